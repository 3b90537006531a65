"""Prescribed motion (`loopdyn.prescribed`) and shaking force and moment (`loopdyn.shaking`).

Prescribed motion: the states close the loops at position, velocity and acceleration level and the
prescribed coordinates follow the drive's exact derivatives, which together fix every coordinate;
the batched inverse dynamics equals the one-state function. Shaking: the ground reactions equal
the rate of change of the total momentum (computed by differentiating the body poses, not by the
recursions) minus the weight; the RMS/peak summaries have the values and gradients they should.
"""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from support.states import complete, random_draws

from loopdyn import kinematics, mechanisms, prescribed, shaking
from loopdyn.inverse import inverse_dynamics

T = 3.0
GRID = jnp.linspace(0.0, T, 7)


def rrr_drive(t):
    """Seed 004 §5.1: theta_k(t) = theta_k(0) + c_k (2 pi t / T - sin(2 pi t / T))."""
    s = 2 * jnp.pi * t / T
    c = jnp.array([1 / 6, -1 / 6, 1 / 12])
    return jnp.array([jnp.pi / 3, 4 * jnp.pi / 3, 11 * jnp.pi / 6]) + c * (s - jnp.sin(s))


def rrr_rates(t):
    s, ds = 2 * jnp.pi * t / T, 2 * jnp.pi / T
    c = jnp.array([1 / 6, -1 / 6, 1 / 12])
    return c * ds * (1 - jnp.cos(s)), c * ds**2 * jnp.sin(s)


@functools.cache
def rrr():
    mech = mechanisms.three_rrr()
    return mech, *prescribed.prescribed_inverse_dynamics(mech, rrr_drive, GRID)


def test_prescribed_motion_satisfies_the_constraints_and_follows_the_drive():
    mech, motion, _ = rrr()
    held = np.array(mech.actuated)
    rate, acceleration = jax.vmap(rrr_rates)(GRID)
    np.testing.assert_allclose(motion.q[:, held], jax.vmap(rrr_drive)(GRID), rtol=0, atol=1e-14)
    np.testing.assert_allclose(motion.qd[:, held], rate, rtol=0, atol=1e-13)
    np.testing.assert_allclose(motion.qdd[:, held], acceleration, rtol=0, atol=1e-13)
    phi, jac, bias = jax.vmap(lambda q, qd: kinematics.loop_terms(mech, q, qd))(motion.q, motion.qd)
    assert float(jnp.max(jnp.abs(phi))) < 1e-10
    assert float(jnp.max(jnp.abs(jnp.einsum("tmn,tn->tm", jac, motion.qd)))) < 1e-12
    assert float(jnp.max(jnp.abs(jnp.einsum("tmn,tn->tm", jac, motion.qdd) + bias))) < 1e-11
    assert float(jnp.min(motion.conditioning)) > 1e-2
    np.testing.assert_allclose(motion.q[0], mech.q0, rtol=0, atol=1e-9)  # q0 is assembled


def test_sampled_drive_equals_the_callable():
    mech, motion, result = rrr()
    rate, acceleration = jax.vmap(rrr_rates)(GRID)
    arrays = (jax.vmap(rrr_drive)(GRID), rate, acceleration)
    again, result2 = prescribed.prescribed_inverse_dynamics(mech, arrays, GRID)
    np.testing.assert_allclose(again.qdd, motion.qdd, rtol=0, atol=1e-12)
    np.testing.assert_allclose(result2.actuator_forces, result.actuator_forces, rtol=0, atol=1e-10)


def test_batched_inverse_dynamics_equals_the_checked_one_state_function():
    mech, motion, result = rrr()
    for k in (0, 3, 6):
        one = inverse_dynamics(mech, motion.q[k], motion.qd[k], motion.qdd[k])
        for field in ("actuator_forces", "multipliers", "reactions", "ground_force"):
            np.testing.assert_allclose(
                getattr(result, field)[k], getattr(one, field), rtol=0, atol=1e-10
            )


def test_state_at_one_time_equals_the_grid():
    """The traceable one-time version (for a feedforward torque inside a simulation)."""
    mech, motion, _ = rrr()
    at = jax.jit(lambda t, q: prescribed.state_at(mech, rrr_drive, t, q))
    for k in (2, 5):
        guess = motion.q[k] + 1e-3  # a nearby state, as a simulation would give
        for mine, grid in zip(at(GRID[k], guess), (motion.q[k], motion.qd[k], motion.qdd[k])):
            np.testing.assert_allclose(mine, grid, rtol=0, atol=1e-10)


def test_prescribed_motion_refusals():
    mech = mechanisms.four_bar()
    with pytest.raises(ValueError, match="2 prescribed coordinates .* prescribe exactly 1"):
        prescribed.prescribed_motion(mech, lambda t: jnp.stack([t, t]), GRID, coordinates=(0, 1))
    with pytest.raises(ValueError, match=r"drive values must have shape \(7, 1\)"):
        prescribed.prescribed_motion(mech, lambda t: jnp.stack([t, t]), GRID)
    # The rocker of a crank-rocker cannot turn a full revolution: the loop opens on the way.
    with pytest.raises(ValueError, match="the loops do not close at t = "):
        prescribed.prescribed_motion(
            mech, lambda t: mech.q0[2:] + 2 * jnp.pi * t / T, GRID, coordinates=("D",)
        )


