"""Random serial and branched trees, built both as a loopdyn Mechanism and as a Pinocchio model."""

import numpy as np
import pinocchio as pin

import loopdyn


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


def random_tree(n, seed, serial=False, prismatic_share=0.3):
    """Body i hangs from the ground or a body on the path to body i - 1 (so declaration order is
    depth-first, the order both libraries number bodies in), through a revolute or prismatic joint
    with random axis and placement. Returns (mechanism, pinocchio model)."""
    rng = np.random.default_rng(seed)
    builder = loopdyn.MechanismBuilder(gravity=rng.normal(size=3) * 5)
    model = pin.Model()
    model.gravity.linear = builder.gravity.copy()
    names, path = ["ground"], [0]
    for i in range(n):
        parent = i if serial else path[int(rng.integers(0, len(path)))]
        path = path[: path.index(parent) + 1] + [i + 1]
        kind = "prismatic" if rng.uniform() < prismatic_share else "revolute"
        axis = rng.normal(size=3)
        axis /= np.linalg.norm(axis)
        position, rotation = rng.normal(size=3) * 0.5, random_rotation(rng)
        mass, com, inertia = rng.uniform(0.5, 3.0), rng.normal(size=3) * 0.3, random_inertia(rng)
        name = f"b{i}"
        builder.add_body(name, mass=mass, com=com, inertia=inertia)
        builder.add_joint(f"j{i}", kind, names[parent], name, axis=axis, position=position,
                          rotation=rotation)
        names.append(name)
        joint = (pin.JointModelRevoluteUnaligned(axis) if kind == "revolute"
                 else pin.JointModelPrismaticUnaligned(axis))
        jid = model.addJoint(parent, joint, pin.SE3(rotation, position), f"j{i}")
        model.appendBodyToJoint(jid, pin.Inertia(mass, com, inertia), pin.SE3.Identity())
    return builder.build(), model

