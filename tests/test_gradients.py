"""Gradients with respect to the physical parameters (masses, inertias, centres of mass and a link
length) against central finite differences in float64: through inverse dynamics over a prescribed
motion, through `simulate` (trajectory losses of the four-bar, the 3-RRR and the carpet scraper),
and the Jacobians of `forward_dynamics` with respect to ``q``, ``qd`` and ``tau`` on the 3-RRR. A
length change re-assembles the loops inside the loss (implicit function theorem of
`kinematics.try_assemble`).

Each loss is compiled once as ``jit(value_and_grad)`` and the finite differences reuse that
program (its values at the perturbed points), so the suite pays one compilation per loss."""

import warnings

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

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
GRID = jnp.linspace(0.0, 0.5, 26)


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


class Case(eqx.Module):
    """A trajectory-loss problem: the mechanism, its free parameters (static), the coordinates
    held when the start re-assembles, the seed velocity of those and the joint torques."""

    mech: loopdyn.Mechanism
    sel: parameters.Free = eqx.field(static=True)
    fixed: tuple[int, ...] = eqx.field(static=True)
    qd_seed: jax.Array
    tau: jax.Array


def _case(mech, fixed, speeds, torques, **free):
    qd = jnp.zeros_like(mech.q0).at[np.array(fixed)].set(jnp.asarray(speeds))
    tau = jnp.zeros_like(mech.q0).at[np.array(fixed)].set(jnp.asarray(torques))
    return Case(mech, parameters.free(mech, **free), fixed, qd, tau)


CASES = {
    "four_bar": _case(
        FOUR_BAR,
        (0,),
        [3.0],
        [0.5],
        masses=["crank", "coupler", "rocker"],
        inertias=["coupler"],
        com=["rocker"],
        placements=["C"],
    ),
    "three_rrr": _case(
        mechanisms.three_rrr(),
        (0, 5, 6),
        [1.0, -0.5, 0.8],
        [4.0, -3.0, 2.0],
        masses=["proximal1", "platform3", "proximal7"],
        inertias=["distal2", "platform3"],
        com=["distal4"],
        placements=["theta2"],  # proximal1's far joint on proximal1: its length
    ),
    "carpet_scraper": _case(
        mechanisms.carpet_scraper(),
        (0,),
        [4.712],
        [2.0],
        masses=["crank1", "coupler3", "arm6"],
        inertias=["rocker2", "arm6"],
        com=["link5"],
        placements=["theta3"],  # joint 3 on the rocker: the rocker's length
    ),
}
HORIZON = 0.05


def trajectory_loss(theta, case, adjoint=None):
    """Mean squared coordinates and velocities at six times of a short driven simulation; the
    start is assembled for the current lengths at the held coordinates of ``case.mech.q0``."""
    base = case.mech
    mech = parameters.from_vector(theta, base, case.sel)
    q0 = kinematics.try_assemble(mech, base.q0, fixed=case.fixed).q
    qd0 = kinematics.project_velocity(mech, q0, case.qd_seed, fixed=case.fixed)
    sim = loopdyn.simulate(
        mech,
        q0,
        qd0,
        HORIZON,
        tau=case.tau,
        saveat=jnp.linspace(0.0, HORIZON, 6),
        rtol=1e-12,
        atol=1e-12,
        adjoint=adjoint,
    )
    return jnp.mean(sim.q**2) + 0.1 * jnp.mean(sim.qd**2)


rms_torque_and_grad = eqx.filter_jit(jax.value_and_grad(rms_torque))
trajectory_loss_and_grad = eqx.filter_jit(jax.value_and_grad(trajectory_loss))


def _central_differences(value_and_grad, theta, *args, relative=1e-5):
    steps = relative * np.maximum(1.0, np.abs(np.asarray(theta)))
    out = np.zeros(theta.shape[0])
    for k, h in enumerate(steps):
        plus = value_and_grad(theta.at[k].add(h), *args)[0]
        minus = value_and_grad(theta.at[k].add(-h), *args)[0]
        out[k] = (float(plus) - float(minus)) / (2.0 * h)
    return out


def gradient_errors(value_and_grad, theta, *args):
    """``|grad - central differences| / max |central differences|`` per entry, and the
    differences."""
    _, grad = value_and_grad(theta, *args)
    fd = _central_differences(value_and_grad, theta, *args)
    return np.abs(np.asarray(grad) - fd) / np.max(np.abs(fd)), fd, grad


