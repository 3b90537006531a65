"""Recursive dynamics of the spanning tree (serial and branched subsystems), DeNOC style.

Twists propagate base -> tips as ``t_i = A_i t_parent + p_i qd_i`` (seed 004 eqs. 20-23; the
twist propagation matrix ``A_i`` is the body-fixed motion transform of `spatial`). The Newton-Euler
wrench of each body is ``w_i = M_i dt_i + W_i M_i t_i`` (seed 004 eq. 10, seed 000 eq. 1); the
backward pass ``tau = N^T w`` of the DeNOC matrices ``N = N_l N_d`` becomes the tips -> base
accumulation of wrenches (seed 000 eqs. 4-7, seed 002 eqs. 17-33 for serial and tree-type systems).
``I = N^T M N`` (seed 000 eq. 7) is computed by the composite-body recursion and ``qdd`` from
forces by the O(n) articulated-body recursion. Gravity enters as an acceleration of the ground.

All functions are pure: ``f(mech, q, ...)`` with ``q``, ``qd``, ``qdd``, ``tau`` of shape ``(n,)``
and external body wrenches ``f_ext`` of shape ``(n, d)`` in body coordinates (``d = mech.dim``),
acting at the body frame origin. Loops over bodies unroll at trace time over the static parent
array; per-body quantities are computed for all bodies at once.
"""

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from . import spatial
from .mechanism import Mechanism

_ROWS = np.array(spatial.PLANAR_ROWS)


def _planar(vectors, mech):
    """Keep the planar rows of spatial vectors (last axis) when the mechanism is planar."""
    return vectors[..., _ROWS] if mech.planar else vectors


def _cross(mech):
    return spatial.planar_cross_motion if mech.planar else spatial.cross_motion


def joint_poses(mech: Mechanism, q: Float[Array, " n"]):
    """Rotation ``(n, 3, 3)`` and origin ``(n, 3)`` of each body in its parent's frame."""
    revolute = np.array([k == "revolute" for k in mech.joint_kinds])
    turn = jax.vmap(spatial.rotation_about)(mech.axis, q)
    turn = jnp.where(revolute[:, None, None], turn, jnp.eye(3))
    slide = jnp.where(revolute[:, None], 0.0, mech.axis * q[:, None])
    rotation = mech.parent_rotation @ turn @ jnp.swapaxes(mech.child_rotation, -1, -2)
    position = (mech.parent_position + jnp.einsum("nij,nj->ni", mech.parent_rotation, slide)
                - jnp.einsum("nij,nj->ni", rotation, mech.child_position))
    return rotation, position


def motion_subspaces(mech: Mechanism) -> Float[Array, "n d"]:
    """Joint-rate propagation vectors ``p_i`` in body coordinates (seed 004 eqs. 22-23)."""
    subspaces = [spatial.joint_subspace(k, mech.axis[i], mech.child_rotation[i], mech.child_position[i])
                 for i, k in enumerate(mech.joint_kinds)]
    return _planar(jnp.stack(subspaces), mech)


def body_inertias(mech: Mechanism) -> Float[Array, "n d d"]:
    """Extended mass matrices ``M_i`` about each body frame origin (seed 000 eq. 3)."""
    inertia = spatial.planar_inertia if mech.planar else spatial.spatial_inertia
    return jax.vmap(inertia)(mech.mass, mech.com, mech.inertia)


def propagation_matrices(mech: Mechanism, q: Float[Array, " n"]) -> Float[Array, "n d d"]:
    """Twist propagation matrices ``A_i`` (parent -> body i, body coordinates)."""
    rotation, position = joint_poses(mech, q)
    if mech.planar:
        return jax.vmap(spatial.planar_motion_transform)(rotation[:, :2, :2], position[:, :2])
    return jax.vmap(spatial.motion_transform)(rotation, position)


def ground_acceleration(mech: Mechanism) -> Float[Array, " d"]:
    """Twist-rate of the ground that stands for gravity: ``-[0; g]``."""
    return _planar(jnp.concatenate([jnp.zeros(3, mech.gravity.dtype), -mech.gravity]), mech)


def forward_kinematics(mech: Mechanism, q: Float[Array, " n"]):
    """World rotation ``(n, 3, 3)`` and origin ``(n, 3)`` of every body frame."""
    rel_rotation, rel_position = joint_poses(mech, q)
    rotation, position = [], []
    for i, p in enumerate(mech.parent):  # base -> tips
        if p < 0:
            rotation.append(rel_rotation[i])
            position.append(rel_position[i])
        else:
            rotation.append(rotation[p] @ rel_rotation[i])
            position.append(position[p] + rotation[p] @ rel_position[i])
    return jnp.stack(rotation), jnp.stack(position)


def _twists_and_rates(mech, q, qd, qdd, base_rate):
    """Base -> tips twist and twist-rate recursion shared by `twists`, `twist_rates` and RNEA."""
    a_mat, s = propagation_matrices(mech, q), motion_subspaces(mech)
    cross = _cross(mech)
    t, dt = [], []
    for i, p in enumerate(mech.parent):  # base -> tips
        ti = s[i] * qd[i] + (a_mat[i] @ t[p] if p >= 0 else 0.0)
        dti = s[i] * qdd[i] + a_mat[i] @ (dt[p] if p >= 0 else base_rate) + cross(ti) @ (s[i] * qd[i])
        t.append(ti)
        dt.append(dti)
    return a_mat, s, jnp.stack(t), jnp.stack(dt)