# ------------------------------------------------------------------------------------------------
# Shaking force and moment against the rate of change of momentum.


@eqx.filter_jit
def _momentum_balance(mech, q, raw, u):
    """Per consistent state (`test_inverse.complete`, in this program): the shaking wrench
    without the weight, -d/dt (P, L) by differentiating `shaking.momentum` along (qd, qdd), and
    the inverse dynamics."""

    def one(q, raw, u):
        q, qd, qdd, _, _ = complete(mech, q, raw, u)
        result = inverse_dynamics(mech, q, qd, qdd, check=False)
        shake = shaking.shaking(mech, result, q, include_weight=False)
        _, (d_linear, d_angular) = jax.jvp(
            lambda q, qd: shaking.momentum(mech, q, qd), (q, qd), (qd, qdd)
        )
        if mech.planar:
            d_linear, d_angular = d_linear[:2], d_angular[2]
        return shake, -d_linear, -d_angular, result

    return jax.vmap(one)(q, raw, u)


# Planar with several loops and ground pivots (the four-bar's case is the scraper's, smaller),
# planar parallel, spatial: one compilation each.
@pytest.mark.parametrize("name", ["carpet_scraper", "three_rrr", "rssr"])
def test_shaking_wrench_is_minus_the_rate_of_change_of_momentum(name):
    mech = getattr(mechanisms, name)()
    with jax.numpy_dtype_promotion("standard"):
        shake, force, moment, result = _momentum_balance(mech, *random_draws(mech))
    scale = float(jnp.max(jnp.abs(result.ground_force)))
    np.testing.assert_allclose(shake.force, force, rtol=0, atol=1e-9 * scale)
    np.testing.assert_allclose(shake.moment, moment, rtol=0, atol=1e-9 * scale)
    # With the weight: F_sh = M g - dP/dt.
    weight = jnp.sum(mech.mass) * mech.gravity[: 2 if mech.planar else 3]
    full = shaking.shaking(mech, result)
    np.testing.assert_allclose(full.force, weight + force, rtol=0, atol=1e-9 * scale)


def test_moment_about_a_point():
    """On the 3-RRR's prescribed motion (three ground pivots), at states whose checked one-state
    inverse dynamics `test_batched_inverse_dynamics_equals_the_checked_one_state_function` has
    compiled."""
    mech, motion, _ = rrr()
    point = jnp.array([0.3, -0.2, 0.0])
    for k in (0, 3):
        result = inverse_dynamics(mech, motion.q[k], motion.qd[k], motion.qdd[k])
        about = shaking.shaking(mech, result, about=point)
        origin = shaking.shaking(mech, result)
        f = origin.force
        assert float(jnp.max(jnp.abs(f))) > 1.0
        expected = origin.moment - (point[0] * f[1] - point[1] * f[0])
        np.testing.assert_allclose(about.moment, expected, rtol=1e-14)


def test_rms_and_peak():
    x = jnp.array([[3.0, 4.0], [0.0, 1.0], [6.0, 8.0]])  # magnitudes 5, 1, 10
    np.testing.assert_allclose(shaking.rms(x), np.sqrt((25 + 1 + 100) / 3), rtol=1e-15)
    np.testing.assert_allclose(shaking.peak(x), 10.0, rtol=1e-15)
    np.testing.assert_allclose(shaking.rms(jnp.array([-2.0, 2.0])), 2.0, rtol=1e-15)
    smooth = shaking.peak(x, p=8.0)
    np.testing.assert_allclose(smooth, ((5**8 + 1 + 10**8) / 3) ** (1 / 8), rtol=1e-14)
    assert 0.87 < float(smooth) / 10 < 1.0
    np.testing.assert_allclose(shaking.peak(x, p=400.0), 10.0, rtol=3e-3)
    grad = jax.grad(lambda x: shaking.peak(x, p=8.0))(x)
    for k in (0, 2):
        up, down = (shaking.peak(x.at[k, 0].add(h), p=8.0) for h in (1e-6, -1e-6))
        np.testing.assert_allclose(grad[k, 0], (up - down) / 2e-6, rtol=1e-6)
    assert float(grad[1, 1]) > 0  # every sample contributes to the smooth peak


def test_gradient_of_the_rms_shaking_force_matches_finite_differences():
    """What a balancing study differentiates: RMS shaking force over a cycle of the four-bar
    with respect to the link masses."""
    mech = mechanisms.four_bar()
    t = jnp.linspace(0.0, 1.0, 9)
    drive = functools.partial(_crank, float(mech.q0[0]))

    def cost(mass):
        m = eqx.tree_at(lambda m: m.mass, mech, mass)
        _, result = prescribed.prescribed_inverse_dynamics(m, drive, t)
        return shaking.rms(shaking.shaking(m, result).force)

    cost_and_grad = jax.jit(jax.value_and_grad(cost))  # one compilation, the differences too
    grad = cost_and_grad(mech.mass)[1]
    h = 1e-6
    for k in range(mech.num_bodies):
        e = jnp.zeros_like(mech.mass).at[k].set(h)
        fd = (cost_and_grad(mech.mass + e)[0] - cost_and_grad(mech.mass - e)[0]) / (2 * h)
        np.testing.assert_allclose(grad[k], fd, rtol=1e-7)


def _crank(start, t):
    return jnp.atleast_1d(start + 2 * jnp.pi * t)
