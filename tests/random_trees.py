"""Random serial and branched trees, built both as a loopdyn Mechanism and as a Pinocchio model,
and random planar trees built as planar or spatial loopdyn Mechanisms."""

from typing import NamedTuple

import numpy as np

import loopdyn

try:
    import pinocchio as pin
except ImportError:  # a machine without the reference (e.g. the GPU benchmark host)
    pin = None


def random_rotation(rng):
    q, r = np.linalg.qr(rng.normal(size=(3, 3)))
    q = q * np.sign(np.diag(r))
    return q if np.linalg.det(q) > 0 else -q


def random_inertia(rng):
    """A physical inertia: random principal moments obeying the triangle inequality, rotated."""
    a, b = rng.uniform(0.05, 1.0, size=2)
    moments = np.array([a, b, rng.uniform(abs(a - b) + 0.01, a + b)])
    r = random_rotation(rng)
    return r @ np.diag(moments) @ r.T


def _path_parent(rng, i, path, serial):
    """Parent of body ``i + 1`` (1-based, 0 = ground): body ``i`` or a body on the path to it, so
    that declaration order is depth-first. Returns the parent and the new path."""
    parent = i if serial else path[int(rng.integers(0, len(path)))]
    return parent, path[: path.index(parent) + 1] + [i + 1]


def random_tree(n, seed, serial=False, prismatic_share=0.3, child_frames=False):
    """Body i hangs from the ground or a body on the path to body i - 1 (so declaration order is
    depth-first, the order both libraries number bodies in), through a revolute or prismatic joint
    with random axis and placement. With ``child_frames`` the joint frame on the child body is also
    random (otherwise it is the body frame). Returns (mechanism, pinocchio model)."""
    rng = np.random.default_rng(seed)
    builder = loopdyn.MechanismBuilder(gravity=rng.normal(size=3) * 5)
    names, path, joints = ["ground"], [0], []
    for i in range(n):
        parent, path = _path_parent(rng, i, path, serial)
        kind = "prismatic" if rng.uniform() < prismatic_share else "revolute"
        axis = rng.normal(size=3)
        axis /= np.linalg.norm(axis)
        position, rotation = rng.normal(size=3) * 0.5, random_rotation(rng)
        mass, com, inertia = rng.uniform(0.5, 3.0), rng.normal(size=3) * 0.3, random_inertia(rng)
        child_position, child_rotation = np.zeros(3), np.eye(3)
        if child_frames:
            child_position, child_rotation = rng.normal(size=3) * 0.5, random_rotation(rng)
        name = f"b{i}"
        builder.add_body(name, mass=mass, com=com, inertia=inertia)
        builder.add_joint(
            f"j{i}",
            kind,
            names[parent],
            name,
            axis=axis,
            position=position,
            rotation=rotation,
            child_position=child_position,
            child_rotation=child_rotation,
        )
        names.append(name)
        joints.append(
            _Joint(
                parent,
                kind,
                axis,
                position,
                rotation,
                child_position,
                child_rotation,
                mass,
                com,
                inertia,
            )
        )
    mech = builder.build()
    return mech, None if pin is None else _pinocchio_model(mech, joints)


class _Joint(NamedTuple):
    """What `random_tree` drew for one joint and its child body."""

    parent: int
    kind: str
    axis: np.ndarray
    position: np.ndarray
    rotation: np.ndarray
    child_position: np.ndarray
    child_rotation: np.ndarray
    mass: float
    com: np.ndarray
    inertia: np.ndarray


def _pinocchio_model(mech, joints):
    """The same tree in Pinocchio (its body frame is the joint frame; ours sits in it)."""
    model = pin.Model()
    model.gravity.linear = np.asarray(mech.gravity).copy()
    body_in_joint = [pin.SE3.Identity()]  # each body frame in its joint frame (Pinocchio's frame)
    for i, j in enumerate(joints):
        body_in_joint.append(pin.SE3(j.child_rotation, j.child_position).inverse())
        joint = (
            pin.JointModelRevoluteUnaligned(j.axis)
            if j.kind == "revolute"
            else pin.JointModelPrismaticUnaligned(j.axis)
        )
        placement = body_in_joint[j.parent] * pin.SE3(j.rotation, j.position)
        jid = model.addJoint(j.parent, joint, placement, f"j{i}")
        model.appendBodyToJoint(jid, pin.Inertia(j.mass, j.com, j.inertia), body_in_joint[-1])
    return model


