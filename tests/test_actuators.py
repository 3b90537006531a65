"""Control actuators, gravity compensation and smoothed joint friction, as MuJoCo defines the first
two: actuator and generalized forces against MuJoCo's ``actuator_force``, ``qfrc_actuator`` and
``qfrc_gravcomp`` at random states and controls (saturating and not), ``qacc`` of tree models
against ``mj_forward``, every forward method of a four-bar against a KKT solve of MuJoCo's terms;
the smooth friction law and its limits; loading, refusals and the builder's checks."""

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from jax.test_util import check_grads

from loopdyn import actuators, energy, forces, forward, kinematics
from loopdyn.inverse import augmented, inverse_dynamics
from loopdyn.io.mjcf import load_mjcf
from loopdyn.mechanism import MechanismBuilder

jax.config.update("jax_enable_x64", True)

# A spatial double pendulum with a slide: every actuator kind, ranges that saturate, gravcomp
# 0.5 and 1.0, a motor (its coordinate stays actuated) and two actuators on one joint.
TREE = """<mujoco><option><flag contact="disable"/></option><worldbody>
  <body name="upper" gravcomp="0.5"><joint name="shoulder" axis="0 1 0.3" damping="0.2"/>
    <geom type="capsule" fromto="0 0 0 0.3 0 -0.2" size="0.03" mass="1.2"/>
    <body name="lower" pos="0.3 0 -0.2" gravcomp="1"><joint name="elbow" axis="1 0 0"/>
      <geom type="capsule" fromto="0 0 0 0 0.25 -0.1" size="0.02" mass="0.7"/>
      <body name="slider" pos="0 0.25 -0.1"><joint name="rail" type="slide" axis="0 0.6 0.8"/>
        <geom type="box" size="0.03 0.02 0.02" mass="0.4"/></body></body></body>
</worldbody><actuator>
  <position name="servo" joint="shoulder" kp="30" kv="2" ctrlrange="-1 1"/>
  <velocity name="spin" joint="elbow" kv="3" forcerange="-0.5 0.8"/>
  <general name="affine" joint="rail" gear="1.5" gaintype="affine" gainprm="4 -2 0.5"
      biastype="affine" biasprm="0.3 -20 -1.5" ctrlrange="-2 3" forcerange="-6 5"/>
  <motor name="drive" joint="elbow" gear="2" ctrlrange="-0.4 0.4"/>
</actuator></mujoco>"""

# A planar four-bar closed by a connect, a servo on the crank, gravcomp on the coupler.
FOURBAR = """<mujoco><option gravity="0 -9.81 0"/><worldbody>
  <body name="crank"><joint name="crank" axis="0 0 1"/>
    <geom type="capsule" fromto="0 0 0 0.2 0 0" size="0.02" mass="1"/>
    <body name="coupler" pos="0.2 0 0" gravcomp="0.5"><joint name="coupler" axis="0 0 1"/>
      <geom type="capsule" fromto="0 0 0 0.5 0.3 0" size="0.02" mass="2"/></body></body>
  <body name="rocker" pos="0.6 0 0"><joint name="rocker" axis="0 0 1" frictionloss="0.3"/>
    <geom type="capsule" fromto="0 0 0 0.1 0.3 0" size="0.02" mass="1.5"/></body>
</worldbody>
<equality><connect body1="coupler" body2="rocker" anchor="0.5 0.3 0"/></equality>
<actuator><position name="servo" joint="crank" kp="8" kv="0.5" forcerange="-3 3"/>
  <motor name="assist" joint="rocker" gear="0.5"/></actuator></mujoco>"""


def mujoco_state(model, mech, q, qd, ctrl):
    """MuJoCo's data after ``mj_forward`` at ``(q, qd, ctrl)``, and loopdyn's dofs in it."""
    qpos = [model.joint(name).qposadr[0] for name in mech.coordinate_names]
    dofs = [model.joint(name).dofadr[0] for name in mech.coordinate_names]
    data = mujoco.MjData(model)
    data.qpos[qpos], data.qvel[dofs], data.ctrl[:] = q, qd, ctrl
    mujoco.mj_forward(model, data)
    return data, dofs


