"""Ball and free joints (configuration size != velocity size): the tree's terms, the maps
between q and v, and closed loops with a free base, against MuJoCo; a free body's flip about its
intermediate axis against the analytic period and the conservation laws."""

import dataclasses
import pathlib
import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from scipy.special import ellipk
from support.mujoco_kkt import evaluate, kkt_reference, mujoco_model

import loopdyn
from loopdyn import configuration, forces, kinematics, tree
from loopdyn.io import keyframes
from loopdyn.mechanism import MechanismBuilder
from loopdyn.topology import analyse

PUBLISHED = pathlib.Path(__file__).parent / "data" / "published"

# A free body carrying a ball joint and a hinge: tilted bodies, a joint anchor off the body
# origin, a hinge ref, the ball's damping and armature, gravity off the axes.
TREE = """<mujoco><option gravity="0.3 -0.2 -9.81"><flag contact="disable"/></option><worldbody>
<body name="A" pos="0.1 0.2 1" quat="0.9 0.1 0.3 0.2"><freejoint name="float"/>
 <inertial pos="0.1 0.02 -0.03" mass="2" fullinertia="0.05 0.04 0.03 0.001 0.002 -0.003"/>
 <body name="B" pos="0.3 0 0.1" quat="0.8 0.2 0.1 0">
  <joint name="ball" type="ball" pos="0.05 0 0" damping="0.3" armature="0.01"/>
  <inertial pos="0.2 0.01 0.0" mass="1" diaginertia="0.01 0.02 0.025"/>
  <body name="C" pos="0.4 0 0"><joint name="hinge" axis="0 1 0" pos="0 0 0.02" ref="0.3"
    damping="0.2" stiffness="3"/>
   <inertial pos="0.1 0 0" mass="0.5" diaginertia="0.002 0.003 0.004"/></body>
 </body></body></worldbody></mujoco>"""


def _unit_quaternions(model, q):
    free, ball = int(mujoco.mjtJoint.mjJNT_FREE), int(mujoco.mjtJoint.mjJNT_BALL)
    for j in range(model.njnt):
        if model.jnt_type[j] in (free, ball):
            a = model.jnt_qposadr[j] + (3 if model.jnt_type[j] == free else 0)
            q[a : a + 4] /= np.linalg.norm(q[a : a + 4])
    return q


@pytest.fixture(scope="module")
def tree_model():
    model, data = mujoco_model(TREE)
    rng = np.random.default_rng(0)
    q = np.stack([_unit_quaternions(model, rng.standard_normal(model.nq)) for _ in range(4)])
    return loopdyn.load_mjcf(TREE), model, data, q, rng.standard_normal((4, model.nv))


def test_layout_is_mujocos(tree_model):
    mech, model, _, _, _ = tree_model
    assert (mech.nq, mech.nv) == (model.nq, model.nv) == (12, 10)
    assert mech.configuration_names == (
        *("float[0]", "float[1]", "float[2]"),
        *("float[qw]", "float[qx]", "float[qy]", "float[qz]"),
        *("ball[qw]", "ball[qx]", "ball[qy]", "ball[qz]"),
        "hinge",
    )
    assert len(mech.coordinate_names) == mech.nv
    assert mech.coordinate_units == ("m",) * 3 + ("rad",) * 7
    assert mech.configuration_units == ("m",) * 3 + ("1",) * 8 + ("rad",)
    np.testing.assert_array_equal(np.asarray(mech.q0), model.qpos0)


def test_tree_terms_matchmujoco_model(tree_model):
    """Poses, mass matrix (armature included), bias and passive forces, and the accelerations
    under random generalized forces, at random states: MuJoCo's own q, v and qacc layout."""
    mech, model, data, q, v = tree_model
    tau = np.random.default_rng(1).standard_normal(v.shape)
    position, rotation = tree.forward_kinematics(mech, q)
    mass = tree.mass_matrix(mech, q)
    bias = tree.bias_forces(mech, q, v)
    passive = forces.joint_forces(mech, q, v)
    qdd = jax.vmap(lambda *state: loopdyn.forward_dynamics(mech, *state)[0])(q, v, tau)
    order = [mech.body_names.index(name) for name in "ABC"]
    for k in range(len(q)):
        reference = evaluate(model, data, q[k], v[k], tau[k])
        np.testing.assert_allclose(position[k][np.array(order)], data.xpos[1:], atol=1e-15)
        np.testing.assert_allclose(
            rotation[k][np.array(order)].reshape(3, 9), data.xmat[1:], atol=1e-15
        )
        np.testing.assert_allclose(mass[k], reference, atol=3e-15)
        np.testing.assert_allclose(bias[k], data.qfrc_bias, atol=3e-14)
        np.testing.assert_allclose(passive[k], data.qfrc_passive, atol=1e-14)
        np.testing.assert_allclose(qdd[k], data.qacc, rtol=1e-12, atol=1e-12)


