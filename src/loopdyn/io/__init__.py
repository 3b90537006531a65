"""Model import from other formats."""

from .mjcf import Keyframe, keyframes, load_mjcf
from .urdf import Closure, load_urdf

__all__ = ["Closure", "Keyframe", "keyframes", "load_mjcf", "load_urdf"]
