"""Integration: energy is conserved for a conservative tree, and the pendulum period matches the
exact elliptic-integral value."""

import jax
import jax.numpy as jnp
import numpy as np
import scipy.special

import loopdyn
from loopdyn import energy, simulate


def pendulum(length=0.7, mass=1.3):
    b = loopdyn.MechanismBuilder(planar=True, gravity=(0.0, -9.81, 0.0))
    b.add_body("bob", mass, com=(0.0, -length, 0.0), inertia=1e-9)
    b.add_joint("pivot", "revolute", "ground", "bob")
    return b.build()


def test_pendulum_period_matches_elliptic_integral():
    mech, amplitude = pendulum(), 1.2
    traj = jax.jit(simulate.simulate, static_argnums=(3, 4))(
        mech, jnp.array([amplitude]), jnp.array([0.0]), 4.0, 4001
    )
    exact = 4 * np.sqrt(0.7 / 9.81) * scipy.special.ellipk(np.sin(amplitude / 2) ** 2)
    q = np.asarray(traj.q[:, 0])
    crossing = np.where((q[:-1] > 0) & (q[1:] <= 0))[0]  # downward zero crossings
    t = np.asarray(traj.t)
    times = t[crossing] - q[crossing] * (t[crossing + 1] - t[crossing]) / (
        q[crossing + 1] - q[crossing]
    )
    np.testing.assert_allclose(times[1] - times[0], exact, rtol=1e-5)


def test_energy_is_conserved_with_springs():
    b = loopdyn.MechanismBuilder(planar=True)
    b.add_body("l1", 1.0, com=(0.2, 0, 0), inertia=0.02)
    b.add_body("l2", 2.0, com=(0.3, 0, 0), inertia=0.04)
    b.add_joint("j1", "revolute", "ground", "l1")
    b.add_joint("j2", "revolute", "l1", "l2", position=(0.4, 0.0, 0.0))
    b.add_spring(
        "s",
        "ground",
        "l2",
        point_a=(0.3, 0.3, 0),
        point_b=(0.5, 0, 0),
        stiffness=80.0,
        rest_length=0.1,
    )
    mech = b.build()
    traj = simulate.simulate(
        mech, jnp.array([0.5, -0.4]), jnp.array([2.0, 0.0]), 3.0, 31, rtol=1e-10, atol=1e-12
    )
    e = jax.vmap(energy.total_energy, in_axes=(None, 0, 0))(mech, traj.q, traj.qd)
    assert np.ptp(np.asarray(e)) < 1e-7 * np.abs(np.asarray(e)).max()
