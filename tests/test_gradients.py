"""Gradients with respect to the physical parameters (masses, inertia, centre of mass and a link
length) through inverse dynamics over a prescribed motion and through `simulate`, against central
finite differences in float64. A length change re-assembles the loop inside the loss (implicit
function theorem of `kinematics.assemble`).

Each loss is compiled once as ``jit(value_and_grad)`` and the finite differences reuse that
program (its values at the perturbed points), so the suite pays one compilation per loss."""

import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

import loopdyn
from loopdyn import kinematics, mechanisms, parameters, prescribed

FOUR_BAR = mechanisms.four_bar(0.3)
FREE = parameters.free(
    FOUR_BAR,
    masses=["crank", "coupler", "rocker"],
    inertias=["coupler"],
    com=["rocker"],
    placements=["C"],  # the coupler's far joint on the coupler: the coupler length
)
THETA = parameters.to_vector(FOUR_BAR, FREE)
GRID = jnp.linspace(0.0, 0.5, 26)
HORIZON = 0.05


def drive(t):
    """Crank angle with a varying speed (so the crank's inertia matters)."""
    return jnp.array([0.3 + 4.0 * t + 0.5 * jnp.sin(3.0 * t)])


def rms_torque(theta):
    """RMS driving torque over the prescribed motion (the loop re-assembled at every time)."""
    mech = parameters.from_vector(theta, FOUR_BAR, FREE)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the four-bar has no determinate order: one 3x3 solve
        _, result = prescribed.prescribed_inverse_dynamics(mech, drive, GRID)
    return jnp.sqrt(jnp.mean(result.actuator_forces**2))


def final_state(theta):
    """A final-state loss of a short simulation driven by a constant crank torque; the start is
    assembled at the crank angle of ``FOUR_BAR.q0`` for the current lengths."""
    mech = parameters.from_vector(theta, FOUR_BAR, FREE)
    q0 = kinematics.try_assemble(mech, FOUR_BAR.q0, fixed=(0,)).q
    qd0 = kinematics.project_velocity(mech, q0, jnp.array([3.0, 0.0, 0.0]), fixed=(0,))
    sim = loopdyn.simulate(
        mech,
        q0,
        qd0,
        HORIZON,
        tau=jnp.array([0.5, 0.0, 0.0]),
        saveat=jnp.array([HORIZON]),
        rtol=1e-12,
        atol=1e-12,
    )
    return jnp.sum(sim.q[-1] ** 2) + 0.1 * jnp.sum(sim.qd[-1] ** 2)


rms_torque_and_grad = eqx.filter_jit(jax.value_and_grad(rms_torque))
final_state_and_grad = eqx.filter_jit(jax.value_and_grad(final_state))


def _central_differences(value_and_grad, theta, relative=1e-5):
    steps = relative * np.maximum(1.0, np.abs(np.asarray(theta)))
    out = np.zeros(theta.shape[0])
    for k, h in enumerate(steps):
        plus = value_and_grad(theta.at[k].add(h))[0]
        minus = value_and_grad(theta.at[k].add(-h))[0]
        out[k] = (float(plus) - float(minus)) / (2.0 * h)
    return out


def _check(value_and_grad, rtol):
    _, grad = value_and_grad(THETA)
    fd = _central_differences(value_and_grad, THETA)
    error = np.abs(np.asarray(grad) - fd) / np.max(np.abs(fd))
    assert np.all(np.abs(fd) > 1e-3)  # every parameter matters to the loss
    assert np.max(error) < rtol, dict(zip(FREE.labels, error))
    return grad


def test_grad_rms_torque_matches_central_differences():
    grad = _check(rms_torque_and_grad, 1e-7)
    # Heavier links need more torque: every log-mass gradient is positive here.
    assert np.all(np.asarray(grad[:3]) > 0)


def test_grad_through_simulate_matches_central_differences():
    # Includes the coupler length: the start re-assembles, the loop closes along the motion.
    _check(final_state_and_grad, 1e-6)
