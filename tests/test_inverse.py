"""Closed-loop inverse dynamics (`loopdyn.inverse`): subsystem recursion against the system solve,
the per-body Newton-Euler balance of the reported reactions checked by code that shares nothing
with the recursion (accelerations by automatic differentiation of the body poses), an analytic
parallelogram, Pinocchio's constraint forces on the spatial RSSR, the solve plans of seed 002,
redundant actuation, gradients, and one test per bad input.

Each mechanism's checks run in one jitted program over a few random consistent states (compile
time dominates, so the programs are shared between tests).
"""

import functools
import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from support.pinocchio_model import pinocchio_problem
from support.states import complete, random_draws

import loopdyn
from loopdyn import MechanismBuilder, forces, kinematics, mechanisms, tree
from loopdyn.inverse import augmented, augmented_shape, inverse_dynamics, joint_points, solve_plan

LIBRARY = {
    "four_bar": mechanisms.four_bar,
    "slider_crank": mechanisms.slider_crank,
    "ladder3": lambda: mechanisms.ladder(3),
    "carpet_scraper": mechanisms.carpet_scraper,
    "three_rrr": mechanisms.three_rrr,
    "rssr": mechanisms.rssr,
    "excavator": mechanisms.excavator,
    "stewart": mechanisms.stewart,
    "quarter_car": mechanisms.quarter_car,
}


@eqx.filter_jit
def _completed(mech, q, raw, u):
    return jax.vmap(functools.partial(complete, mech))(q, raw, u)


def consistent_states(mech, k=3, seed=0):
    """``k`` consistent states near ``mech.q0`` (`random_draws`, `complete`): random ``qd`` in
    the null space of J and the accelerations that random actuator forces produce. Returns
    ``(q, qd, qdd)`` and the actuator forces and multipliers, each stacked ``(k, ...)``."""
    return _completed(mech, *random_draws(mech, k, seed))


def _skew_vector(m):
    return jnp.stack([m[2, 1] - m[1, 2], m[0, 2] - m[2, 0], m[1, 0] - m[0, 1]]) / 2


def body_motion(mech, q, qd, qdd):
    """World centre-of-mass acceleration, angular velocity and angular acceleration of every
    body by differentiating the poses along ``q(t) = q + t qd + t^2/2 qdd`` twice."""

    def pose(t):
        qt = q + t * qd + 0.5 * t * t * qdd
        position, rotation = tree.forward_kinematics(mech, qt)
        return position + jnp.einsum("nij,nj->ni", rotation, mech.com), rotation

    (com, rotation), (_, d_rot) = jax.jvp(pose, (0.0,), (1.0,))
    acc_com = jax.jacfwd(jax.jacfwd(lambda t: pose(t)[0]))(0.0)
    dd_rot = jax.jacfwd(jax.jacfwd(lambda t: pose(t)[1]))(0.0)
    omega = jax.vmap(lambda r, dr: _skew_vector(dr @ r.T))(rotation, d_rot)
    alpha = jax.vmap(lambda r, dr, ddr: _skew_vector(ddr @ r.T + dr @ dr.T))(
        rotation, d_rot, dd_rot
    )
    return com, rotation, acc_com, omega, alpha


def joint_bodies(mech):
    """For every joint name: (parent body, child body), -1 the ground, chains through massless
    bodies collapsed to their real ends."""
    out = []
    for name in mech.joint_names:
        chain = [
            k for k, c in enumerate(mech.coordinate_names) if c == name or c.startswith(name + "[")
        ]
        if chain:
            out.append((mech.parent[chain[0]], chain[-1]))
        else:
            cut = next(c for c in mech.cut_joints if c.name == name)
            out.append((cut.body_a, cut.body_b))
    return out