def random_planar_tree(n, seed, planar, serial=False, prismatic_share=0.3):
    """A random tree whose motion stays in the xy-plane: revolute axes +-z, prismatic axes in the
    plane, joint frames turned about z. Placements, centres of mass and inertias are fully 3-D
    (links on different layers). ``planar`` selects the planar or the spatial model of the same
    mechanism; the same ``seed`` gives the same parameters."""
    rng = np.random.default_rng(seed)
    builder = loopdyn.MechanismBuilder(planar=planar, gravity=(*rng.normal(size=2) * 5, 0.0))
    names, path = ["ground"], [0]
    for i in range(n):
        parent, path = _path_parent(rng, i, path, serial)
        if rng.uniform() < prismatic_share:
            angle = rng.uniform(-np.pi, np.pi)
            kind, axis = "prismatic", (np.cos(angle), np.sin(angle), 0.0)
        else:
            kind, axis = "revolute", (0.0, 0.0, float(rng.choice([-1.0, 1.0])))
        name = f"b{i}"
        builder.add_body(
            name,
            mass=rng.uniform(0.5, 3.0),
            com=rng.normal(size=3) * 0.3,
            inertia=random_inertia(rng),
        )
        builder.add_joint(
            f"j{i}",
            kind,
            names[parent],
            name,
            axis=axis,
            position=rng.normal(size=3) * 0.5,
            rotation=rng.uniform(-np.pi, np.pi),
            child_position=rng.normal(size=3) * 0.5,
            child_rotation=rng.uniform(-np.pi, np.pi),
        )
        names.append(name)
    return builder.build()


def random_multidof_tree(n, seed, serial=False):
    """A random tree of revolute, spherical and universal joints with random placements. Pinocchio
    gets each spherical (universal) joint as revolutes about the x, y, z (x, y) axes of the joint
    frame through massless bodies, with coordinates named like loopdyn's. Returns (mechanism,
    pinocchio model)."""
    rng = np.random.default_rng(seed)
    builder = loopdyn.MechanismBuilder(gravity=rng.normal(size=3) * 5)
    model = pin.Model()
    model.gravity.linear = builder.gravity.copy()
    names, path, joint_of = ["ground"], [0], [0]  # joint_of[k]: Pinocchio joint moving body k
    chains = {
        "spherical": (pin.JointModelRX, pin.JointModelRY, pin.JointModelRZ),
        "universal": (pin.JointModelRX, pin.JointModelRY),
    }
    for i in range(n):
        parent, path = _path_parent(rng, i, path, serial)
        kind = ("revolute", "spherical", "universal")[int(rng.integers(0, 3))]
        axis = rng.normal(size=3)
        axis /= np.linalg.norm(axis)
        position, rotation = rng.normal(size=3) * 0.5, random_rotation(rng)
        mass, com, inertia = rng.uniform(0.5, 3.0), rng.normal(size=3) * 0.3, random_inertia(rng)
        name = f"b{i}"
        builder.add_body(name, mass=mass, com=com, inertia=inertia)
        builder.add_joint(
            f"j{i}", kind, names[parent], name, axis=axis, position=position, rotation=rotation
        )
        names.append(name)
        jid, placement = joint_of[parent], pin.SE3(rotation, position)
        if kind == "revolute":
            jid = model.addJoint(jid, pin.JointModelRevoluteUnaligned(axis), placement, f"j{i}")
        for k, joint in enumerate(chains.get(kind, ())):
            jid = model.addJoint(
                jid, joint(), placement if k == 0 else pin.SE3.Identity(), f"j{i}[{k}]"
            )
        model.appendBodyToJoint(jid, pin.Inertia(mass, com, inertia), pin.SE3.Identity())
        joint_of.append(jid)
    return builder.build(), model


def swap_vector(x):
    """Reorder the last axis (length 6) between loopdyn's [angular; linear] and Pinocchio's
    [linear; angular] (the map is its own inverse)."""
    x = np.asarray(x)
    return np.concatenate([x[..., 3:], x[..., :3]], axis=-1)


def swap_matrix(x):
    """`swap_vector` on both sides of 6x6 matrices (last two axes)."""
    return np.swapaxes(swap_vector(np.swapaxes(swap_vector(x), -1, -2)), -1, -2)
