"""Closed-loop forward dynamics: the four methods agree with each other on every library mechanism,
satisfy the acceleration constraints and the equations of motion, match Pinocchio's
constraintDynamics, conserve energy (d/dt E = qd . tau), and refuse singular constraints and
malformed arguments by name.

Compile time dominates: every method runs in one jitted program over the random states of all
planar mechanisms placed side by side in one mechanism (another for the spatial ones, one for the
quarter car: `GROUPS`); the agreement, equation-of-motion, Pinocchio and energy tests share it,
each cutting its mechanism out (`solutions`)."""

import functools
import sys
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from support.composite import side_by_side
from support.dead_centre import folded_four_bar
from support.pinocchio_model import pinocchio_problem

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


# One compiled program per group: the planar mechanisms side by side in one mechanism, the spatial
# ones in another (`support.composite.side_by_side`: names prefixed, exact arrays, structure
# asserted), and the quarter car alone (side_by_side leaves springs out). A union's loops involve
# only their own mechanism's coordinates, so its mass matrix is block diagonal and every method's
# solution is each mechanism's, stacked; each test cuts its mechanism's rows and coordinates out.
GROUPS = (
    ("four_bar", "slider_crank", "ladder3", "three_rrr", "carpet_scraper", "excavator"),
    ("rssr", "stewart"),
    ("quarter_car",),
)


def union_of(group):
    """The mechanism that holds ``group`` side by side and, per member, its coordinates (a slice)
    and constraint rows."""
    mechs = [library(name) for name in group]
    if len(mechs) == 1:
        mech = mechs[0]
        return mech, [slice(0, mech.num_bodies)], [np.arange(mech.topology.num_rows)]
    union, coordinates, rows = side_by_side(mechs)
    for mech in mechs:  # what side_by_side does not compare
        assert not mech.spring_names
        np.testing.assert_array_equal(union.gravity, mech.gravity)
    return union, coordinates, rows


@functools.cache
def random_states(group, count=3, seed=0):
    """Per member: assembled configurations near ``q0`` (its actuated coordinates held), random
    velocities projected onto the null space of J and random joint forces, drawn from its own
    generator; the configurations are assembled, and J taken, on the union (one program each)."""
    union, coordinates, _ = union_of(group)
    guesses, raw, taus, fixed = [], [], [], []
    for name, own in zip(group, coordinates):
        mech = library(name)
        rng = np.random.default_rng(seed)
        n = mech.num_bodies
        draws = [(mech.q0 + 0.05 * rng.normal(size=n), rng.normal(size=n)) for _ in range(count)]
        guesses.append(np.stack([g for g, _ in draws]))
        raw.append(np.stack([r for _, r in draws]))
        taus.append(rng.normal(size=(count, n)))
        fixed += [own.start + k for k in mech.actuated]
    guesses, raw = np.concatenate(guesses, axis=1), np.concatenate(raw, axis=1)
    n = union.num_bodies
    qs, qds = [], []
    for guess, r in zip(guesses, raw):
        q = kinematics.assemble(union, guess, fixed=tuple(fixed))
        jac = np.asarray(kinematics.loop_jacobian(union, q))
        qs.append(q)
        qds.append(jnp.asarray((np.eye(n) - np.linalg.pinv(jac) @ jac) @ r))
    return jnp.stack(qs), jnp.stack(qds), jnp.asarray(np.concatenate(taus, axis=1))


@eqx.filter_jit
def batched(mech, q, qd, tau, methods, independent):
    """``{method: Solution}`` over the states, every method in one program (one compilation),
    and `kinematics.loop_terms` ``(Phi, J, J' qd)`` at the states."""
    solve = functools.partial(forward.solve, mech, independent=independent)
    results = {m: jax.vmap(functools.partial(solve, method=m))(q, qd, tau) for m in methods}
    return results, jax.vmap(functools.partial(kinematics.loop_terms, mech))(q, qd)


