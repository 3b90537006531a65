"""loopdyn: differentiable dynamics of multi-closed-loop mechanisms in JAX."""

from . import spatial, tree
from .mechanism import CutJoint, Mechanism, MechanismBuilder

__all__ = ["CutJoint", "Mechanism", "MechanismBuilder", "spatial", "tree"]
