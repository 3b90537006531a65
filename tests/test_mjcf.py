"""MJCF import: loaded mechanisms against MuJoCo's own kinematics, constraint gaps and dynamics, and
against the same mechanisms built with `MechanismBuilder`."""

import pathlib
import re
import warnings

import equinox as eqx
import jax
import mujoco
import numpy as np
import pytest

from loopdyn import configuration, kinematics, tree
from loopdyn.io.mjcf import load_mjcf, world_rotation
from loopdyn.mechanism import MechanismBuilder

DATA = pathlib.Path(__file__).parent / "data"
TOL = 1e-12


# ---------------------------------------------------------------- references built by hand


def fourbar_reference():
    """tests/data/fourbar.xml, built with the builder from the numbers in its comment."""
    b = MechanismBuilder(planar=True, gravity=(0.0, -9.81, 0.0))
    b.add_body("crank", 1.0, com=(0.15, 0.2, 0.0), inertia=(0.01, 0.01, 0.02))
    b.add_body("coupler", 2.0, com=(0.4, 0.0, 0.0), inertia=(0.05, 0.06, 0.11))
    b.add_body("rocker", 1.5, com=(0.2, 0.0, 0.0), inertia=(0.02, 0.02, 0.04))
    b.add_joint("theta1", "revolute", "ground", "crank", actuated=True)
    b.add_joint("theta2", "revolute", "crank", "coupler", position=(0.3, 0.4, 0.0))
    b.add_joint(
        "theta3",
        "revolute",
        "ground",
        "rocker",
        axis=(0, 0, -1),
        position=(1.1, 0, 0),
        rotation=np.pi / 2,
    )
    b.add_joint(
        "B",
        "revolute",
        "coupler",
        "rocker",
        position=(0.8, 0, 0),
        child_position=(0.4, 0, 0),
        cut=True,
    )
    return b.build()


def three_rrr_reference():
    """tests/data/three_rrr.xml from its documented geometry: base pivots at radius 0.8 m, the
    platform centred at the origin, proximal links turned by beta from the inward direction."""
    rp = 0.4 / np.sqrt(3.0)
    d = 0.8 - rp
    beta = np.arccos((0.4**2 + d**2 - 0.6**2) / (2 * 0.4 * d))
    b = MechanismBuilder(planar=True, gravity=(0.0, -9.81, 0.0))
    for i in range(3):
        b.add_body(f"proximal{i + 1}", 3.0, com=(0.2, 0, 0), inertia=0.04)
        b.add_body(f"distal{i + 1}", 4.0, com=(0.3, 0, 0), inertia=0.12)
        if i == 0:
            b.add_body("platform", 8.0, com=(0, 0, 0), inertia=0.0817)
    vertices = []
    for i in range(3):
        alpha = -np.pi / 2 + 2 * np.pi * i / 3
        u = np.array([np.cos(alpha), np.sin(alpha), 0.0])
        theta = alpha + np.pi + beta
        elbow = 0.8 * u + 0.4 * np.array([np.cos(theta), np.sin(theta), 0.0])
        gap = rp * u - elbow
        phi = np.arctan2(gap[1], gap[0])
        vertices.append(rp * u)
        prox, dist = f"proximal{i + 1}", f"distal{i + 1}"
        b.add_joint(
            f"theta{i + 1}",
            "revolute",
            "ground",
            prox,
            position=0.8 * u,
            rotation=theta,
            actuated=True,
        )
        b.add_joint(
            f"theta{i + 4}", "revolute", prox, dist, position=(0.4, 0, 0), rotation=phi - theta
        )
        if i == 0:
            b.add_joint(
                "theta7",
                "revolute",
                dist,
                "platform",
                position=(0.6, 0, 0),
                rotation=-phi,
                child_position=vertices[0],
            )
    for i in (1, 2):
        b.add_joint(
            f"C{i + 1}",
            "revolute",
            f"distal{i + 1}",
            "platform",
            position=(0.6, 0, 0),
            child_position=vertices[i],
            cut=True,
        )
    return b.build()


# ---------------------------------------------------------------- loopdyn and MuJoCo side by side


@eqx.filter_jit
def loopdyn_kinematics(mech, qs, jacobian=False):
    """Body poses, Phi and (optionally) J at a batch of configurations: one compile per model."""

    def one(q):
        position, rotation = tree.forward_kinematics(mech, q)
        jac = kinematics.loop_jacobian(mech, q) if jacobian else None
        return rotation, position, kinematics.loop_residual(mech, q), jac

    return jax.vmap(one)(qs)


@eqx.filter_jit
def loopdyn_dynamics(mech, qs, qds):
    return jax.vmap(lambda q, qd: (tree.mass_matrix(mech, q), tree.bias_forces(mech, q, qd)))(
        qs, qds
    )


