"""`loopdyn.ROS34PW2`: third order whatever W (the W-method property), and in `simulate` on a
four-bar with stiff joint dampers, friction and a spring: the trajectory and its gradient
against Tsit5's at tight tolerances, in a fraction of Tsit5's steps."""

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import loopdyn
from loopdyn import kinematics, mechanisms
from loopdyn.rosenbrock import LinearlyImplicitTerm

A = jnp.asarray(np.random.default_rng(0).standard_normal((4, 4))) - 2.0 * jnp.eye(4)
Y0 = jnp.array([1.0, 0.5, -0.3, 0.2])


def field(t, y, args):
    return A @ y + 0.3 * jnp.sin(3.0 * t) * y**2


@pytest.fixture(scope="module")
def exact():
    return diffrax.diffeqsolve(
        diffrax.ODETerm(field), diffrax.Tsit5(), 0.0, 1.0, 1e-3, Y0,
        stepsize_controller=diffrax.PIDController(rtol=1e-13, atol=1e-13), max_steps=100_000,
    ).ys[-1]  # fmt: skip


@pytest.mark.parametrize("which", ["jacobian", "zero", "random"])
def test_third_order_for_any_w(which, exact):
    """y' = A y + 0.3 sin(3t) y^2 over [0, 1] in 40 and 80 fixed steps: the error falls eightfold
    with W = A, W = 0 (the method is then an explicit Runge-Kutta one) and a random W."""
    random = jnp.asarray(np.random.default_rng(1).standard_normal((4, 4)))
    w = {"jacobian": A, "zero": jnp.zeros((4, 4)), "random": random}[which]
    stage = lambda t, y, y0, args, hg, s: jnp.linalg.solve(
        jnp.eye(4) - hg * w, field(t, y, args) + w @ s
    )
    errors = [
        np.max(np.abs(diffrax.diffeqsolve(
            LinearlyImplicitTerm(field, stage), loopdyn.ROS34PW2(), 0.0, 1.0, 1.0 / n, Y0
        ).ys[-1] - exact))
        for n in (40, 80)
    ]  # fmt: skip
    assert 7.6 < errors[0] / errors[1] < 8.8  # measured 7.9-8.3


# The four-bar's crank and rocker damped (20 and 5 N m s on inertias of a few 1e-3 kg m^2), the
# rocker sprung (300 N m/rad) and the coupler's joint given dry friction (0.2 N m smoothed over
# 0.01 rad/s: a 20 N m s damper near rest): Tsit5's steps are bound by stability, not accuracy.
STIFF = eqx.tree_at(
    lambda m: (m.damping, m.stiffness, m.frictionloss, m.friction_velocity),
    mechanisms.four_bar(),
    (
        jnp.array([20.0, 0.0, 5.0]),
        jnp.array([0.0, 0.0, 300.0]),
        jnp.array([0.0, 0.2, 0.0]),
        jnp.full(3, 0.01),
    ),
)
TAU = jnp.array([0.3, 0.0, 0.0])
QD0 = kinematics.project_velocity(STIFF, STIFF.q0, jnp.array([3.0, 0.0, 0.0]), fixed=(0,))


def run(mech, solver, rtol, **options):
    return loopdyn.simulate(
        mech, mech.q0, QD0, 2.0, tau=TAU, solver=solver, rtol=rtol, atol=rtol, max_steps=100_000,
        **options,
    )  # fmt: skip


@pytest.fixture(scope="module")
def reference():
    return run(STIFF, None, 1e-12)


def test_follows_the_tight_trajectory_in_few_steps(reference):
    """rtol 1e-6: 1,463 steps against Tsit5's 17,589 (13,818 with the friction's slope left out
    of W), q within 1.3e-6 of Tsit5 at 1e-12; rtol 1e-8: within 8.5e-8; the loops stay closed
    to the Baumgarte-stabilised solve's accuracy."""
    loose, tight = run(STIFF, loopdyn.ROS34PW2(), 1e-6), run(STIFF, loopdyn.ROS34PW2(), 1e-8)
    explicit = run(STIFF, None, 1e-6)
    assert loose.succeeded and tight.succeeded
    assert int(loose.stats.steps) < int(explicit.stats.steps) / 8
    np.testing.assert_allclose(loose.ts, reference.ts, rtol=0, atol=1e-15)  # steps land on them
    assert np.max(np.abs(loose.q - reference.q)) < 1e-5
    assert np.max(np.abs(tight.q - reference.q)) < 8e-7
    assert np.max(tight.loop_residual[:, 0]) < 6e-8


def test_gradient_matches_differences_of_the_tight_solution():
    """d q(0.2 s) / d damping of the crank (while the motion still feels it) in forward mode
    through the ROS34PW2 solve (rtol 1e-9) against central differences of Tsit5's solutions at rtol 1e-12
    (step 1e-4 N m s)."""

    def final(damping, solver, rtol, **options):
        mech = eqx.tree_at(lambda m: m.damping, STIFF, STIFF.damping.at[0].set(damping))
        return run(mech, solver, rtol, **options).q[20]

    forward = diffrax.ForwardMode()  # one parameter: forward mode is the cheap direction
    gradient = jax.jacfwd(final)(20.0, loopdyn.ROS34PW2(), 1e-9, adjoint=forward)
    step = 1e-4
    differences = (final(20.0 + step, None, 1e-12) - final(20.0 - step, None, 1e-12)) / (2 * step)
    np.testing.assert_allclose(
        gradient, differences, rtol=0, atol=1e-6 * np.max(np.abs(differences))
    )


def test_backsolve_adjoint_is_refused():
    with pytest.raises(ValueError, match="BacksolveAdjoint cannot run solver=ROS34PW2"):
        loopdyn.simulate(
            STIFF, STIFF.q0, QD0, 1.0, solver=loopdyn.ROS34PW2(), adjoint=diffrax.BacksolveAdjoint()
        )
