"""Loop kinematics: Phi, J (twist-based) against autodiff of Phi, J' qd against the JVP of J qd,
assembly (closure, held coordinates, implicit gradients against finite differences), velocity
projection, and the singular / redundant / unassemblable cases with their messages."""

import functools
import re

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from support.composite import side_by_side

import loopdyn
from loopdyn import kinematics as K
from loopdyn import mechanisms, tree

TURN_Y = np.array([[0.0, 0, 1], [0, 1, 0], [-1, 0, 0]])  # +90 degrees about y


def four_bar(crank=0.1, coupler=0.3, rocker=0.25, ground=0.3, cut="revolute", planar=True):
    """Pivots A = (0, 0) and D = (ground, 0); cut joint C joins the coupler's end to the
    rocker's."""
    b = loopdyn.MechanismBuilder(planar=planar)
    inertia = 1e-3 if planar else (1e-4, 1e-3, 1e-3)
    b.add_body("crank", 1.0, (crank / 2, 0, 0), inertia)
    b.add_body("coupler", 2.0, (coupler / 2, 0, 0), inertia)
    b.add_body("rocker", 1.5, (rocker / 2, 0, 0), inertia)
    b.add_joint("A", "revolute", "ground", "crank", actuated=True)
    b.add_joint("B", "revolute", "crank", "coupler", position=(crank, 0, 0))
    b.add_joint("D", "revolute", "ground", "rocker", position=(ground, 0, 0))
    b.add_joint(
        "C", cut, "coupler", "rocker", position=(coupler, 0, 0), child_position=(rocker, 0, 0)
    )
    return b.build()


def slider_crank():
    """Crank, rod and slider in a chain; the slider runs along the ground's x axis through a
    prismatic cut joint."""
    b = loopdyn.MechanismBuilder(planar=True)
    b.add_body("crank", 1.0, (0.05, 0, 0), 1e-3)
    b.add_body("rod", 2.0, (0.15, 0, 0), 2e-3)
    b.add_body("slider", 3.0, (0, 0, 0), 1e-3)
    b.add_joint("A", "revolute", "ground", "crank", actuated=True)
    b.add_joint("B", "revolute", "crank", "rod", position=(0.1, 0, 0))
    b.add_joint("P", "revolute", "rod", "slider", position=(0.3, 0, 0))
    b.add_joint("G", "prismatic", "ground", "slider", axis=(1, 0, 0))
    return b.build()


def two_loop():
    """A four-bar whose rocker drives, through link ``link``, a slider on a prismatic tree joint:
    two loops in a chain (subsystems crank+coupler, rocker+link, slider)."""
    b = loopdyn.MechanismBuilder(planar=True)
    for name, length in (("crank", 0.1), ("coupler", 0.3), ("rocker", 0.25), ("link", 0.3)):
        b.add_body(name, 1.0 + length, (length / 2, 0, 0), 1e-3)
    b.add_body("slider", 2.0, (0, 0, 0), 1e-3)
    b.add_joint("A", "revolute", "ground", "crank", actuated=True)
    b.add_joint("B", "revolute", "crank", "coupler", position=(0.1, 0, 0))
    b.add_joint("D", "revolute", "ground", "rocker", position=(0.3, 0, 0))
    b.add_joint("E", "revolute", "rocker", "link", position=(0.25, 0, 0))
    b.add_joint("S", "prismatic", "ground", "slider", axis=(1, 0, 0), position=(0, 0.4, 0))
    b.add_joint(
        "C", "revolute", "coupler", "rocker", position=(0.3, 0, 0), child_position=(0.25, 0, 0)
    )
    b.add_joint("F", "revolute", "link", "slider", position=(0.3, 0, 0))
    return b.build()


def planar_weld():
    """The four-bar with its fixed link as a fourth moving body welded to the ground at D."""
    b = loopdyn.MechanismBuilder(planar=True)
    for name, length in (("crank", 0.1), ("coupler", 0.3), ("rocker", 0.25), ("base", 0.3)):
        b.add_body(name, 1.0, (length / 2, 0, 0), 1e-3)
    b.add_joint("A", "revolute", "ground", "crank", actuated=True)
    b.add_joint("B", "revolute", "crank", "coupler", position=(0.1, 0, 0))
    b.add_joint("C", "revolute", "coupler", "rocker", position=(0.3, 0, 0))
    b.add_joint("D", "revolute", "rocker", "base", position=(0.25, 0, 0))
    b.add_joint("W", "weld", "ground", "base", position=(0.3, 0, 0))
    return b.build()


