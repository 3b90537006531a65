"""loopdyn: differentiable dynamics of multi-closed-loop mechanisms in JAX."""

from . import (
    compilation,
    configuration,
    design,
    energy,
    equalities,
    fit,
    forces,
    forward,
    inverse,
    kinematics,
    mechanisms,
    montecarlo,
    parameters,
    prescribed,
    redundancy,
    rosenbrock,
    shaking,
    sharding,
    simulation,
    spatial,
    topology,
    tree,
)
from .configuration import integrate
from .equalities import switch_equalities
from .forward import forward_dynamics
from .inverse import inverse_dynamics
from .io.mjcf import load_mjcf
from .io.urdf import load_urdf
from .mechanism import CutJoint, Mechanism, MechanismBuilder
from .rosenbrock import ROS34PW2
from .sharding import batch
from .simulation import Simulation, simulate

__all__ = [
    "ROS34PW2",
    "CutJoint",
    "Mechanism",
    "MechanismBuilder",
    "Simulation",
    "batch",
    "compilation",
    "configuration",
    "design",
    "energy",
    "equalities",
    "fit",
    "forces",
    "forward",
    "forward_dynamics",
    "integrate",
    "inverse",
    "inverse_dynamics",
    "kinematics",
    "load_mjcf",
    "load_urdf",
    "mechanisms",
    "montecarlo",
    "parameters",
    "prescribed",
    "redundancy",
    "rosenbrock",
    "shaking",
    "sharding",
    "simulate",
    "simulation",
    "spatial",
    "switch_equalities",
    "topology",
    "tree",
]
