"""URDF with loop closures (`loopdyn.load_urdf`): a four-bar drawn in the xz-plane and a spatial
RSSR, each read by MuJoCo's compiler for loopdyn and by Pinocchio's own URDF parser for the
reference, closed by the same point constraint; the closures given in Python and in a TOML
sidecar file build the same mechanism; bad closures are named."""

import jax.numpy as jnp
import numpy as np
import pinocchio as pin  # a dev dependency (make test installs it): the reference
import pytest

import loopdyn
from loopdyn import kinematics
from loopdyn.io.urdf import Closure, load_urdf

INERTIAL = (
    '<inertial><origin xyz="{c}"/><mass value="{m}"/>'
    '<inertia ixx="{i[0]}" iyy="{i[1]}" izz="{i[2]}" ixy="0" ixz="0" iyz="{i[3]}"/></inertial>'
)
JOINT = (
    '<joint name="{name}" type="revolute"><parent link="{parent}"/><child link="{child}"/>'
    '<origin xyz="{xyz}" rpy="{rpy}"/><axis xyz="{axis}"/>'
    '<limit lower="-10" upper="10" effort="100" velocity="100"/></joint>'
)


def joint(name, parent, child, xyz, axis, rpy="0 0 0"):
    return {"name": name, "parent": parent, "child": child, "xyz": xyz, "axis": axis, "rpy": rpy}


def urdf(links, joints):
    """A URDF with a massless ``base`` link and the given links and joints."""
    body = ['<link name="base"/>']
    for name, c, m, i in links:
        body.append(f'<link name="{name}">{INERTIAL.format(c=c, m=m, i=i)}</link>')
    body += [JOINT.format(**j) for j in joints]
    return f'<?xml version="1.0"?><robot name="loop">{"".join(body)}</robot>'


FOUR_BAR = urdf(
    [
        ("crank", "0.05 0 0", 1.0, (1e-4, 1e-3, 1e-3, 0)),
        ("coupler", "0.15 0 0.01", 2.0, (1e-4, 0.015, 0.015, 0)),
        ("rocker", "0.1 0 0", 1.5, (1e-4, 0.008, 0.008, 0)),
    ],
    [
        joint("A", "base", "crank", "0 0 0", "0 1 0"),
        joint("B", "crank", "coupler", "0.1 0 0", "0 1 0"),
        joint("D", "base", "rocker", "0.3 0 0", "0 1 0", "0 -1.2 0"),
    ],
)
# Crank about z, coupler on a ball joint made of three hinges, rocker about x: the closing point
# is a spatial connect at the coupler's far end.
RSSR = urdf(
    [
        ("crank", "0.05 0 0", 0.5, (1e-4, 5e-4, 5e-4, 0)),
        ("c1", "0 0 0", 1e-6, (1e-9, 1e-9, 1e-9, 0)),
        ("c2", "0 0 0", 1e-6, (1e-9, 1e-9, 1e-9, 0)),
        ("coupler", "0.1 0.1 0.175", 1.0, (8e-3, 8e-3, 1e-3, 1e-4)),
        ("rocker", "0 0 0.125", 0.8, (4e-3, 4e-3, 2e-4, 0)),
    ],
    [
        joint("crank", "base", "crank", "0 0 0", "0 0 1"),
        joint("bx", "crank", "c1", "0.1 0 0", "1 0 0"),
        joint("by", "c1", "c2", "0 0 0", "0 1 0"),
        joint("bz", "c2", "coupler", "0 0 0", "0 0 1"),
        joint("rocker", "base", "rocker", "0.3 0.2 0.1", "1 0 0"),
    ],
)
CASES = {
    "four_bar": (FOUR_BAR, Closure("C", "coupler", "rocker", (0.3, 0.0, 0.0)), ("A",)),
    "rssr": (RSSR, Closure("B", "coupler", "rocker", (0.2, 0.2, 0.35)), ("crank",)),
}


def load(tmp_path, name):
    text, closure, actuated = CASES[name]
    path = tmp_path / f"{name}.urdf"
    path.write_text(text)
    with pytest.warns(UserWarning, match="limits"):
        return path, load_urdf(path, (closure,), actuated)


