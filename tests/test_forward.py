"""Closed-loop forward dynamics: the four methods agree with each other on every library mechanism,
satisfy the acceleration constraints and the equations of motion, match Pinocchio's
constraintDynamics, conserve energy (d/dt E = qd . tau), and refuse singular constraints and
malformed arguments by name.

Compile time dominates: every method of a mechanism runs in one jitted program over its random
states (`solutions`), which the agreement, equation-of-motion, Pinocchio and energy tests share."""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import loopdyn
from loopdyn import energy, forward, kinematics, mechanisms, tree

LIBRARY = {
    "four_bar": mechanisms.four_bar,
    "slider_crank": mechanisms.slider_crank,
    "ladder3": functools.partial(mechanisms.ladder, 3),
    "rssr": mechanisms.rssr,
    "three_rrr": mechanisms.three_rrr,
    "carpet_scraper": mechanisms.carpet_scraper,
    "excavator": mechanisms.excavator,
    "quarter_car": mechanisms.quarter_car,
    "stewart": mechanisms.stewart,
}


@functools.cache
def library(name):
    return LIBRARY[name]()


@functools.cache
def random_states(name, count=3, seed=0):
    """Assembled configurations near ``q0``, random velocities projected onto the null space of
    J, and random joint forces."""
    mech = library(name)
    rng = np.random.default_rng(seed)
    n = mech.num_bodies
    qs, qds = [], []
    for _ in range(count):
        q = kinematics.assemble(mech, mech.q0 + 0.05 * rng.normal(size=n), fixed=mech.actuated)
        jac = np.asarray(kinematics.loop_jacobian(mech, q))
        qs.append(q)
        qds.append(jnp.asarray((np.eye(n) - np.linalg.pinv(jac) @ jac) @ rng.normal(size=n)))
    return jnp.stack(qs), jnp.stack(qds), jnp.asarray(rng.normal(size=(count, n)))


@eqx.filter_jit
def batched(mech, q, qd, tau, methods, independent):
    """``{method: Solution}`` over the states, every method in one program (one compilation),
    and `kinematics.loop_terms` ``(Phi, J, J' qd)`` at the states."""
    solve = functools.partial(forward.solve, mech, independent=independent)
    results = {m: jax.vmap(functools.partial(solve, method=m))(q, qd, tau) for m in methods}
    return results, jax.vmap(functools.partial(kinematics.loop_terms, mech))(q, qd)


@functools.cache
def solutions(name):
    """The random states of ``name``, every method's solutions there and the loop terms."""
    mech = library(name)
    q, qd, tau = random_states(name)
    independent = forward.independent_coordinates(mech)
    return (q, qd, tau), *batched(mech, q, qd, tau, forward.METHODS, independent)


def relative(a, b):
    return float(jnp.max(jnp.abs(a - b)) / jnp.maximum(jnp.max(jnp.abs(b)), 1e-300))


@pytest.mark.parametrize("name", list(LIBRARY))
def test_methods_agree_and_satisfy_constraints(name):
    (q, _, _), results, (_, jac, bias) = solutions(name)
    reference = results[forward.METHODS[0]]
    assert not np.any(reference.singular)
    for method, result in results.items():
        assert relative(result.qdd, reference.qdd) < 1e-9, method
        assert relative(result.lam, reference.lam) < 1e-9, method
    for k in range(q.shape[0]):
        scale = float(jnp.max(jnp.abs(jac[k])) * jnp.max(jnp.abs(reference.qdd[k])) + 1.0)
        np.testing.assert_allclose(jac[k] @ reference.qdd[k], -bias[k], atol=1e-10 * scale)


@eqx.filter_jit
def tree_terms(mech, q, qd):
    """``I`` and ``C qd + g`` at the states, from the tree algorithms alone."""
    return jax.vmap(lambda q, qd: (tree.mass_matrix(mech, q), tree.bias_forces(mech, q, qd)))(q, qd)


