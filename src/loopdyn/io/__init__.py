"""Model import from other formats."""

from .mjcf import load_mjcf
from .urdf import Closure, load_urdf

__all__ = ["Closure", "load_mjcf", "load_urdf"]
