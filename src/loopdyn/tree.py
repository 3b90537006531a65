"""Recursive dynamics of the spanning tree (serial and branched subsystems), DeNOC style.

Twists propagate base -> tips, ``t_i = A_i t_parent + p_i qd_i`` (seed 004 eqs. 20-23), and
wrenches accumulate tips -> base, ``tau = N^T w`` (seed 000 eqs. 4-7; seed 002 eqs. 17-33 for
serial and tree-type systems), with the Newton-Euler wrench ``w_i = M_i dt_i + W_i M_i t_i`` of
each body (seed 004 eq. 10, seed 000 eq. 1). ``I = N^T M N`` (seed 000 eq. 7) comes from the
composite-body recursion and ``qdd`` from forces from the O(n) articulated-body recursion. Gravity
enters as an acceleration of the ground.

The passes refer every twist, wrench and extended mass matrix to the ground frame (origin and
axes). There the twist propagation matrix ``A_i`` is the identity (``t_i = t_parent + p_i qd_i``)
and each body's change of frame is applied once, outside the sequential passes, which are left
with a few vector operations per body. Results asked for in body coordinates (twists, twist-rates,
joint wrenches) are transformed back at the end.

All functions are pure: ``f(mech, q, ...)`` with ``q``, ``qd``, ``qdd``, ``tau`` of shape ``(n,)``
and external body wrenches ``f_ext`` of shape ``(n, d)`` in body coordinates (``d = mech.dim``),
acting at the body frame origin. Loops over bodies unroll at trace time over the static parent
array. Speed under ``jax.vmap`` on CPU: batched tiny ``dot``s are slow there, so products are
written as elementwise sums (``_mm``) or reductions (``_mv``, ``_dot``). Every value a sequential
pass hands on is read by a reduction or a matrix product, which makes XLA keep it in memory
instead of fusing the pass into one loop that recomputes all earlier bodies for each element.
"""

import functools
import operator

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from . import spatial
from .mechanism import Mechanism

_ROWS = np.array(spatial.PLANAR_ROWS)
_PAD = (_ROWS[0], 6 - _ROWS[-1] - 1)  # the planar rows are contiguous


def _mm(a, b):
    """``a @ b`` for small matrices (leading axes broadcast) as a sum of elementwise products."""
    return functools.reduce(
        operator.add, (a[..., :, k, None] * b[..., None, k, :] for k in range(a.shape[-1]))
    )


def _mv(a, v):
    """``a @ v`` for small matrices and vectors (leading axes broadcast), as a reduction."""
    return jnp.sum(a * v[..., None, :], axis=-1)


def _dot(u, v):
    return jnp.sum(u * v, axis=-1)


def _transpose(a):
    return jnp.swapaxes(a, -1, -2)


def _cross(a, b):
    """``a x b`` for 3-vectors (last axis), elementwise."""
    return jnp.stack(
        [
            a[..., 1] * b[..., 2] - a[..., 2] * b[..., 1],
            a[..., 2] * b[..., 0] - a[..., 0] * b[..., 2],
            a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0],
        ],
        axis=-1,
    )


def _planar(vectors, mech):
    """Keep the planar rows of spatial vectors (last axis) when the mechanism is planar."""
    return vectors[..., _ROWS] if mech.planar else vectors


def _spatial(vectors, mech):
    """Spatial vectors from the mechanism's vectors (planar ones padded with zeros)."""
    return jnp.pad(vectors, [(0, 0)] * (vectors.ndim - 1) + [_PAD]) if mech.planar else vectors


def _cross_motion(mech, t, u):
    """``t x u`` for twists ``t``, ``u`` (last axis ``d``)."""
    t, u = _spatial(t, mech), _spatial(u, mech)
    w, v, uw, uv = t[..., :3], t[..., 3:], u[..., :3], u[..., 3:]
    out = jnp.concatenate([_cross(w, uw), _cross(w, uv) + _cross(v, uw)], axis=-1)
    return _planar(out, mech)


def _cross_force(mech, t, f):
    """``t x* f`` for a twist ``t`` and a wrench ``f`` (last axis ``d``)."""
    t, f = _spatial(t, mech), _spatial(f, mech)
    w, v, n, force = t[..., :3], t[..., 3:], f[..., :3], f[..., 3:]
    out = jnp.concatenate([_cross(w, n) + _cross(v, force), _cross(w, force)], axis=-1)
    return _planar(out, mech)