def draws(mech, model, k=8, seed=0):
    """``k`` random states and controls, a third of the controls beyond every ``ctrlrange``."""
    rng = np.random.default_rng(seed)
    spread = np.abs(model.actuator_ctrlrange).max(axis=1) + 1.0
    for s in range(k):
        q = mech.q0 + rng.uniform(-1.0, 1.0, mech.num_bodies)
        ctrl = rng.uniform(-1.0, 1.0, model.nu) * spread * (3.0 if s % 3 == 0 else 0.7)
        yield q, rng.normal(size=mech.num_bodies), ctrl


@pytest.fixture(scope="module")
def tree_model():
    return load_mjcf(TREE), mujoco.MjModel.from_xml_string(TREE)


def test_loaded_actuators(tree_model):
    mech, _ = tree_model
    assert mech.ctrl_names == ("servo", "spin", "affine", "drive")
    names = [mech.coordinate_names[int(np.argmax(np.abs(arm)))] for arm in mech.ctrl_arm]
    assert names == ["shoulder", "elbow", "rail", "elbow"]
    assert mech.actuator_names == ("elbow",)  # the motor's coordinate, input tau as before
    assert mech.ctrl_limited == (True, False, True, True)
    assert mech.ctrl_force_limited == (False, True, True, False)
    np.testing.assert_array_equal(mech.ctrl_gear, [1.0, 1.0, 1.5, 2.0])
    np.testing.assert_array_equal(mech.ctrl_gain, [[30, 0, 0], [3, 0, 0], [4, -2, 0.5], [1, 0, 0]])
    np.testing.assert_array_equal(
        mech.ctrl_bias, [[0, -30, -2], [0, 0, -3], [0.3, -20, -1.5], [0] * 3]
    )
    np.testing.assert_array_equal(mech.gravcomp, [0.5, 1.0, 0.0])
    assert mech.gravcomp_bodies == (0, 1)


def test_actuator_and_gravcomp_forces_match_mujoco(tree_model):
    mech, model = tree_model  # measured: forces exact, gravcomp and passive 9e-16
    saturated = np.zeros((2, model.nu), bool)  # ctrl and force clamps that acted
    for q, qd, ctrl in draws(mech, model):
        data, dofs = mujoco_state(model, mech, q, qd, ctrl)
        force = actuators.actuator_force(mech, q, qd, ctrl)
        np.testing.assert_allclose(force, data.actuator_force, rtol=0, atol=1e-14)
        generalized = actuators.actuator_forces(mech, q, qd, ctrl)
        np.testing.assert_allclose(generalized, data.qfrc_actuator[dofs], rtol=0, atol=1e-14)
        held = forces.gravcomp_forces(mech, q)
        np.testing.assert_allclose(held, data.qfrc_gravcomp[dofs], rtol=0, atol=1e-14)
        passive = forces.passive_forces(mech, q, qd)
        np.testing.assert_allclose(passive, data.qfrc_passive[dofs], rtol=0, atol=1e-14)
        low, high = model.actuator_ctrlrange.T
        saturated[0] |= model.actuator_ctrllimited & ((ctrl < low) | (ctrl > high))
        low, high = model.actuator_forcerange.T
        saturated[1] |= model.actuator_forcelimited & ((force == low) | (force == high))
    assert saturated[0].sum() == 3 and saturated[1].sum() == 2  # every clamp acted