def rssr(cut="spherical"):
    """Spatial RSSR: crank about z, coupler on a spherical tree joint, rocker about y; closed by a
    spherical cut joint, or by a universal one whose pin on the coupler lies across its length
    (RSUR, which removes the coupler's spin)."""
    b = loopdyn.MechanismBuilder()
    b.add_body("crank", 1.0, (0.05, 0, 0), (1e-4, 1e-3, 1e-3))
    b.add_body("coupler", 2.0, (0.175, 0, 0), (1e-4, 2e-2, 2e-2))
    b.add_body("rocker", 1.5, (0.075, 0, 0), (1e-4, 3e-3, 3e-3))
    b.add_joint("A", "revolute", "ground", "crank", axis=(0, 0, 1), actuated=True)
    b.add_joint("S", "spherical", "crank", "coupler", position=(0.1, 0, 0))
    b.add_joint("D", "revolute", "ground", "rocker", axis=(0, 1, 0), position=(0.3, 0.0, 0.15))
    b.add_joint(
        "C",
        cut,
        "coupler",
        "rocker",
        position=(0.35, 0, 0),
        rotation=TURN_Y,
        child_position=(0.15, 0, 0),
        child_rotation=TURN_Y,
    )
    return b.build()


def random_rotation(rng):
    q, r = np.linalg.qr(rng.normal(size=(3, 3)))
    q = q * np.sign(np.diag(r))
    return q if np.linalg.det(q) > 0 else -q


def all_cuts(seed=0):
    """A random spatial tree (a chain of four and a branch of four from the first body, revolute
    and prismatic joints on random axes) carrying one cut joint of every kind at random frames,
    some between branches (common ancestor a body) and some to the ground."""
    rng = np.random.default_rng(seed)
    b = loopdyn.MechanismBuilder()
    parents = ["ground", "b0", "b1", "b2", "b0", "b4", "b5", "b6"]
    for i, parent in enumerate(parents):
        b.add_body(f"b{i}", 1.0, rng.normal(size=3) * 0.1, (0.1, 0.1, 0.1))
        b.add_joint(
            f"j{i}",
            "prismatic" if i in (2, 5) else "revolute",
            parent,
            f"b{i}",
            axis=rng.normal(size=3),
            position=rng.normal(size=3) * 0.3,
            rotation=random_rotation(rng),
        )
    for name, kind, a, c in (
        ("weld", "weld", "b3", "b7"),
        ("rev", "revolute", "b7", "ground"),
        ("pri", "prismatic", "b2", "b6"),
        ("uni", "universal", "ground", "b3"),
        ("sph", "spherical", "b5", "b2"),
    ):
        b.add_joint(
            name,
            kind,
            a,
            c,
            axis=rng.normal(size=3),
            cut=True,
            position=rng.normal(size=3) * 0.3,
            rotation=random_rotation(rng),
            child_position=rng.normal(size=3) * 0.3,
            child_rotation=random_rotation(rng),
        )
    return b.build()


MECHANISMS = {
    "four_bar": four_bar(),
    "slider_crank": slider_crank(),
    "two_loop": two_loop(),
    "weld": planar_weld(),
    "rssr": rssr("spherical"),
    "rsur": rssr("universal"),
    "all_cuts": all_cuts(),
}
GUESS = {  # near a closed configuration, crank (coordinate 0) held
    "four_bar": [0.7, -0.9, 1.6],
    "slider_crank": [0.7, -0.9, 0.2],
    "two_loop": [0.7, -0.9, 1.6, 1.0, 0.0],
    "weld": [0.7, -0.9, 2.4, -2.0],
    "rssr": [0.3, 0.1, 0.2, -0.1, 2.5],
    "rsur": [0.3, 0.1, 0.2, -0.1, 2.5],
}