def _pose_terms(mech):
    """The q-independent terms of the joint poses, by Rodrigues' formula between the fixed joint
    frames: ``R = R0 + sin(q) R1 + (1 - cos q) R2`` and ``r = r0 + sin(q) r1 + (1 - cos q) r2 +
    q r3`` (``R1 = R2 = 0`` for prismatic joints, ``r3 = 0`` for revolute ones)."""
    revolute = np.array([k == "revolute" for k in mech.joint_kinds])
    turn = jax.vmap(spatial.skew)(mech.axis) * revolute[:, None, None]
    first, last = mech.parent_rotation, _transpose(mech.child_rotation)
    rotations = [
        _mm(first, last),
        _mm(_mm(first, turn), last),
        _mm(_mm(_mm(first, turn), turn), last),
    ]
    positions = [-_mv(r, mech.child_position) for r in rotations]
    positions[0] = positions[0] + mech.parent_position
    return rotations, positions + [_mv(first, mech.axis) * (~revolute)[:, None]]


def joint_poses(mech: Mechanism, q: Float[Array, " n"]):
    """Rotation ``(n, 3, 3)`` and origin ``(n, 3)`` of each body in its parent's frame."""
    (r0, r1, r2), (p0, p1, p2, p3) = _pose_terms(mech)
    sin, vers, q = jnp.sin(q)[:, None], 1.0 - jnp.cos(q)[:, None], q[:, None]
    rotation = r0 + sin[..., None] * r1 + vers[..., None] * r2
    return rotation, p0 + sin * p1 + vers * p2 + q * p3


def _poses(mech, q):
    """World rotation and origin of every body frame (lists), composing the homogeneous
    transforms ``[R | r]`` base -> tips."""
    rotation, position = joint_poses(mech, q)
    last_row = jnp.array([0.0, 0.0, 0.0, 1.0], q.dtype)
    poses = []
    for i, p in enumerate(mech.parent):  # base -> tips
        pose = jnp.concatenate([rotation[i], position[i][:, None]], axis=-1)
        poses.append(_mm(poses[p], jnp.concatenate([pose, last_row[None]])) if p >= 0 else pose)
    return [x[:, :3] for x in poses], [x[:, 3] for x in poses]


def forward_kinematics(mech: Mechanism, q: Float[Array, " n"]):
    """World origin ``(n, 3)`` and rotation ``(n, 3, 3)`` of every body frame (positions first,
    as everywhere in loopdyn)."""
    rotation, position = _poses(mech, q)
    return jnp.stack(position), jnp.stack(rotation)


def motion_subspaces(mech: Mechanism) -> Float[Array, "n d"]:
    """Joint-rate propagation vectors ``p_i`` in body coordinates (seed 004 eqs. 22-23)."""
    subspaces = [
        spatial.joint_subspace(k, mech.axis[i], mech.child_rotation[i], mech.child_position[i])
        for i, k in enumerate(mech.joint_kinds)
    ]
    return _planar(jnp.stack(subspaces), mech)


def body_inertias(mech: Mechanism) -> Float[Array, "n d d"]:
    """Extended mass matrices ``M_i`` about each body frame origin (seed 000 eq. 3)."""
    inertia = spatial.planar_inertia if mech.planar else spatial.spatial_inertia
    return jax.vmap(inertia)(mech.mass, mech.com, mech.inertia)


def propagation_matrices(mech: Mechanism, q: Float[Array, " n"]) -> Float[Array, "n d d"]:
    """Twist propagation matrices ``A_i`` (parent -> body i, body coordinates)."""
    rotation, position = joint_poses(mech, q)
    e = _transpose(rotation)
    lower = _cross(position[:, None, :], e)  # -E r~: row k is r x (row k of E)
    x = jnp.concatenate(
        [jnp.concatenate([e, jnp.zeros_like(e)], axis=-1), jnp.concatenate([lower, e], axis=-1)],
        axis=-2,
    )
    return x[:, _ROWS[:, None], _ROWS] if mech.planar else x


def ground_acceleration(mech: Mechanism) -> Float[Array, " d"]:
    """Twist-rate of the ground that stands for gravity: ``-[0; g]``."""
    return _planar(jnp.concatenate([jnp.zeros(3, mech.gravity.dtype), -mech.gravity]), mech)


# Changes of frame between a body and the ground, given the body's world pose.


def _motion_to_world(mech, rotation, position, t):
    t = _spatial(t, mech)
    w = _mv(rotation, t[..., :3])
    v = _mv(rotation, t[..., 3:]) + _cross(position, w)
    return _planar(jnp.concatenate([w, v], axis=-1), mech)


def _motion_to_body(mech, rotation, position, t):
    t = _spatial(t, mech)
    w, rotation_t = t[..., :3], _transpose(rotation)
    v = _mv(rotation_t, t[..., 3:] - _cross(position, w))
    return _planar(jnp.concatenate([_mv(rotation_t, w), v], axis=-1), mech)