def test_tree_accelerations_match_mujoco(tree_model):
    """Full ``qacc`` (actuators, gravcomp, damping, gravity) against ``mj_forward``; the motor's
    coordinate also takes ``tau``, added to its ``ctrl``'s force (MuJoCo's ``qfrc_applied``)."""
    mech, model = tree_model
    for q, qd, ctrl in draws(mech, model, k=4, seed=1):
        tau = np.array([0.0, 0.25, 0.0])
        data, dofs = mujoco_state(model, mech, q, qd, ctrl)
        data.qfrc_applied[dofs] = tau
        mujoco.mj_forward(model, data)
        qdd, _ = forward.forward_dynamics(mech, q, qd, tau, ctrl=ctrl)
        np.testing.assert_allclose(qdd, data.qacc[dofs], rtol=0, atol=4e-12)
    qdd, _ = forward.forward_dynamics(mech, q, qd, jnp.zeros(3))  # no ctrl: no actuator acts
    data, dofs = mujoco_state(model, mech, q, qd, np.zeros(model.nu))
    np.testing.assert_array_less(1e-3, np.abs(data.qfrc_actuator[dofs][0]))
    np.testing.assert_allclose(
        qdd,
        np.linalg.solve(
            _full_mass(model, data, dofs),
            (data.qfrc_passive - data.qfrc_bias)[dofs],
        ),
        rtol=0,
        atol=4e-12,
    )


# A floating base with a ball hip (nq = 12, nv = 10): actuators on the knee, gravcomp on both
# moving bodies, q and v laid out as MuJoCo's qpos and qvel.
FLOATING = """<mujoco><option><flag contact="disable"/></option><worldbody>
  <body name="base" pos="0 0 1" gravcomp="0.5"><freejoint name="float"/>
    <geom type="box" size="0.1 0.08 0.05" mass="3"/>
    <body name="arm" pos="0.1 0 0" gravcomp="1"><joint name="hip" type="ball" damping="0.1"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 -0.1" size="0.03" mass="1"/>
      <body name="shin" pos="0.3 0 -0.1"><joint name="knee" axis="0 1 0" ref="0.2"/>
        <geom type="capsule" fromto="0 0 0 0 0.2 -0.2" size="0.02" mass="0.5"/></body></body></body>
</worldbody><actuator>
  <position name="servo" joint="knee" kp="20" kv="1" ctrlrange="-0.5 0.5"/>
  <general name="lift" joint="knee" gaintype="affine" gainprm="2 0.5 -0.3" biastype="affine"
      biasprm="0.1 -3 -0.2" forcerange="-2 2"/></actuator></mujoco>"""


def test_floating_base_with_a_ball_joint_matches_mujoco():
    """Actuator length from the knee's entry of ``q`` when ``nq != nv``; gravcomp on a free and
    a ball-jointed body; ``qacc`` against ``mj_forward`` (measured: forces exact, gravcomp
    2e-15, qacc 3e-14 of its largest entry)."""
    mech, model = load_mjcf(FLOATING), mujoco.MjModel.from_xml_string(FLOATING)
    assert (mech.nq, mech.nv) == (12, 10)
    np.testing.assert_array_equal(mech.ctrl_arm, np.eye(10)[[9, 9]])
    rng = np.random.default_rng(5)
    for _ in range(4):
        data = mujoco.MjData(model)
        data.qpos[:] = model.qpos0 + 0.5 * rng.normal(size=model.nq)
        for quaternion in (slice(3, 7), slice(7, 11)):
            data.qpos[quaternion] /= np.linalg.norm(data.qpos[quaternion])
        data.qvel[:], data.ctrl[:] = rng.normal(size=model.nv), rng.normal(size=model.nu)
        mujoco.mj_forward(model, data)
        q, v, ctrl = jnp.asarray(data.qpos), jnp.asarray(data.qvel), jnp.asarray(data.ctrl)
        force = actuators.actuator_force(mech, q, v, ctrl)
        np.testing.assert_allclose(force, data.actuator_force, rtol=0, atol=1e-14)
        generalized = actuators.actuator_forces(mech, q, v, ctrl)
        np.testing.assert_allclose(generalized, data.qfrc_actuator, rtol=0, atol=1e-14)
        held = forces.gravcomp_forces(mech, q)
        np.testing.assert_allclose(held, data.qfrc_gravcomp, rtol=0, atol=2e-14)
        qdd, _ = forward.forward_dynamics(mech, q, v, jnp.zeros(mech.nv), ctrl=ctrl)
        scale = np.abs(data.qacc).max()
        np.testing.assert_allclose(qdd, data.qacc, rtol=0, atol=3e-13 * scale)