residual = jax.jit(K.loop_residual)
jacobian = jax.jit(K.loop_jacobian)
try_assemble = jax.jit(K.try_assemble, static_argnames=("fixed", "tol", "max_iter"))
project_velocity = jax.jit(K.project_velocity, static_argnames="fixed")


@jax.jit
@functools.partial(jax.vmap, in_axes=(None, 0, 0))
def derivatives(mech, q, qd):
    """`loop_terms` (Phi, J, J' qd), the autodiff references of J and J' qd (jacfwd of Phi, the
    JVP of ``q -> J(q) qd`` along ``qd``), and the stand-alone functions' values: Phi, J qd and
    J' qd, and Phi and J qd of `residuals_at` (J not formed)."""
    jac_ad, phi = jax.jacfwd(lambda x: (K.loop_residual(mech, x),) * 2, has_aux=True)(q)
    jac_qd, bias_ad = jax.jvp(lambda x: K.loop_jacobian(mech, x) @ qd, (q,), (qd,))
    measured = K.residuals_at(mech, tree.body_motion(mech, q, qd, accelerations=False))[:2]
    alone = (phi, jac_qd, K.loop_bias(mech, q, qd), *measured)
    return K.loop_terms(mech, q, qd), (jac_ad, bias_ad), alone


@functools.cache
def closed(name):
    """An assembled configuration of ``MECHANISMS[name]`` with the crank held."""
    result = try_assemble(MECHANISMS[name], jnp.array(GUESS[name], dtype=float), fixed=(0,))
    assert bool(result.converged), (name, result.residual)
    return result.q


# The library's four-bar, slider-crank (a prismatic tree joint closed by a revolute cut) and RSSR
# have the joint and cut kinds of the hand-built four_bar, two_loop and rssr; that the library's
# q0 closes the loops, test_mechanisms.test_q0_closes_every_loop_and_mobility_is_as_expected.
LIBRARY = {
    "carpet_scraper": mechanisms.carpet_scraper,
    "three_rrr": mechanisms.three_rrr,
    "rssr": mechanisms.rssr,
    "excavator": mechanisms.excavator,
    "quarter_car": mechanisms.quarter_car,
    "stewart": mechanisms.stewart,
    "ladder": functools.partial(mechanisms.ladder, 3),
}


@functools.cache
def library(name):
    return LIBRARY[name]()


def derivative_states(mech, name, from_library):
    """Four configurations and random rates. Hand-built: random (not closed) configurations and,
    where the mechanism closes, a closed one last; library: the assembled q0 first, then three
    perturbed off closure."""
    rng = np.random.default_rng(len(name))
    n = mech.num_bodies
    if from_library:
        qs = np.asarray(mech.q0) + np.concatenate([np.zeros((1, n)), rng.normal(size=(3, n)) * 0.3])
        return qs, rng.normal(size=qs.shape)
    qs = rng.uniform(-np.pi, np.pi, (3 if name in GUESS else 4, n))
    if name in GUESS:
        qs = np.concatenate([qs, np.asarray(closed(name))[None]])
    return qs, rng.normal(size=qs.shape) * 2.0


@functools.cache
def all_derivatives(planar):
    """`derivatives` of every planar (or every spatial) mechanism, hand-built and library, side by
    side in one program (one compilation per kind): ``{(library, name): (qs, qds, terms,
    references, alone)}``, each mechanism's rows and coordinates cut out of the whole."""
    cases = [(False, name, m) for name, m in MECHANISMS.items()]
    cases += [(True, name, library(name)) for name in LIBRARY]
    cases = [c for c in cases if c[2].planar == planar]
    union, coordinates, rows = side_by_side([m for _, _, m in cases])
    states = [derivative_states(m, name, lib) for lib, name, m in cases]
    qs, qds = (jnp.asarray(np.concatenate(x, axis=1)) for x in zip(*states))
    out = jax.tree.map(np.asarray, derivatives(union, qs, qds))
    found = {}
    for (lib, name, _), own, r, (q, qd) in zip(cases, coordinates, rows, states):
        cut = jax.tree.map(
            lambda x, r=r, own=own: x[:, r][:, :, own] if x.ndim == 3 else x[:, r], out
        )
        found[lib, name] = (q, qd, *cut)
    return found


