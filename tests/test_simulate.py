"""`loopdyn.simulate`: exact solutions (pendulum period), conservation and work-energy balance,
the seeds' 15 s free runs with each stabilisation, refusals and result codes."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.integrate
import scipy.special

import loopdyn
from loopdyn import energy, forward, kinematics, mechanisms, simulation


def pendulum(length=0.7, mass=1.3):
    b = loopdyn.MechanismBuilder(planar=True, gravity=(0.0, -9.81, 0.0))
    b.add_body("bob", mass, com=(0.0, -length, 0.0), inertia=1e-9)
    b.add_joint("pivot", "revolute", "ground", "bob")
    return b.build()


PENDULUM = pendulum()


@pytest.fixture(scope="module")
def swing():
    """4 s of the pendulum from 1.2 rad, saved every millisecond: the period test's run, which
    the save and energy-helper tests reuse (one compilation for the three)."""
    ts = jnp.linspace(0.0, 4.0, 4001)
    return loopdyn.simulate(PENDULUM, jnp.array([1.2]), jnp.zeros(1), 4.0, saveat=ts)


def test_pendulum_period_matches_elliptic_integral(swing):
    amplitude, sim = 1.2, swing
    exact = 4 * np.sqrt(0.7 / 9.81) * scipy.special.ellipk(np.sin(amplitude / 2) ** 2)
    q, t = np.asarray(sim.q[:, 0]), np.asarray(sim.ts)
    crossing = np.where((q[:-1] > 0) & (q[1:] <= 0))[0]  # downward zero crossings
    times = t[crossing] - q[crossing] * (t[crossing + 1] - t[crossing]) / (
        q[crossing + 1] - q[crossing]
    )
    np.testing.assert_allclose(times[1] - times[0], exact, rtol=1e-6)
    assert sim.succeeded and sim.ts[-1] == 4.0 and sim.lam is None  # multipliers not asked


def test_energy_is_conserved_with_springs():
    b = loopdyn.MechanismBuilder(planar=True)
    b.add_body("l1", 1.0, com=(0.2, 0, 0), inertia=0.02)
    b.add_body("l2", 2.0, com=(0.3, 0, 0), inertia=0.04)
    b.add_joint("j1", "revolute", "ground", "l1")
    b.add_joint("j2", "revolute", "l1", "l2", position=(0.4, 0.0, 0.0))
    b.add_spring(
        "s", "ground", "l2", point_a=(0.3, 0.3, 0), point_b=(0.5, 0, 0), stiffness=80.0,
        rest_length=0.1,
    )  # fmt: skip
    sim = loopdyn.simulate(
        b.build(), jnp.array([0.5, -0.4]), jnp.array([2.0, 0.0]), 3.0, rtol=1e-10, atol=1e-12
    )
    e = np.asarray(sim.energy)
    assert np.ptp(e) < 1e-8 * np.abs(e).max()


FOUR_BAR = mechanisms.four_bar()
TAU = jnp.array([0.3, 0.0, 0.0])  # constant torque on the crank


@pytest.fixture(scope="module", params=simulation.STABILIZATIONS)
def four_bar_run(request):
    qd0 = kinematics.project_velocity(FOUR_BAR, FOUR_BAR.q0, jnp.array([3.0, 0, 0]), fixed=(0,))
    # independent=(0,): the crank, which assemble=True holds, so the refusal test's assembled
    # run below shares the baumgarte program (SSLM does not read it otherwise).
    return request.param, loopdyn.simulate(
        FOUR_BAR, FOUR_BAR.q0, qd0, 2.0, tau=TAU, stabilization=request.param, independent=(0,)
    )


def test_work_of_a_constant_torque_equals_the_energy_gained(four_bar_run):
    """d/dt E = qd . tau, so E(t) - tau . (q(t) - q(0)) is constant: energy balance of the driven
    closed loop, independent of the multipliers (which do no work)."""
    _, sim = four_bar_run
    balance = np.asarray(sim.energy - (sim.q - sim.q[0]) @ TAU)
    assert sim.succeeded
    assert np.ptp(balance) < 2e-7 * np.abs(sim.energy).max()
    assert np.ptp(np.asarray(sim.q[:, 0])) > 0.4  # the crank swings


def test_stabilisation_keeps_the_loop_closed(four_bar_run):
    stabilization, sim = four_bar_run
    bound = {"none": 1e-6, "baumgarte": 1e-9, "embedding": 1e-14}[stabilization]
    assert np.max(np.asarray(sim.loop_residual[:, 0])) < bound


def test_multipliers_at_the_saves_are_the_stabilised_solves():
    """``multipliers=True``: ``lam`` at each saved state is `forward.solve`'s there with the same
    torque and Baumgarte gains (without it, ``lam`` is None and the program holds one copy of the
    dynamics)."""
    qd0 = kinematics.project_velocity(FOUR_BAR, FOUR_BAR.q0, jnp.array([3.0, 0, 0]), fixed=(0,))
    sim = loopdyn.simulate(
        FOUR_BAR, FOUR_BAR.q0, qd0, 0.5, tau=TAU, baumgarte=(5.0, 20.0), multipliers=True,
        saveat=jnp.linspace(0.0, 0.5, 6),
    )  # fmt: skip
    solve = lambda q, qd: forward.solve(FOUR_BAR, q, qd, TAU, baumgarte=(5.0, 20.0)).lam
    expected = jax.vmap(solve)(sim.q, sim.qd)
    assert sim.lam.shape == (6, 2) and np.ptp(np.asarray(expected[:, 0])) > 1.0
    np.testing.assert_allclose(sim.lam, expected, rtol=1e-14, atol=1e-13)  # 1.4e-14 of 62


# Each mechanism with one stabilisation, each stabilisation on one mechanism (every pairing is a
# compilation of its own; the four-bar runs above cover every stabilisation).
@pytest.mark.parametrize(
    ("name", "stabilization"), [("carpet_scraper", "embedding"), ("three_rrr", "baumgarte")]
)
def test_seed_free_motion_15s(name, stabilization):
    """Seed 000 Table 2's initial states, unactuated and undamped, 15 s at rtol = atol = 1e-8."""
    mech = getattr(mechanisms, name)()
    sim = loopdyn.simulate(
        mech, mech.q0, jnp.zeros_like(mech.q0), 15.0, stabilization=stabilization
    )
    e = np.asarray(sim.energy)
    assert sim.succeeded, sim.message
    assert np.max(np.abs(e - e[0])) < 1e-6 * abs(e[0])
    residual = np.max(np.asarray(sim.loop_residual[:, 0]))
    assert residual < (1e-8 if stabilization == "baumgarte" else 1e-10)


