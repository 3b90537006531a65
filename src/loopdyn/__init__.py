"""loopdyn: differentiable dynamics of multi-closed-loop mechanisms in JAX."""

from . import energy, forces, kinematics, mechanisms, simulate, spatial, topology, tree
from .io.mjcf import load_mjcf
from .mechanism import CutJoint, Mechanism, MechanismBuilder

__all__ = [
    "CutJoint",
    "Mechanism",
    "MechanismBuilder",
    "energy",
    "forces",
    "kinematics",
    "load_mjcf",
    "mechanisms",
    "simulate",
    "spatial",
    "topology",
    "tree",
]