def mujoco_id(model, kind, name):
    """MuJoCo's id of a named element, or of a generated name ``<kind><id>``."""
    i = mujoco.mj_name2id(model, getattr(mujoco.mjtObj, f"mjOBJ_{kind.upper()}"), name)
    if i < 0 and name.startswith(kind) and name[len(kind) :].isdigit():
        i = int(name[len(kind) :])
    return i


def euler_quat(angles):
    """MuJoCo quaternion of the builder's spherical chain: rotations about x, then y, then z."""
    quat = np.array([1.0, 0.0, 0.0, 0.0])
    for axis, angle in zip(np.eye(3), angles):
        turn = np.concatenate([[np.cos(angle / 2)], np.sin(angle / 2) * axis])
        mujoco.mju_mulQuat(quat, quat.copy(), turn)
    return quat


def mujoco_forward(model, qpos, qvel):
    data = mujoco.MjData(model)
    data.qpos[:], data.qvel[:] = qpos, qvel
    mujoco.mj_forward(model, data)
    return data


def equality_gap(model, data, e):
    """MuJoCo's constraint violation rows of equality ``e`` (connect: body1 point minus body2
    point, world axes; weld: then the orientation error)."""
    rows = (data.efc_type == mujoco.mjtConstraint.mjCNSTR_EQUALITY) & (data.efc_id == e)
    return data.efc_pos[rows]


def cut_frames(mech, rotation, position, c):
    """World rotation and origin of cut joint c's frames on its bodies a and b."""
    cut, frames = mech.cut_joints[c], []
    for body, r, p in (
        (cut.body_a, mech.cut_rotation_a[c], mech.cut_position_a[c]),
        (cut.body_b, mech.cut_rotation_b[c], mech.cut_position_b[c]),
    ):
        rb, pb = (np.eye(3), np.zeros(3)) if body < 0 else (rotation[body], position[body])
        frames.append((rb @ r, pb + rb @ p))
    return frames


def assert_poses_match_mujoco(model, mech, rotation, position, data):
    """Every loopdyn body that is a MuJoCo body sits where MuJoCo puts it."""
    compared = 0
    for i, name in enumerate(mech.body_names):
        b = mujoco_id(model, "body", name)
        if b >= 0:
            np.testing.assert_allclose(rotation[i], data.xmat[b].reshape(3, 3), atol=TOL, rtol=0)
            np.testing.assert_allclose(position[i], data.xpos[b], atol=TOL, rtol=0)
            compared += 1
    return compared


def assert_dynamics_match_mujoco(model, mech, dofs, qs, qds):
    """Tree mass matrix and bias forces (Coriolis, centrifugal, gravity) against MuJoCo's."""
    mass, bias = map(np.asarray, loopdyn_dynamics(mech, qs, qds))
    for k in range(len(qs)):
        data = mujoco_forward(model, qs[k], qds[k])
        full = np.zeros((model.nv, model.nv))
        mujoco.mj_fullM(model, data, full)
        np.testing.assert_allclose(mass[k], full[np.ix_(dofs, dofs)], atol=1e-12, rtol=1e-12)
        np.testing.assert_allclose(bias[k], data.qfrc_bias[dofs], atol=1e-12, rtol=1e-12)
    assert abs(bias).max() > 1.0


def random_states(mech, count, seed):
    """``count`` random (q, qd), the first one at ``q0``, at rest: MuJoCo's qpos and qvel."""
    rng = np.random.default_rng(seed)
    moves = rng.uniform(-1.0, 1.0, size=(count, mech.nv))
    qs = np.array(configuration.integrate(mech, mech.q0, moves))
    qds = rng.normal(size=(count, mech.nv))
    qs[0], qds[0] = mech.q0, 0.0
    return qs, qds


# ---------------------------------------------------------------- planar closed loops