def test_refuses_an_open_loop_and_assembles_on_request():
    q0 = FOUR_BAR.q0.at[1].add(0.05)
    cut = FOUR_BAR.topology.loops[0].name
    with pytest.raises(ValueError, match=f"q0 does not close the loop of cut joint '{cut}'"):
        loopdyn.simulate(FOUR_BAR, q0, jnp.zeros(3), 1.0, tau=TAU)
    with pytest.raises(ValueError, match="qd0 violates J qd0 = 0"):
        loopdyn.simulate(FOUR_BAR, FOUR_BAR.q0, jnp.array([1.0, 0, 0]), 1.0, tau=TAU)
    # 2 s with four_bar_run's options: the baumgarte program compiled for it serves this run
    sim = loopdyn.simulate(FOUR_BAR, q0, jnp.zeros(3), 2.0, tau=TAU, assemble=True)
    assert sim.succeeded
    assert float(jnp.linalg.norm(kinematics.loop_residual(FOUR_BAR, sim.q[0]))) < 1e-10


@pytest.mark.parametrize(
    "arguments, message",
    [
        ((jnp.zeros(2), jnp.zeros(1)), "q0"),
        ((jnp.zeros(1), jnp.zeros((1, 1))), "qd0"),
        ((jnp.array([jnp.nan]), jnp.zeros(1)), "q0"),
    ],
)
def test_arguments_are_named(arguments, message):
    with pytest.raises(ValueError, match=message):
        loopdyn.simulate(PENDULUM, *arguments, 1.0)


def test_options_are_checked():
    for options, message in [
        ({"stabilization": "projection"}, "stabilization"),
        ({"method": "lagrange"}, "method"),
    ]:
        with pytest.raises(ValueError, match=message):
            loopdyn.simulate(PENDULUM, jnp.zeros(1), jnp.zeros(1), 1.0, **options)
    with pytest.raises(ValueError, match="t1"):
        loopdyn.simulate(PENDULUM, jnp.zeros(1), jnp.zeros(1), 0.0)


def test_failure_is_a_result_code_and_throw_raises_it():
    sim = loopdyn.simulate(PENDULUM, jnp.array([1.0]), jnp.zeros(1), 1.0, max_steps=4)
    assert int(sim.stats.result) == simulation.MAX_STEPS and not sim.succeeded
    assert "max_steps" in sim.message
    assert 0.0 <= float(sim.stats.t_reached) < 1.0
    assert np.all(np.isinf(np.asarray(sim.q[-1])))  # rows after the failure are inf, not NaN
    with pytest.raises(RuntimeError, match="stopped at t = .*max_steps"):
        loopdyn.simulate(PENDULUM, jnp.array([1.0]), jnp.zeros(1), 1.0, max_steps=4, throw=True)


