"""Identification: the regressor is exact and linear, the identifiability report names what one
driving torque cannot see, noisy fits cover the truth at the stated confidence, and a trajectory
fit through `simulate` (Levenberg-Marquardt) recovers every mass of the 3-RRR."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import loopdyn
from loopdyn import fit, mechanisms, parameters, prescribed

FOUR_BAR = mechanisms.four_bar(0.3)
GRID = jnp.linspace(0.0, 1.6, 81)


def drive(t):
    return jnp.array([0.3 + 4.0 * t + 0.5 * jnp.sin(3.0 * t)])


with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # the four-bar has no determinate order: one 3x3 solve
    MOTION, TRUE = prescribed.prescribed_inverse_dynamics(FOUR_BAR, drive, GRID)
PI = fit.inertial_parameters(FOUR_BAR)
Y, OFFSET = fit.regressor(FOUR_BAR, MOTION.q, MOTION.qd, MOTION.qdd)


def test_parameters_round_trip_and_labels():
    assert fit.parameter_labels(FOUR_BAR)[:4] == ("crank.m", "crank.mx", "crank.my", "crank.Izz")
    # Uniform bar of length L from its frame: m L/2 and m L^2/3 about the proximal end.
    np.testing.assert_allclose(PI[:4], [1.5, 1.5 * 0.019, 0.0, 1.5 * 0.038**2 / 3], rtol=1e-12)
    back = fit.with_inertial_parameters(FOUR_BAR, PI)
    np.testing.assert_allclose(back.inertia, FOUR_BAR.inertia, atol=1e-17)
    np.testing.assert_allclose(back.com, FOUR_BAR.com, atol=1e-17)
    rssr = mechanisms.rssr()
    pi = fit.inertial_parameters(rssr)
    assert pi.shape == (10 * 3,)
    back = fit.with_inertial_parameters(rssr, pi)
    np.testing.assert_allclose(back.inertia, rssr.inertia, atol=1e-15)


def test_regressor_reproduces_inverse_dynamics_and_is_linear():
    assert Y.shape == (81, 1, 12)
    np.testing.assert_allclose(OFFSET, 0.0, atol=1e-12)  # no springs
    predicted = jnp.einsum("tap,p->ta", Y, PI)
    scale = float(jnp.max(jnp.abs(TRUE.actuator_forces)))
    np.testing.assert_allclose(predicted, TRUE.actuator_forces, atol=1e-12 * scale)
    # Linearity: inverse dynamics of another parameter set is Y (at the same states) times it.
    other = PI * jnp.linspace(0.5, 2.0, PI.shape[0])
    mech = fit.with_inertial_parameters(FOUR_BAR, other)
    forces = jax.vmap(lambda q, qd, qdd: loopdyn.inverse.solve(mech, q, qd, qdd)[0])(
        MOTION.q[::20], MOTION.qd[::20], MOTION.qdd[::20]
    )
    np.testing.assert_allclose(jnp.einsum("tap,p->ta", Y[::20], other), forces, atol=1e-12 * scale)


def test_identifiability_report_names_the_pivoted_masses():
    ident = fit.identify(FOUR_BAR, MOTION.q, MOTION.qd, MOTION.qdd, TRUE.actuator_forces)
    # Crank and rocker turn about their frame origins: their masses load only the pivots.
    assert "crank.m" in ident.unidentifiable and "rocker.m" in ident.unidentifiable
    assert ident.rank == 8 and ident.null_space.shape == (12, 4)
    assert np.max(np.abs(Y.reshape(81, 12) @ ident.null_space)) < 1e-12
    identifiable = [label for label, ok in zip(ident.labels, ident.identifiable) if ok]
    assert identifiable == ["crank.my", "coupler.my", "rocker.my"]
    # Noise-free data from the true parameters as prior: the estimate is the truth.
    np.testing.assert_allclose(ident.estimate, PI, atol=1e-12)
    assert ident.noise_std < 1e-12
    # From a prior 30 % off, the identifiable parameters and the torque are recovered exactly.
    wrong = fit.with_inertial_parameters(FOUR_BAR, PI * 1.3)
    again = fit.identify(wrong, MOTION.q, MOTION.qd, MOTION.qdd, TRUE.actuator_forces)
    np.testing.assert_allclose(again.estimate[again.identifiable], 0.0, atol=1e-10)
    np.testing.assert_allclose(
        Y.reshape(81, 12) @ again.estimate, TRUE.actuator_forces[:, 0], atol=1e-10
    )


def test_noisy_fit_covers_the_truth_at_the_stated_confidence():
    rng = np.random.default_rng(7)
    sigma = 0.01 * float(jnp.std(TRUE.actuator_forces))
    first = None
    inside, trials = [], 300
    for k in range(trials):
        noisy = np.asarray(TRUE.actuator_forces) + sigma * rng.standard_normal((81, 1))
        if k == 0:
            first = fit.identify(FOUR_BAR, MOTION.q, MOTION.qd, MOTION.qdd, noisy)
            ok = first.identifiable
        ident = first if k == 0 else _refit(first, noisy)
        low, high = ident.interval[ok, 0], ident.interval[ok, 1]
        inside.append((low <= np.asarray(PI)[ok]) & (np.asarray(PI)[ok] <= high))
    assert abs(first.noise_std - sigma) < 0.25 * sigma
    coverage = np.mean(inside, axis=0)
    assert np.all(np.abs(coverage - 0.95) < 0.04), coverage


_Y2 = np.asarray(Y).reshape(81, 12)


def _refit(first, noisy):
    """The same least squares as `identify` for new data at the same states (numpy only, so the
    coverage study stays fast): the estimate moves by the pseudo-inverse of the residual."""
    rhs = noisy[:, 0] - _Y2 @ first.estimate
    pinv = np.linalg.pinv(_Y2, rcond=1e-9)
    estimate = first.estimate + pinv @ rhs
    residual = noisy[:, 0] - _Y2 @ estimate
    noise = np.sqrt(residual @ residual / first.dof)
    error = first.std_error * noise / first.noise_std
    with np.errstate(invalid="ignore"):  # unidentifiable entries: inf / inf
        t = (first.interval[:, 1] - first.estimate) / first.std_error
    return first._replace(
        estimate=estimate,
        interval=np.stack([estimate - t * error, estimate + t * error], axis=1),
    )


def test_identify_checks_shapes():
    with pytest.raises(ValueError, match=r"actuator_forces must have shape \(81, 1\)"):
        fit.identify(FOUR_BAR, MOTION.q, MOTION.qd, MOTION.qdd, TRUE.actuator_forces[:, 0])
    with pytest.raises(ValueError, match="qd must have shape"):
        fit.regressor(FOUR_BAR, MOTION.q, MOTION.qd[:, :2], MOTION.qdd)
    with pytest.raises(ValueError, match="unknown body 'x'"):
        fit.parameter_labels(FOUR_BAR, ["x"])


RRR = mechanisms.three_rrr()
RRR_FREE = parameters.free(RRR, masses=list(RRR.body_names))
RRR_TS = jnp.linspace(0.0, 0.4, 21)
RRR_OPTIONS = {"tau": (4.0, 0.0, 0.0, 0.0, 0.0, -3.0, 2.0), "rtol": 1e-10, "atol": 1e-10}


def test_trajectory_fit_recovers_every_3rrr_mass():
    """From rest under gravity and base torques, 0.4 s sampled every 0.02 s; start: the seven
    masses alternately 30 % heavy and 30 % light. Noise-free data give every mass to 1e-6; with
    Gaussian noise of 1 % of each coordinate's range, every mass lies in its interval."""
    zero = jnp.zeros(7)
    record = loopdyn.simulate(RRR, RRR.q0, zero, 0.4, saveat=RRR_TS, **RRR_OPTIONS).q
    off = jnp.log(jnp.where(jnp.arange(7) % 2 == 0, 1.3, 0.7))
    start = parameters.from_vector(parameters.to_vector(RRR, RRR_FREE) + off, RRR, RRR_FREE)
    truth = np.asarray(RRR.mass)
    steps = []
    clean = fit.fit_trajectory(
        start,
        RRR_FREE,
        RRR_TS,
        record,
        RRR.q0,
        zero,
        progress=lambda *a: steps.append(a),
        **RRR_OPTIONS,
    )
    assert clean.converged and clean.statistics.rank == 7  # all seven identifiable
    assert clean.statistics.singular_values[-1] > 1e-2 * clean.statistics.singular_values[0]
    np.testing.assert_allclose(clean.values, truth, rtol=1e-6)
    np.testing.assert_allclose(clean.mech.mass, truth, rtol=1e-6)
    assert clean.value_labels[0] == "proximal1.mass" and len(steps) == len(clean.cost) - 1
    assert np.all(np.diff(clean.cost) <= 0) and clean.cost[-1] < 1e-16 * clean.cost[0]

    noise = 0.01 * np.asarray(jnp.max(record, axis=0) - jnp.min(record, axis=0))
    noisy = np.asarray(record) + noise * np.random.default_rng(0).standard_normal(record.shape)
    noisy[0] = record[0]  # the start is known
    result = fit.fit_trajectory(
        start,
        RRR_FREE,
        RRR_TS,
        noisy,
        RRR.q0,
        zero,
        weight=noise,
        confidence=0.99,
        **RRR_OPTIONS,
    )
    assert result.converged
    low, high = result.interval.T
    assert np.all((low <= truth) & (truth <= high)), (low, result.values, high)
    assert np.all(low > 0)  # intervals of log masses: positive
    assert 0.7 < result.statistics.noise_std < 1.3  # the weight was the true noise level
    # Informative intervals: from 24 % (distal2) to 140 % (proximal6, the least excited) of the
    # mass at 99 %; experiments/rrr_mass_fit.py checks their coverage over repeated draws.
    width = (high - low) / truth
    assert np.all((width > 0.05) & (width < 2.0)), width


def test_fit_trajectory_checks_its_arguments():
    with pytest.raises(ValueError, match=r"q_measured must have shape \(21, 7\)"):
        fit.fit_trajectory(RRR, RRR_FREE, RRR_TS, jnp.zeros((20, 7)), RRR.q0, jnp.zeros(7))
    with pytest.raises(ValueError, match="weight must be positive"):
        fit.fit_trajectory(
            RRR, RRR_FREE, RRR_TS, jnp.zeros((21, 7)), RRR.q0, jnp.zeros(7), weight=0.0
        )