@pytest.mark.parametrize(
    "name, reference, dynamics",
    [("fourbar", fourbar_reference, True), ("three_rrr", three_rrr_reference, False)],
)
def test_planar_loops_match_builder_and_mujoco(name, reference, dynamics):
    path = DATA / f"{name}.xml"
    mech, ref = load_mjcf(path), reference()
    model = mujoco.MjModel.from_xml_path(str(path))
    assert mech.planar
    for field in ("body_names", "parent", "coordinate_names", "actuator_names", "cut_joints"):
        assert getattr(mech, field) == getattr(ref, field), field
    for field in ("mass", "com", "inertia", "gravity", "q0"):
        np.testing.assert_allclose(getattr(mech, field), getattr(ref, field), atol=TOL, rtol=0)

    qs, qds = random_states(mech, 5, seed=1)
    rot, pos, phi, jac = map(np.asarray, loopdyn_kinematics(mech, qs, jacobian=True))
    rot_ref, pos_ref, phi_ref, jac_ref = map(np.asarray, loopdyn_kinematics(ref, qs, jacobian=True))
    for got, want in ((rot, rot_ref), (pos, pos_ref), (phi, phi_ref), (jac, jac_ref)):
        np.testing.assert_allclose(got, want, atol=TOL, rtol=0)
    np.testing.assert_allclose(phi[0], 0.0, atol=TOL)  # the files draw the loops closed at q0
    assert abs(phi).max() > 1e-2  # random configurations open the loops: the comparison bites

    dofs = [model.jnt_dofadr[mujoco_id(model, "joint", c)] for c in mech.coordinate_names]
    for k in range(len(qs)):
        data = mujoco_forward(model, qs[k], qds[k])
        assert assert_poses_match_mujoco(model, mech, rot[k], pos[k], data) == mech.num_bodies
        gaps = np.concatenate([equality_gap(model, data, e) for e in range(model.neq)])
        # loopdyn's planar revolute rows are (p_b - p_a)_{x,y}; MuJoCo's connect rows p_1 - p_2.
        np.testing.assert_allclose(phi[k], -gaps.reshape(-1, 3)[:, :2].ravel(), atol=TOL, rtol=0)
    if dynamics:  # planar tree dynamics against MuJoCo's spatial ones
        assert_dynamics_match_mujoco(model, mech, dofs, qs, qds)


def test_sources_path_text_and_model_agree():
    path = DATA / "fourbar.xml"
    variants = [
        load_mjcf(str(path)),
        load_mjcf(path.read_text()),
        load_mjcf(mujoco.MjModel.from_xml_path(str(path))),
    ]
    base = load_mjcf(path)
    for mech in variants:
        assert mech.body_names == base.body_names and mech.cut_joints == base.cut_joints
        for a, b in zip(jax.tree.leaves(mech), jax.tree.leaves(base)):
            np.testing.assert_array_equal(a, b)


def test_planar_choice():
    planar, spatial = load_mjcf(DATA / "fourbar.xml"), load_mjcf(DATA / "fourbar.xml", planar=False)
    assert planar.planar and not spatial.planar
    assert [c.kind for c in spatial.cut_joints] == ["spherical"]  # connect: revolute in the plane
    for a, b in zip(jax.tree.leaves(planar), jax.tree.leaves(spatial)):  # same geometry and inertia
        np.testing.assert_array_equal(a, b)
    xy_gravity_z = (DATA / "fourbar.xml").read_text().replace('<option gravity="0 -9.81 0"/>', "")
    xz_gravity_y = """<mujoco><option gravity="0 -9.81 0"/><worldbody>
        <body name="crank"><joint name="t1" axis="0 1 0"/><geom size="0.05"/>
          <body name="coupler" pos="0.3 0 0.4"><joint name="t2" axis="0 1 0"/><geom size="0.05"/>
          </body></body>
        <body name="rocker" pos="1.1 0 0"><joint name="t3" axis="0 1 0"/><geom size="0.05"/></body>
      </worldbody>
      <equality><connect body1="coupler" body2="rocker" anchor="0.8 0 0"/></equality></mujoco>"""
    for xml, normal, gravity in (
        (xy_gravity_z, "[0.0, 0.0, 1.0]", "[0.0, 0.0, -9.81]"),
        (xz_gravity_y, "[0.0, 1.0, 0.0]", "[0.0, -9.81, 0.0]"),
    ):
        spatial = load_mjcf(xml)  # gravity out of the plane: spatial, the connect's normal row
        assert not spatial.planar and [c.kind for c in spatial.cut_joints] == ["spherical"]
        assert [len(rows) for _, rows in spatial.reduced_points] == [2]  # ... dropped
        message = f"moves in planes normal to {normal}, but gravity {gravity} is not in the plane"
        with pytest.raises(ValueError, match=re.escape(message) + ".*weld constraints"):
            load_mjcf(xml.replace("<connect", "<weld"))  # its angle rows would vanish
        assert [c.kind for c in load_mjcf(xml, planar=False).cut_joints] == ["spherical"]
    with pytest.raises(ValueError, match=r"not planar: gravity \[0.5, -1.2, -9.81\]"):
        load_mjcf(DATA / "serial.xml", planar=True)
    for body, joint, reason in (
        ("", 'type="ball"', "joint 'j' is a ball joint"),
        ("", 'axis="0 1 0"', "gravity [0.0, -9.81, 0.0] is not in the plane of motion"),
        ("", 'axis="0 1 0"/><joint name="k"', "hinge 'j' has axis"),  # no common plane
        ("", 'type="slide" axis="0 0.6 0.8"', "slide 'j' has axis"),
        ('euler="90 0 0"', 'axis="0 1 0"', "joint 'j': its frame turns out of the plane"),
    ):  # the last hinge axis is along world z, but the body frame is not in the plane
        xml = f"""<mujoco><option gravity="0 -9.81 0"/><worldbody><body {body}>
                  <joint name="j" {joint}/><geom size="0.1"/></body></worldbody></mujoco>"""
        assert load_mjcf(xml).planar is False
        with pytest.raises(ValueError, match=re.escape(f"not planar: {reason}")):
            load_mjcf(xml, planar=True)


