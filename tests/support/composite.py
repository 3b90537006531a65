"""Several mechanisms as one, so that one compiled program checks them all."""

import equinox as eqx
import numpy as np

import loopdyn

ARRAYS = (  # what the kinematics reads of a mechanism, stacked body by body and cut by cut
    "mass", "com", "inertia", "axis", "q0", "parent_position", "parent_rotation", "child_position",
    "child_rotation", "cut_axis", "cut_position_a", "cut_rotation_a", "cut_position_b",
    "cut_rotation_b",
)  # fmt: skip


def side_by_side(mechs):
    """One mechanism holding ``mechs`` side by side (names prefixed ``k:``, no body shared), so
    that one compiled program checks them all: its loops are theirs and involve only their own
    coordinates, so its Phi, J and J' qd are theirs, stacked. Returns it and, per mechanism, the
    slice of its coordinates and the indices of its constraint rows. (Springs are left out.)"""
    b = loopdyn.MechanismBuilder(planar=mechs[0].planar)
    for k, m in enumerate(mechs):
        body = [f"{k}:{name}" for name in m.body_names] + ["ground"]  # body[-1]: the ground
        for i in range(m.num_bodies):
            if m.mass[i] > 0:
                b.add_body(body[i], float(m.mass[i]), m.com[i], m.inertia[i])
            else:
                b.add_frame(body[i])
            b.add_joint(
                f"{k}:{m.coordinate_names[i]}",
                m.joint_kinds[i],
                body[m.parent[i]],
                body[i],
                axis=m.axis[i],
                position=m.parent_position[i],
                rotation=m.parent_rotation[i],
                child_position=m.child_position[i],
                child_rotation=m.child_rotation[i],
            )
        for c, cut in enumerate(m.cut_joints):
            b.add_joint(
                f"{k}:{cut.name}",
                cut.kind,
                body[cut.body_a],
                body[cut.body_b],
                axis=m.cut_axis[c],
                position=m.cut_position_a[c],
                rotation=m.cut_rotation_a[c],
                child_position=m.cut_position_b[c],
                child_rotation=m.cut_rotation_b[c],
                cut=True,
            )
    # The builder re-normalises axes and rotations (1 ulp): the union takes their exact values.
    built = b.build(q0=np.concatenate([m.q0 for m in mechs]))
    exact = {name: np.concatenate([getattr(m, name) for m in mechs]) for name in ARRAYS}
    for name in ARRAYS:
        np.testing.assert_allclose(getattr(built, name), exact[name], rtol=1e-15, atol=1e-15)
    union = eqx.tree_at(
        lambda u: [getattr(u, name) for name in ARRAYS], built, list(exact.values())
    )
    assert [c.name for c in union.cut_joints] == [
        f"{k}:{c.name}" for k, m in enumerate(mechs) for c in m.cut_joints
    ]
    top, coordinates, rows, start = union.topology, [], [], 0
    for k, m in enumerate(mechs):  # the same joints, bodies and cut joints, in the same order
        own = slice(start, start + m.num_bodies)
        assert union.coordinate_names[own] == tuple(f"{k}:{c}" for c in m.coordinate_names)
        assert union.parent[own] == tuple(p + start if p >= 0 else -1 for p in m.parent)
        assert union.joint_kinds[own] == m.joint_kinds
        loops = [i for i, loop in enumerate(top.loops) if loop.name.startswith(f"{k}:")]
        assert [top.loops[i].cut for i in loops] == sorted(top.loops[i].cut for i in loops)
        cuts = [union.cut_joints[top.loops[i].cut] for i in loops]
        assert [(c.name, c.kind, c.body_a, c.body_b) for c in cuts] == [
            (f"{k}:{c.name}", c.kind, *(x + start if x >= 0 else -1 for x in (c.body_a, c.body_b)))
            for c in m.cut_joints
        ]
        coordinates.append(own)
        rows.append(np.arange(top.num_rows)[[r for i in loops for r in range(*top.row_slices[i])]])
        assert len(rows[k]) == m.topology.num_rows
        start += m.num_bodies
    return union, coordinates, rows
