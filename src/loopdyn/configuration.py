"""The configuration manifold: ``q`` (``nq``) and velocities ``v`` (``nv``) when ball and free
joints carry unit quaternions (`loopdyn.mechanism`), laid out as MuJoCo's ``qpos`` and ``qvel``.

A scalar coordinate's rate is its velocity. A quaternion ``(w, x, y, z)`` turns the child joint
frame in the parent joint frame, and its rate is ``q' = q (0, omega) / 2`` with ``omega`` the
joint's angular velocity in the child joint frame (the joint's three velocities). `integrate`
moves along a velocity on the manifold (quaternions by the exponential map, ``q exp(omega dt /
2)``, as MuJoCo's ``mj_integratePos``), `difference` is its inverse, `rate` and `velocity` map
between ``v`` and ``q'``. The rotation of a quaternion is that of its normalised value
(`quaternion_matrix`), so a drifted norm changes no pose; `quaternion_norms` measures the drift.
Mechanisms without quaternions have ``q' = v`` and every function here is the plain formula.
"""

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from . import placement
from .mechanism import Mechanism, configuration_layout


def _layout(mech):
    """Static indices: velocities with a scalar coordinate, their entries in ``q``, and the
    ``(k, 4)`` entries of the quaternions in ``q`` and ``(k, 3)`` of their velocities."""
    scalar, start = configuration_layout(mech.nv, mech.quaternion_slots)
    slots = np.array([i for i in range(mech.nv) if scalar[i] < mech.nq], dtype=int)
    turned = np.asarray(mech.quaternion_slots, dtype=int)[:, None] + np.arange(3)
    return slots, scalar[slots], start[:, None] + np.arange(4), turned


def scalar_coordinates(
    mech: Mechanism, q: Float[Array, "... nq"], axis: int = -1
) -> Float[Array, "... nv"]:
    """Each body's joint coordinate ``(..., nv)``: its entry of ``q``, and 0 for the three
    bodies a quaternion turns (their rotation is the quaternion's); ``axis``: that of ``q``'s
    entries."""
    if not mech.quaternion_slots:
        return q
    scalar, _ = configuration_layout(mech.nv, mech.quaternion_slots)
    zero = jnp.zeros_like(jax.lax.slice_in_dim(q, 0, 1, axis=axis))
    return placement.take(jnp.concatenate([q, zero], axis=axis), scalar, axis=axis)


def quaternion_matrix(w, x, y, z, axis=-2):
    """Rotation matrix of the quaternion ``(w, x, y, z)`` after normalising it; the components
    are arrays of one shape, and the matrix's rows and columns are the result's axes ``axis``
    and ``axis + 1`` (by default the last two)."""
    s = 2.0 / (w * w + x * x + y * y + z * z)
    rows = [
        [1.0 - s * (y * y + z * z), s * (x * y - w * z), s * (x * z + w * y)],
        [s * (x * y + w * z), 1.0 - s * (x * x + z * z), s * (y * z - w * x)],
        [s * (x * z - w * y), s * (y * z + w * x), 1.0 - s * (x * x + y * y)],
    ]
    ndim = jnp.ndim(w) + 2
    axis = axis % ndim
    return jnp.stack([jnp.stack(r, axis=axis) for r in rows], axis=axis)


def _multiply(a, b):
    """Quaternion product ``a b`` of ``(..., 4)`` arrays."""
    aw, av, bw, bv = a[..., :1], a[..., 1:], b[..., :1], b[..., 1:]
    w = aw * bw - jnp.sum(av * bv, axis=-1, keepdims=True)
    return jnp.concatenate([w, aw * bv + bw * av + jnp.cross(av, bv)], axis=-1)


def _exp(theta):
    """Unit quaternion of the rotation vector ``theta`` ``(..., 3)``: ``(cos h, sin h / (2 h)
    theta)`` with ``h = |theta| / 2`` (a series near 0, safe to differentiate)."""
    h2 = jnp.sum(theta * theta, axis=-1, keepdims=True) / 4.0
    small = h2 < 1e-8
    h = jnp.sqrt(jnp.where(small, 1.0, h2))
    cos = jnp.where(small, 1.0 - h2 / 2.0, jnp.cos(h))
    sinc = jnp.where(small, 1.0 - h2 / 6.0, jnp.sin(h) / h)
    return jnp.concatenate([cos, 0.5 * sinc * theta], axis=-1)


def _log(quat):
    """Rotation vector ``theta`` of a quaternion (normalised first; the shorter way round):
    the inverse of `_exp`."""
    quat = jnp.where(quat[..., :1] < 0, -quat, quat)
    w, v = quat[..., :1], quat[..., 1:]
    s2 = jnp.sum(v * v, axis=-1, keepdims=True)
    small = s2 < 1e-16 * w * w
    s = jnp.sqrt(jnp.where(small, 1.0, s2))
    angle_per_sin = jnp.where(small, 2.0 / w, 2.0 * jnp.arctan2(s, w) / s)
    return angle_per_sin * v


def _checked(mech, what, x, size):
    x = jnp.asarray(x)
    if x.ndim == 0 or x.shape[-1] != size:
        kind = "nq" if size == mech.nq and mech.nq != mech.nv else "nv"
        raise ValueError(f"{what} has shape {x.shape}; expected (..., {size}) ({kind} = {size})")
    return x