def test_configuration_maps_matchmujoco_model(tree_model):
    """`integrate` is MuJoCo's mj_integratePos, `difference` its inverse, `rate` the time
    derivative of `integrate` (central differences) and `velocity` the inverse of `rate`."""
    mech, model, _, q, v = tree_model
    dt = 0.37
    moved = configuration.integrate(mech, q, v, dt)
    for k in range(len(q)):
        reference = q[k].copy()
        mujoco.mj_integratePos(model, reference, v[k], dt)
        np.testing.assert_allclose(moved[k], reference, atol=1e-15)
    np.testing.assert_allclose(configuration.difference(mech, q, moved), dt * v, atol=2e-15)
    np.testing.assert_allclose(configuration.quaternion_norms(mech, moved), 1.0, atol=1e-15)
    h = 1e-5
    numeric = (configuration.integrate(mech, q, v, h) - configuration.integrate(mech, q, v, -h)) / (
        2 * h
    )
    rate = configuration.rate(mech, q, v)
    np.testing.assert_allclose(rate, numeric, atol=1e-10)
    np.testing.assert_allclose(configuration.velocity(mech, q, rate), v, atol=1e-15)
    scaled = q.copy()
    scaled[:, 3:7] *= 1.7
    np.testing.assert_allclose(configuration.normalize(mech, scaled), q, atol=1e-15)
    np.testing.assert_allclose(  # a drifted norm changes no pose
        tree.forward_kinematics(mech, scaled)[0], tree.forward_kinematics(mech, q)[0], atol=1e-15
    )


def test_keyframes_are_states_of_the_loaded_mechanism():
    key = (
        '<keyframe><key name="lifted" time="0.5" qpos="0 0 2 0.6 0 0.8 0 1 0 0 0 0.7"/></keyframe>'
    )
    xml = TREE.replace("</mujoco>", key + "</mujoco>")
    model, data = mujoco_model(xml)
    (name, lifted), mech = next(iter(keyframes(xml).items())), loopdyn.load_mjcf(xml)
    assert name == "lifted" and lifted.time == 0.5 and lifted.v.shape == (mech.nv,)
    mujoco.mj_resetDataKeyframe(model, data, 0)
    mujoco.mj_forward(model, data)
    position, _ = tree.forward_kinematics(mech, lifted.q)
    order = np.array([mech.body_names.index(name) for name in "ABC"])
    np.testing.assert_allclose(position[order], data.xpos[1:], atol=1e-15)


def test_rssr_with_a_true_ball_joint():
    """The RSSR's ball joint loads as a quaternion: inverse dynamics returns the driving force
    and multipliers of forward dynamics, and the derivatives of `assemble` (implicit, in q's
    tangent) and of the accelerations (by mass) match central differences."""
    mech = loopdyn.load_mjcf(pathlib.Path(__file__).parent / "data" / "rssr.xml")
    assert (mech.nq, mech.nv) == (6, 5) and mech.configuration_names[1] == "ball[qw]"
    guess = configuration.integrate(mech, mech.q0, jnp.full(mech.nv, 0.1))
    q = kinematics.assemble(mech, guess, fixed=(0,))
    qd = kinematics.project_velocity(mech, q, jnp.arange(1.0, mech.nv + 1), fixed=(0,))
    tau = jnp.zeros(mech.nv).at[0].set(0.7)
    qdd, lam = loopdyn.forward_dynamics(mech, q, qd, tau)
    result = loopdyn.inverse_dynamics(mech, q, qd, qdd)
    np.testing.assert_allclose(result.tau, tau, atol=1e-11)
    np.testing.assert_allclose(result.multipliers, lam, rtol=1e-10, atol=1e-10)

    # The coupler's idle spin leaves the closed q a manifold over the crank angle: the
    # derivative is the minimum-norm closed tangent, in q's tangent space.
    tangent = jax.jacfwd(lambda c: kinematics.assemble(mech, guess.at[0].set(c), fixed=(0,)))
    dv = configuration.velocity(mech, q, tangent(guess[0]))
    jac = kinematics.loop_jacobian(mech, q)
    np.testing.assert_allclose(dv[0], 1.0, atol=1e-14)
    np.testing.assert_allclose(jac @ dv, 0.0, atol=1e-13)
    idle = np.linalg.svd(np.asarray(jac[:, 1:]))[2][-1]  # the free coordinates' null space
    np.testing.assert_allclose(idle @ dv[1:], 0.0, atol=1e-13)
    h = 1e-6

    def squared(mass):
        changed = eqx.tree_at(lambda m: m.mass, mech, mass)
        return jnp.sum(loopdyn.forward_dynamics(changed, q, qd, tau)[0] ** 2)

    gradient = jax.grad(squared)(mech.mass)
    numeric = [
        (squared(mech.mass.at[i].add(h)) - squared(mech.mass.at[i].add(-h))) / (2 * h)
        for i in range(mech.nv)
    ]
    np.testing.assert_allclose(gradient, numeric, rtol=1e-7, atol=1e-6)