def assert_derivatives(q, qd, terms, references, alone):
    """J = jacfwd(Phi) and J' qd = JVP of J qd; `loop_terms` equals the stand-alone functions
    and `residuals_at`."""
    (phi, j, b), (j_ad, b_ad) = terms, references
    np.testing.assert_allclose(j, j_ad, rtol=0, atol=1e-10)
    np.testing.assert_allclose(b, b_ad, rtol=0, atol=1e-10)
    jac_qd = np.einsum("cmn,cn->cm", j, qd)
    for one, other in zip((phi, jac_qd, b, phi, jac_qd), alone):
        np.testing.assert_allclose(one, other, rtol=1e-13, atol=1e-14)


@pytest.mark.parametrize("name", list(MECHANISMS))
def test_jacobian_and_bias_are_derivatives(name):
    """At three random (not closed) configurations and, where the mechanism closes, a closed one
    (four random ones where it does not)."""
    mech = MECHANISMS[name]
    q, qd, terms, references, alone = all_derivatives(mech.planar)[False, name]
    phi, j, b = terms
    assert j.shape == (len(q), mech.topology.num_rows, mech.num_bodies)
    assert np.max(np.abs(j)) > 0.1 and np.max(np.abs(b)) > 0.1
    if name in GUESS:
        assert np.max(np.abs(phi[-1])) <= 1e-12
    assert_derivatives(q, qd, terms, references, alone)


@pytest.mark.parametrize("name", list(LIBRARY))
def test_library_jacobian_and_bias_are_derivatives(name):
    """The larger mechanisms of `loopdyn.mechanisms`, at the assembled q0 and at three
    configurations perturbed off closure."""
    mech = library(name)
    q, qd, terms, references, alone = all_derivatives(mech.planar)[True, name]
    phi, j, b = terms
    assert j.shape == (len(q), mech.topology.num_rows, mech.num_bodies)
    assert np.max(np.abs(j)) > 0.1 and np.max(np.abs(b)) > 0.1
    assert np.max(np.abs(phi[0])) <= 1e-12
    assert_derivatives(q, qd, terms, references, alone)


@pytest.mark.parametrize("name", ["weld", "all_cuts"])
def test_assembly_rows_and_their_jacobian(name):
    """`K._closure`, the rows assembly's Newton steps use (locked turns by the Gibbs vector):
    its J is its derivative (forward mode, on the configuration manifold) far from closure, up
    to turns near a half turn; its other rows are the loop residual's; at a closed
    configuration its rows and J are the loop residual's and J."""
    mech = MECHANISMS[name]
    rng = np.random.default_rng(5)
    locked = np.asarray(K._locked_rows(mech))
    assert locked.sum() == (1 if mech.planar else 6)  # the weld's (and the prismatic joint's)
    for scale in (0.5, 1.5):
        q = mech.q0 + scale * jnp.asarray(rng.normal(size=mech.nq))
        phi, jac = K._closure(mech, q, jacobian=True)
        moved = lambda v, q=q: K._closure(mech, K.configuration.integrate(mech, q, v))
        reference = jax.jacfwd(moved)(jnp.zeros(mech.nv))  # ~1e3 near a half turn (the pole)
        assert np.abs(jac - reference).max() <= 1e-12 * np.abs(reference).max()  # 2e-13 seen
        np.testing.assert_allclose(phi[~locked], residual(mech, q)[~locked], rtol=0, atol=1e-15)
        assert np.abs(phi[locked]).max() > 0.1
    if name not in GUESS:  # all_cuts' random geometry does not close
        return
    closed = K.assemble(mech, jnp.array(GUESS[name]), fixed=(0,))
    phi, jac = K._closure(mech, closed, jacobian=True)
    np.testing.assert_allclose(phi, residual(mech, closed), rtol=0, atol=1e-15)
    np.testing.assert_allclose(jac, jacobian(mech, closed), rtol=0, atol=1e-14)


