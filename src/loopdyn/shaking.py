"""Shaking force and shaking moment: the resultant wrench a mechanism applies to its ground, and
the summaries over a cycle that balancing studies minimise.

The ground exerts on the mechanism the wrench ``(F_g, M_g)`` that `loopdyn.inverse` reports
(``ground_force``, ``ground_moment``: the sum of the reactions of every joint to the ground, and
of springs to the ground; moment about the world origin). The mechanism applies the opposite to
the ground: the shaking force ``F_sh = -F_g`` and shaking moment ``M_sh = -M_g`` (seed 002 §5,
the balancing application of its refs. [33]; seed 004 §4.2). Newton and Euler for the whole
mechanism give the same from its momentum alone,

    F_g + sum_i m_i g = dP/dt,      M_g + sum_i c_i x m_i g = dL/dt   (about the world origin),

with ``P = sum_i m_i v_i`` and ``L = sum_i (c_i x m_i v_i + I_i w_i)`` (`momentum`), which is how
the tests check the reactions. With ``include_weight=False`` the static weight is left out, so
that ``F_sh = -dP/dt`` and ``M_sh = -dL/dt``: the purely dynamic part that counterweights
balance.

Everything here is a plain JAX function of arrays, differentiable with respect to the
mechanism's parameters (gradients for balancing by optimisation). See docs/references.md.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from . import tree
from .inverse import InverseDynamics
from .mechanism import Mechanism


class Shaking(NamedTuple):
    """Shaking force (planar ``(2,)``, spatial ``(3,)``) and moment (planar ``()``, spatial
    ``(3,)``) that the mechanism applies to the ground; leading axes as the inputs'."""

    force: Array
    moment: Array


def _skew_vector(m):
    return 0.5 * jnp.stack([m[..., 2, 1] - m[..., 1, 2], m[..., 0, 2] - m[..., 2, 0],
                            m[..., 1, 0] - m[..., 0, 1]], axis=-1)  # fmt: skip


def momentum(
    mech: Mechanism, q: Float[Array, " n"], qd: Float[Array, " n"]
) -> tuple[Float[Array, " 3"], Float[Array, " 3"]]:
    """Total linear momentum ``P`` and angular momentum ``L`` about the world origin (world axes,
    3-vectors also for planar mechanisms), from the body poses and their time derivatives along
    ``qd`` (forward-mode differentiation of the poses, independent of the recursions)."""

    def poses(q):
        position, rotation = tree.forward_kinematics(mech, q)
        return position + jnp.einsum("nij,nj->ni", rotation, mech.com), rotation

    (com, rotation), (velocity, d_rotation) = jax.jvp(poses, (q,), (qd,))
    omega = _skew_vector(d_rotation @ jnp.swapaxes(rotation, -1, -2))
    inertia = rotation @ mech.inertia @ jnp.swapaxes(rotation, -1, -2)
    linear = mech.mass[:, None] * velocity
    angular = jnp.cross(com, linear) + jnp.einsum("nij,nj->ni", inertia, omega)
    return jnp.sum(linear, axis=0), jnp.sum(angular, axis=0)


def weight(mech: Mechanism, q: Float[Array, " n"]) -> tuple[Array, Array]:
    """The resultant gravity force ``sum m_i g`` and its moment about the world origin, in the
    layout of `Shaking` (planar: force ``(2,)``, moment ``()``)."""
    position, rotation = tree.forward_kinematics(mech, q)
    com = position + jnp.einsum("nij,nj->ni", rotation, mech.com)
    force = jnp.sum(mech.mass) * mech.gravity
    moment = jnp.sum(jnp.cross(com, mech.mass[:, None] * mech.gravity), axis=0)
    return (force[:2], moment[2]) if mech.planar else (force, moment)


def _moment_about(mech, moment, force, point):
    """A moment about the world origin, moved to be about ``point`` (3-vector)."""
    point = jnp.asarray(point, force.dtype)
    if mech.planar:
        return moment - (point[0] * force[..., 1] - point[1] * force[..., 0])
    return moment - jnp.cross(point, force)


def shaking(
    mech: Mechanism,
    result: InverseDynamics,
    q: Float[Array, "... n"] | None = None,
    about=None,
    include_weight: bool = True,
) -> Shaking:
    """Shaking force and moment from the ground reactions of `loopdyn.inverse.inverse_dynamics`
    (one state, or stacked over time). Moment about the world origin, or about ``about`` (a world
    point). ``include_weight=False`` removes the static weight (needs ``q``, stacked like
    ``result``), leaving ``-dP/dt`` and ``-dL/dt``."""
    force, moment = -result.ground_force, -result.ground_moment
    if not include_weight:
        if q is None:
            raise ValueError("shaking: include_weight=False needs the positions q")
        w_force, w_moment = jnp.vectorize(
            lambda q: weight(mech, q), signature="(n)->(d),(" + ("" if mech.planar else "k") + ")"
        )(q)
        force, moment = force - w_force, moment - w_moment
    if about is not None:
        moment = _moment_about(mech, moment, force, about)
    return Shaking(force, moment)


def rms(x: Array, axis: int = 0) -> Array:
    """Root mean square over ``axis`` (time) of the magnitude of ``x``: vectors ``(T, d)`` by
    their Euclidean norm, scalars ``(T,)`` by their absolute value. Differentiable."""
    x = jnp.asarray(x)
    squares = x**2 if x.ndim == 1 else jnp.sum(x**2, axis=-1)
    return jnp.sqrt(jnp.mean(squares, axis=axis))


def peak(x: Array, axis: int = 0, p: float | None = None) -> Array:
    """Largest magnitude over ``axis`` (time), as `rms` measures magnitudes. ``p=None``: the exact
    maximum (its gradient flows through the largest sample only); a number ``p`` gives the smooth
    ``p``-mean ``(mean |x|^p)^(1/p)``, which tends to the maximum from below as ``p`` grows and
    has a gradient from every sample (for optimisers)."""
    x = jnp.asarray(x)
    squares = x**2 if x.ndim == 1 else jnp.sum(x**2, axis=-1)
    if p is None:
        return jnp.sqrt(jnp.max(squares, axis=axis))
    top = jax.lax.stop_gradient(jnp.max(squares, axis=axis, keepdims=True))
    top = jnp.maximum(top, jnp.finfo(squares.dtype).tiny)
    scaled = jnp.mean((squares / top) ** (p / 2), axis=axis)
    return jnp.sqrt(jnp.squeeze(top, axis)) * scaled ** (1.0 / p)


def summary(shake: Shaking, axis: int = 0) -> dict[str, Array]:
    """RMS and peak of the shaking force and moment over time: the four numbers balancing
    studies report."""
    return {
        "force_rms": rms(shake.force, axis),
        "force_peak": peak(shake.force, axis),
        "moment_rms": rms(shake.moment, axis),
        "moment_peak": peak(shake.moment, axis),
    }