def test_builder_ball_and_free_joints():
    """The builder's ball and free joints: default q0 the identity, checks that name the joint."""
    b = MechanismBuilder()
    b.add_body("base", 1.0, inertia=(1.0, 1.0, 1.0)).add_body("arm", 1.0, inertia=(1, 1, 1))
    b.add_joint("float", "free", "ground", "base").add_joint("shoulder", "ball", "base", "arm")
    mech = b.build(q0={"float[2]": 1.5})
    np.testing.assert_array_equal(mech.q0, [0, 0, 1.5, 1, 0, 0, 0, 1, 0, 0, 0])
    assert mech.coordinate_names[6:] == ("shoulder[0]", "shoulder[1]", "shoulder[2]")
    for kind, kwargs, message in (
        ("ball", {"actuated": True}, "only revolute or prismatic tree joints can be actuated"),
        ("ball", {"stiffness": 1.0}, "takes armature and damping only"),
        ("free", {"springref": 0.1}, "takes armature and damping only"),
    ):
        b = MechanismBuilder().add_body("arm", 1.0, inertia=(1.0, 1.0, 1.0))
        with pytest.raises(ValueError, match=message):
            b.add_joint("j", kind, "ground", "arm", **kwargs)
    b = MechanismBuilder().add_body("arm", 1.0, inertia=(1.0, 1.0, 1.0))
    with pytest.raises(ValueError, match="limits belong to a revolute or prismatic tree joint"):
        b.add_joint("j", "ball", "ground", "arm", limits=(-1.0, 1.0))
    with pytest.raises(ValueError, match=r"limits \[1.0, -1.0\] need low < high"):
        b.add_joint("j", "revolute", "ground", "arm", limits=(1.0, -1.0))
    planar = MechanismBuilder(planar=True).add_body("arm", 1.0, inertia=1.0)
    with pytest.raises(ValueError, match="a free joint does not fit a planar mechanism"):
        planar.add_joint("j", "free", "ground", "arm")
    b = MechanismBuilder().add_body("arm", 1.0, inertia=(1.0, 1.0, 1.0))
    b.add_joint("j", "ball", "ground", "arm")
    with pytest.raises(ValueError, match="the quaternion 'j' is zero"):
        b.build(q0=np.zeros(4))
    with pytest.raises(ValueError, match=r"q has shape \(3,\); expected \(\.\.\., 4\)"):
        tree.mass_matrix(b.build(), jnp.zeros(3))


def _spatial_four_bar(planar):
    """A four-bar with hinges about z; built spatially its spherical cut joint's z row is
    redundant at every configuration."""
    b = MechanismBuilder(planar=planar, gravity=(0.0, -9.81, 0.0))
    for name, length in (("crank", 0.2), ("coupler", 0.5), ("rocker", 0.4)):
        b.add_body(name, 1.0 + length, com=(length / 2, 0, 0), inertia=(0.01, 0.02, 0.03))
    b.add_joint("A", "revolute", "ground", "crank")
    b.add_joint("B", "revolute", "crank", "coupler", position=(0.2, 0, 0))
    b.add_joint("D", "revolute", "ground", "rocker", position=(0.6, 0, 0))
    b.add_joint("C", "spherical" if not planar else "revolute", "coupler", "rocker", cut=True,
                position=(0.5, 0, 0), child_position=(0.4, 0, 0))  # fmt: skip
    return b.build(q0=[1.2, -0.6, 1.9])


