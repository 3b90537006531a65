"""Twist and wrench algebra, planar (3-vectors) and spatial (6-vectors).

Notation (seeds 000 §2, 004 §2): a twist is ``t = [w; v]`` (angular first) and a wrench is
``w = [n; f]`` (moment first). Both are expressed in the coordinates of a body frame and refer to
that frame's origin. Planar vectors keep the out-of-plane angular component and the in-plane
linear ones: ``[w_z; v_x; v_y]`` and ``[n_z; f_x; f_y]``; they are the rows ``PLANAR_ROWS`` of the
spatial vectors of a motion in the xy-plane, so every planar quantity here equals the matching
sub-block of its spatial counterpart (a property the tests check).

The twist propagation matrix ``A`` of the DeNOC formulation (seed 004 eq. 3), written in
body-fixed coordinates, is the motion transform ``X`` below: ``t_k = X_k t_parent + p_k qd_k``.
Wrenches go the other way with ``X.T``.
"""

import jax.numpy as jnp
import numpy as np

from . import placement

PLANAR_ROWS = (2, 3, 4)  # [w_z, v_x, v_y] inside [w_x, w_y, w_z, v_x, v_y, v_z]


def from_planar(x):
    """Spatial 6-vectors ``(..., 6)`` of planar 3-vectors ``(..., 3)`` (zeros off the plane)."""
    return placement.put(jnp.zeros((*x.shape[:-1], 6), x.dtype), np.asarray(PLANAR_ROWS), x, -1)


def skew(r):
    """3x3 matrix ``r~`` with ``r~ u = r x u``."""
    x, y, z = r[0], r[1], r[2]
    zero = jnp.zeros_like(x)
    return jnp.stack([jnp.stack([zero, -z, y]), jnp.stack([z, zero, -x]), jnp.stack([-y, x, zero])])


def rotation_about(axis, angle):
    """Rotation matrix of ``angle`` about the unit vector ``axis`` (Rodrigues)."""
    k = skew(axis)
    return jnp.eye(3) + jnp.sin(angle) * k + (1.0 - jnp.cos(angle)) * (k @ k)


def motion_transform(rotation, position):
    """Spatial ``X`` taking twists from frame A to frame B, where B has orientation ``rotation``
    and origin ``position`` in A coordinates: ``X = [E 0; -E r~ E]`` with ``E = rotation.T``."""
    e = rotation.T
    return jnp.block([[e, jnp.zeros((3, 3), e.dtype)], [-e @ skew(position), e]])


def planar_motion_transform(rotation, position):
    """Planar ``X`` (3x3) for a frame rotated by the 2x2 ``rotation`` with origin ``position``."""
    e = rotation.T
    lever = e @ jnp.stack([-position[1], position[0]])
    return jnp.block([[jnp.ones((1, 1), e.dtype), jnp.zeros((1, 2), e.dtype)], [lever[:, None], e]])


def cross_motion(t):
    """Spatial ``t x`` acting on twists (the derivative of a moving frame's twist)."""
    w, v = skew(t[:3]), skew(t[3:])
    return jnp.block([[w, jnp.zeros_like(w)], [v, w]])


def planar_cross_motion(t):
    """Planar ``t x`` acting on planar twists."""
    w, vx, vy = t[0], t[1], t[2]
    zero = jnp.zeros_like(w)
    return jnp.stack(
        [jnp.stack([zero, zero, zero]), jnp.stack([vy, zero, -w]), jnp.stack([-vx, w, zero])]
    )


def cross_force(t, cross):
    """``t x*`` acting on wrenches: ``-(t x)^T`` for the given motion cross product."""
    return -cross(t).T


def spatial_inertia(mass, com, inertia_com):
    """Extended mass matrix (seed 000 eq. 3) about the frame origin, from the mass, the centre of
    mass ``com`` and the 3x3 inertia about the centre of mass, all in body coordinates."""
    c = skew(com)
    c_ct = (com[0] ** 2 + com[1] ** 2 + com[2] ** 2) * jnp.eye(3) - jnp.outer(com, com)  # c c^T
    return jnp.block([[inertia_com + mass * c_ct, mass * c], [mass * c.T, mass * jnp.eye(3)]])


def planar_inertia(mass, com, inertia_com):
    """Planar extended mass matrix (3x3): the ``PLANAR_ROWS`` block of ``spatial_inertia``."""
    cx, cy = com[0], com[1]
    izz = inertia_com[2, 2] + mass * (cx * cx + cy * cy)
    return jnp.stack(
        [
            jnp.stack([izz, -mass * cy, mass * cx]),
            jnp.stack([-mass * cy, mass, 0.0 * mass]),
            jnp.stack([mass * cx, 0.0 * mass, mass]),
        ]
    )


def joint_subspace(kind, axis, child_rotation, child_position):
    """Joint-rate propagation vector ``p`` (the motion subspace) in child-body coordinates.

    The joint frame sits at ``child_position`` with orientation ``child_rotation`` in the child body;
    ``axis`` is the unit joint axis in the joint frame. Revolute: ``[u; c x u]``, prismatic ``[0; u]``
    with ``u`` the axis in body coordinates (seed 004 eq. 4).
    """
    stacked = (x[None] for x in (axis, child_rotation, child_position))
    return joint_subspaces((kind,), *stacked)[0]


def joint_subspaces(kinds, axes, child_rotations, child_positions):
    """`joint_subspace` of many joints at once, ``(n, 6)``: one kind per joint, arrays stacked
    along their first axis."""
    for kind in sorted(set(kinds) - {"revolute", "prismatic"}):
        raise ValueError(f"unknown joint kind {kind!r}; expected 'revolute' or 'prismatic'")
    revolute = np.array([k == "revolute" for k in kinds])[:, None]
    u = jnp.sum(child_rotations * axes[:, None, :], axis=-1)
    turning = jnp.concatenate([u, jnp.cross(child_positions, u)], axis=1)
    return jnp.where(revolute, turning, jnp.concatenate([jnp.zeros_like(u), u], axis=1))


def joint_pose(kind, axis, q, parent_rotation, parent_position, child_rotation, child_position):
    """Pose (rotation, origin) of the child body in parent-body coordinates at coordinate ``q``.

    Parent joint frame ``P`` and child joint frame ``C`` coincide at ``q = 0``; the joint then
    rotates (revolute) or slides (prismatic) ``C`` relative to ``P`` along ``axis``.
    """
    if kind == "revolute":
        rj, dj = rotation_about(axis, q), jnp.zeros(3, axis.dtype)
    else:
        rj, dj = jnp.eye(3, dtype=axis.dtype), axis * q
    rotation = parent_rotation @ rj @ child_rotation.T
    position = parent_position + parent_rotation @ dj - rotation @ child_position
    return rotation, position
