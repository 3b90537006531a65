"""Structurally redundant loop rows, found when a mechanism is built (NumPy, no JAX).

A spherical cut joint (an MJCF ``connect``) imposes three point rows, the gap ``p_b - p_a``. When
its loop moves in a plane, e.g. a planar sub-loop of hinges with parallel axes inside a spatial
robot, the gap cannot change along the plane's normal: that row is dependent on the others at
every configuration (Pinocchio and MuJoCo solve such constraints with regularised or proximal
methods; loopdyn's exact methods need full row rank). Rule: the rank of the point rows over the
loop's own coordinates is measured at `STATES` random configurations (not by counting unknowns);
if it is below 3 at every one, and the directions the gap cannot move along are the same in cut
frame a at all of them, those directions are fixed in frame a: the loop keeps only the rows
across the others, ``(R_a n) . (p_b - p_a)`` for an orthonormal basis ``n`` of what remains
(`kinematics`' ``across`` rows). The motion is unchanged; the multipliers of that loop are the
force components along those ``n`` (turning with frame a), the force along the dropped
directions being zero: a documented choice among the many multipliers that give the same motion.
A rank deficit that changes with the configuration is a singular pose, not a structure, and is
left to `kinematics.check_jacobian`.
"""

from __future__ import annotations

import numpy as np

from .topology import loop_sides

STATES = 3  # random configurations the rank is measured at
_RTOL = 1e-9  # singular values below this times the largest count as zero
_SAME = 1e-8  # the dropped directions agree in frame a to this


def _rodrigues(axis, angle):
    k = np.array([[0, -axis[2], axis[1]], [axis[2], 0, -axis[0]], [-axis[1], axis[0], 0]])
    return np.eye(3) + np.sin(angle) * k + (1 - np.cos(angle)) * (k @ k)


def _quaternion(rng):
    w, x, y, z = rng.standard_normal(4)
    s = 2.0 / (w * w + x * x + y * y + z * z)
    return np.array(
        [
            [1 - s * (y * y + z * z), s * (x * y - w * z), s * (x * z + w * y)],
            [s * (x * y + w * z), 1 - s * (x * x + z * z), s * (y * z - w * x)],
            [s * (x * z - w * y), s * (y * z + w * x), 1 - s * (x * x + y * y)],
        ]
    )


def _motion(joints, parent, quaternions, rng):
    """World rotation and origin of every body at a random configuration, and each joint's
    world axis and a point on it (revolute) or its direction (prismatic)."""
    n = len(parent)
    rotation, origin = np.empty((n, 3, 3)), np.empty((n, 3))
    axes, points = np.empty((n, 3)), np.empty((n, 3))
    for i, j in enumerate(joints):
        angle = rng.uniform(-np.pi, np.pi)
        turn = _rodrigues(j.axis, angle) if j.kind == "revolute" else np.eye(3)
        if i in quaternions:
            turn = _quaternion(rng)
        elif i - 1 in quaternions or i - 2 in quaternions:
            turn = np.eye(3)  # a ball's second and third bodies: angle 0
        slide = j.axis * angle if j.kind == "prismatic" else np.zeros(3)
        joint_r = j.rotation @ turn @ j.child_rotation.T
        joint_p = j.position + j.rotation @ slide - joint_r @ j.child_position
        up_r, up_p = (
            (np.eye(3), np.zeros(3)) if parent[i] < 0 else (rotation[parent[i]], origin[parent[i]])
        )
        rotation[i], origin[i] = up_r @ joint_r, up_p + up_r @ joint_p
        axes[i] = rotation[i] @ j.child_rotation @ j.axis
        points[i] = origin[i] + rotation[i] @ j.child_position
    return rotation, origin, axes, points


def reduced_point_rows(joints, parent, quaternions, cuts, seed=0) -> dict[int, tuple]:
    """For each spherical cut joint whose point rows are structurally redundant (module
    docstring): the directions in cut frame a to keep, ``{cut index: ((n_x, n_y, n_z), ...)}``.
    ``joints`` are the tree joints in body order (``kind``, ``axis``, ``rotation``, ``position``,
    ``child_rotation``, ``child_position``), ``cuts`` the cut joints (``kind``, ``rotation``,
    ``position`` on body a, ``child_position`` on body b) with their body indices ``(a, b)``."""
    rng = np.random.default_rng(seed)
    states = [_motion(joints, parent, set(quaternions), rng) for _ in range(STATES)]
    out = {}
    for c, (cut, a, b) in enumerate(cuts):
        if cut.kind != "spherical":
            continue
        side_a, _, side_b = loop_sides(parent, a, b)
        sides = [(-1.0, k, a) for k in side_a] + [(1.0, k, b) for k in side_b]
        kept = []
        for rotation, origin, axes, points in states:
            frame_a = (np.eye(3) if a < 0 else rotation[a]) @ cut.rotation
            ends = {
                a: cut.position if a < 0 else origin[a] + rotation[a] @ cut.position,
                b: cut.child_position if b < 0 else origin[b] + rotation[b] @ cut.child_position,
            }
            columns = [
                sign
                * (
                    np.cross(axes[k], ends[end] - points[k])
                    if joints[k].kind == "revolute"
                    else axes[k]
                )
                for sign, k, end in sides
            ]
            if not columns:
                break
            u, s, _ = np.linalg.svd(np.array(columns).T)
            rank = int(np.sum(s > _RTOL * s[0]))
            kept.append(frame_a.T @ u[:, :rank])
        if len(kept) < STATES or kept[0].shape[1] == 3:
            continue
        projector = [k @ k.T for k in kept]
        if kept[0].shape[1] and all(
            k.shape == kept[0].shape and np.abs(p - projector[0]).max() < _SAME
            for k, p in zip(kept, projector)
        ):
            out[c] = _basis(projector[0], kept[0].shape[1])
    return out


def _basis(projector, rank):
    """An orthonormal basis of the range of ``projector`` (rank ``rank``), the frame's own axes
    where they lie in it (e.g. x and y for a plane normal to z)."""
    picked = []
    for axis in np.eye(3):
        v = projector @ axis
        for p in picked:
            v = v - (v @ p) * p
        if np.linalg.norm(v) > 0.5:
            picked.append(v / np.linalg.norm(v))
        if len(picked) == rank:
            break
    if len(picked) < rank:
        u, _, _ = np.linalg.svd(projector)
        picked = list(u[:, :rank].T)
    return tuple(tuple(float(x) for x in np.where(np.abs(v) < 1e-14, 0.0, v)) for v in picked)