def newton_euler_residual(mech, rigid, q, qd, qdd, result):
    """Largest imbalance over the rigid bodies of ``m a = m g + sum F`` and ``I alpha + w x I w =
    sum M`` (about the centre of mass) with the reported reactions, relative to the largest
    reaction. ``rigid``: which bodies carry mass."""
    com, rotation, acc, omega, alpha = body_motion(mech, q, qd, qdd)
    reactions = result.reactions
    if mech.planar:  # back to spatial [n; f] with z components zero
        reactions = jnp.zeros((len(mech.joint_names), 6)).at[:, 2:5].set(reactions)
    # every joint acts on its child (+) and its parent (-); the ground's share is dropped
    ends = [
        (j, body, sign)
        for j, pair in enumerate(joint_bodies(mech))
        for body, sign in zip(pair, (-1.0, 1.0))
    ]
    joint, body, sign = (np.array(x) for x in zip(*ends))
    on_body = body >= 0
    joint, body, sign = joint[on_body], body[on_body], sign[on_body][:, None]
    f = sign * reactions[joint, 3:]
    n = sign * reactions[joint, :3] + jnp.cross(joint_points(mech, q)[joint] - com[body], f)
    wrench = jnp.zeros((mech.num_bodies, 6)).at[body].add(jnp.concatenate([n, f], axis=1))
    springs = forces.spring_wrenches(mech, q, qd)
    if mech.planar:
        springs = jnp.zeros((mech.num_bodies, 6)).at[:, 2:5].set(springs)
    position = tree.forward_kinematics(mech, q)[0]
    f_s = jnp.einsum("kij,kj->ki", rotation, springs[:, 3:])
    n_s = jnp.einsum("kij,kj->ki", rotation, springs[:, :3]) + jnp.cross(position - com, f_s)
    inertia = rotation @ mech.inertia @ jnp.swapaxes(rotation, 1, 2)
    newton = mech.mass[:, None] * (acc - mech.gravity) - wrench[:, 3:] - f_s
    spin = jnp.cross(omega, jnp.einsum("kij,kj->ki", inertia, omega))
    euler = jnp.einsum("kij,kj->ki", inertia, alpha) + spin - wrench[:, :3] - n_s
    imbalance = jnp.max(jnp.abs(jnp.concatenate([newton, euler], axis=1)), axis=1)
    return jnp.max(jnp.where(rigid, imbalance, 0.0)) / jnp.max(jnp.abs(reactions))


@functools.cache
def evaluated(name):
    """Three consistent states of library mechanism ``name`` (`consistent_states`, completed in
    the program), both methods and the balance residual there, in one compiled program."""
    mech = LIBRARY[name]()
    rigid = np.asarray(mech.mass) > 0

    @eqx.filter_jit
    def run(mech, q, raw, u):
        def one(q, raw, u):
            q, qd, qdd, u, lam = complete(mech, q, raw, u)
            sub = inverse_dynamics(mech, q, qd, qdd, check=False)
            system = inverse_dynamics(mech, q, qd, qdd, method="system", check=False)
            balance = newton_euler_residual(mech, rigid, q, qd, qdd, sub)
            return (q, qd, qdd, u, lam), (sub, system, balance, joint_frames(mech, q))

        return jax.vmap(one)(q, raw, u)

    solve_plan(mech)  # planned by rank on the concrete geometry; `run` traces the mechanism
    states, results = run(mech, *random_draws(mech))
    return mech, states, results


def joint_frames(mech, q):
    """World axis and linear part of every tree joint's unit twist about the world origin, and
    every joint's point (`joint_points`), at ``q``."""
    position, rotation = tree.forward_kinematics(mech, q)
    s = kinematics._spatial(mech, tree.motion_subspaces(mech))
    axis = jnp.einsum("nij,nj->ni", rotation, s[:, :3])
    linear = jnp.einsum("nij,nj->ni", rotation, s[:, 3:]) - jnp.cross(axis, position)
    return axis, linear, joint_points(mech, q)


@pytest.mark.parametrize("name", LIBRARY)
def test_forces_and_multipliers_reproduce_the_forward_solution(name):
    """The states were made by a dense KKT solve of the forward problem with known actuator
    forces: inverse dynamics returns those forces and the same multipliers."""
    _, (_, _, _, u, lam), (sub, *_) = evaluated(name)
    scale = max(1.0, float(jnp.max(jnp.abs(lam), initial=0.0)))
    np.testing.assert_allclose(sub.actuator_forces, u, rtol=0, atol=1e-9 * scale)
    np.testing.assert_allclose(sub.multipliers, lam, rtol=0, atol=1e-9 * scale)