@functools.cache
def group_solutions(group):
    """The union of ``group``, its states, every method's solutions there and the loop terms.
    ``"embedding"`` takes every member's own independent coordinates."""
    union, coordinates, rows = union_of(group)
    q, qd, tau = random_states(group)
    independent = tuple(
        own.start + k
        for name, own in zip(group, coordinates)
        for k in forward.independent_coordinates(library(name))
    )
    return (
        union,
        coordinates,
        rows,
        (q, qd, tau),
        batched(union, q, qd, tau, forward.GENERAL_METHODS, independent),
    )


def group_of(name):
    return next(group for group in GROUPS if name in group)


@functools.cache
def solutions(name):
    """The random states of ``name``, every method's solutions there and the loop terms, cut out
    of its group's."""
    group = group_of(name)
    _, coordinates, rows, states, (results, terms) = group_solutions(group)
    own, r = coordinates[group.index(name)], rows[group.index(name)]
    states = tuple(x[:, own] for x in states)
    results = {
        m: forward.Solution(s.qdd[:, own], s.lam[:, r], s.singular) for m, s in results.items()
    }
    phi, jac, bias = terms
    return states, results, (phi[:, r], jac[:, r][:, :, own], bias[:, r])


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


@functools.cache
def group_tree_terms(group):
    union, _, _, (q, qd, _), _ = group_solutions(group)
    return tree_terms(union, q, qd)


# Every mechanism of the two unions (one program each); the quarter car's spring is in neither.
@pytest.mark.parametrize("name", GROUPS[0] + GROUPS[1])
def test_equations_of_motion_hold_with_the_multipliers(name):
    """``I qdd - J^T lam = phi`` assembled from the tree algorithms independently of any method
    (on the union: its ``I`` is block diagonal, each block the member's), for every method; and
    for the four-bar and the 3-RRR the checked entry point `loopdyn.forward_dynamics` gives the
    batched program's SSLM solution."""
    mech = library(name)
    group = group_of(name)
    own = group_solutions(group)[1][group.index(name)]
    (q, qd, tau), results, (_, jac, _) = solutions(name)
    inertia, bias = group_tree_terms(group)
    np.testing.assert_array_equal(inertia[:, own, :].at[:, :, own].set(0.0), 0.0)
    inertia, bias = inertia[:, own, own], bias[:, own]
    rhs = tau - bias
    for method, result in results.items():
        lhs = jnp.einsum("kij,kj->ki", inertia, result.qdd)
        lhs = lhs - jnp.einsum("kmi,km->ki", jac, result.lam)
        np.testing.assert_allclose(
            lhs, rhs, atol=1e-10 * float(jnp.max(jnp.abs(rhs))), err_msg=method
        )
    if name in ("four_bar", "three_rrr"):
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
def energy_rates(mech, q, qd, qdd, masks):
    """``d/dt E_k(q, qd)`` along ``(qd, qdd)`` at each state for each member ``k`` of a union:
    ``E`` of the union is the sum of its members' energies, so its derivative along ``(qd,
    qdd)`` zeroed outside member ``k``'s coordinates (``masks[k]``) is member ``k``'s."""

    def rate(q, qd, qdd, mask):
        tangents = (qd * mask, qdd * mask)
        return jax.jvp(functools.partial(energy.total_energy, mech), (q, qd), tangents)[1]

    per_state = jax.vmap(rate, in_axes=(0, 0, 0, None))
    return jax.vmap(per_state, in_axes=(None, None, None, 0))(q, qd, qdd, masks)


