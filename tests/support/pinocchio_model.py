"""A loopdyn mechanism as a Pinocchio model with its loop constraints (the reference)."""

import numpy as np


def pinocchio_problem(mech):
    """The mechanism as a Pinocchio model plus one 3-D point constraint per cut joint."""
    from types import SimpleNamespace

    import pinocchio as pin
    from random_trees import _pinocchio_model

    joints = [
        SimpleNamespace(
            parent=mech.parent[i] + 1,
            kind=mech.joint_kinds[i],
            axis=np.asarray(mech.axis[i]),
            rotation=np.asarray(mech.parent_rotation[i]),
            position=np.asarray(mech.parent_position[i]),
            child_rotation=np.asarray(mech.child_rotation[i]),
            child_position=np.asarray(mech.child_position[i]),
            mass=float(mech.mass[i]),
            com=np.asarray(mech.com[i]),
            inertia=np.asarray(mech.inertia[i]),
        )
        for i in range(mech.num_bodies)
    ]
    model = _pinocchio_model(mech, joints)
    constraints = []
    for k, cut in enumerate(mech.cut_joints):
        assert cut.kind in ("revolute", "spherical")
        frames = []
        for body, rotation, position in (
            (cut.body_a, mech.cut_rotation_a[k], mech.cut_position_a[k]),
            (cut.body_b, mech.cut_rotation_b[k], mech.cut_position_b[k]),
        ):
            in_body = pin.SE3(np.asarray(rotation), np.asarray(position))
            joint_of_body = (
                pin.SE3(
                    np.asarray(mech.child_rotation[body]), np.asarray(mech.child_position[body])
                )
                if body >= 0
                else pin.SE3.Identity()
            )
            frames += [body + 1, joint_of_body.inverse() * in_body]
        constraints.append(
            pin.RigidConstraintModel(
                pin.ContactType.CONTACT_3D, model, *frames, pin.ReferenceFrame.LOCAL
            )
        )
    return pin, model, pin.StdVec_RigidConstraintModel(constraints)