def _full_mass(model, data, dofs):
    full = np.zeros((model.nv, model.nv))
    mujoco.mj_fullM(model, data, full)
    return full[np.ix_(dofs, dofs)]


@pytest.mark.parametrize("method", forward.GENERAL_METHODS)
def test_four_bar_methods_solve_with_mujocos_terms(method):
    """Each method against a dense KKT solve of MuJoCo's mass matrix, bias, gravcomp and
    actuator forces (friction left out: MuJoCo's is a constraint), loop rows from loopdyn."""
    model = mujoco.MjModel.from_xml_string(FOURBAR)
    model.opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_FRICTIONLOSS
    mech = load_mjcf(model)
    assert mech.actuator_names == ("rocker",) and float(mech.frictionloss[2]) == 0.0
    rng = np.random.default_rng(2)
    for shift in (0.0, 0.4):
        q = kinematics.assemble(mech, mech.q0 + jnp.array([shift, 0.0, 0.0]))
        qd = kinematics.project_velocity(mech, q, rng.normal(size=3))
        ctrl = rng.normal(size=2)
        data, dofs = mujoco_state(model, mech, q, qd, ctrl)
        rhs = (data.qfrc_actuator + data.qfrc_passive - data.qfrc_bias)[dofs]
        assert abs(data.qfrc_gravcomp[dofs]).max() > 0.1
        _, jac, rate = (np.asarray(x) for x in kinematics.loop_terms(mech, q, qd))
        m = jac.shape[0]
        kkt = np.block([[_full_mass(model, data, dofs), -jac.T], [jac, np.zeros((m, m))]])
        want = np.linalg.solve(kkt, np.concatenate([rhs, -rate]))
        qdd, lam = forward.forward_dynamics(mech, q, qd, jnp.zeros(3), method=method, ctrl=ctrl)
        np.testing.assert_allclose(qdd, want[:3], rtol=0, atol=3e-12)  # |qdd| up to 120
        np.testing.assert_allclose(lam, want[3:], rtol=0, atol=3e-12)


def test_inverse_dynamics_and_the_augmented_solve_take_gravcomp_and_friction():
    """Forward dynamics of the four-bar with gravcomp and smooth friction driven by the motor's
    ``tau``, then inverse dynamics (both methods and the augmented solve) give ``tau`` back."""
    mech = load_mjcf(FOURBAR, frictionloss="smooth")
    q = kinematics.assemble(mech, mech.q0 + jnp.array([0.3, 0.0, 0.0]))
    qd = kinematics.project_velocity(mech, q, jnp.array([0.5, -0.2, 0.1]))
    qdd, lam = forward.forward_dynamics(mech, q, qd, jnp.array([0.0, 0.0, 0.6]))
    assert abs(float(forces.passive_forces(mech, q, qd)[2])) > 0.1  # friction acts
    for method in ("subsystem", "system"):
        result = inverse_dynamics(mech, q, qd, qdd, method=method)
        np.testing.assert_allclose(result.actuator_forces, [0.6], rtol=0, atol=1e-11)
        np.testing.assert_allclose(result.multipliers, lam, rtol=0, atol=1e-11)
    full = augmented(mech, q, qd, qdd)
    np.testing.assert_allclose(full.actuator_forces, [0.6], rtol=0, atol=1e-11)