def fourbar_in_plane(turn):
    """The four-bar of tests/data/fourbar.xml drawn in the plane whose right, up and normal
    directions are the columns of ``turn`` (identity: the xy-plane), gravity down. Its hinges
    turn about minus the normal, so the xz-plane ``(x, z, -y)`` gives hinges about +y, as MuJoCo
    users draw them. The crank's ref turns its joint frame; inertias clear of the triangle
    inequality's edge, which rounding would cross."""

    def vec(*v):
        return " ".join(repr(float(x)) for x in turn @ np.array(v, dtype=np.float64))

    def inertia(*moments):
        full = turn @ np.diag(moments) @ turn.T
        return " ".join(repr(float(full[i, j])) for i, j in _UPPER)

    return f"""<mujoco><option gravity="{vec(0, -9.81, 0)}"/><worldbody>
      <body name="crank">
        <joint name="theta1" axis="{vec(0, 0, -1)}" ref="30"/>
        <inertial pos="{vec(0.15, 0.2, 0)}" mass="1" fullinertia="{inertia(0.012, 0.01, 0.02)}"/>
        <body name="coupler" pos="{vec(0.3, 0.4, 0)}">
          <joint name="theta2" axis="{vec(0, 0, -1)}"/>
          <inertial pos="{vec(0.4, 0, 0)}" mass="2" fullinertia="{inertia(0.05, 0.06, 0.11)}"/>
        </body>
      </body>
      <body name="rocker" pos="{vec(1.1, 0, 0)}" axisangle="{vec(0, 0, 1)} 90">
        <joint name="theta3" axis="{vec(0, 0, -1)}"/>
        <inertial pos="{vec(0.2, 0, 0)}" mass="1.5" fullinertia="{inertia(0.022, 0.02, 0.04)}"/>
      </body>
    </worldbody>
    <equality><connect name="B" body1="coupler" body2="rocker" anchor="{vec(0.8, 0, 0)}"/>
    </equality></mujoco>"""


_UPPER = ((0, 0), (1, 1), (2, 2), (0, 1), (0, 2), (1, 2))  # MuJoCo's fullinertia order
XZ = np.array([[1.0, 0, 0], [0, 0, -1], [0, 1, 0]])  # columns: right x, up z, normal -y


def tilted_plane():
    """Right, up and normal of a plane tilted every way, right's largest component positive."""
    turn = np.zeros(9)
    mujoco.mju_quat2Mat(turn, euler_quat([0.3, -0.7, 1.1]))
    turn = turn.reshape(3, 3)
    return turn if turn[np.argmax(abs(turn[:, 0])), 0] > 0 else turn @ np.diag([-1.0, 1, -1])


@eqx.filter_jit
def loop_dynamics(mech, qs, qds):
    """Mass matrix, bias forces, (Phi, J, J' qd) and body poses at a batch of states."""

    def one(q, qd):
        terms = kinematics.loop_terms(mech, q, qd)
        return tree.mass_matrix(mech, q), tree.bias_forces(mech, q, qd), terms

    return jax.vmap(one)(qs, qds), jax.vmap(lambda q: kinematics.body_poses(mech, q))(qs)