@pytest.mark.parametrize("name", LIBRARY)
def test_generalized_forces_are_the_actuator_forces_in_place(name):
    """``tau``, what forward dynamics takes, holds the actuator forces at the actuated
    coordinates and zeros elsewhere. The states came from a KKT solve of the forward problem
    with forces equal to these (the test above), and test_forward checks every forward method
    against that solve, so forward dynamics of ``tau`` returns the motion: no round trip is
    compiled."""
    mech, _, (sub, *_) = evaluated(name)
    expected = np.zeros(sub.tau.shape)
    expected[:, np.array(mech.actuated, dtype=int)] = sub.actuator_forces
    np.testing.assert_array_equal(sub.tau, expected)


@pytest.mark.parametrize("name", LIBRARY)
def test_subsystem_recursion_equals_system_solve(name):
    mech, _, (sub, system, *_) = evaluated(name)
    for field in sub._fields:
        a, b = np.asarray(getattr(sub, field)), np.asarray(getattr(system, field))
        scale = max(1.0, float(np.max(np.abs(b), initial=0.0)))
        assert np.max(np.abs(a - b), initial=0.0) <= 1e-9 * scale, field
    assert sub.reactions.shape == (3, len(mech.joint_names), mech.dim)
    assert np.max(np.asarray(sub.residual)) < 1e-10


@pytest.mark.parametrize("name", LIBRARY)
def test_reactions_balance_every_body(name):
    """Each rigid body's reactions, gravity, springs and inertia forces sum to zero."""
    _, _, (_, _, residual, *_) = evaluated(name)
    assert np.max(np.asarray(residual)) < 1e-9


@eqx.filter_jit
def _augmented(mech, q, qd, qdd):
    return jax.vmap(lambda q, qd, qdd: augmented(mech, q, qd, qdd))(q, qd, qdd)


@pytest.mark.parametrize("name", LIBRARY)
def test_fully_augmented_newton_euler_solve_gives_the_same_numbers(name):
    """Seed 002's "traditional" method: all reactions from one solve of every rigid body's
    Newton-Euler equations (least squares for the unactuated quarter car), no recursion."""
    mech, (q, qd, qdd, _, _), (sub, *_) = evaluated(name)
    full = _augmented(mech, q, qd, qdd)
    for field in full._fields:
        a, b = np.asarray(getattr(full, field)), np.asarray(getattr(sub, field))
        scale = max(1.0, float(np.max(np.abs(b), initial=0.0)))
        assert np.max(np.abs(a - b), initial=0.0) <= 1e-9 * scale, field


@pytest.mark.parametrize("name", LIBRARY)
def test_passive_joints_transmit_no_force_along_their_motion(name):
    """The reaction's component along a tree joint's motion is the actuator force (0 if passive),
    at every state (the joint axes and points from the jitted program, `joint_frames`)."""
    mech, (q, *_), (sub, *_, (axes, linears, points)) = evaluated(name)
    for t in range(q.shape[0]):
        reactions = sub.reactions[t]
        if mech.planar:
            reactions = jnp.zeros((len(mech.joint_names), 6)).at[:, 2:5].set(reactions)
        axis, linear = axes[t], linears[t]
        for j, name_j in enumerate(mech.joint_names):
            if name_j not in mech.coordinate_names:
                continue
            k = mech.coordinate_names.index(name_j)
            moment_origin = reactions[j, :3] + jnp.cross(points[t, j], reactions[j, 3:])
            along = axis[k] @ moment_origin + linear[k] @ reactions[j, 3:]
            np.testing.assert_allclose(
                along, sub.tau[t, k], atol=1e-9 * float(jnp.max(jnp.abs(reactions)))
            )