# Every mechanism of the two unions (one program each).
@pytest.mark.parametrize("name", GROUPS[0] + GROUPS[1])
def test_power_balance(name):
    """The constraint forces do no work: d/dt E(q, qd) along (qd, qdd) equals the joint power,
    with every method's accelerations at the random states."""
    group = group_of(name)
    union, coordinates, _, (q_all, qd_all, _), (all_results, _) = group_solutions(group)
    masks = np.zeros((len(group), union.num_bodies))
    for k, own in enumerate(coordinates):
        masks[k, own] = 1.0
    (_, qd, tau), results, _ = solutions(name)
    power = jnp.einsum("ki,ki->k", qd, tau)
    for method in results:
        rates = energy_rates(union, q_all, qd_all, all_results[method].qdd, jnp.asarray(masks))
        rate = rates[group.index(name)]
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
    joints and actuator are named as the library four-bar's: `loopdyn.forward_dynamics`'s SSLM
    program is theirs; the batched program holds the three methods it checks."""
    mech = folded_four_bar()
    assert jax.tree.structure(mech) == jax.tree.structure(library("four_bar"))
    state = (jnp.stack([mech.q0] * 3), jnp.zeros((3, 3)), jnp.ones((3, 3)))
    independent = forward.independent_coordinates(library("four_bar"))
    flagged, _ = batched(mech, *state, forward.METHODS[:3], independent)
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


# ------------------------------------------------------------------------------------------------
# SSLM's compiled program on a chain of loops.


def sslm_program(mech):
    """`forward.solve`'s SSLM program for ``mech``, compiled for one state."""

    def sslm(q, qd, tau):
        return forward.solve(mech, q, qd, tau, method="sslm")

    return jax.jit(sslm).lower(mech.q0, mech.q0, mech.q0).compile()


def op_count(compiled):
    return sum(" = " in line for line in compiled.as_text().splitlines())


def test_sslm_program_does_not_grow_along_a_chain_of_loops():
    """On the ladder (a chain of loops) SSLM eliminates by a scan (`forward._plan`): from 16 to
    32 loops its compiled program grows by at most 10 %; it agrees with the KKT solution, and
    at a dead centre (every loop's joints in line: crank and coupler of the first loop folded
    flat, so every rocker lies along the ground line) it is flagged singular."""
    mech = mechanisms.ladder(32)
    assert forward._plan(mech.topology).mode == "scan"
    program = sslm_program(mech)
    assert op_count(program) <= 1.1 * op_count(sslm_program(mechanisms.ladder(16)))
    rng = np.random.default_rng(1)
    n = mech.num_bodies
    q = kinematics.assemble(mech, mech.q0 + 0.05 * rng.normal(size=n), fixed=mech.actuated)
    jac = np.asarray(kinematics.loop_jacobian(mech, q))
    qd = jnp.asarray((np.eye(n) - np.linalg.pinv(jac) @ jac) @ rng.normal(size=n))
    tau = jnp.asarray(rng.normal(size=n))
    result = program(q, qd, tau)
    reference = forward.solve(mech, q, qd, tau, method="system")
    assert not result.singular
    assert relative(result.qdd, reference.qdd) < 1e-10
    assert relative(result.lam, reference.lam) < 1e-10
    ground, rocker = 0.089, 0.1152  # ladder's defaults; the crank 0.038 at angle pi
    flat = mechanisms.ladder(32, np.pi, coupler=float(np.hypot(ground + 0.038, 0.0)) + rocker)
    assert forward.solve(flat, flat.q0, jnp.zeros(n), jnp.ones(n), method="sslm").singular