@pytest.mark.parametrize("plane", ["xz", "tilted"])
def test_any_plane_loads_planar_like_xy_spatial_and_mujoco(plane):
    turn = XZ if plane == "xz" else tilted_plane()
    xml = fourbar_in_plane(turn)
    if plane == "xz":  # what a MuJoCo user writes: hinges about y, gravity along -z
        assert 'axis="0.0 1.0 0.0"' in xml and 'gravity="0.0 0.0 -9.81"' in xml
    mech, model = load_mjcf(xml), mujoco.MjModel.from_xml_string(xml)
    in_xy, spatial = load_mjcf(fourbar_in_plane(np.eye(3))), load_mjcf(xml, planar=False)
    rotation = world_rotation(xml)  # the file's world into loopdyn's: turn^T
    assert mech.planar and in_xy.planar and not spatial.planar
    np.testing.assert_allclose(rotation, turn.T, atol=1e-15, rtol=0)
    np.testing.assert_array_equal(world_rotation(xml, planar=False), np.eye(3))
    np.testing.assert_array_equal(mech.gravity, [0.0, -9.81, 0.0])
    assert in_xy.axis_names == spatial.axis_names == ("x", "y", "z")
    if plane == "xz":
        assert mech.axis_names == ("x", "z", "-y") and mech.plane_axes == ("x", "z")
    else:  # each turned axis by its direction in the file
        shown = [[float(c) for c in name.strip("()").split(",")] for name in mech.axis_names]
        np.testing.assert_allclose(shown, turn.T, atol=5e-3, rtol=0)
    for a, b in zip(jax.tree.leaves(mech), jax.tree.leaves(in_xy)):  # the same planar model
        np.testing.assert_allclose(a, b, atol=TOL, rtol=0)

    qs, qds = random_states(mech, 5, seed=5)
    (mass, bias, (phi, jac, rate)), (pos, rot) = jax.tree.map(
        np.asarray, loop_dynamics(mech, qs, qds)
    )
    (mass_xy, bias_xy, terms_xy), _ = loop_dynamics(in_xy, qs, qds)
    (mass_3d, bias_3d, terms_3d), _ = loop_dynamics(spatial, qs, qds)
    for got, want in zip((mass, bias, phi, jac, rate), (mass_xy, bias_xy, *terms_xy)):
        np.testing.assert_allclose(got, want, atol=TOL, rtol=0)
    np.testing.assert_allclose(mass, mass_3d, atol=TOL, rtol=0)
    np.testing.assert_allclose(bias, bias_3d, atol=TOL, rtol=0)
    # Spatially the connect's row along the plane's normal is redundant: the rows that remain
    # are across frame a's in-plane axes, the planar gap seen in frame a.
    rot_3d, pos_3d, _, _ = loopdyn_kinematics(spatial, qs)
    frame_a = np.stack([cut_frames(spatial, r, p, 0)[0][0] for r, p in zip(rot_3d, pos_3d)])
    ((cut, kept),) = spatial.reduced_points
    across = frame_a @ np.asarray(kept).T  # (states, 3, 2): world directions of the rows
    assert cut == 0 and np.allclose(across.transpose(0, 2, 1) @ rotation[2], 0.0, atol=TOL)
    in_file = np.einsum("ji,kj->ki", rotation[:2], phi)  # the planar gap in the file's axes
    np.testing.assert_allclose(terms_3d[0], np.einsum("kij,ki->kj", across, in_file), atol=TOL)
    np.testing.assert_allclose(  # at q0, closed, J is the planar J seen in frame a too
        terms_3d[1][0], across[0].T @ rotation[:2].T @ jac[0], atol=TOL, rtol=0
    )
    assert abs(phi).max() > 1e-2 and abs(phi[0]).max() < TOL  # closed at q0 only

    dofs = [model.jnt_dofadr[mujoco_id(model, "joint", c)] for c in mech.coordinate_names]
    assert_dynamics_match_mujoco(model, mech, dofs, qs, qds)
    for k in range(len(qs)):  # poses and loop gaps back in the file's frame
        data = mujoco_forward(model, qs[k], qds[k])
        file_rot, file_pos = rotation.T @ rot[k] @ rotation, pos[k] @ rotation
        assert assert_poses_match_mujoco(model, mech, file_rot, file_pos, data) == 3
        np.testing.assert_allclose(
            phi[k], -(rotation @ equality_gap(model, data, 0))[:2], atol=TOL, rtol=0
        )


OPEN = """<mujoco><option gravity="0 -9.81 0"/><worldbody>
  <body name="arm"><joint name="a"/><geom size="0.1"/><site name="tip" pos="1 0 0"/></body>
  <body name="other" pos="2 0 0"><joint name="b"/><geom size="0.1"/>
    <site name="end" pos="-0.96 0.03 0"/></body>
  </worldbody><equality><connect {name} site1="tip" site2="end"/></equality></mujoco>"""


@pytest.mark.parametrize("name, shown", [("", "equality0"), ('name="pin"', "pin")])
def test_open_connect_warns_with_its_name_and_distance(name, shown):
    with pytest.warns(UserWarning, match=rf"equality '{shown}': .* are 0\.05 apart at qpos0"):
        mech = load_mjcf(OPEN.format(name=name))  # the sites are (0.04, 0.03) apart
    np.testing.assert_allclose(np.linalg.norm(kinematics.loop_residual(mech, mech.q0)), 0.05)