def pinocchio_reference(path, mech, closure):
    """Pinocchio's model of the URDF and a 3-D point constraint at the closure's anchor (on
    body2, the same point at ``q0``, where MuJoCo computes it too)."""
    model = pin.buildModelFromUrdf(str(path))
    data = model.createData()
    pin.forwardKinematics(model, data, np.zeros(model.nq))
    joint = {name: model.getJointId(name) for name in model.names}
    # Each link hangs from the joint of the same index in both tools' depth-first order.
    body_joint = {b: mech.coordinate_names[k] for k, b in enumerate(mech.body_names)}
    j1, j2 = joint[body_joint[closure.body1]], joint[body_joint[closure.body2]]
    world = data.oMi[j1] * pin.SE3(np.eye(3), np.asarray(closure.anchor, float))
    placement2 = data.oMi[j2].inverse() * world
    constraint = pin.RigidConstraintModel(
        pin.ContactType.CONTACT_3D,
        model,
        j1,
        pin.SE3(np.eye(3), np.asarray(closure.anchor, float)),
        j2,
        placement2,
        pin.ReferenceFrame.LOCAL,
    )
    return model, constraint


@pytest.mark.parametrize("name", CASES)
def test_forward_dynamics_matches_pinocchio_reading_the_same_urdf(tmp_path, name):
    path, mech = load(tmp_path, name)
    closure = CASES[name][1]
    assert mech.planar == (name == "four_bar")
    model, constraint = pinocchio_reference(path, mech, closure)
    assert mech.coordinate_names == tuple(model.names[1:])  # the URDF's joints, in order
    data = model.createData()
    constraints = pin.StdVec_RigidConstraintModel([constraint])
    datas = pin.StdVec_RigidConstraintData([constraint.createData()])
    pin.initConstraintDynamics(model, data, constraints, datas)
    settings = pin.ProximalSettings(1e-14, 1e-12, 200)
    rng = np.random.default_rng(1)
    for _ in range(3):
        fixed = mech.actuated
        q = kinematics.assemble(mech, mech.q0 + 0.2 * rng.standard_normal(mech.num_bodies), fixed)
        jac = np.asarray(kinematics.loop_jacobian(mech, q))
        raw = rng.standard_normal(mech.num_bodies)
        qd = raw - np.linalg.pinv(jac) @ (jac @ raw)
        tau = np.zeros(mech.num_bodies)
        tau[list(mech.actuated)] = rng.standard_normal()
        qdd, _ = loopdyn.forward_dynamics(mech, q, jnp.asarray(qd), jnp.asarray(tau))
        reference = pin.constraintDynamics(
            model, data, np.asarray(q), qd, tau, constraints, datas, settings
        )
        scale = 1.0 + np.abs(reference).max()
        # Seen: 2e-15 (four-bar), 1e-14 (RSSR).
        np.testing.assert_allclose(qdd, reference, rtol=0, atol=1e-13 * scale)


def test_a_sidecar_file_builds_the_same_mechanism(tmp_path):
    path, mech = load(tmp_path, "four_bar")
    sidecar = tmp_path / "four_bar.loops.toml"
    sidecar.write_text(
        'actuated = ["A"]\n\n[[closure]]\nname = "C"\nbody1 = "coupler"\nbody2 = "rocker"\n'
        "anchor = [0.3, 0, 0]\n"
    )
    with pytest.warns(UserWarning, match="limits"):
        again = loopdyn.load_urdf(path, sidecar)
    assert again.cut_joints == mech.cut_joints and again.actuator_names == ("A",)
    for a, b in zip(*(np.asarray(x) for x in (again.cut_position_b, mech.cut_position_b))):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    ("closure", "actuated", "message"),
    [
        (Closure("C", "coupler", "nowhere"), (), "closure 'C': unknown link 'nowhere'"),
        (Closure("C", "coupler", "rocker", kind="hinge"), (), "kind must be one of"),
        (Closure("C", "coupler", "rocker"), ("E",), "actuated joint 'E' is not in the URDF"),
    ],
)
def test_bad_closures_are_named(tmp_path, closure, actuated, message):
    path = tmp_path / "four_bar.urdf"
    path.write_text(FOUR_BAR)
    with pytest.raises(ValueError, match=message):
        load_urdf(path, (closure,), actuated)


def test_a_bad_sidecar_is_named(tmp_path):
    path = tmp_path / "four_bar.urdf"
    path.write_text(FOUR_BAR)
    sidecar = tmp_path / "bad.toml"
    sidecar.write_text('[[closure]]\nname = "C"\nbody1 = "coupler"\n')
    with pytest.raises(ValueError, match="closure 0 has keys"):
        load_urdf(path, sidecar)
    with pytest.raises(FileNotFoundError, match="no URDF file"):
        load_urdf(tmp_path / "missing.urdf")