@pytest.mark.parametrize("name", ["four_bar", "three_rrr"])
def test_equations_of_motion_hold_with_the_multipliers(name):
    """``I qdd - J^T lam = phi`` assembled from the tree algorithms independently of any method,
    for every method; and the checked entry point `loopdyn.forward_dynamics` gives the batched
    program's SSLM solution."""
    mech = library(name)
    (q, qd, tau), results, (_, jac, _) = solutions(name)
    inertia, bias = tree_terms(mech, q, qd)
    rhs = tau - bias
    for method, result in results.items():
        lhs = jnp.einsum("kij,kj->ki", inertia, result.qdd)
        lhs = lhs - jnp.einsum("kmi,km->ki", jac, result.lam)
        np.testing.assert_allclose(
            lhs, rhs, atol=1e-10 * float(jnp.max(jnp.abs(rhs))), err_msg=method
        )
    qdd, lam = loopdyn.forward_dynamics(mech, q[0], qd[0], tau[0])
    assert relative(qdd, results["sslm"].qdd[0]) < 1e-9
    assert relative(lam, results["sslm"].lam[0]) < 1e-9


def test_no_loops_is_the_tree():
    b = loopdyn.MechanismBuilder(planar=True)
    b.add_body("link", 1.0, (0.2, 0, 0), 0.01)
    b.add_joint("A", "revolute", "ground", "link")
    mech = b.build()
    qdd, lam = loopdyn.forward_dynamics(mech, jnp.array([0.3]), jnp.array([1.0]), jnp.zeros(1))
    assert lam.shape == (0,)
    np.testing.assert_allclose(qdd, -9.81 * 0.2 * np.cos(0.3) / (0.01 + 0.04), rtol=1e-12)


# ------------------------------------------------------------------------------------------------
# Pinocchio's constraintDynamics on the same models.


def pinocchio_problem(mech):
    """The mechanism as a Pinocchio model plus one 3-D point constraint per cut joint."""
    pin = pytest.importorskip("pinocchio")
    from types import SimpleNamespace

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


@pytest.mark.parametrize("name", ["four_bar", "three_rrr", "rssr", "excavator", "stewart"])
def test_matches_pinocchio_constraint_dynamics(name):
    """Every method's solution at the random states (the quarter car's spring has no Pinocchio
    counterpart here)."""
    mech = library(name)
    pin, model, constraints = pinocchio_problem(mech)
    data = model.createData()
    datas = pin.StdVec_RigidConstraintData([c.createData() for c in constraints])
    pin.initConstraintDynamics(model, data, constraints, datas)
    settings = pin.ProximalSettings(1e-14, 1e-10, 100)  # mu > 0: planar z rows are redundant
    (q, qd, tau), results, _ = solutions(name)
    for k in range(q.shape[0]):
        args = (np.asarray(q[k]), np.asarray(qd[k]), np.asarray(tau[k]))
        theirs = pin.constraintDynamics(model, data, *args, constraints, datas, settings)
        # Per loop, the constraint force has the same magnitude (Pinocchio's in the cut frame).
        forces = np.linalg.norm(np.asarray(data.lambda_c).reshape(-1, 3), axis=1)
        for method, ours in results.items():
            assert relative(ours.qdd[k], jnp.asarray(theirs)) < 1e-9, method
            per_loop = np.asarray(ours.lam[k]).reshape(len(mech.cut_joints), -1)
            np.testing.assert_allclose(
                np.linalg.norm(per_loop, axis=1), forces, rtol=1e-8, err_msg=method
            )


# ------------------------------------------------------------------------------------------------
# Energy balance: dE/dt = qd . (tau + damping) along the constrained motion.


@eqx.filter_jit
def energy_rates(mech, q, qd, qdd):
    """``d/dt E(q, qd)`` along ``(qd, qdd)`` at each state."""

    def rate(q, qd, qdd):
        return jax.jvp(functools.partial(energy.total_energy, mech), (q, qd), (qd, qdd))[1]

    return jax.vmap(rate)(q, qd, qdd)