def rate(mech: Mechanism, q: Float[Array, "... nq"], v: Float[Array, "... nv"]):
    """``q'`` ``(..., nq)`` of the velocity ``v``: ``v`` itself for scalar coordinates,
    ``q (0, omega) / 2`` for a quaternion."""
    q, v = _checked(mech, "q", q, mech.nq), _checked(mech, "v", v, mech.nv)
    if not mech.quaternion_slots:
        return v
    slots, entries, quaternions, turned = _layout(mech)
    shape = jnp.broadcast_shapes(q.shape[:-1], v.shape[:-1])
    omega = v[..., turned]
    omega = jnp.concatenate([jnp.zeros_like(omega[..., :1]), omega], axis=-1)
    out = jnp.zeros(shape + (mech.nq,), jnp.result_type(q, v))
    out = placement.put(out, entries, v[..., slots], axis=-1)
    return placement.put(out, quaternions, 0.5 * _multiply(q[..., quaternions], omega), axis=-1)


def velocity(mech: Mechanism, q: Float[Array, "... nq"], q_rate: Float[Array, "... nq"]):
    """``v`` ``(..., nv)`` of a configuration rate ``q'`` (the inverse of `rate`; a quaternion's
    ``omega = 2 vec(conj(q) q') / |q|^2``, the part of ``q'`` along ``q`` dropped)."""
    q, q_rate = _checked(mech, "q", q, mech.nq), _checked(mech, "q_rate", q_rate, mech.nq)
    if not mech.quaternion_slots:
        return q_rate
    slots, entries, quaternions, turned = _layout(mech)
    quat = q[..., quaternions]
    conj = quat * jnp.array([1.0, -1.0, -1.0, -1.0])
    norm2 = jnp.sum(quat * quat, axis=-1, keepdims=True)
    omega = 2.0 * _multiply(conj, q_rate[..., quaternions])[..., 1:] / norm2
    shape = jnp.broadcast_shapes(q.shape[:-1], q_rate.shape[:-1])
    out = jnp.zeros(shape + (mech.nv,), jnp.result_type(q, q_rate))
    out = placement.put(out, slots, q_rate[..., entries], axis=-1)
    return placement.put(out, turned, omega, axis=-1)


def integrate(
    mech: Mechanism, q: Float[Array, "... nq"], v: Float[Array, "... nv"], dt=1.0
) -> Float[Array, "... nq"]:
    """The configuration reached from ``q`` moving at the constant velocity ``v`` for ``dt``:
    ``q + v dt`` for scalar coordinates, ``q exp(omega dt / 2)`` for a quaternion (its norm
    kept), as MuJoCo's ``mj_integratePos``."""
    q, v = _checked(mech, "q", q, mech.nq), _checked(mech, "v", v, mech.nv)
    if not mech.quaternion_slots:
        return q + v * dt
    slots, entries, quaternions, turned = _layout(mech)
    shape = jnp.broadcast_shapes(q.shape[:-1], v.shape[:-1])
    out = jnp.broadcast_to(q, shape + (mech.nq,)).astype(jnp.result_type(q, v))
    out = placement.add_at(out, entries, v[..., slots] * dt, axis=-1)
    turn = _exp(v[..., turned] * jnp.asarray(dt)[..., None, None])
    return placement.put(out, quaternions, _multiply(q[..., quaternions], turn), axis=-1)


def difference(
    mech: Mechanism, q0: Float[Array, "... nq"], q1: Float[Array, "... nq"]
) -> Float[Array, "... nv"]:
    """The velocity ``v`` with ``integrate(mech, q0, v) == q1`` (quaternions normalised; the
    shorter rotation), as MuJoCo's ``mj_differentiatePos`` over a unit time."""
    q0, q1 = _checked(mech, "q0", q0, mech.nq), _checked(mech, "q1", q1, mech.nq)
    if not mech.quaternion_slots:
        return q1 - q0
    slots, entries, quaternions, turned = _layout(mech)
    a, b = q0[..., quaternions], q1[..., quaternions]
    a = a / jnp.linalg.norm(a, axis=-1, keepdims=True)
    b = b / jnp.linalg.norm(b, axis=-1, keepdims=True)
    relative = _multiply(a * jnp.array([1.0, -1.0, -1.0, -1.0]), b)
    shape = jnp.broadcast_shapes(q0.shape[:-1], q1.shape[:-1])
    out = jnp.zeros(shape + (mech.nv,), jnp.result_type(q0, q1))
    out = placement.put(out, slots, q1[..., entries] - q0[..., entries], axis=-1)
    return placement.put(out, turned, _log(relative), axis=-1)


def quaternion_norms(mech: Mechanism, q: Float[Array, "... nq"]) -> Float[Array, "... k"]:
    """The norm of each quaternion in ``q`` (1 on the manifold; the drift of an integration)."""
    q = _checked(mech, "q", q, mech.nq)
    return jnp.linalg.norm(q[..., _layout(mech)[2]], axis=-1)


def normalize(mech: Mechanism, q: Float[Array, "... nq"]) -> Float[Array, "... nq"]:
    """``q`` with every quaternion scaled to unit norm (the same poses)."""
    q = _checked(mech, "q", q, mech.nq)
    if not mech.quaternion_slots:
        return q
    quaternions = _layout(mech)[2]
    quat = q[..., quaternions]
    unit = quat / jnp.linalg.norm(quat, axis=-1, keepdims=True)
    return placement.put(q, quaternions, unit, axis=-1)