def test_power_balance_with_gravcomp_friction_and_a_servo():
    """dE/dt = (tau + actuator forces + friction) . qd on the closed four-bar: gravcomp's share
    is out of the potential, the loop forces do no work."""
    mech = load_mjcf(FOURBAR, frictionloss="smooth")
    q = kinematics.assemble(mech, mech.q0 + jnp.array([0.3, 0.0, 0.0]))
    qd = kinematics.project_velocity(mech, q, jnp.array([0.5, -0.2, 0.1]))
    tau, ctrl = jnp.array([0.0, 0.0, 0.6]), jnp.array([0.4, -0.3])
    qdd, _ = forward.forward_dynamics(mech, q, qd, tau, ctrl=ctrl)
    rate = jax.jvp(lambda q, qd: energy.total_energy(mech, q, qd), (q, qd), (qd, qdd))[1]
    friction = forces.joint_forces(mech, q, qd)  # no dampers or springs here
    power = jnp.dot(tau + actuators.actuator_forces(mech, q, qd, ctrl) + friction, qd)
    np.testing.assert_allclose(rate, power, rtol=1e-12, atol=1e-13)
    assert abs(float(jnp.dot(friction, qd))) > 0.01


def test_smooth_friction_law_and_its_limits():
    b = MechanismBuilder(planar=True).add_body("link", 1.0, com=(0.2, 0, 0), inertia=0.01)
    b.add_joint("j", "revolute", "ground", "link", frictionloss=0.3, friction_velocity=0.02)
    mech = b.build()
    q = jnp.zeros(1)
    for qd in (-1.0, -0.01, 0.0, 1e-4, 0.05, 3.0):
        got = forces.joint_forces(mech, q, jnp.array([qd]))[0]
        np.testing.assert_allclose(got, -0.3 * np.tanh(qd / 0.02), rtol=1e-15, atol=0)
    fast = forces.joint_forces(mech, q, jnp.array([[0.06], [-10.0]]))[:, 0]  # 3 v_s and beyond
    np.testing.assert_allclose(fast, [-0.3, 0.3], rtol=0.01)
    slope = jax.grad(lambda v: forces.joint_forces(mech, q, v)[0])(jnp.zeros(1))
    np.testing.assert_allclose(slope, [-0.3 / 0.02], rtol=1e-14)  # a damper near rest
    assert mech.friction_velocity[0] == 0.02


def test_frictionloss_loads_only_when_asked():
    model = mujoco.MjModel.from_xml_string(FOURBAR)
    with pytest.raises(
        ValueError, match=r"joint 'rocker' has frictionloss .*frictionloss='smooth'"
    ):
        load_mjcf(model)
    mech = load_mjcf(model, frictionloss="smooth")
    np.testing.assert_array_equal(mech.frictionloss, [0.0, 0.0, 0.3])
    with pytest.raises(ValueError, match="frictionloss must be None or 'smooth', got 'exact'"):
        load_mjcf(model, frictionloss="exact")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            '<actuator><general name="lag" joint="hinge" dyntype="filter" dynprm="0.1"/></actuator>',
            "actuator 'lag' has activation dynamics",
        ),
        (
            '<actuator><general name="custom" joint="hinge" biastype="user"/></actuator>',
            "actuator 'custom' has a gain or bias other than fixed/affine",
        ),
    ],
)
def test_refusals(extra, message):
    body = '<joint name="hinge" axis="0 1 0"/><geom size="0.1" pos="0.2 0 0"/>'
    xml = f'<mujoco><worldbody><body name="arm">{body}</body></worldbody>{extra}</mujoco>'
    mujoco.MjModel.from_xml_string(xml)  # MuJoCo itself accepts the model
    with pytest.raises(ValueError, match=message):
        load_mjcf(xml)


def test_an_actuator_force_range_of_a_driven_joint_warns():
    xml = """<mujoco><worldbody><body name="arm"><joint name="hinge" axis="0 1 0"
      actuatorfrcrange="-1 1"/><geom size="0.1" pos="0.2 0 0"/></body><body name="leg">
      <joint name="free" axis="0 1 0" actuatorfrcrange="-1 1"/><geom size="0.1"/></body>
      </worldbody><actuator><motor joint="hinge"/></actuator></mujoco>"""
    with pytest.warns(UserWarning, match=r"joints \['hinge'\] clamp their actuators' total force"):
        load_mjcf(xml)