@pytest.mark.parametrize("name", ["four_bar", "rssr", "carpet_scraper"])
def test_power_balance(name):
    """The constraint forces do no work: d/dt E(q, qd) along (qd, qdd) equals the joint power,
    with every method's accelerations at the random states."""
    mech = library(name)
    (q, qd, tau), results, _ = solutions(name)
    power = jnp.einsum("ki,ki->k", qd, tau)
    for method, result in results.items():
        rate = energy_rates(mech, q, qd, result.qdd)
        np.testing.assert_allclose(rate, power, rtol=1e-9, atol=1e-12, err_msg=method)


# ------------------------------------------------------------------------------------------------
# Singular constraints and bad arguments.


def test_redundant_loop_rows_are_named():
    """A planar four-bar built spatially with a spherical cut: its 3 rows have rank 2 (no motion
    along z), at every pose."""
    b = loopdyn.MechanismBuilder()
    for body, length in (("crank", 0.1), ("coupler", 0.3), ("rocker", 0.25)):
        b.add_body(body, 1.0, (length / 2, 0, 0), (1e-4, 1e-3, 1e-3))
    b.add_joint("A", "revolute", "ground", "crank")
    b.add_joint("B", "revolute", "crank", "coupler", position=(0.1, 0, 0))
    b.add_joint("D", "revolute", "ground", "rocker", position=(0.3, 0, 0))
    b.add_joint(
        "C", "spherical", "coupler", "rocker", position=(0.3, 0, 0), child_position=(0.25, 0, 0)
    )
    mech = b.build()
    with pytest.raises(ValueError, match=r"cut joint 'C'"):
        loopdyn.forward_dynamics(mech, mech.q0, jnp.zeros(3), jnp.zeros(3))


def test_dead_centre_is_reported_not_nan():
    """A four-bar whose links line up (crank + coupler = ground + rocker, folded flat). Its bodies,
    joints and actuator are named as the library four-bar's: its batched program is theirs,
    compiled once (same static structure, the same number of states)."""
    b = loopdyn.MechanismBuilder(planar=True)
    for body, length in (("crank", 0.1), ("coupler", 0.3), ("rocker", 0.2)):
        b.add_body(body, 1.0, (length / 2, 0, 0), 1e-3)
    b.add_joint("A", "revolute", "ground", "crank", actuated=True)
    b.add_joint("B", "revolute", "crank", "coupler", position=(0.1, 0, 0))
    b.add_joint("D", "revolute", "ground", "rocker", position=(0.6, 0, 0))
    b.add_joint(
        "C",
        "revolute",
        "coupler",
        "rocker",
        position=(0.3, 0, 0),
        child_position=(0.2, 0, 0),
        cut=True,
    )
    mech = b.build(q0=np.array([0.0, 0.0, np.pi]))
    assert jax.tree.structure(mech) == jax.tree.structure(library("four_bar"))
    state = (jnp.stack([mech.q0] * 3), jnp.zeros((3, 3)), jnp.ones((3, 3)))
    independent = forward.independent_coordinates(library("four_bar"))
    flagged, _ = batched(mech, *state, forward.METHODS, independent)
    for method in forward.METHODS[:3]:
        with pytest.raises(ValueError, match="cut joint 'C'"):
            loopdyn.forward_dynamics(mech, mech.q0, jnp.zeros(3), jnp.ones(3), method=method)
        assert np.all(flagged[method].singular), method


@pytest.mark.parametrize(
    ("argument", "shape"), [("q", (2,)), ("qd", (4,)), ("tau", (2,)), ("f_ext", (3, 2))]
)
def test_arguments_are_checked_by_name(argument, shape):
    mech = library("four_bar")
    args = {"q": mech.q0, "qd": jnp.zeros(3), "tau": jnp.zeros(3), "f_ext": jnp.zeros((3, 3))}
    args[argument] = jnp.zeros(shape)
    with pytest.raises(ValueError, match=rf"forward_dynamics: {argument} must have shape"):
        loopdyn.forward_dynamics(mech, **args)


def test_unknown_method_is_refused():
    mech = library("four_bar")
    with pytest.raises(ValueError, match="method must be one of"):
        loopdyn.forward_dynamics(mech, mech.q0, jnp.zeros(3), jnp.zeros(3), method="lu")