def test_torque_as_constant_samples_and_function_agree():
    q0, qd0, t1 = jnp.array([0.3]), jnp.zeros(1), 1.0
    ts = jnp.linspace(0.0, t1, 2001)
    options = {"saveat": ts, "rtol": 1e-10, "atol": 1e-10}  # the ramp below shares a compilation
    runs = [
        loopdyn.simulate(PENDULUM, q0, qd0, t1, tau=tau, **options)
        for tau in (
            jnp.array([0.5]),
            jnp.full((5, 1), 0.5),
            lambda t, q, qd: jnp.full_like(q, 0.5),
        )
    ]
    for sim in runs[1:]:
        np.testing.assert_allclose(sim.q, runs[0].q, rtol=0, atol=1e-12)
    # and a torque that changes over time is interpolated: ramp 0 -> 1 over [0, t1]
    ramp = loopdyn.simulate(
        PENDULUM, q0, qd0, t1, tau=jnp.linspace(0.0, 1.0, 5)[:, None], **options
    )
    t, e = np.asarray(ramp.ts), np.asarray(ramp.energy)
    power = np.asarray(ramp.qd[:, 0]) * t / t1
    work = scipy.integrate.cumulative_trapezoid(power, t, initial=0.0)
    np.testing.assert_allclose(e - e[0], work, rtol=0, atol=1e-6 * np.abs(work).max())


def test_save_is_atomic_and_complete(tmp_path, swing):
    sim = swing
    path = tmp_path / "run.npz"
    simulation.save(path, sim, note=np.array("pendulum"))
    with np.load(path) as data:
        np.testing.assert_array_equal(data["q"], sim.q)
        assert int(data["stats_result"]) == simulation.SUCCESS and str(data["note"]) == "pendulum"
    assert [p.name for p in tmp_path.iterdir()] == ["run.npz"]  # no temporary left behind


def test_energy_helper_matches_saved_energy(swing):
    sim = swing
    total = jax.vmap(energy.total_energy, (None, 0, 0))(PENDULUM, sim.q, sim.qd)
    np.testing.assert_allclose(sim.energy, total, rtol=1e-14)


def compilations(*args, **options):
    """XLA compilations (JAX's backend compile events) in ``simulate(PENDULUM, *args,
    **options)``, and its result."""
    events = []

    def count(event, duration, **kwargs):
        if event == "/jax/core/compile/backend_compile_duration":
            events.append(duration)

    jax.monitoring.register_event_duration_secs_listener(count)
    try:
        result = loopdyn.simulate(PENDULUM, *args, **options)
    finally:
        jax.monitoring.unregister_event_duration_listener(count)
    return len(events), result


def test_new_times_tolerances_and_torque_samples_reuse_the_compiled_program():
    """``t1``, ``saveat`` times, ``rtol``, ``atol``, ``dt0`` and ``tau`` samples are arguments of
    the program, not constants in it: changing them compiles nothing; a new number of saves does
    (so the count can fail). ``None`` and a constant ``tau`` are one program."""
    q0, qd0, torque = jnp.array([0.3]), jnp.zeros(1), jnp.array([0.2])
    first, _ = compilations(q0, qd0, 1.0)
    count, sim = compilations(q0, qd0, 1.5, tau=torque, rtol=1e-7, atol=1e-9, dt0=1e-3)
    assert first > 0 and count == 0 and sim.succeeded and float(sim.ts[-1]) == 1.5
    counts = []
    for t1, a, b in ((1.0, 0.0, 1.0), (0.7, 1.0, -1.0)):
        ts, tau = t1 * jnp.linspace(0.0, 1.0, 31) ** 2, jnp.linspace(a, b, 5)[:, None]
        count, sim = compilations(q0, qd0, t1, tau=tau, saveat=ts)
        assert sim.succeeded and np.array_equal(sim.ts, ts)
        counts.append(count)
    count, _ = compilations(q0, qd0, 0.7, saveat=jnp.linspace(0.0, 0.7, 11))
    assert counts[0] > 0 and counts[1] == 0 and count > 0


def test_the_compiled_simulation_has_no_host_callbacks():
    """Host callbacks (``eqx.error_if``, diffrax's runtime checks) keep a program out of JAX's
    persistent compilation cache; `simulate`'s program (here the four-bar's, Baumgarte
    stabilisation and a constant torque, traced inside a user's ``jit``) has none."""
    lowered = jax.jit(lambda q0, qd0: loopdyn.simulate(FOUR_BAR, q0, qd0, 1.0, tau=TAU)).lower(
        FOUR_BAR.q0, jnp.zeros(3)
    )
    targets = set(re.findall(r'custom_call @(\w+)|call_target_name = "(\w+)"', lowered.as_text()))
    assert not [t for pair in targets for t in pair if "callback" in t]


def test_times_and_tolerances_are_checked():
    for options, message in [
        ({"saveat": jnp.array([0.0, 0.5, 1.5])}, "saveat"),
        ({"saveat": jnp.array([0.5, 0.2])}, "saveat"),
        ({"dt0": -1e-3}, "dt0"),
        ({"rtol": 0.0}, "rtol"),
    ]:
        with pytest.raises(ValueError, match=message):
            loopdyn.simulate(PENDULUM, jnp.zeros(1), jnp.zeros(1), 1.0, **options)