def test_four_bar_residual_and_poses_match_hand_geometry():
    mech, q = MECHANISMS["four_bar"], jnp.array([0.7, -0.9, 1.6])
    t1, t12, t3 = 0.7, 0.7 - 0.9, 1.6
    coupler_end = 0.1 * np.array([np.cos(t1), np.sin(t1)]) + 0.3 * np.array(
        [np.cos(t12), np.sin(t12)]
    )
    rocker_end = np.array([0.3, 0.0]) + 0.25 * np.array([np.cos(t3), np.sin(t3)])
    np.testing.assert_allclose(residual(mech, q), rocker_end - coupler_end, atol=1e-15)
    positions, rotations = K.body_poses(mech, q)
    np.testing.assert_allclose(
        positions[1, :2], 0.1 * np.array([np.cos(t1), np.sin(t1)]), atol=1e-15
    )
    np.testing.assert_allclose(rotations[1, :2, 0], [np.cos(t12), np.sin(t12)], atol=1e-15)


def test_slider_crank_rows_are_offset_and_angle():
    """Prismatic cut along x: rows are the slider's y (across the axis) and sin(ground - slider
    angle)."""
    mech, q = MECHANISMS["slider_crank"], jnp.array([0.7, -0.9, 0.2])
    y = 0.1 * np.sin(0.7) + 0.3 * np.sin(0.7 - 0.9)
    np.testing.assert_allclose(residual(mech, q), [y, np.sin(0.0 - (0.7 - 0.9 + 0.2))], atol=1e-15)


def test_planar_spherical_cut_is_a_planar_revolute():
    ball, pin, q = four_bar(cut="spherical"), MECHANISMS["four_bar"], jnp.array([0.3, -0.4, 2.0])
    assert ball.topology.loops[0].rows == 2
    np.testing.assert_array_equal(residual(ball, q), residual(pin, q))


@pytest.mark.parametrize("name", list(GUESS))
def test_assembly_closes_loops_and_holds_fixed(name):
    mech, q = MECHANISMS[name], closed(name)
    assert float(jnp.max(jnp.abs(residual(mech, q)))) <= 1e-12
    assert q[0] == GUESS[name][0]  # held exactly


def test_assembly_is_unique_branch_of_hand_solution():
    """Four-bar closure in closed form (circle intersection) for the branch near the guess."""
    q = closed("four_bar")
    b = 0.1 * np.array([np.cos(0.7), np.sin(0.7)])
    d = np.array([0.3, 0.0])
    dist = np.linalg.norm(d - b)
    along = (dist**2 + 0.3**2 - 0.25**2) / (2 * dist)
    normal = np.array([-(d - b)[1], (d - b)[0]]) / dist
    u = (d - b) / dist
    candidates = [b + along * u + s * np.sqrt(0.3**2 - along**2) * normal for s in (1, -1)]
    joint_c = b + 0.3 * np.array([np.cos(q[0] + q[1]), np.sin(q[0] + q[1])])
    assert min(np.linalg.norm(joint_c - c) for c in candidates) < 1e-12


def test_assembly_under_vmap_and_jit():
    mech = MECHANISMS["four_bar"]
    cranks = jnp.linspace(0.0, 2 * np.pi, 7)
    guesses = jnp.stack([cranks, -0.9 + 0 * cranks, 1.6 + 0 * cranks], axis=1)
    result = jax.vmap(lambda g: try_assemble(mech, g, fixed=(0,)))(guesses)
    assert bool(jnp.all(result.converged))
    np.testing.assert_array_equal(result.q[:, 0], cranks)
    assert float(jnp.max(jnp.abs(jax.vmap(residual, (None, 0))(mech, result.q)))) <= 1e-12


def _assembled(mech, crank, ground_x):
    """Four-bar closed with the crank at ``crank`` and the rocker's pivot at ``(ground_x, 0)``."""
    mech = eqx.tree_at(
        lambda m: m.parent_position, mech, mech.parent_position.at[2, 0].set(ground_x)
    )
    return K.assemble(mech, jnp.stack([crank, -0.9 + 0 * crank, 1.6 + 0 * crank]), fixed=("A",))


