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

Rows of different loops can be dependent too: two spherical cut joints holding one free body
(MuJoCo's ``island_efc.xml``) fix the distance between the two anchors twice, so their six point
rows have rank 5 on the body's six coordinates. Rule: after the step above, the rank of all
loops' rows together (their form at closure, where the gap terms vanish, over each loop's own
coordinates; couplings' rows included) is measured at the same configurations. Where it is short
at every one, by the same amount, the spherical cut joints are tried from the last to the first:
the left null space of all rows, restricted to that joint's rows, spans the world directions
along which its rows depend on the others'; if that span is fixed in its cut frame a, else in
frame b (the frame of its kept directions, if reduced already), at every configuration, the joint
drops it and keeps the rows across the rest of that frame (`kinematics`' ``across`` or
``across_b`` rows), and the rank is measured again. In ``island_efc.xml`` the later connect keeps
the two rows across the line joining the anchors, fixed in the free body, its frame b
(``mech.reduced_on_b``). As above the motion is unchanged and the multipliers are the force along
the kept directions, the dropped rows carrying zero force. A deficit that no such drop removes
(a dependence among rows of other kinds, a direction turning in both frames, or one that would
leave a joint no rows) is kept: `forward_dynamics` refuses and `kinematics.check_jacobian` names
the loops, as before.
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


def _frames(state, cut, a, b):
    """World rotations of cut frames a and b and their origins at one configuration."""
    rotation, origin = state[:2]
    frame_a = (np.eye(3) if a < 0 else rotation[a]) @ cut.rotation
    frame_b = (np.eye(3) if b < 0 else rotation[b]) @ cut.child_rotation
    end_a = cut.position if a < 0 else origin[a] + rotation[a] @ cut.position
    end_b = cut.child_position if b < 0 else origin[b] + rotation[b] @ cut.child_position
    return (frame_a, frame_b), (end_a, end_b)


def _velocities(joints, parent, state, a, b, ends):
    """``(3, n)`` Jacobians of the gap's velocity ``v_b - v_a`` and of ``omega_b - omega_a`` at
    closure: over the loop's own coordinates only (those above the common ancestor move both
    ends alike once the gap is closed)."""
    _, _, axes, points = state
    side_a, _, side_b = loop_sides(parent, a, b)
    gap, turn = np.zeros((3, len(parent))), np.zeros((3, len(parent)))
    for sign, side, end in ((-1.0, side_a, ends[0]), (1.0, side_b, ends[1])):
        for k in side:
            revolute = joints[k].kind == "revolute"
            gap[:, k] = sign * (np.cross(axes[k], end - points[k]) if revolute else axes[k])
            turn[:, k] = sign * axes[k] if revolute else 0.0
    return gap, turn


def _rank(matrix):
    """Left singular vectors of ``matrix`` (columns) and its numerical rank."""
    u, s, _ = np.linalg.svd(matrix)
    return u, int(np.sum(s > _RTOL * s[0])) if s.size and s[0] > 0 else 0


def _within_loops(states, joints, parent, cuts):
    """``{cut: directions in frame a}`` of the spherical cut joints whose point rows are
    redundant within their own loop (module docstring)."""
    out = {}
    for c, (cut, a, b) in enumerate(cuts):
        if cut.kind != "spherical":
            continue
        kept = []
        for state in states:
            (frame_a, _), ends = _frames(state, cut, a, b)
            u, rank = _rank(_velocities(joints, parent, state, a, b, ends)[0])
            kept.append(frame_a.T @ u[:, :rank])
        if kept[0].shape[1] in (0, 3):
            continue
        projector = [k @ k.T for k in kept]
        if all(
            k.shape == kept[0].shape and np.abs(p - projector[0]).max() < _SAME
            for k, p in zip(kept, projector)
        ):
            out[c] = _basis(projector[0], kept[0].shape[1])
    return out


def _across(axis):
    """``(2, 3)``: an orthonormal basis of the plane normal to ``axis``."""
    return np.linalg.svd(axis[None])[2][1:]


def _cut_rows(cut, frames, gap, turn, kept):
    """The rows of one cut joint at closure ``(r, n)`` (their span; `kinematics`' rows): the gap
    rows along world axes or, where reduced, along the kept directions of their frame, then the
    rows of the turns the joint locks."""
    frame_a, frame_b = frames
    if kept is not None:
        directions, side = kept[:2]
        move = np.array(directions) @ frames[side].T @ gap
    else:
        move = _across(frame_a @ cut.axis) @ gap if cut.kind == "prismatic" else gap
    lock = {
        "spherical": np.zeros((0, 3)),
        "revolute": _across(frame_a @ cut.axis),
        "universal": np.cross(frame_b[:, 1], frame_a[:, 0])[None],
    }.get(cut.kind, np.eye(3))
    return np.vstack([move, lock @ turn])


def _gap_directions(frames, kept):
    """``(3, r)``: the world directions of a spherical cut joint's ``r`` gap rows."""
    if kept is None:
        return np.eye(3)
    directions, side = kept[:2]
    return frames[side] @ np.array(directions).T


def _fixed_drop(frames, restricted, kept):
    """The directions a spherical cut joint keeps, ``(directions, side)``, once it drops those
    its rows depend on the others along: the world directions ``restricted`` (one ``(3, k)`` per
    configuration), if they span a space fixed in cut frame a (else b; the frame of its kept
    directions if already reduced) at every configuration and it keeps at least one row; else
    None."""
    spans = [np.linalg.svd(w)[:2] for w in restricted]  # w: rows of orthonormal null vectors
    dropped = int(np.sum(spans[0][1] > _SAME))
    if not dropped or any(np.sum(s > _SAME) != dropped for _, s in spans):
        return None
    rows = 3 if kept is None else len(kept[0])
    for side in (0, 1) if kept is None else (kept[1],):
        local = [f[side].T @ u[:, :dropped] for f, (u, _) in zip(frames, spans)]
        projector = [v @ v.T for v in local]
        if rows > dropped and all(np.abs(p - projector[0]).max() < _SAME for p in projector):
            held = np.eye(3) if kept is None else np.array(kept[0]).T @ np.array(kept[0])
            return _basis(held - projector[0], rows - dropped), side
    return None


def _across_loops(states, joints, parent, cuts, couplings, kept):
    """``kept`` with the drops that give all loops' rows full rank (module docstring)."""
    kept = dict(kept)
    for _ in range(3 * len(cuts)):  # each pass drops at least one row
        frames = [[_frames(s, cut, a, b) for cut, a, b in cuts] for s in states]
        blocks, nulls = [], []
        for state, at, coupled in zip(states, frames, couplings):
            rows = [
                _cut_rows(cut, f, *_velocities(joints, parent, state, a, b, ends), kept.get(c))
                for c, ((cut, a, b), (f, ends)) in enumerate(zip(cuts, at))
            ]
            u, rank = _rank(np.vstack(rows + [coupled]))
            blocks.append(rows)
            nulls.append(u[:, rank:])
        deficit = nulls[0].shape[1]
        if not deficit or any(n.shape[1] != deficit for n in nulls):
            break  # full rank, or a deficit that changes with the configuration
        starts = np.cumsum([0] + [len(r) for r in blocks[0]])
        for c in reversed(range(len(cuts))):
            if cuts[c][0].kind != "spherical":
                continue
            rows = slice(starts[c], starts[c + 1])
            restricted = [
                _gap_directions(at[c][0], kept.get(c)) @ null[rows]
                for at, null in zip(frames, nulls)
            ]
            drop = _fixed_drop([at[c][0] for at in frames], restricted, kept.get(c))
            if drop is not None:
                kept[c] = (*drop, True)
                break
        else:
            break  # no spherical cut joint can drop the dependent rows
    return kept


def _coupling_rows(couplings, n, rng):
    """The couplings' rows of J, ``first - P'(w) second`` at a random ``w``, ``(c, n)``."""
    slopes = [np.polyval(np.polyder(poly[::-1]), rng.normal()) for _, _, poly in couplings]
    return np.array([f - k * s for (f, s, _), k in zip(couplings, slopes)]).reshape(-1, n)


def reduced_rows(joints, parent, quaternions, cuts, couplings=(), seed=0) -> dict[int, tuple]:
    """For each spherical cut joint whose point rows are structurally redundant, within its
    loop or across loops (module docstring): the directions it keeps, the cut frame they are
    fixed in and whether rows were dropped across loops, ``{cut index: (((n_x, n_y, n_z), ...),
    side, across)}`` (side 0: frame a, 1: frame b).
    ``joints`` are the tree joints in body order (``kind``, ``axis``, ``rotation``,
    ``position``, ``child_rotation``, ``child_position``), ``cuts`` the cut joints (``kind``,
    ``axis``, ``rotation`` and ``position`` on body a, ``child_rotation`` and
    ``child_position`` on body b) with their body indices ``(a, b)``; ``couplings`` the
    couplings' ``(first, second, poly)`` (`MechanismBuilder.add_coupling`), whose rows join the
    rank across loops."""
    rng = np.random.default_rng(seed)
    states = [_motion(joints, parent, set(quaternions), rng) for _ in range(STATES)]
    kept = {c: (d, 0, False) for c, d in _within_loops(states, joints, parent, cuts).items()}
    if len(cuts) + len(couplings) < 2:
        return kept
    coupled = [_coupling_rows(couplings, len(parent), rng) for _ in states]
    return _across_loops(states, joints, parent, cuts, coupled, kept)


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