def _check(value_and_grad, theta, labels, rtol, *args):
    error, fd, grad = gradient_errors(value_and_grad, theta, *args)
    assert np.all(np.abs(fd) > 1e-9 * np.max(np.abs(fd)))  # every parameter matters to the loss
    assert np.max(error) < rtol, dict(zip(labels, error))
    return grad


def test_grad_rms_torque_matches_central_differences():
    grad = _check(rms_torque_and_grad, parameters.to_vector(FOUR_BAR, FREE), FREE.labels, 1e-7)
    # Heavier links need more torque: every log-mass gradient is positive here.
    assert np.all(np.asarray(grad[:3]) > 0)


@pytest.mark.parametrize(
    "name",
    ["four_bar", "three_rrr", "carpet_scraper"],
)
def test_grad_of_trajectory_loss_matches_central_differences(name):
    # Masses, inertias, a centre of mass and a link length: the start re-assembles, the loops
    # close along the motion.
    case = CASES[name]
    theta = parameters.to_vector(case.mech, case.sel)
    _check(trajectory_loss_and_grad, theta, case.sel.labels, 1e-5, case)


def test_backsolve_adjoint_agrees_with_checkpointing_on_a_short_horizon():
    """BacksolveAdjoint re-integrates the Baumgarte-stabilised state backwards (simulation module
    docstring); over ``alpha t1 = 0.5`` it reproduces the discrete gradient to the tolerances."""
    case = CASES["four_bar"]
    theta = parameters.to_vector(case.mech, case.sel)
    backsolve = eqx.filter_jit(jax.grad(trajectory_loss))(theta, case, diffrax.BacksolveAdjoint())
    exact = trajectory_loss_and_grad(theta, case)[1]
    np.testing.assert_allclose(backsolve, exact, rtol=0, atol=1e-8 * float(jnp.max(jnp.abs(exact))))
    with pytest.raises(ValueError, match="cannot differentiate stabilization='embedding'"):
        loopdyn.simulate(
            case.mech,
            case.mech.q0,
            jnp.zeros(3),
            0.1,
            stabilization="embedding",
            adjoint=diffrax.BacksolveAdjoint(),
        )


RRR = CASES["three_rrr"].mech


def _accelerations(q, qd, tau):
    """``qdd`` by `forward.solve` called as `forward_dynamics` calls it (SSLM, no ``f_ext``)."""
    return loopdyn.forward.solve(RRR, q, qd, tau, None, "sslm", independent=()).qdd


def _entry_accelerations(q, qd, tau):
    """``qdd`` from the checked entry point, eagerly: the central differences below and the final
    check run its one compiled program."""
    return loopdyn.forward_dynamics(RRR, q, qd, tau)[0]


def test_forward_dynamics_jacobians_match_central_differences():
    """``d qdd / d(q, qd, tau)`` of the 3-RRR's forward dynamics (SSLM, no stabilisation) as the
    function that `forward_dynamics` evaluates at any ``q``: ``J(q)``, ``J'(q, qd) qd`` and the
    tree terms at that ``q``, on or off the constraint manifold. (Along the manifold's tangent
    directions it is the derivative of the constrained motion.) The state: the seed
    configuration with velocities in the null space of ``J`` and base torques."""
    q = RRR.q0
    qd = kinematics.project_velocity(RRR, q, jnp.array([1.0, 0, 0, 0, 0, -0.5, 0.8]), (0, 5, 6))
    tau = jnp.array([4.0, 0, 0, 0, 0, -3.0, 2.0])
    # The Jacobian program also returns qdd (as aux): the value the entry point is checked
    # against at the end comes from a program compiled apart from the entry point's.
    jacobians, qdd = jax.jit(
        jax.jacfwd(lambda *x: (_accelerations(*x),) * 2, argnums=(0, 1, 2), has_aux=True)
    )(q, qd, tau)
    args = [q, qd, tau]
    for k, (jac, name) in enumerate(zip(jacobians, ("q", "qd", "tau"))):
        fd = np.zeros((7, 7))
        for j in range(7):
            h = 1e-6 * max(1.0, abs(float(args[k][j])))
            plus, minus = list(args), list(args)
            plus[k], minus[k] = args[k].at[j].add(h), args[k].at[j].add(-h)
            fd[:, j] = (_entry_accelerations(*plus) - _entry_accelerations(*minus)) / (2 * h)
        error = np.max(np.abs(np.asarray(jac) - fd)) / np.max(np.abs(fd))
        assert error < 1e-6, (name, error)
    # The same on the library's checked entry point (a ValueError-free state, consistent qd).
    np.testing.assert_allclose(_entry_accelerations(q, qd, tau), qdd, atol=1e-10)