def test_plans_of_seed_002():
    """Carpet scraper 4x4, 2x2, 1x1 (seed 002 §6.1, Table 2); RSSR 3x3 then the 1x1 of the crank
    (§6.2, Table 3); system approach 7x7 and 4x4."""
    scraper, rssr = mechanisms.carpet_scraper(), mechanisms.rssr()
    assert [s.shape for s in solve_plan(scraper)] == [(4, 4), (2, 2), (1, 1)]
    assert [s.subsystems for s in solve_plan(scraper)] == [(2,), (1,), (0,)]
    assert [s.loops for s in solve_plan(scraper)] == [(1, 2), (0,), ()]
    assert [s.shape for s in solve_plan(scraper, "system")] == [(7, 7)]
    assert [s.shape for s in solve_plan(rssr)] == [(3, 3), (1, 1)]
    assert [s.shape for s in solve_plan(rssr, "system")] == [(4, 4)]
    assert augmented_shape(scraper) == (21, 21) and augmented_shape(rssr) == (18, 18)
    # The four-bar has no determinate subsystem (seed 002 Fig. 3b): one system step.
    assert [s.shape for s in solve_plan(mechanisms.four_bar())] == [(3, 3)]


def test_a_traced_mechanism_gets_the_plan_of_its_geometry():
    """Under ``jit`` with the mechanism as an argument its geometry is traced: the plan decided
    by rank on the concrete geometry (eagerly, before) is used, not the system step."""
    scraper = mechanisms.carpet_scraper()
    eager, traced = solve_plan(scraper), []
    eqx.filter_jit(lambda m: traced.append(solve_plan(m)) or m.q0)(scraper)
    assert traced == [eager] and len(eager) == 3


def partly_determinate():
    """A four-bar (no determinate order, seed 002 Fig. 3b) beside a second four-bar drawn as one
    chain from the ground, closed to the ground (a determinate subsystem of its own)."""
    b = MechanismBuilder(planar=True)
    for name, length in (("crank", 0.1), ("coupler", 0.3), ("rocker", 0.25)):
        b.add_body(name, 1.0, (length / 2, 0, 0), 1e-3)
    b.add_joint("A", "revolute", "ground", "crank", actuated=True)
    b.add_joint("B", "revolute", "crank", "coupler", position=(0.1, 0, 0))
    b.add_joint("D", "revolute", "ground", "rocker", position=(0.3, 0, 0))
    b.add_joint(
        "C", "revolute", "coupler", "rocker", position=(0.3, 0, 0), child_position=(0.25, 0, 0)
    )
    for name, length in (("c2", 0.1), ("k2", 0.3), ("r2", 0.25)):
        b.add_body(name, 2.0, (length / 2, 0, 0), 2e-3)
    b.add_joint("A2", "revolute", "ground", "c2", position=(0, 1, 0), actuated=True)
    b.add_joint("B2", "revolute", "c2", "k2", position=(0.1, 0, 0))
    b.add_joint("E2", "revolute", "k2", "r2", position=(0.3, 0, 0))
    b.add_joint(
        "D2",
        "revolute",
        "r2",
        "ground",
        position=(0.25, 0, 0),
        rotation=0.0,
        child_position=(0.3, 1, 0),
    )
    mech = b.build()
    guess = mech.q0.at[1].set(1.3).at[2].set(1.0).at[4].set(1.2).at[5].set(1.6)
    return eqx.tree_at(lambda m: m.q0, mech, kinematics.assemble(mech, guess, fixed=(0, 3)))


def test_partly_determinate_mechanism_falls_back_for_the_rest():
    mech = partly_determinate()
    plan = solve_plan(mech)
    assert [(s.subsystems, s.shape) for s in plan] == [((2,), (3, 3)), ((0, 1), (3, 3))]
    q, qd, qdd = (x[0] for x in consistent_states(mech, k=1)[:3])
    sub = inverse_dynamics(mech, q, qd, qdd)
    system = inverse_dynamics(mech, q, qd, qdd, method="system")
    np.testing.assert_allclose(sub.reactions, system.reactions, rtol=0, atol=1e-10)
    np.testing.assert_allclose(sub.actuator_forces, system.actuator_forces, rtol=0, atol=1e-10)


# ------------------------------------------------------------------------------------------------
# Pinocchio: the RSSR's reaction at its cut joint against constraintDynamics' contact force, and
# every tree joint's reaction against the wrench Pinocchio's RNEA transmits through that joint
# with the contact force applied to the two bodies.


