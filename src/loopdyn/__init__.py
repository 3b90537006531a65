"""loopdyn: differentiable dynamics of multi-closed-loop mechanisms in JAX."""

from . import energy, forces, forward, kinematics, mechanisms, simulate, spatial, topology, tree
from .forward import forward_dynamics
from .io.mjcf import load_mjcf
from .mechanism import CutJoint, Mechanism, MechanismBuilder

__all__ = [
    "CutJoint",
    "Mechanism",
    "MechanismBuilder",
    "energy",
    "forces",
    "forward",
    "forward_dynamics",
    "kinematics",
    "load_mjcf",
    "mechanisms",
    "simulate",
    "spatial",
    "topology",
    "tree",
]