def chain_ladder(k, **dimensions):
    """The ladder of ``k`` four-bars drawn as MJCF usually draws it: every loop through one deep
    chain of couplers (benchmarks/_peers.py)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from _peers import ladder_chain_mjcf

    return loopdyn.load_mjcf(ladder_chain_mjcf(k, **dimensions))


def test_sslm_where_every_loop_shares_a_subsystem_factorises_the_gicm_whole():
    """On the MJCF drawing of a ladder every loop couples with every other, so above
    `dense.UNROLL` rows SSLM factorises the GICM whole (`forward._plan`, "dense"): its program
    grows less than the loops (lowered, 12 -> 24 loops: 3,638 -> 6,386 operations, the 13
    coordinates of the 12-loop chain factorised by `dense.spd_solve`'s columns; block by block
    8,010 -> 19,068), it agrees with the KKT solution and SLM, and with every bar in line
    (coupler + rocker = ground - crank) it is flagged singular."""

    def lowered_ops(mech):
        sslm = lambda q, qd, tau: forward.solve(mech, q, qd, tau, method="sslm")
        text = jax.jit(sslm).lower(mech.q0, mech.q0, mech.q0).as_text()
        return sum(" = " in line and "stablehlo." in line for line in text.splitlines())

    small, mech = chain_ladder(12), chain_ladder(24)
    assert forward._plan(mech.topology).mode == "dense"
    assert lowered_ops(mech) <= 2.0 * lowered_ops(small)
    program = sslm_program(mech)
    rng = np.random.default_rng(3)
    n = mech.num_bodies
    fixed = forward.independent_coordinates(mech)
    q = kinematics.assemble(mech, mech.q0 + 0.05 * rng.normal(size=n), fixed=fixed)
    qd, tau = jnp.asarray(rng.normal(size=n)), jnp.asarray(rng.normal(size=n))
    result = program(q, qd, tau)
    assert not result.singular
    for method in ("system", "slm"):
        reference = forward.solve(mech, q, qd, tau, method=method)
        assert relative(result.qdd, reference.qdd) < 1e-11
        assert relative(result.lam, reference.lam) < 1e-10
    flat = chain_ladder(24, coupler=0.02, rocker=0.031)
    assert forward.solve(flat, flat.q0, jnp.zeros(n), jnp.ones(n), method="sslm").singular


def test_sslm_off_a_chain_of_loops_goes_block_by_block():
    """The Stewart platform's five loops share the platform's subsystem (no chain of loops):
    SSLM takes the block-by-block path (`forward._plan`) and agrees with the KKT solution."""
    mech = library("stewart")
    assert len(mech.topology.loops) > forward._PER_BLOCK_LOOPS
    assert forward._plan(mech.topology).mode == "per_block"
    rng = np.random.default_rng(2)
    n = mech.num_bodies
    q = kinematics.assemble(mech, mech.q0 + 0.05 * rng.normal(size=n), fixed=mech.actuated)
    qd, tau = jnp.asarray(rng.normal(size=n)), jnp.asarray(rng.normal(size=n))
    result = forward.solve(mech, q, qd, tau, method="sslm")
    reference = forward.solve(mech, q, qd, tau, method="system")
    assert not result.singular
    assert relative(result.qdd, reference.qdd) < 1e-10
    assert relative(result.lam, reference.lam) < 1e-10


def test_sslm_solves_the_subsystems_no_loop_acts_on():
    """A double pendulum beside a four-bar (its GICM whole), a 3-loop ladder (block by block)
    and an 8-loop ladder (scan):
    SSLM gives the pendulum its open-tree accelerations (`tree.forward_dynamics`, from its own
    ``I_j^-1 phi_j``) and the whole solution agrees with the KKT one."""
    b = loopdyn.MechanismBuilder(planar=True)
    b.add_body("upper", 1.2, (0.1, 0.0, 0.0), 0.01).add_body("lower", 0.7, (0.08, 0.0, 0.0), 0.005)
    b.add_joint("shoulder", "revolute", "ground", "upper", position=(0.5, 0.3, 0.0))
    b.add_joint("elbow", "revolute", "upper", "lower", position=(0.2, 0.0, 0.0))
    pendulum = b.build()
    rng = np.random.default_rng(4)
    closed_loops = (library("four_bar"), mechanisms.ladder(3), mechanisms.ladder(8))
    for closed, mode in zip(closed_loops, ("dense", "per_block", "scan")):
        mech = side_by_side([pendulum, closed])[0]
        assert forward._mode(mech.topology) == mode
        assert 0 not in {j for _, j in mech.topology.blocks}  # the pendulum's subsystem
        n = mech.num_bodies
        qd = kinematics.project_velocity(mech, mech.q0, jnp.asarray(rng.normal(size=n)))
        tau = jnp.asarray(rng.normal(size=n))
        result = forward.solve(mech, mech.q0, qd, tau, method="sslm")
        reference = forward.solve(mech, mech.q0, qd, tau, method="system")
        assert not result.singular
        assert relative(result.qdd, reference.qdd) < 1e-13, mode
        assert relative(result.lam, reference.lam) < 1e-13, mode
        alone = tree.forward_dynamics(pendulum, mech.q0[:2], qd[:2], tau[:2])
        assert relative(result.qdd[:2], alone) < 1e-13, mode