def test_rssr_reactions_match_pinocchio():
    import pinocchio as pin

    mech, (q, qd, qdd, _, _), (sub, *_) = evaluated("rssr")
    _, model, constraints = pinocchio_problem(mech)
    data = model.createData()
    datas = pin.StdVec_RigidConstraintData([c.createData() for c in constraints])
    pin.initConstraintDynamics(model, data, constraints, datas)
    settings = pin.ProximalSettings(1e-14, 1e-12, 100)
    (cut,) = mech.cut_joints
    c = mech.joint_names.index(cut.name)
    for k in range(q.shape[0]):
        args = [np.asarray(x[k]) for x in (q, qd)]
        tau = np.asarray(sub.tau[k])
        theirs_qdd = pin.constraintDynamics(model, data, *args, tau, constraints, datas, settings)
        np.testing.assert_allclose(theirs_qdd, qdd[k], rtol=0, atol=1e-9)
        # The contact force acts on joint 1 (body a) in the constraint frame on body a: the force
        # on body b from body a is its opposite, in world axes.
        frame_a = data.oMi[cut.body_a + 1] * constraints[0].joint1_placement
        on_b = -frame_a.rotation @ np.asarray(data.lambda_c)
        reaction = np.asarray(sub.reactions[k, c])
        scale = np.max(np.abs(reaction))
        np.testing.assert_allclose(reaction[3:], on_b, rtol=0, atol=1e-9 * scale)
        np.testing.assert_allclose(reaction[:3], 0.0, atol=1e-9 * scale)  # a ball joint
        # RNEA with the contact force on both bodies: the joint torques are the actuator forces
        # and data.f[i] is the wrench joint i transmits (its frame, about its origin).
        point = frame_a.translation
        fext = [pin.Force.Zero() for _ in range(model.njoints)]
        for body, force in ((cut.body_a, -on_b), (cut.body_b, on_b)):
            world = pin.Force(force, np.cross(point, force))
            fext[body + 1] = data.oMi[body + 1].actInv(world)
        a = np.asarray(qdd[k])
        np.testing.assert_allclose(
            pin.rnea(model, data, *args, a, pin.StdVec_Force(fext)), tau, rtol=0, atol=1e-9
        )
        for j, name in enumerate(mech.joint_names):
            if name == cut.name:
                continue
            chain = [
                i
                for i, n in enumerate(mech.coordinate_names)
                if n == name or n.startswith(name + "[")
            ]
            joint = chain[-1] + 1
            world = data.oMi[joint].act(data.f[joint])
            origin = data.oMi[joint].translation
            moment = world.angular - np.cross(origin, world.linear)
            theirs = np.concatenate([moment, world.linear])
            np.testing.assert_allclose(
                sub.reactions[k, j], theirs, rtol=0, atol=1e-9 * scale, err_msg=name
            )


# ------------------------------------------------------------------------------------------------
# Redundant actuation, gradients, bad input.


def four_bar(actuated=("A", "D")):
    """A four-bar with the ``actuated`` joints of crank A and rocker D (both: 2 actuators for 1
    DOF, none: a passive linkage)."""
    b = MechanismBuilder(planar=True)
    for name, length, mass in (("crank", 0.1, 1.0), ("coupler", 0.3, 2.0), ("rocker", 0.25, 1.5)):
        b.add_body(name, mass, (length / 2, 0, 0), mass * length**2 / 12)
    b.add_joint("A", "revolute", "ground", "crank", actuated="A" in actuated)
    b.add_joint("B", "revolute", "crank", "coupler", position=(0.1, 0, 0))
    b.add_joint("D", "revolute", "ground", "rocker", position=(0.3, 0, 0), actuated="D" in actuated)
    b.add_joint(
        "C", "revolute", "coupler", "rocker", position=(0.3, 0, 0), child_position=(0.25, 0, 0)
    )
    mech = b.build()
    guess = mech.q0.at[0].set(0.9).at[1].set(-0.5).at[2].set(1.6)
    return eqx.tree_at(lambda m: m.q0, mech, kinematics.assemble(mech, guess, fixed=(0,)))