def test_redundant_point_rows_are_dropped():
    """The spatial four-bar keeps the x and y rows of its spherical cut joint, in frame a (the
    coupler's), and moves exactly as the planar one: the same accelerations, the multipliers the
    planar world-axis force turned into the coupler's axes; a spatial loop keeps all three."""
    spatial, planar = _spatial_four_bar(False), _spatial_four_bar(True)
    assert spatial.reduced_points == ((0, ((1.0, 0.0, 0.0), (0.0, 1.0, 0.0))),)
    assert spatial.topology.num_rows == 2
    q = kinematics.assemble(planar, planar.q0, fixed=(0,))
    qd = kinematics.project_velocity(planar, q, jnp.array([1.3, 0.0, 0.0]), fixed=(0,))
    tau = jnp.array([0.4, 0.0, 0.0])
    expected, lam = loopdyn.forward_dynamics(planar, q, qd, tau)
    angle = float(q[0] + q[1])  # of the coupler, whose frame carries the rows' directions
    turn = np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
    for method in loopdyn.forward.GENERAL_METHODS:
        qdd, lam_spatial = loopdyn.forward_dynamics(spatial, q, qd, tau, method=method)
        np.testing.assert_allclose(qdd, expected, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(turn @ lam_spatial, lam, rtol=1e-11, atol=1e-11)
    kinematics.check_jacobian(spatial, q)  # full rank now
    rssr = loopdyn.load_mjcf(pathlib.Path(__file__).parent / "data" / "rssr.xml")
    assert rssr.reduced_points == ()


def _held_box(box_is_a, weld=False):
    """A free box held at two points 0.2 apart on its x axis by spherical cut joints to the
    ground (the box is body a of the first, and of the second where ``box_is_a``), or by a weld
    and a spherical one."""
    b = MechanismBuilder(gravity=(0.0, 0.0, -9.81))
    b.add_body("box", 2.0, com=(0.03, 0.02, -0.01), inertia=(0.02, 0.03, 0.04))
    b.add_joint("float", "free", "ground", "box")
    b.add_joint("left", "weld" if weld else "spherical", "box", "ground", cut=True,
                position=(-0.1, 0.0, 0.0), child_position=(-0.1, 0.0, 0.0))  # fmt: skip
    ends = [("box", (0.1, 0.0, 0.0)), ("ground", (0.1, 0.0, 0.0))][:: 1 if box_is_a else -1]
    b.add_joint("right", "spherical", ends[0][0], ends[1][0], cut=True,
                position=ends[0][1], child_position=ends[1][1])  # fmt: skip
    return b.build()


def test_rows_redundant_across_loops_are_dropped():
    """Two spherical cut joints on one free box: six point rows of rank 5 over two loops (the
    distance between the anchors is fixed twice). The later joint keeps its rows across the
    anchors' line, in the box's frame: frame b (``reduced_on_b``) or a. Both models move alike;
    all methods agree; the least-squares KKT solve with the full, rank-deficient rows gives the
    same accelerations (the motion is unique); the kept multipliers, with zero force along the
    line, give the same joint forces as the full rows. `assemble` refuses the box closed half a
    turn over, where the kept rows vanish with the anchors apart along the line. A weld with a connect is refused, naming
    both loops: no direction fixed in a frame can be dropped."""
    rng = np.random.default_rng(2)
    reference = None
    for box_is_a in (False, True):
        mech = _held_box(box_is_a)
        assert mech.reduced_points == ((1, ((0.0, 1.0, 0.0), (0.0, 0.0, 1.0))),)
        assert mech.reduced_on_b == (() if box_is_a else (1,))
        if reference is None:
            q = configuration.integrate(mech, mech.q0, 0.2 * rng.standard_normal(mech.nv))
            q = kinematics.assemble(mech, q)
            qd = kinematics.project_velocity(mech, q, rng.standard_normal(mech.nv))
            tau = rng.standard_normal(mech.nv)
        qdd, lam = loopdyn.forward_dynamics(mech, q, qd, tau, method="system")
        reference = qdd if reference is None else reference
        np.testing.assert_allclose(qdd, reference, rtol=0, atol=1e-12 * np.abs(qdd).max())
        for method in loopdyn.forward.GENERAL_METHODS[1:] if box_is_a else ():
            other, _ = loopdyn.forward_dynamics(mech, q, qd, tau, method=method)
            np.testing.assert_allclose(other, qdd, rtol=0, atol=1e-12 * np.abs(qdd).max())
        topology = analyse(mech.parent, mech.cut_joints, False)  # all rows
        full = dataclasses.replace(mech, reduced_points=(), reduced_on_b=(), topology=topology)
        _, jac, bias = (np.asarray(x) for x in kinematics.loop_terms(full, q, qd))
        assert np.linalg.matrix_rank(jac) == 5
        mass = np.asarray(tree.mass_matrix(mech, q))
        reduced = np.asarray(kinematics.loop_jacobian(mech, q))
        phi = mass @ qdd - reduced.T @ lam  # I qdd = phi + J' lam
        kkt = np.block([[mass, -jac.T], [jac, np.zeros((6, 6))]])
        solution = np.linalg.lstsq(kkt, np.concatenate([phi, -bias]), rcond=None)[0]
        np.testing.assert_allclose(solution[: mech.nv], qdd, rtol=0, atol=1e-12 * np.abs(qdd).max())
        box = np.asarray(kinematics.body_poses(mech, q)[1][-1])
        held = np.concatenate([lam[:3], box @ np.array([0.0, *lam[3:]])])
        np.testing.assert_allclose(jac.T @ held, reduced.T @ lam, atol=1e-12 * np.abs(lam).max())
    flipped = jnp.array([-0.2, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0])  # half a turn about y: 0.4 apart
    with pytest.raises(
        ValueError, match="'right' has its kept rows at zero with its two points 0.4"
    ):
        kinematics.assemble(mech, flipped)
    with pytest.raises(ValueError, match="simulate: the spherical cut joint 'right' has its kept"):
        loopdyn.simulate(mech, flipped, jnp.zeros(mech.nv), 0.01)
    weld = _held_box(True, weld=True)
    assert weld.reduced_points == ()
    with pytest.raises(ValueError, match=r"loops 0 \('left'\), 1 \('right'\) are dependent"):
        kinematics.check_jacobian(weld, weld.q0)  # as forward_dynamics raises


@pytest.fixture(scope="module")
def cassie():
    path = PUBLISHED / "closed_chain.xml"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mech = loopdyn.load_mjcf(path)
    return mech, mujoco_model(path.read_text()), caught


def test_cassie_loads_unchanged(cassie):
    """Pinocchio's closed_chain.xml (Cassie: free base, ball joints, four connects, joint
    damping, armature and springs): loads as it is, with one warning, about the ignored limits;
    the plantar-rod connects close planar sub-loops and keep two rows each."""
    mech, (model, _), caught = cassie
    assert len(caught) == 1 and str(caught[0].message).startswith("joint limits (range) are")
    assert (mech.nq, mech.nv) == (model.nq, model.nv) == (35, 32)
    np.testing.assert_array_equal(mech.q0, model.qpos0)
    assert [c for c, _ in mech.reduced_points] == [0, 2]
    assert mech.topology.num_rows == 10
    assert np.abs(kinematics.loop_residual(mech, mech.q0)).max() < 1e-15


def test_cassie_dynamics_match_a_kkt_solve_frommujoco_model(cassie):
    """At assembled random states, every method's accelerations equal the KKT solution built
    from MuJoCo's mass matrix, bias and passive forces, and its own connect Jacobian with its
    time derivative by central differences along mj_integratePos (least squares over MuJoCo's
    redundant rows: the motion is unique)."""
    mech, (model, data), _ = cassie
    rng = np.random.default_rng(3)
    base = tuple(range(6))
    for _ in range(2):
        q = configuration.integrate(mech, mech.q0, 0.2 * rng.standard_normal(mech.nv))
        q = kinematics.assemble(mech, q, fixed=base)
        v = kinematics.project_velocity(mech, q, rng.standard_normal(mech.nv), fixed=base)
        q, v, tau = np.asarray(q), np.asarray(v), rng.standard_normal(mech.nv)
        expected = kkt_reference(model, data, q, v, tau)
        scale = np.abs(expected).max()
        for method in loopdyn.forward.GENERAL_METHODS:
            qdd, _ = loopdyn.forward_dynamics(mech, q, v, tau, method=method)
            np.testing.assert_allclose(qdd, expected, atol=1e-10 * scale)


def test_menagerie_cassie_with_its_motors_and_keyframe():
    """Menagerie's Cassie (meshes stripped): its ten geared motors take MuJoCo's ``ctrl``,
    clamped to ``ctrlrange``, and its "home" keyframe is a state; near it, the accelerations
    under random controls (some beyond the ranges) equal the KKT solve of MuJoCo's terms."""
    path = PUBLISHED / "cassie_no_meshes.xml"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mech = loopdyn.load_mjcf(path)
    assert len(caught) == 1 and "joint limits" in str(caught[0].message)
    model, data = mujoco_model(path.read_text())
    assert mech.ctrl_names == mech.actuator_names and len(mech.ctrl_names) == 10
    home = keyframes(path)["home"]
    q = kinematics.assemble(mech, home.q, fixed=tuple(range(6)))
    gap = np.abs(kinematics.loop_residual(mech, home.q)).max()  # MuJoCo's soft loops: a bit open
    assert 1e-6 < gap < 1e-2 and np.abs(q - home.q).max() < 0.03  # measured 0.024 rad
    rng = np.random.default_rng(5)
    v = kinematics.project_velocity(mech, q, rng.standard_normal(mech.nv), fixed=tuple(range(6)))
    ctrl = rng.uniform(-20.0, 20.0, len(mech.ctrl_names))
    q, v, tau = np.asarray(q), np.asarray(v), np.zeros(mech.nv)
    expected = kkt_reference(model, data, q, v, tau, ctrl=ctrl)
    qdd, _ = loopdyn.forward_dynamics(mech, q, v, tau, ctrl=ctrl)
    np.testing.assert_allclose(qdd, expected, atol=1e-10 * np.abs(expected).max())


def test_tennis_racket_flip():
    """A free body spun about its intermediate principal axis flips with the period of the
    Euler equations' elliptic solution (Landau & Lifshitz, Mechanics, section 37); energy and
    angular momentum stay constant to 1e-10 relative over 20 s, and so does the quaternion's
    norm, integrated without normalisation."""
    moments = np.array([1.0, 2.0, 3.0])  # kg m^2
    b = MechanismBuilder(gravity=(0.0, 0.0, 0.0)).add_body("racket", 1.5, inertia=moments)
    mech = b.add_joint("float", "free", "ground", "racket").build()
    omega = np.array([0.04, 4.0, 0.04])  # rad/s, body axes: flips every 4.9 s
    v0 = jnp.concatenate([jnp.array([0.1, 0.0, 0.0]), omega])
    ts = jnp.linspace(0.0, 20.0, 4001)
    sim = loopdyn.simulate(mech, mech.q0, v0, 20.0, saveat=ts, rtol=1e-12, atol=1e-12)
    assert sim.succeeded, sim.message
    q, v = np.asarray(sim.q), np.asarray(sim.qd)
    w, x, y, z = (q[:, 3 + k] / np.linalg.norm(q[:, 3:7], axis=1) for k in range(4))
    rotation = np.asarray(configuration.quaternion_matrix(w, x, y, z))  # (T, 3, 3)
    momentum = np.einsum("tij,tj->ti", rotation, moments * v[:, 3:])
    energy = np.asarray(sim.energy)
    # measured: energy 3.8e-12, momentum 4.5e-12, quaternion norm 1.2e-11, period 8e-9
    assert np.abs(energy / energy[0] - 1).max() < 4e-11
    assert np.abs(momentum - momentum[0]).max() / np.linalg.norm(momentum[0]) < 5e-11
    assert np.abs(np.asarray(sim.quaternion_norm) - 1.0).max() < 1.2e-10
    two_e, m2 = moments @ omega**2, (moments * omega) @ (moments * omega)
    i1, i2, i3 = moments if m2 > two_e * moments[1] else moments[::-1]
    rate = np.sqrt((i3 - i2) * (m2 - two_e * i1) / (i1 * i2 * i3))
    k2 = (i2 - i1) * (two_e * i3 - m2) / ((i3 - i2) * (m2 - two_e * i1))
    half_period = 2 * ellipk(k2) / rate  # between sign changes of the intermediate rate
    w2, t = v[:, 4], np.asarray(ts)
    cross = np.nonzero(np.sign(w2[1:]) != np.sign(w2[:-1]))[0]
    times = t[cross] - w2[cross] * (t[cross + 1] - t[cross]) / (w2[cross + 1] - w2[cross])
    assert len(times) >= 3
    np.testing.assert_allclose(np.diff(times), half_period, rtol=1e-7)