def _force_to_world(mech, rotation, position, f):
    f = _spatial(f, mech)
    force = _mv(rotation, f[..., 3:])
    moment = _mv(rotation, f[..., :3]) + _cross(position, force)
    return _planar(jnp.concatenate([moment, force], axis=-1), mech)


def _force_to_body(mech, rotation, position, f):
    f = _spatial(f, mech)
    force, rotation_t = f[..., 3:], _transpose(rotation)
    moment = _mv(rotation_t, f[..., :3] - _cross(position, force))
    return _planar(jnp.concatenate([moment, _mv(rotation_t, force)], axis=-1), mech)


def _world_inertia(mech, i, rotation, position):
    """Extended mass matrix of body ``i`` about the ground origin, in ground axes."""
    com = _mv(rotation, mech.com[i]) + position
    inertia = _mm(_mm(rotation, mech.inertia[i]), _transpose(rotation))
    make = spatial.planar_inertia if mech.planar else spatial.spatial_inertia
    return make(mech.mass[i], com, inertia)


def _frames(mech, q):
    """World rotation, origin and joint-rate propagation vector ``p_i`` of every body (lists)."""
    rotation, position = _poses(mech, q)
    s = motion_subspaces(mech)
    return (
        rotation,
        position,
        [_motion_to_world(mech, r, x, si) for r, x, si in zip(rotation, position, s)],
    )


def _path_sums(mech, x):
    """Base -> tips: each body's value plus those of its ancestors (twists from joint rates)."""
    out = []
    for i, p in enumerate(mech.parent):  # base -> tips
        out.append(x[i] + out[p] if p >= 0 else x[i])
    return out


def _subtree_sums(mech, x):
    """Tips -> base: each body's value plus those of its descendants (the ``N^T`` sums)."""
    x = list(x)
    for i in reversed(range(mech.num_bodies)):  # tips -> base
        p = mech.parent[i]
        if p >= 0:
            x[p] = x[p] + x[i]
    return x


def _world_motion(mech, q, qd, qdd):
    """World poses, ``p_i``, twists and twist-rates (without gravity) of every body (lists)."""
    rotation, position, s = _frames(mech, q)
    rate = [si * qdi for si, qdi in zip(s, qd)]
    t = _path_sums(mech, rate)
    dt = _path_sums(
        mech, [si * qddi + _cross_motion(mech, ti, ri) for si, qddi, ti, ri in zip(s, qdd, t, rate)]
    )
    return rotation, position, s, t, dt


def twists(mech: Mechanism, q, qd) -> Float[Array, "n d"]:
    """Twist of every body in its own coordinates (seed 004 eq. 20)."""
    rotation, position, s = _frames(mech, q)
    t = _path_sums(mech, [si * qdi for si, qdi in zip(s, qd)])
    return jnp.stack([_motion_to_body(mech, *x) for x in zip(rotation, position, t)])


def twist_rates(mech: Mechanism, q, qd, qdd) -> Float[Array, "n d"]:
    """Twist-rate (time derivative of the twist, without gravity) of every body."""
    rotation, position, _, _, dt = _world_motion(mech, q, qd, qdd)
    return jnp.stack([_motion_to_body(mech, *x) for x in zip(rotation, position, dt)])


def _world_wrenches(mech, q, qd, qdd, f_ext):
    """World poses, ``p_i`` and the wrench each tree joint carries, in the ground frame."""
    rotation, position, s, t, dt = _world_motion(mech, q, qd, qdd)
    gravity = ground_acceleration(mech)
    w = []
    for i in range(mech.num_bodies):
        m = _world_inertia(mech, i, rotation[i], position[i])
        w.append(_mv(m, dt[i] + gravity) + _cross_force(mech, t[i], _mv(m, t[i])))
        if f_ext is not None:
            w[i] = w[i] - _force_to_world(mech, rotation[i], position[i], f_ext[i])
    return rotation, position, s, _subtree_sums(mech, w)


def joint_wrenches(mech: Mechanism, q, qd, qdd, f_ext=None) -> Float[Array, "n d"]:
    """Wrench transmitted from each parent to its body through the tree joint (body coordinates):
    the recursive Newton-Euler backward pass (seed 002 eqs. 20-22, 30-33)."""
    rotation, position, _, w = _world_wrenches(mech, q, qd, qdd, f_ext)
    return jnp.stack([_force_to_body(mech, *x) for x in zip(rotation, position, w)])