def twists(mech: Mechanism, q, qd) -> Float[Array, "n d"]:
    """Twist of every body in its own coordinates (seed 004 eq. 20)."""
    zero = jnp.zeros(mech.dim, q.dtype)
    return _twists_and_rates(mech, q, qd, jnp.zeros_like(qd), zero)[2]


def twist_rates(mech: Mechanism, q, qd, qdd) -> Float[Array, "n d"]:
    """Twist-rate (time derivative of the twist, without gravity) of every body."""
    zero = jnp.zeros(mech.dim, q.dtype)
    return _twists_and_rates(mech, q, qd, qdd, zero)[3]


def _accumulate(mech, a_mat, w):
    """Tips -> base sum of body wrenches: the wrench carried by each tree joint."""
    w = list(w)
    for i in reversed(range(mech.num_bodies)):  # tips -> base
        p = mech.parent[i]
        if p >= 0:
            w[p] = w[p] + a_mat[i].T @ w[i]
    return jnp.stack(w)


def joint_wrenches(mech: Mechanism, q, qd, qdd, f_ext=None) -> Float[Array, "n d"]:
    """Wrench transmitted from each parent to its body through the tree joint (body coordinates):
    the recursive Newton-Euler backward pass (seed 002 eqs. 20-22, 30-33)."""
    a_mat, _, t, dt = _twists_and_rates(mech, q, qd, qdd, ground_acceleration(mech))
    m = body_inertias(mech)
    cross = _cross(mech)
    w = jnp.einsum("nij,nj->ni", m, dt) + jax.vmap(
        lambda ti, mi: spatial.cross_force(ti, cross) @ mi @ ti)(t, m)
    if f_ext is not None:
        w = w - f_ext
    return _accumulate(mech, a_mat, w)


def inverse_dynamics(mech: Mechanism, q, qd, qdd, f_ext=None) -> Float[Array, " n"]:
    """Joint forces ``tau = I qdd + C qd + gravity - (external)`` by the recursive Newton-Euler
    (DeNOC) algorithm (seed 000 eq. 6 without multipliers)."""
    return jnp.sum(motion_subspaces(mech) * joint_wrenches(mech, q, qd, qdd, f_ext), axis=-1)


def bias_forces(mech: Mechanism, q, qd, f_ext=None) -> Float[Array, " n"]:
    """``C qd`` plus gravity (and minus external wrenches): inverse dynamics at ``qdd = 0``."""
    return inverse_dynamics(mech, q, qd, jnp.zeros_like(qd), f_ext)


def mass_matrix(mech: Mechanism, q) -> Float[Array, "n n"]:
    """Generalized inertia matrix ``I = N^T M N`` (seed 000 eq. 7), composite-body recursion."""
    a_mat, s = propagation_matrices(mech, q), motion_subspaces(mech)
    composite = list(body_inertias(mech))
    n = mech.num_bodies
    for i in reversed(range(n)):  # tips -> base
        p = mech.parent[i]
        if p >= 0:
            composite[p] = composite[p] + a_mat[i].T @ composite[i] @ a_mat[i]
    rows = [[None] * n for _ in range(n)]
    zero = jnp.zeros((), q.dtype)
    for i in range(n):
        force = composite[i] @ s[i]
        rows[i][i] = s[i] @ force
        j = i
        while mech.parent[j] >= 0:  # up the branch: ancestors of i
            force = a_mat[j].T @ force
            j = mech.parent[j]
            rows[i][j] = rows[j][i] = s[j] @ force
    return jnp.stack([jnp.stack([zero if h is None else h for h in row]) for row in rows])


def forward_dynamics(mech: Mechanism, q, qd, tau, f_ext=None) -> Float[Array, " n"]:
    """Joint accelerations of the open tree under ``tau`` and body wrenches ``f_ext`` by the O(n)
    articulated-body recursion: solves ``I qdd = tau - C qd - gravity + N^T f_ext``."""
    a_mat, s, t, _ = _twists_and_rates(mech, q, qd, jnp.zeros_like(qd), jnp.zeros(mech.dim, q.dtype))
    cross = _cross(mech)
    m = body_inertias(mech)
    n = mech.num_bodies
    bias_acc = [cross(t[i]) @ (s[i] * qd[i]) for i in range(n)]
    art = list(m)
    bias = [spatial.cross_force(t[i], cross) @ m[i] @ t[i] for i in range(n)]
    if f_ext is not None:
        bias = [bias[i] - f_ext[i] for i in range(n)]
    u_vec, d_inv, u = [None] * n, [None] * n, [None] * n
    for i in reversed(range(n)):  # tips -> base
        u_vec[i] = art[i] @ s[i]
        d_inv[i] = 1.0 / (s[i] @ u_vec[i])
        u[i] = tau[i] - s[i] @ bias[i]
        p = mech.parent[i]
        if p >= 0:
            art_a = art[i] - jnp.outer(u_vec[i], u_vec[i]) * d_inv[i]
            bias_a = bias[i] + art_a @ bias_acc[i] + u_vec[i] * (u[i] * d_inv[i])
            art[p] = art[p] + a_mat[i].T @ art_a @ a_mat[i]
            bias[p] = bias[p] + a_mat[i].T @ bias_a
    acc, qdd = [None] * n, [None] * n
    base = ground_acceleration(mech)
    for i in range(n):  # base -> tips
        p = mech.parent[i]
        acc_i = a_mat[i] @ (acc[p] if p >= 0 else base) + bias_acc[i]
        qdd[i] = d_inv[i] * (u[i] - u_vec[i] @ acc_i)
        acc[i] = acc_i + s[i] * qdd[i]
    return jnp.stack(qdd)