def test_gravcomp_must_be_one_per_loaded_body():
    xml = """<mujoco><worldbody><body name="arm" gravcomp="1"><joint name="hinge" axis="0 1 0"/>
      <geom size="0.1" pos="0.2 0 0"/><body name="hand" pos="0.4 0 0" gravcomp="0.5">
      <geom size="0.05"/></body></body></worldbody></mujoco>"""
    with pytest.raises(ValueError, match=r"body 'arm': the bodies welded into it have different"):
        load_mjcf(xml)
    mech = load_mjcf(xml.replace('gravcomp="0.5"', 'gravcomp="1"'))
    assert mech.body_names == ("arm",) and float(mech.gravcomp[0]) == 1.0
    model = mujoco.MjModel.from_xml_string(xml.replace('gravcomp="0.5"', 'gravcomp="1"'))
    q, qd = jnp.array([0.7]), jnp.zeros(1)
    data, _ = mujoco_state(model, mech, q, qd, [])
    np.testing.assert_allclose(
        forces.gravcomp_forces(mech, q), data.qfrc_gravcomp, rtol=0, atol=1e-14
    )


def test_ctrl_drives_gradients_and_batches(tree_model):
    mech, model = tree_model
    q, qd, ctrl = next(draws(mech, model, k=1, seed=4))
    ctrl = np.clip(ctrl, -0.3, 0.3)  # inside every range: smooth there
    check_grads(
        lambda c: forward.forward_dynamics(mech, q, qd, jnp.zeros(3), ctrl=c)[0],
        (jnp.asarray(ctrl),),
        order=1,
        modes=("fwd", "rev"),
    )
    batch = jnp.stack([jnp.asarray(ctrl), -jnp.asarray(ctrl)])
    stacked = actuators.actuator_forces(mech, jnp.stack([q, q]), jnp.stack([qd, qd]), batch)
    np.testing.assert_allclose(stacked[1], actuators.actuator_forces(mech, q, qd, batch[1]))


def test_builder_checks_actuators():
    def builder():
        b = MechanismBuilder(planar=True).add_body("link", mass=1.0, inertia=0.1)
        b.add_body("other", mass=1.0, inertia=0.1)
        b.add_joint("j", "revolute", "ground", "link")
        return b.add_joint("k", "revolute", "link", "other")

    b = builder().add_actuator("servo", "j", gain=(5, 0, 0), bias=(0, -5, -1))
    with pytest.raises(ValueError, match="actuator name 'servo' is already used"):
        b.add_actuator("servo", "k")
    with pytest.raises(ValueError, match="actuator 'a': joint 'x' is not a revolute or prismatic"):
        builder().add_actuator("a", "x")
    with pytest.raises(ValueError, match="actuator 'a': gear must be a finite non-zero number"):
        builder().add_actuator("a", "j", gear=0.0)
    with pytest.raises(ValueError, match=r"actuator 'a': ctrlrange \[1.0, -1.0\] has its low end"):
        builder().add_actuator("a", "j", ctrlrange=(1, -1))
    with pytest.raises(ValueError, match=r"actuator 'a': gain: expected shape \(3,\)"):
        builder().add_actuator("a", "j", gain=(1, 0))
    with pytest.raises(ValueError, match="body 'b': gravcomp must be a finite number"):
        builder().add_body("b", mass=1.0, inertia=0.1, gravcomp=float("inf"))
    with pytest.raises(ValueError, match="joint 'm': friction_velocity must be > 0, got 0"):
        builder().add_body("b", 1.0, inertia=0.1).add_joint(
            "m", "revolute", "other", "b", friction_velocity=0.0
        )
    mech = b.build()
    np.testing.assert_array_equal(mech.ctrl_arm, [np.eye(mech.nv)[0]])
    assert mech.actuator_names == ()
    with pytest.raises(ValueError, match=r"ctrl must have shape \(1,\) \(one entry per control"):
        forward.forward_dynamics(mech, jnp.zeros(2), jnp.zeros(2), jnp.zeros(2), ctrl=jnp.zeros(2))