def test_redundant_actuation_gives_the_minimum_norm_forces():
    """Every force pair that balances the motion differs from the returned one by a null vector
    of ``[B J^T]``; the returned forces are orthogonal to the actuator part of those."""
    mech = four_bar()
    q, qd, qdd = (x[0] for x in consistent_states(mech, k=1)[:3])
    with pytest.warns(UserWarning, match="redundantly actuated"):
        result = inverse_dynamics(mech, q, qd, qdd, method="system")
    assert float(result.residual) < 1e-10
    jac = np.asarray(kinematics.loop_jacobian(mech, q))
    matrix = np.concatenate([np.eye(3)[:, list(mech.actuated)], jac.T], axis=1)
    null = np.linalg.svd(matrix)[2][np.linalg.matrix_rank(matrix) :]
    assert null.shape[0] == 1
    u = np.asarray(result.actuator_forces)
    assert abs(null[0, :2] @ u) < 1e-10 * np.linalg.norm(u)
    with pytest.warns(UserWarning):
        sub = inverse_dynamics(mech, q, qd, qdd)
    np.testing.assert_allclose(sub.actuator_forces, u, rtol=0, atol=1e-10)


def test_gradient_of_the_driving_torque_matches_finite_differences():
    mech = mechanisms.four_bar()
    q, qd, qdd = (x[0] for x in consistent_states(mech, k=1)[:3])

    def torque(mass):
        m = eqx.tree_at(lambda m: m.mass, mech, mass)
        result = loopdyn.inverse.solve(m, q, qd, qdd)
        return result.actuator_forces[0] + jnp.sum(result.reactions**2) * 1e-3

    torque_and_grad = jax.jit(jax.value_and_grad(torque))  # one compilation, the differences too
    grad = torque_and_grad(mech.mass)[1]
    h = 1e-6
    for k in range(mech.num_bodies):
        e = jnp.zeros_like(mech.mass).at[k].set(h)
        fd = (torque_and_grad(mech.mass + e)[0] - torque_and_grad(mech.mass - e)[0]) / (2 * h)
        np.testing.assert_allclose(grad[k], fd, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("argument", ["q", "qd", "qdd"])
def test_arguments_are_checked_by_name(argument):
    mech = mechanisms.four_bar()
    state = {"q": mech.q0, "qd": jnp.zeros(3), "qdd": jnp.zeros(3)}
    state[argument] = jnp.zeros(4)
    match = rf"inverse_dynamics: {argument} must have shape \(3,\)"
    with pytest.raises(ValueError, match=match):
        inverse_dynamics(mech, **state)


def test_unknown_method_is_refused():
    mech = mechanisms.four_bar()
    with pytest.raises(ValueError, match="method must be one of"):
        inverse_dynamics(mech, mech.q0, jnp.zeros(3), jnp.zeros(3), method="sslm")


@eqx.filter_jit
def checked_forces(mech, q, qd, qdd):
    """The checked `inverse_dynamics` under jit (one compilation for the three levels)."""
    return inverse_dynamics(mech, q, qd, qdd).actuator_forces


@pytest.mark.parametrize("level", ["position", "velocity", "acceleration"])
def test_a_state_off_the_constraints_is_refused_with_the_loop_named(level):
    mech = mechanisms.four_bar()
    q, qd, qdd = (x[0] for x in consistent_states(mech, k=1)[:3])
    bump = jnp.array([0.0, 0.01, 0.0])
    state = {"position": (q + bump, qd, qdd), "velocity": (q, qd + bump, qdd)}
    state = state.get(level, (q, qd, qdd + bump))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match=rf"the {level} residual of the loop of cut joint 'C'"):
            inverse_dynamics(mech, *state)
        with pytest.raises(Exception, match="does not satisfy the loop constraints"):
            checked_forces(mech, *state)


def test_a_motion_the_actuators_cannot_produce_is_refused():
    """An unactuated four-bar cannot follow a prescribed acceleration that gravity does not give."""
    mech = four_bar(actuated=())
    q = mech.q0
    jac = np.asarray(kinematics.loop_jacobian(mech, q))
    qdd = jnp.asarray(np.linalg.svd(jac)[2][-1])  # in the null space of J (qd = 0: Psi = 0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match="cannot produce this motion.*unbalanced generalized"):
            inverse_dynamics(mech, q, jnp.zeros(3), qdd)