def test_assembly_gradients_match_central_differences():
    """Reverse mode, w.r.t. the held crank angle and a link placement, against central
    differences."""
    mech, h = MECHANISMS["four_bar"], 1e-6
    value = jax.jit(_assembled)
    rows = jax.jit(jax.jacrev(_assembled, argnums=(1, 2)))(mech, 0.7, 0.3)
    fd = [
        (value(mech, 0.7 + h, 0.3) - value(mech, 0.7 - h, 0.3)) / (2 * h),
        (value(mech, 0.7, 0.3 + h) - value(mech, 0.7, 0.3 - h)) / (2 * h),
    ]
    for k in range(2):
        assert float(jnp.min(jnp.abs(rows[k][1:]))) > 0.01  # non-trivial derivatives
        np.testing.assert_allclose(rows[k][1:], fd[k][1:], rtol=1e-6)
    np.testing.assert_array_equal(rows[0][0], 1.0)  # the held crank passes through
    np.testing.assert_array_equal(rows[1][0], 0.0)


def test_spatial_assembly_gradient_matches_central_differences():
    """RSUR: d(free coordinates)/d(crank angle) by the implicit function theorem, forward mode."""
    mech, h, q = MECHANISMS["rsur"], 1e-6, closed("rsur")

    def solve(crank):
        return try_assemble(mech, q.at[0].set(crank), fixed=(0,)).q

    fd = (solve(q[0] + h) - solve(q[0] - h)) / (2 * h)
    np.testing.assert_allclose(jax.jit(jax.jacfwd(solve))(q[0])[1:], fd[1:], rtol=1e-6)


@pytest.mark.parametrize("name", ["two_loop", "rsur"])
def test_project_velocity_follows_the_held_crank(name):
    """Projected rates equal the finite-difference rates of the assembled motion (unique when J
    over the free coordinates is square: one DOF, crank held)."""
    mech, q, h = MECHANISMS[name], closed(name), 1e-6
    qd = jnp.asarray(np.random.default_rng(3).normal(size=mech.num_bodies)).at[0].set(1.3)
    projected = project_velocity(mech, q, qd, fixed=("A",))
    ahead = try_assemble(mech, q.at[0].add(1.3 * h), fixed=(0,)).q
    behind = try_assemble(mech, q.at[0].add(-1.3 * h), fixed=(0,)).q
    assert projected[0] == qd[0]
    np.testing.assert_allclose(jacobian(mech, q) @ projected, 0.0, atol=1e-12)
    np.testing.assert_allclose(projected, (ahead - behind) / (2 * h), rtol=1e-6, atol=1e-8)


def test_blocks_are_slices_of_jacobian():
    mech, q = MECHANISMS["two_loop"], closed("two_loop")
    j, top = jacobian(mech, q), mech.topology
    blocks = K.loop_jacobian_blocks(mech, q)
    assert sorted(blocks) == [(0, 0), (0, 1), (1, 1), (1, 2)]
    for (i, s), block in blocks.items():
        assert block.shape == top.block_shape(i, s)
        np.testing.assert_array_equal(block, j[top.rows(i), top.coordinates(s)])
    np.testing.assert_array_equal(j[top.rows(0), top.coordinates(2)], 0.0)
    np.testing.assert_array_equal(j[top.rows(1), top.coordinates(0)], 0.0)


def test_unassemblable_four_bar_reports_residual():
    mech = four_bar(coupler=0.01)  # reach 0.26 < 0.4, the pivot distance with the crank at pi
    guess = jnp.array([np.pi, 0.5, 2.5])
    with pytest.raises(
        ValueError, match=r"do not close.*residual norm \|Phi\| = (\S+),.*'C'"
    ) as info:
        K.assemble(mech, guess, fixed=("A",))
    reported = float(re.search(r"\|Phi\| = (\S+),", str(info.value)).group(1))
    assert 0.4 - 0.26 - 1e-3 <= reported < 0.2  # no closer than the geometry allows
    with pytest.raises(Exception, match="do not close"):
        jax.jit(functools.partial(K.assemble, fixed=("A",)))(mech, guess).block_until_ready()


