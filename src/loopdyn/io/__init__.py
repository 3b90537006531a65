"""Model import from other formats."""

from .mjcf import load_mjcf

__all__ = ["load_mjcf"]