def test_edited_connect_warns_and_closed_ones_do_not():
    model = mujoco.MjModel.from_xml_string(fourbar_in_plane(XZ))
    model.eq_data[0, 3:6] += (0.0, 0.0, 0.02)  # body2's point, moved along the rocker
    with pytest.warns(UserWarning, match=r"equality 'B': .* are 0\.02 apart at qpos0"):
        load_mjcf(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # closed as drawn: silent
        for source in ("fourbar", "three_rrr", "rssr", fourbar_in_plane(XZ)):
            load_mjcf(source if source.startswith("<") else DATA / f"{source}.xml")


# ---------------------------------------------------------------- spatial models


def test_serial_dynamics_match_mujoco():
    path = DATA / "serial.xml"
    mech, model = load_mjcf(path), mujoco.MjModel.from_xml_path(str(path))
    assert not mech.planar
    # "mount" (welded to the world) and "tool" (welded to forearm) are merged; the massless
    # "forearm[0]" carries the first of forearm's two joints; unnamed elements get their ids.
    assert mech.body_names == ("upper", "forearm[0]", "forearm", "body5", "side")
    assert mech.coordinate_names == ("shoulder", "elbow", "extend", "joint3", "rail")
    assert set(mech.actuator_names) == {"shoulder", "rail"}
    dofs = [model.jnt_dofadr[mujoco_id(model, "joint", c)] for c in mech.coordinate_names]
    np.testing.assert_allclose(mech.q0, model.qpos0[dofs], atol=0, rtol=0)  # refs: 20 deg, 0.05
    np.testing.assert_allclose(mech.gravity, model.opt.gravity, atol=0, rtol=0)
    np.testing.assert_allclose(
        float(mech.mass.sum()), model.body_subtreemass[0] - model.body_mass[1], rtol=1e-14
    )

    qs, qds = random_states(mech, 5, seed=2)
    rot, pos, _, _ = map(np.asarray, loopdyn_kinematics(mech, qs))
    for k in range(len(qs)):
        data = mujoco_forward(model, qs[k], qds[k])
        assert assert_poses_match_mujoco(model, mech, rot[k], pos[k], data) == 4
    assert_dynamics_match_mujoco(model, mech, dofs, qs, qds)


def test_rssr_ball_joint_and_spherical_cut_match_mujoco():
    path = DATA / "rssr.xml"
    mech, model = load_mjcf(path), mujoco.MjModel.from_xml_path(str(path))
    assert mech.coordinate_names == ("crank", "ball[0]", "ball[1]", "ball[2]", "rocker")
    assert [(c.name, c.kind) for c in mech.cut_joints] == [("B", "spherical")]
    qs, qds = random_states(mech, 5, seed=3)
    rot, pos, phi, _ = map(np.asarray, loopdyn_kinematics(mech, qs))
    np.testing.assert_allclose(phi[0], 0.0, atol=TOL)  # closed at q0
    for k in range(len(qs)):
        data = mujoco_forward(model, qs[k], qds[k])
        assert assert_poses_match_mujoco(model, mech, rot[k], pos[k], data) == 3
        np.testing.assert_allclose(phi[k], -equality_gap(model, data, 0), atol=TOL, rtol=0)
    assert abs(phi).max() > 1e-2


EQUALITIES = """
<mujoco>
  <worldbody>
    <body name="post" pos="0.4 0.4 0" euler="0 30 0">
      <site name="top" pos="0 0 0.5" euler="0 0 45"/>
    </body>
    <body name="a" pos="0.1 0.2 0.3" euler="10 20 30">
      <joint name="a1" axis="0 1 1"/> <joint name="a2" type="slide" axis="1 0 0"/>
      <joint name="a3" axis="1 0 0" pos="0.1 0 0"/>
      <geom size="0.1"/> <site name="s1" pos="0.3 0.1 0.2" euler="40 0 10"/>
    </body>
    <body name="b" pos="0.5 -0.2 0.1" euler="-20 5 60">
      <joint name="b1" axis="1 0 0"/> <joint name="b2" axis="0 1 0"/>
      <joint name="b3" axis="0 0 1"/>
      <geom size="0.1"/> <site name="s2" pos="0.1 0.4 -0.2" euler="0 30 0"/>
      <body name="b_tip" pos="0 0 0.3" euler="0 0 20"><geom size="0.05"/></body>
    </body>
  </worldbody>
  <equality>
    <weld name="w" body1="a" body2="b_tip" anchor="0.1 0.2 0.3"/>
    <weld name="w_rel" body1="a" body2="b" anchor="0.1 0.2 0.3"
          relpose="0.3 0.2 0.1 0.5 0.5 0.5 0.5"/>
    <weld site1="s1" site2="s2"/>
    <connect name="c_sites" site1="s1" site2="s2"/>
    <connect name="c_post" site1="s2" site2="top"/>
  </equality>
</mujoco>
"""


def test_a_weld_without_torque_is_a_point_constraint():
    """``torquescale="0"``: MuJoCo leaves the rotation free, so the weld locks the point only
    (3 rows, a spherical cut joint) where a plain weld locks all 6."""
    loose = EQUALITIES.replace('anchor="0.1 0.2 0.3"/>', 'anchor="0.1 0.2 0.3" torquescale="0"/>')
    with pytest.warns(UserWarning, match="apart at qpos0"):
        mech, stiff = load_mjcf(loose), load_mjcf(EQUALITIES)
    assert (mech.cut_joints[0].kind, stiff.cut_joints[0].kind) == ("spherical", "weld")
    assert (mech.topology.loops[0].rows, stiff.topology.loops[0].rows) == (3, 6)
    np.testing.assert_allclose(mech.cut_position_a[0], stiff.cut_position_a[0], atol=0)
    np.testing.assert_allclose(mech.cut_position_b[0], stiff.cut_position_b[0], atol=0)


def test_weld_and_connect_frames_match_mujoco():
    model = mujoco.MjModel.from_xml_string(EQUALITIES)
    with pytest.warns(UserWarning, match="apart at qpos0") as caught:
        mech = load_mjcf(EQUALITIES)  # relpose and the sites put these ends apart: open loops
    assert [str(w.message).split(":")[0] for w in caught] == [
        "equality 'w_rel'",
        "equality 'equality2'",
        "equality 'c_sites'",
        "equality 'c_post'",
    ]
    assert not mech.planar
    assert [(c.name, c.kind) for c in mech.cut_joints] == [
        ("w", "weld"),
        ("w_rel", "weld"),
        ("equality2", "weld"),
        ("c_sites", "spherical"),
        ("c_post", "spherical"),
    ]
    b_tip_on_b = mech.cut_joints[0].body_b == mech.body_index("b")  # b_tip is merged into b
    assert b_tip_on_b and mech.cut_joints[4].body_b == -1  # the post is part of the ground
    # b's three hinges meet at its origin: the post's connect can only move s2 on a sphere about
    # it, so the row along the radius (fixed in s2's frame) is dropped.
    reduced = dict(mech.reduced_points)
    assert list(reduced) == [4] and mech.topology.loops[4].rows == 2
    qs, qds = random_states(mech, 4, seed=4)
    rot, pos, phi, _ = map(np.asarray, loopdyn_kinematics(mech, qs))
    for k in range(len(qs)):
        data = mujoco_forward(model, qs[k], qds[k])
        assert assert_poses_match_mujoco(model, mech, rot[k], pos[k], data) == 2
        for c, cut in enumerate(mech.cut_joints):
            gap = equality_gap(model, data, c)
            (rot_a, pos_a), (rot_b, pos_b) = cut_frames(mech, rot[k], pos[k], c)
            np.testing.assert_allclose(pos_a - pos_b, gap[:3], atol=TOL, rtol=0)
            rows = slice(*mech.topology.row_slices[c])
            directions = rot_a @ np.asarray(reduced[c]).T if c in reduced else np.eye(3)
            np.testing.assert_allclose(
                phi[k, rows][: directions.shape[1]], -directions.T @ gap[:3], atol=TOL, rtol=0
            )
            if cut.kind == "weld":  # MuJoCo: vector part of the quaternion of R_b^T R_a (+-)
                quat = np.zeros(4)
                mujoco.mju_mat2Quat(quat, (rot_b.T @ rot_a).flatten())
                sign = np.sign(quat[1:] @ gap[3:])
                np.testing.assert_allclose(sign * quat[1:], gap[3:], atol=TOL, rtol=0)


# ---------------------------------------------------------------- refusals


def _model(worldbody="", extra=""):
    return f"""<mujoco><worldbody>
      <body name="arm">
        <joint name="hinge"/><geom name="g1" size="0.1"/><site name="tip" pos="1 0 0"/>
        <body name="hand" pos="1 0 0"><joint name="wrist"/><geom name="g2" size="0.1"/></body>
      </body>
      {worldbody}</worldbody>{extra}</mujoco>"""


@pytest.mark.parametrize(
    "xml, message",
    [
        (
            _model(
                '<site name="anchor" pos="0 1 0"/>',
                '<tendon><spatial name="rope"><site site="tip"/><site site="anchor"/></spatial>'
                '</tendon><equality><tendon name="taut" tendon1="rope"/></equality>',
            ),
            "tendon 'rope' is a spatial tendon",
        ),
        (
            _model(
                '<site name="anchor" pos="0 1 0"/>',
                '<tendon><spatial name="rope"><site site="tip"/><site site="anchor"/></spatial>'
                '</tendon><equality><tendon name="taut" tendon1="rope"/></equality>',
            ),
            "equality 'taut': a tendon constraint (only connect, weld, joint and fixed-tendon",
        ),
        (
            _model(
                extra='<actuator><general name="servo" joint="hinge" dyntype="integrator"/>'
                "</actuator>"
            ),
            "actuator 'servo' has activation dynamics",
        ),
        (
            _model(extra='<actuator><motor name="pull" site="tip" gear="1 0 0 0 0 0"/></actuator>'),
            "actuator 'pull' does not act on a joint",
        ),
        (
            _model(
                '<body name="limb"><joint name="knee" frictionloss="0.1"/><geom size="0.1"/></body>'
            ),
            "joint 'knee' has frictionloss",
        ),
        (
            _model(
                '<body name="limb"><joint name="hip" type="ball" stiffness="0.1"/>'
                '<geom size="0.1"/></body>'
            ),
            "joint 'hip' has stiffness",
        ),
        (
            _model(extra='<contact><pair name="touch" geom1="g1" geom2="g2"/></contact>'),
            "pair 'touch': loopdyn has no contact",
        ),
    ],
)
def test_refuses_what_it_cannot_represent(xml, message):
    mujoco.MjModel.from_xml_string(xml)  # MuJoCo itself accepts the model
    with pytest.raises(ValueError, match=re.escape(message)):
        load_mjcf(xml)


def test_an_equality_between_bodies_fixed_together_is_left_out():
    """MuJoCo keeps a weld of a body fixed to the world as a constraint without rows; loopdyn
    leaves it out, naming it."""
    xml = _model(
        '<body name="cap" pos="1 0 0"><geom size="0.1"/></body>',
        '<equality><weld name="glue" body1="cap" body2="world"/></equality>',
    )
    mujoco.MjModel.from_xml_string(xml)
    with pytest.warns(UserWarning, match="equality 'glue' ties bodies .* it constrains nothing"):
        mech = load_mjcf(xml)
    assert mech.nv == 2 and not mech.topology.loops


def test_every_unsupported_feature_is_listed_at_once_or_left_out_with_one_warning():
    xml = _model(
        '<body name="limb"><joint name="knee" frictionloss="0.1"/><geom size="0.1"/></body>',
        '<tendon><fixed name="cable" stiffness="2"><joint joint="hinge" coef="1"/></fixed></tendon>'
        '<equality><connect name="pin" body1="hand" body2="world" anchor="1 0 0" active="false"/>'
        '</equality><actuator><general name="servo" joint="hinge" dyntype="integrator"/>'
        '<motor name="drive" joint="wrist"/></actuator>',
    )
    listed = ("joint 'knee' has frictionloss", "tendon 'cable' has stiffness")
    listed += ("actuator 'servo' has activation dynamics",)
    with pytest.raises(ValueError, match="uses 3 feature") as refused:
        load_mjcf(xml)
    assert all(item in str(refused.value) for item in listed)
    assert "unsupported='warn'" in str(refused.value) and "pin" not in str(refused.value)
    with pytest.warns(UserWarning, match="without 3 unsupported") as warned:
        mech = load_mjcf(xml, unsupported="warn")
    assert all(item in str(warned[0].message) for item in listed) and len(warned) == 1
    assert mech.cut_joints == () and mech.actuator_names == ("wrist",)  # the pin is inactive
    assert mech.ctrl_names == ("drive",) and float(mech.frictionloss.sum()) == 0.0
    with pytest.warns(UserWarning, match="without 3 unsupported"):
        switched = load_mjcf(xml, unsupported="warn", active={"pin": True})
    assert [c.name for c in switched.cut_joints] == ["pin"]
    with pytest.raises(ValueError, match=r"active: unknown equalities \['latch'\]"):
        load_mjcf(xml, unsupported="warn", active={"latch": False})


def test_bad_sources():
    with pytest.raises(FileNotFoundError, match="no MJCF file"):
        load_mjcf(DATA / "missing.xml")
    with pytest.raises(ValueError, match="MuJoCo could not compile the MJCF text"):
        load_mjcf("<mujoco><worldbody><body><joint type='spiral'/></body></worldbody></mujoco>")


def test_joint_limits_are_ignored_with_a_warning():
    xml = _model('<body name="limb"><joint name="knee" range="-1 1"/><geom size="0.1"/></body>')
    with pytest.warns(UserWarning, match="joint limits .* are ignored.*: joint.s. 'knee'"):
        mech = load_mjcf(xml)
    assert "knee" in mech.coordinate_names
