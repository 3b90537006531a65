"""Argument checks shared by the public entry points: shapes are checked when a function is called
(or traced: shapes are static, so under ``jit``/``vmap`` the check runs once per compilation), and a
wrong shape raises a ``ValueError`` naming the function, the argument, the expected and the given
shape, instead of JAX clamping an index into a silently wrong answer."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .mechanism import Mechanism

# Arguments with one entry per coordinate, and per body wrench.
_PER_COORDINATE = ("q", "qd", "qdd", "tau", "q0", "qd0", "q_guess")
_PER_BODY = ("f_ext",)


def expected_shape(mech: Mechanism, name: str) -> tuple[int, ...]:
    """Shape a per-state argument called ``name`` must have for ``mech``."""
    if name in _PER_COORDINATE:
        return (mech.num_bodies,)
    if name in _PER_BODY:
        return (mech.num_bodies, mech.dim)
    raise KeyError(name)


def _describe(mech, name):
    if name in _PER_BODY:
        kind = "spatial" if mech.dim == 6 else "planar"
        return f"one {kind} wrench per body {list(mech.body_names)}"
    return f"one entry per coordinate {list(mech.coordinate_names)}"


def check_arrays(mech: Mechanism, function: str, **arrays):
    """Return the ``arrays`` as JAX arrays after checking each shape (``None`` passes through).

    Raises ``ValueError`` like ``forward_dynamics: tau must have shape (3,) (one entry per
    coordinate ['A', 'B', 'C']), got (2,)``; also for non-numeric input and for arguments that
    are not real numbers."""
    out = []
    for name, value in arrays.items():
        if value is None:
            out.append(None)
            continue
        shape = expected_shape(mech, name)
        try:
            array = jnp.asarray(value)
        except (TypeError, ValueError) as error:
            raise ValueError(f"{function}: {name} must be an array of shape {shape}: {error}")
        if array.shape != shape:
            raise ValueError(
                f"{function}: {name} must have shape {shape} ({_describe(mech, name)}), "
                f"got {array.shape}"
            )
        if jnp.issubdtype(array.dtype, jnp.complexfloating) or array.dtype == bool:
            raise ValueError(f"{function}: {name} must be real numbers, got dtype {array.dtype}")
        if not jnp.issubdtype(array.dtype, jnp.floating):
            array = array.astype(mech.q0.dtype)
        out.append(array)
    return out[0] if len(out) == 1 else out


def check_finite(function: str, **arrays):
    """Eager check that concrete arrays hold no NaN or inf (skipped for traced values)."""
    for name, value in arrays.items():
        if isinstance(value, jax.core.Tracer):  # checked at run time by the caller, if at all
            continue
        concrete = np.asarray(value)
        if not np.all(np.isfinite(concrete)):
            bad = np.argwhere(~np.isfinite(concrete))[:3].tolist()
            raise ValueError(f"{function}: {name} contains NaN or inf (at indices {bad})")