def test_dead_centre_is_reported():
    """Coupler and rocker in line: J over the free coordinates loses rank with the crank held."""
    a, b, c, d = 0.1, 0.2, 0.15, 0.3
    mech = four_bar(crank=a, coupler=b, rocker=c, ground=d)
    theta = np.arccos((a * a + d * d - (b + c) ** 2) / (2 * a * d))
    pin_b = a * np.array([np.cos(theta), np.sin(theta)])
    u = (np.array([d, 0.0]) - pin_b) / (b + c)
    q = jnp.array([theta, np.arctan2(u[1], u[0]) - theta, np.arctan2(-u[1], -u[0])])
    assert float(jnp.max(jnp.abs(residual(mech, q)))) < 1e-15
    assert int(K.constraint_rank(mech, q, fixed=("A",))) == 1
    assert int(K.constraint_rank(mech, q)) == 2
    with pytest.raises(ValueError, match=r"rank 1 < 2 rows.*\['A'\] held.*dead centre"):
        K.check_jacobian(mech, q, fixed=("A",))
    s = K.check_jacobian(mech, closed("four_bar"), fixed=("A",))  # a regular pose passes
    assert s.min() > 1e-3


def test_spatial_model_of_planar_loop():
    """A revolute cut joint's five rows on three coordinates are refused; a spherical one's
    row along the plane's normal, dependent at every configuration, is dropped when the model
    is built (`loopdyn.redundancy`), and the two rows that remain have full rank."""
    with pytest.raises(
        ValueError,
        match="cut joint 'C'.*3 joint coordinates.*5 constraint rows.*spherical or universal",
    ):
        four_bar(planar=False)
    ball = four_bar(cut="spherical", planar=False)
    assert ball.reduced_points == ((0, ((1.0, 0.0, 0.0), (0.0, 1.0, 0.0))),)
    assert ball.topology.num_rows == 2
    q = try_assemble(ball, jnp.array([0.7, -0.9, 1.6]), fixed=(0,)).q
    assert K.check_jacobian(ball, q).min() > 1e-2


def test_fixed_coordinates_are_checked():
    with pytest.raises(ValueError, match="unknown coordinate 'X'"):
        K.assemble(MECHANISMS["four_bar"], jnp.zeros(3), fixed=("X",))
    with pytest.raises(ValueError, match="index 5 out of range"):
        K.project_velocity(MECHANISMS["four_bar"], jnp.zeros(3), jnp.zeros(3), fixed=(5,))


def test_a_weld_closed_at_a_half_turn_is_refused():
    """The planar weld's angle row, the sine of the turn between its frames, vanishes at a half
    turn too. Newton's steps measure the turn by its Gibbs vector instead (`K._closure`), so from
    a guess turned a half turn assembly reaches the aligned frames; a state the angle row takes
    as closed at a half turn is measured by `locked_turns`, flagged by `try_assemble` (the Gibbs
    row has its pole there: no step), and refused by `assemble` and `simulate`, naming the weld."""
    mech = MECHANISMS["weld"]
    closed = K.assemble(mech, jnp.array(GUESS["weld"]), fixed=(0,))
    assert float(K.locked_turns(mech, closed)[0]) < 1e-7
    turned = K.assemble(mech, jnp.array(GUESS["weld"]) + jnp.array([0.0, 0.0, 0.0, np.pi]), (0,))
    assert float(K.locked_turns(mech, turned)[0]) < 1e-7
    np.testing.assert_allclose(turned, closed + jnp.array([0.0, 0.0, 0.0, 2 * np.pi]), atol=1e-12)
    flipped = closed + jnp.array([0.0, 0.0, 0.0, np.pi])
    result = K.try_assemble(mech, flipped, fixed=(0,))
    assert float(result.residual) <= 1e-12 and not bool(result.converged)
    np.testing.assert_allclose(K.locked_turns(mech, result.q), [np.pi], atol=1e-7)
    message = "weld cut joint 'W' has its angle rows at zero with its two frames 3.142 rad apart"
    with pytest.raises(ValueError, match=message):
        K.assemble(mech, flipped, fixed=(0,))
    zeros = jnp.zeros(mech.nv)
    with pytest.raises(ValueError, match="simulate: the weld cut joint 'W'"):
        loopdyn.simulate(mech, result.q, zeros, 0.01)
