"""Argument checks shared by the public entry points, run before anything compiles: shapes (also
when traced: shapes are static, so under ``jit``/``vmap`` the check runs once per compilation),
NaN and inf in concrete inputs, and the precision. Each raises a ``ValueError`` naming the
function and the argument, instead of JAX clamping an index into a silently wrong answer, a NaN
surfacing later as a failed factorisation, or a float32 rounding error reported as an open loop.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from . import compilation
from .mechanism import Mechanism

# Arguments with one entry per configuration entry (nq), per coordinate (velocity, nv), and per
# body wrench.
_PER_CONFIGURATION = ("q", "q0", "q_guess")
_PER_COORDINATE = ("qd", "qdd", "tau", "qd0")
_PER_BODY = ("f_ext",)


def expected_shape(mech: Mechanism, name: str) -> tuple[int, ...]:
    """Shape a per-state argument called ``name`` must have for ``mech``."""
    if name in _PER_CONFIGURATION:
        return (mech.nq,)
    if name in _PER_COORDINATE:
        return (mech.num_bodies,)
    if name in _PER_BODY:
        return (mech.num_bodies, mech.dim)
    if name == "ctrl":
        return (len(mech.ctrl_names),)
    raise KeyError(name)


# The types of JAX arrays and tracers met so far: their ``aval`` (shape, dtype) is read in tens of
# nanoseconds, where ``isinstance(x, jax.Array)``, ``x.shape`` and ``x.dtype`` take hundreds.
_ARRAY_TYPES: set[type] = set()


@compilation.by_identity
def _facts(mech):
    """The mechanism's precision and the shape of each per-state argument, once per mechanism
    (each attribute of an equinox module costs about a microsecond to read)."""
    names = _PER_CONFIGURATION + _PER_COORDINATE + _PER_BODY + ("ctrl",)
    return mech.q0.dtype, {name: expected_shape(mech, name) for name in names}


def _describe(mech, name):
    if name in _PER_BODY:
        kind = "spatial" if mech.dim == 6 else "planar"
        return f"one {kind} wrench per body {list(mech.body_names)}"
    if name in _PER_CONFIGURATION and mech.nq != mech.nv:
        return f"one entry per configuration entry {list(mech.configuration_names)}"
    if name == "ctrl":
        return f"one entry per control actuator {list(mech.ctrl_names)}"
    return f"one entry per coordinate {list(mech.coordinate_names)}"


def check_precision(mech: Mechanism, function: str):
    """Refuse a mechanism built in float32 (JAX's default): the closed-loop tolerances (loops
    closed to 1e-12, states checked to 1e-6 relative) are at or below float32's resolution."""
    if mech.q0.dtype != np.float64:
        raise ValueError(
            f"{function}: the mechanism is in {mech.q0.dtype}, and loopdyn's closed-loop methods "
            "need float64 (float32 cannot close the loops to their tolerances): call "
            'jax.config.update("jax_enable_x64", True) right after importing jax, then build or '
            "load the mechanism"
        )


def check_arrays(mech: Mechanism, function: str, *, eager: bool = False, **arrays):
    """Return the ``arrays`` as JAX arrays in the mechanism's precision after checking each shape
    and, when concrete, that it holds no NaN or inf (``None`` passes through); `check_precision`
    first. ``eager``: for the programs of `compilation.eager`, NumPy input stays NumPy (a jitted
    call converts it for less than ``jnp.asarray`` costs) and NaN and inf are left to the
    program, which reports them (`check_finite` names them then).

    Raises ``ValueError`` like ``forward_dynamics: tau must have shape (3,) (one entry per
    coordinate ['A', 'B', 'C']), got (2,)``; also for non-numeric input, for arguments that
    are not real numbers and for NaN or inf (the first entries named)."""
    dtype, shapes = _facts(mech)
    if dtype != np.float64:
        check_precision(mech, function)
    out = []
    for name, value in arrays.items():
        if value is None:
            out.append(None)
            continue
        shape = shapes[name]
        if type(value) in _ARRAY_TYPES:  # the common case, at a tenth of the cost of the rest
            aval = value.aval
            if aval.shape == shape and aval.dtype == dtype:
                out.append(value)
                continue
        if isinstance(value, jax.Array):  # jax arrays and tracers pass as they are
            _ARRAY_TYPES.add(type(value))
        else:
            try:
                value = np.asarray(value)
            except (TypeError, ValueError) as error:
                raise ValueError(f"{function}: {name} must be an array of shape {shape}: {error}")
        if value.shape != shape:
            raise ValueError(
                f"{function}: {name} must have shape {shape} ({_describe(mech, name)}), "
                f"got {value.shape}"
            )
        if value.dtype.kind not in "fiu":
            raise ValueError(f"{function}: {name} must be real numbers, got dtype {value.dtype}")
        out.append(value.astype(dtype) if value.dtype != dtype else value)
    if not eager:
        concrete = [x for x in out if x is not None and not isinstance(x, jax.core.Tracer)]
        if concrete and not np.isfinite(np.concatenate([np.ravel(x) for x in concrete])).all():
            check_finite(function, **{k: v for k, v in zip(arrays, out) if v is not None})
        out = [jnp.asarray(x) if isinstance(x, np.ndarray) else x for x in out]
    return out[0] if len(out) == 1 else out


def check_finite(function: str, **arrays):
    """Eager check that concrete arrays hold no NaN or inf (skipped for traced values and
    None)."""
    for name, value in arrays.items():
        if value is None or isinstance(value, jax.core.Tracer):
            continue  # a traced one is checked at run time by the caller, if at all
        concrete = np.asarray(value)
        if not np.isfinite(concrete).all():
            bad = [
                tuple(i) if len(i) > 1 else int(i[0])
                for i in np.argwhere(~np.isfinite(concrete))[:3]
            ]
            raise ValueError(f"{function}: {name} contains NaN or inf (at {bad})")
