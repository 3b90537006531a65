"""Counterweight balancing (`loopdyn.design`) on the planar four-bar.

The optimum of the shaking force is checked against the exact full force balance of Berkof and
Lowen (eq. (2) of the module docstring, derived there from the loop closure), computed here from
the link lengths given to the factory, with the coupler's centre of mass moved off the line of
its joints (force balance needs no special coupler). Independently of the inverse dynamics, the
balanced mechanism's total centre of mass, from the body poses alone, stays where it is.
Gradients of the objective come from one ``jit(value_and_grad)`` program whose values also give
the central differences."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from loopdyn import design, mechanisms, tree

A, B, C, D = 0.038, 0.1152, 0.1152, 0.089  # crank, coupler, rocker, ground (the factory's)
Z2 = 0.0576 + 0.02j  # coupler centre of mass in its frame (x from B towards C)
MECH = mechanisms.four_bar(0.3, crank=A, coupler=B, rocker=C, ground=D)
MECH = eqx.tree_at(lambda m: m.com, MECH, MECH.com.at[1, :2].set([Z2.real, Z2.imag]))
MOTION = design.crank_cycle(MECH, 6.0, 24)
BOX = ((-0.2, 0.2), (-0.2, 0.2))
SLOTS = (design.Slot("crank", (0.1, 5.0), BOX), design.Slot("rocker", (0.1, 5.0), BOX, 0.02))
OPTIONS = {"method": "system"}


def total_com(mech, q):
    position, rotation = tree.forward_kinematics(mech, q)
    com = position + jnp.einsum("nij,nj->ni", rotation, mech.com)
    return jnp.sum(mech.mass[:, None] * com, axis=0) / jnp.sum(mech.mass)


def test_counterweights_give_the_exact_full_force_balance():
    result = design.balance(MECH, MOTION, SLOTS, design.Weights(1.0, 0.0, 0.0), **OPTIONS)
    assert result.converged and not result.at_bound.any()
    assert float(result.terms.force) < 1e-6 * float(result.unbalanced.force)
    # Berkof-Lowen (2): the mass moments of crank (about A) and rocker (about D) in their frames.
    m1, m2, m3 = (float(x) for x in MECH.mass)
    mu1, mu3 = m2 * A * (Z2 / B - 1), -m2 * Z2 * C / B
    cw = result.counterweights
    moment = np.asarray(cw.mass)[:, None] * np.asarray(cw.position)[:, :2]
    exact = np.array([[mu1.real - m1 * A / 2, mu1.imag], [mu3.real - m3 * C / 2, mu3.imag]])
    np.testing.assert_allclose(moment, exact, rtol=0, atol=1e-8 * np.abs(exact).max())
    # The total centre of mass stands still; without the counterweights it moves.
    before = jax.vmap(lambda q: total_com(MECH, q))(MOTION.q)
    after = jax.vmap(lambda q: total_com(result.mechanism, q))(MOTION.q)
    assert float(jnp.max(jnp.abs(after - after[0]))) < 1e-12
    assert float(jnp.max(jnp.abs(before - before[0]))) > 1e-3


def test_spatial_rssr_force_balance():
    """Spatial path (three position coordinates, a disc): the RSSR's coupler is a uniform bar, so
    for the force it is half its mass at each spherical end; the crank (about z through the
    origin) and the rocker (about x through its pivot) are balanced when their first moments
    with those halves have no component across their axes. Along the axes they are free."""
    mech = mechanisms.rssr()
    motion = design.crank_cycle(mech, 2 * np.pi, 16)
    box = ((-0.2, 0.2),) * 3
    slots = [design.Slot("crank6", (0.1, 5.0), box), design.Slot("rocker1", (0.1, 5.0), box, 0.01)]
    result = design.balance(mech, motion, slots)
    assert result.converged
    assert float(result.terms.force) < 1e-6 * float(result.unbalanced.force)
    m1, m3, m2 = (float(mech.mass[mech.body_index(b)]) for b in ("crank6", "rocker1", "coupler3"))
    c1, c3 = (np.asarray(mech.com[mech.body_index(b)]) for b in ("crank6", "rocker1"))
    cw = result.counterweights
    moment = np.asarray(cw.mass)[:, None] * np.asarray(cw.position)
    # Crank pin at 2 c1, rocker tip at 2 c3 (bars with the COM at mid-length).
    np.testing.assert_allclose(moment[0, :2], -((m1 + m2) * c1)[:2], rtol=0, atol=1e-10)
    np.testing.assert_allclose(moment[1, 1:], -((m3 + m2) * c3)[1:], rtol=0, atol=1e-10)
    after = jax.vmap(lambda q: total_com(result.mechanism, q))(motion.q)
    assert float(jnp.max(jnp.abs(after - after[0]))) < 1e-12


def test_added_counterweight_is_the_composite_body():
    """Parallel-axis theorem, full 3x3 (the counterweight off the plane too), thin disc."""
    r, mc, rho = np.array([-0.05, 0.01, 0.02]), 0.7, 0.03
    cw = design.Counterweights(jnp.array([mc]), jnp.array([r]), jnp.array([rho]), (2,))
    new = design.add_counterweights(MECH, cw)
    m, c = float(MECH.mass[2]), np.asarray(MECH.com[2])
    com = (m * c + mc * r) / (m + mc)

    def shift(mass, d):
        return mass * (d @ d * np.eye(3) - np.outer(d, d))

    inertia = np.asarray(MECH.inertia[2]) + shift(m, c - com) + shift(mc, r - com)
    inertia += mc * rho**2 * np.diag([0.25, 0.25, 0.5])
    np.testing.assert_allclose(float(new.mass[2]), m + mc, rtol=1e-15)
    np.testing.assert_allclose(np.asarray(new.com[2]), com, rtol=0, atol=1e-15)
    np.testing.assert_allclose(np.asarray(new.inertia[2]), inertia, rtol=0, atol=1e-15)
    np.testing.assert_array_equal(np.asarray(new.mass[:2]), np.asarray(MECH.mass[:2]))


def objective(z, weights=(1.0, 0.5, 0.2)):
    """The objective (1) through inverse dynamics of the loaded mechanism (not the linear model
    the optimiser uses)."""
    mech = design.add_counterweights(MECH, design.counterweights(z, MECH, SLOTS))
    ratios = jnp.stack(design.terms(mech, MOTION, **OPTIONS)) / jnp.stack(UNBALANCED)
    return jnp.sum(jnp.asarray(weights) * ratios**2)


UNBALANCED = design.terms(MECH, MOTION, **OPTIONS)
objective_and_grad = eqx.filter_jit(jax.value_and_grad(objective))
Z = jnp.array([[0.8, -0.05, 0.02], [2.1, -0.1, -0.03]])  # mass, x, y on crank, rocker


def test_objective_gradient_matches_central_differences():
    _, grad = objective_and_grad(Z)
    fd = np.zeros(Z.shape)
    for k in np.ndindex(Z.shape):
        h = 1e-5 * max(1.0, abs(float(Z[k])))
        fd[k] = objective_and_grad(Z.at[k].add(h))[0] - objective_and_grad(Z.at[k].add(-h))[0]
        fd[k] /= 2 * h
    assert np.all(np.abs(fd) > 1e-3)
    np.testing.assert_allclose(np.asarray(grad), fd, rtol=0, atol=1e-5 * np.abs(fd).max())


def test_linear_model_equals_inverse_dynamics_of_the_loaded_mechanism():
    bodies = tuple(MECH.body_index(s.body) for s in SLOTS)
    model = design.linearise(MECH, MOTION, bodies, None, "system")
    cw = design.counterweights(Z, MECH, SLOTS)
    full = design.series(design.add_counterweights(MECH, cw), MOTION, None, "system")
    for a, b in zip(model.series(cw), full):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=0, atol=1e-11)


def test_torque_bound_holds_and_trade_off_is_monotone():
    weights = design.Weights(1.0, 1.0, 0.0)  # force and moment: a unique optimum
    free = design.balance(MECH, MOTION, SLOTS, weights, **OPTIONS)
    ratio = float(free.terms.torque / free.unbalanced.torque)
    bound = design.balance(MECH, MOTION, SLOTS, weights, 0.9 * ratio - 1, **OPTIONS)
    achieved = float(bound.terms.torque / bound.unbalanced.torque)
    assert abs(achieved - 0.9 * ratio) < 1e-7 * ratio  # the bound is active and kept
    assert bound.torque_multiplier > 0 and bound.objective > free.objective * (1 + 1e-3)
    curve = design.trade_off(MECH, MOTION, SLOTS, (0.0, 0.5, 1.0), (0.0,), **OPTIONS)
    force, moment = curve.terms[:, 0], curve.terms[:, 1]
    assert np.all(np.diff(force) > 0) and np.all(np.diff(moment) < 0)
    assert curve.pareto.all()


def test_pareto_points():
    points = np.array([[1.0, 2.0, 3.0], [2.0, 1.0, 3.0], [2.0, 2.0, 3.0], [1.0, 2.0, 3.0]])
    np.testing.assert_array_equal(design.pareto(points), [True, True, False, True])


def test_bad_slots_and_weights_are_refused():
    with pytest.raises(ValueError, match="unknown body 'wheel'"):
        design.balance(MECH, MOTION, [design.Slot("wheel", (0, 1), BOX)])
    with pytest.raises(ValueError, match="lo < hi"):
        design.balance(MECH, MOTION, [design.Slot("crank", (1, 0), BOX)])
    with pytest.raises(ValueError, match="needs 2 \\(lo, hi\\) pairs"):
        design.balance(MECH, MOTION, [design.Slot("crank", (0, 1), BOX[:1])])
    with pytest.raises(ValueError, match="not all 0"):
        design.balance(MECH, MOTION, SLOTS, design.Weights(0.0, 0.0, 0.0))
    with pytest.raises(ValueError, match=r"q of shape \(T, 3\)\), got tuple"):
        design.balance(MECH, (MOTION.q,), SLOTS)
    cw = design.Counterweights(jnp.ones(2), jnp.zeros((2, 2)), jnp.zeros(2), (0, 2))
    with pytest.raises(ValueError, match=r"weights.position must have shape \(2, 3\)"):
        design.add_counterweights(MECH, cw)
    with pytest.raises(ValueError, match="speed must be finite and non-zero"):
        design.crank_cycle(MECH, 0.0, 10)