def inverse_dynamics(mech: Mechanism, q, qd, qdd, f_ext=None) -> Float[Array, " n"]:
    """Joint forces ``tau = I qdd + C qd + gravity - (external)`` by the recursive Newton-Euler
    (DeNOC) algorithm (seed 000 eq. 6 without multipliers)."""
    _, _, s, w = _world_wrenches(mech, q, qd, qdd, f_ext)
    return jnp.stack([_dot(si, wi) for si, wi in zip(s, w)])


def bias_forces(mech: Mechanism, q, qd, f_ext=None) -> Float[Array, " n"]:
    """``C qd`` plus gravity (and minus external wrenches): inverse dynamics at ``qdd = 0``."""
    return inverse_dynamics(mech, q, qd, jnp.zeros_like(qd), f_ext)


def mass_matrix(mech: Mechanism, q) -> Float[Array, "n n"]:
    """Generalized inertia matrix ``I = N^T M N`` (seed 000 eq. 7) by the composite-body
    recursion: ``I_ij = p_j . (C_i p_i)`` for ``j`` on the path from ``i`` to the ground, with
    ``C_i`` the extended mass matrix of the subtree at ``i``."""
    return mass_matrix_blocks(mech, q, ((0, mech.num_bodies),))[0]


def mass_matrix_blocks(mech: Mechanism, q, ranges) -> list[Float[Array, "k k"]]:
    """The diagonal blocks of `mass_matrix` over the coordinate ``ranges`` ``(start, stop)``
    (e.g. ``mech.topology.coordinate_slices``: the subsystems' ``I_j``, seed 000 eq. 20), at the
    cost of those blocks only."""
    rotation, position, s = _frames(mech, q)
    n = mech.num_bodies
    composite = _subtree_sums(
        mech, [_world_inertia(mech, i, rotation[i], position[i]) for i in range(n)]
    )
    force = jnp.stack([_mv(c, si) for c, si in zip(composite, s)])
    s = jnp.stack(s)
    on_path = np.eye(n, dtype=bool)  # on_path[i, j]: j is i or one of its ancestors
    for i, p in enumerate(mech.parent):
        if p >= 0:
            on_path[i] |= on_path[p]
    blocks = []
    for start, stop in ranges:
        k = slice(start, stop)
        lower = jnp.where(on_path[k, k], _dot(force[k, None, :], s[None, k, :]), 0.0)
        blocks.append(lower + jnp.where(np.eye(stop - start, dtype=bool), 0.0, _transpose(lower)))
    return blocks


def forward_dynamics(mech: Mechanism, q, qd, tau, f_ext=None) -> Float[Array, " n"]:
    """Joint accelerations of the open tree under ``tau`` and body wrenches ``f_ext`` by the O(n)
    articulated-body recursion: solves ``I qdd = tau - C qd - gravity + N^T f_ext``."""
    rotation, position, s = _frames(mech, q)
    n = mech.num_bodies
    t, bias_acc, art, bias = [], [], [], []
    for i, p in enumerate(mech.parent):  # base -> tips
        rate = s[i] * qd[i]
        t.append(rate + t[p] if p >= 0 else rate)
        bias_acc.append(_cross_motion(mech, t[i], rate))
        art.append(_world_inertia(mech, i, rotation[i], position[i]))
        bias.append(_cross_force(mech, t[i], _mv(art[i], t[i])))
        if f_ext is not None:
            bias[i] = bias[i] - _force_to_world(mech, rotation[i], position[i], f_ext[i])
    u_vec, d_inv, u = [None] * n, [None] * n, [None] * n
    for i in reversed(range(n)):  # tips -> base
        u_vec[i] = _mv(art[i], s[i])
        d_inv[i] = 1.0 / _dot(s[i], u_vec[i])
        u[i] = tau[i] - _dot(s[i], bias[i])
        p = mech.parent[i]
        if p >= 0:  # articulated inertia and bias wrench handed to the parent
            gain = u_vec[i] * d_inv[i]
            art[p] = art[p] + art[i] - u_vec[i][:, None] * gain[None, :]
            bias[p] = (
                bias[p]
                + bias[i]
                + _mv(art[i], bias_acc[i])
                + gain * (u[i] - _dot(u_vec[i], bias_acc[i]))
            )
    acc, qdd = [None] * n, [None] * n
    for i, p in enumerate(mech.parent):  # base -> tips
        acc_i = (acc[p] if p >= 0 else ground_acceleration(mech)) + bias_acc[i]
        qdd[i] = d_inv[i] * (u[i] - _dot(u_vec[i], acc_i))
        acc[i] = acc_i + s[i] * qdd[i]
    return jnp.stack(qdd)
