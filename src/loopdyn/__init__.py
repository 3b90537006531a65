"""loopdyn: differentiable dynamics of multi-closed-loop mechanisms in JAX."""

from . import energy, forces, forward, kinematics, mechanisms, simulation, spatial, topology, tree
from .forward import forward_dynamics
from .io.mjcf import load_mjcf
from .mechanism import CutJoint, Mechanism, MechanismBuilder
from .simulation import Simulation, simulate

__all__ = [
    "CutJoint",
    "Mechanism",
    "MechanismBuilder",
    "Simulation",
    "energy",
    "forces",
    "forward",
    "forward_dynamics",
    "kinematics",
    "load_mjcf",
    "mechanisms",
    "simulate",
    "simulation",
    "spatial",
    "topology",
    "tree",
]
