"""Constraint-stabilised simulation of closed-loop mechanisms: one jitted diffrax solve.

The state is ``y = [q; qd]`` (one array) and the vector field is ``[q'; qdd]`` with ``qdd`` from
`forward.solve` (any method). Integrating the acceleration constraint alone lets ``Phi`` and
``J qd`` drift away from zero (seed 000 §5, seed 004 §4.3); the ``stabilization`` options are

- ``"none"``: ``J qdd = -J' qd`` as it is;
- ``"baumgarte"``: ``J qdd = -J' qd - 2 alpha J qd - beta^2 Phi``, so that the residual obeys
  ``Phi'' + 2 alpha Phi' + beta^2 Phi = 0`` (seed 004 §4.3, Baumgarte's method);
- ``"embedding"``: integration in minimal coordinates by coordinate partitioning (seed 003,
  appendix): after every step the dependent coordinates are recomputed from the independent ones
  (Newton's method on ``Phi = 0``, the independent ones held) and ``qd_d = -J_d^-1 J_i qd_i``, so
  each step starts on the constraint manifold; the saved states are closed the same way. The
  partition is chosen at each step by column pivoting of ``J``: free motion, e.g. of the 3-RRR,
  leaves the region where any one fixed partition is well conditioned (along its 15 s seed run
  every fixed choice reaches cond(J_d) > 2000).

Gradients (``adjoint``, diffrax's): ``RecursiveCheckpointAdjoint`` (default) differentiates the
discrete solver steps in reverse mode, storing checkpoints: exact gradients of the computed
trajectory for every stabilization; by default it keeps ``log2(max_steps)`` checkpoints and
recomputes steps, ``RecursiveCheckpointAdjoint(checkpoints=N)`` with ``N`` at least the steps
taken stores them all (5 s of the 3-RRR, 46 parameters: gradient 3.95x the simulation instead of
7.8x, benchmarks/results/gradients.md). ``ForwardMode`` does the same in forward mode (``jax.jacfwd``:
cheap for few parameters and many outputs, e.g. least-squares residuals). ``BacksolveAdjoint``
solves the continuous adjoint equations backwards in time, re-integrating the state backwards
as well: its gradients carry the solver's error, and it is stable only where the backward
re-integration is. With ``"baumgarte"`` the correction that damps ``Phi`` forward in time
excites it backwards (``Phi'' - 2 alpha Phi' + beta^2 Phi = 0`` in reversed time), so errors of
the reconstructed state grow like ``exp(alpha dt)`` over a stretch ``dt`` integrated backwards;
diffrax restarts the backward state from the stored one at every save time, so ``dt`` is the
interval between saves. Measured against the default (gains 10/s, rtol 1e-10): four-bar, one
save at ``t1`` = 0.5, 1, 2 s: relative gradient error 3e-9, 7e-7, 7e-3; 3-RRR over 5 s with a
save every 0.05 s: 1e-7 (benchmarks/results/gradients.md). Use it with saves at most about
``1 / alpha`` apart. ``"embedding"`` projects after each step, which the continuous adjoint does
not see: refused.
"""

from __future__ import annotations

import contextlib
import functools
import json
import warnings
from collections.abc import Callable
from typing import NamedTuple

import diffrax
import equinox as eqx
import equinox._errors as equinox_errors  # EQX_ON_ERROR, read when tracing
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int

from . import compilation, configuration, dense, energy, forward, kinematics, rosenbrock, tree
from ._checks import check_arrays, check_finite
from .io.files import write_atomic
from .mechanism import Mechanism

STABILIZATIONS = ("none", "baumgarte", "embedding")

SUCCESS, MAX_STEPS, FAILED = 0, 1, 2
_REMEDIES = {
    MAX_STEPS: "max_steps was reached: raise max_steps, loosen rtol/atol, or use an implicit "
    "solver if stiff dampers or springs make the problem stiff: loopdyn.ROS34PW2() for the "
    "joints' own (at rtol of 1e-3 to 1e-6), diffrax.Kvaerno5() for spring-dampers between bodies",
    FAILED: "the step size collapsed: the constraints became singular (a dead centre or change "
    "point, where the multipliers grow without bound) or the dynamics returned NaN; "
    "kinematics.check_jacobian(mech, result.q[-1]) names the loop at the last saved state",
}


class Stats(eqx.Module):
    """Solver statistics: steps taken, accepted and rejected, the result code (`SUCCESS`,
    `MAX_STEPS` or `FAILED`) and the time reached."""

    steps: Int[Array, ""]
    accepted_steps: Int[Array, ""]
    rejected_steps: Int[Array, ""]
    result: Int[Array, ""]
    t_reached: Float[Array, ""]


class Simulation(eqx.Module):
    """A trajectory at the save times ``ts``: ``q`` (aligned with ``mech.configuration_names``),
    ``qd`` (with ``mech.coordinate_names``), the multipliers ``lam`` (loop rows; None unless
    ``simulate(..., multipliers=True)``),
    ``loop_residual`` with columns ``|Phi(q)|`` (position) and ``|J qd|`` (velocity), the total
    mechanical ``energy``, the norm of each quaternion in ``q`` as integrated (never normalised:
    its distance from 1 is the integration's drift; poses use the normalised quaternion) and the
    solver `Stats`. Rows after a failure (see ``stats.result``) hold ``inf``."""

    ts: Float[Array, " T"]
    q: Float[Array, "T nq"]
    qd: Float[Array, "T n"]
    lam: Float[Array, "T m"] | None
    loop_residual: Float[Array, "T 2"]
    energy: Float[Array, " T"]
    quaternion_norm: Float[Array, "T k"]
    stats: Stats

    @property
    def succeeded(self) -> bool:
        return int(self.stats.result) == SUCCESS

    @property
    def message(self) -> str:
        """What happened, and a remedy when the solve failed."""
        code, t = int(self.stats.result), float(self.stats.t_reached)
        if code == SUCCESS:
            return f"reached t = {t:g} in {int(self.stats.accepted_steps)} steps"
        return f"stopped at t = {t:g}: {_REMEDIES[code]}"


def _dependent(jac):
    """The ``m`` dependent coordinates at a state: columns of ``J`` picked greedily by
    column-pivoted Gram-Schmidt (each pick the column farthest from the span of those picked), so
    ``J_d`` stays well conditioned wherever the motion goes; traceable, unlike a static choice."""
    rows = jac.shape[0]
    remaining, picked = jac, []
    for _ in range(rows):
        norms = jnp.sum(remaining**2, axis=0)
        k = jnp.argmax(norms)
        axis = remaining[:, k] / jnp.sqrt(norms[k])
        remaining = remaining - jnp.outer(axis, axis @ remaining)
        remaining = remaining.at[:, k].set(0.0)
        picked.append(k)
    return jnp.stack(picked)


def _on_manifold(mech, q, qd, iterations):
    """Coordinate partitioning (seed 003, appendix): with the dependent coordinates chosen at
    ``q``, close the loops by Newton's method on them, the independent ones held (a fixed number
    of steps: traceable, differentiable, quadratically convergent from a nearby state), then set
    ``qd_d = -J_d^-1 J_i qd_i``."""
    dependent = _dependent(kinematics.loop_jacobian(mech, q))
    for _ in range(iterations):
        jac = kinematics.loop_jacobian(mech, q)
        step = dense.solve(jac[:, dependent], kinematics.loop_residual(mech, q))
        q = configuration.integrate(mech, q, jnp.zeros_like(qd).at[dependent].set(-step))
    jac = kinematics.loop_jacobian(mech, q)
    qd = qd.at[dependent].set(0.0)
    return q, qd.at[dependent].set(-dense.solve(jac[:, dependent], jac @ qd))


def _torque(tau, t1):
    """``tau`` as a function of ``(t, q, qd)``: samples ``(K, n)`` evenly spaced over ``[0, t1]``
    (linearly interpolated; one sample is a constant) or a callable."""
    if callable(tau):
        return tau
    if tau.shape[0] == 1:
        return lambda t, q, qd: tau[0]
    last = tau.shape[0] - 1
    position = lambda t: jnp.clip(t / t1 * last, 0.0, last)
    index = lambda t: jnp.minimum(jnp.floor(position(t)), last - 1).astype(int)

    def interpolated(t, q, qd):
        k, w = index(t), position(t) - index(t)
        return (1.0 - w) * tau[k] + w * tau[k + 1]

    return interpolated


def _accelerations(mech, q, qd, inputs, options):
    """The solution of the (stabilised) constrained equations at one state under
    ``inputs = (tau, ctrl)`` (``ctrl`` None: no control actuator acts)."""
    baumgarte = options.gains if options.stabilization == "baumgarte" else None
    return forward.solve(
        mech, q, qd, inputs[0], method=options.method, baumgarte=baumgarte,
        independent=options.independent, ctrl=inputs[1],
    )  # fmt: skip


def _rejecting(solution):
    """The accelerations, NaN at a singular state: the solver rejects the step, never a
    silent NaN in the results."""
    return solution.qdd + jnp.where(solution.singular, jnp.nan, 0.0)


def _inputs(inputs, t1):
    """``(tau, ctrl)`` as one function of ``(t, q, qd)`` (`_torque` each; ctrl may be None)."""
    tau, ctrl = (None if x is None else _torque(x, t1) for x in inputs)
    return lambda t, q, qd: (tau(t, q, qd), None if ctrl is None else ctrl(t, q, qd))


def _joined(state):
    """The state ``(q, qd)`` as the one array diffrax integrates, ``[q; qd]``: each operation of
    the solver's stages, error norm and interpolation is one, not one per part (5 s 3-RRR
    simulate: 3,434 -> 3,322 lowered operations, first call 3.3 -> 2.9 s, run 5.4 -> 5.2 ms,
    the same trajectory to the last bit; one core, three runs alternating, 2026-12-07)."""
    return jnp.concatenate(state, axis=-1)


def _split(nq, y):
    """``(q, qd)`` from `_joined`'s ``[q; qd]`` (states along the last axis)."""
    return y[..., :nq], y[..., nq:]


class _Partitioned(diffrax.AbstractAdaptiveSolver, diffrax.AbstractWrappedSolver):
    """A diffrax solver whose every step ends with ``project`` (here: the dependent coordinates
    recomputed from the independent ones). The step after a projection re-evaluates its first
    stage instead of reusing the last stage of the unprojected state."""

    solver: diffrax.AbstractSolver
    project: Callable = eqx.field(static=True)

    @property
    def term_structure(self):
        return self.solver.term_structure

    @property
    def interpolation_cls(self):
        return self.solver.interpolation_cls

    def order(self, terms):
        return self.solver.order(terms)

    def error_order(self, terms):
        return self.solver.error_order(terms)

    def init(self, terms, t0, t1, y0, args):
        return self.solver.init(terms, t0, t1, y0, args)

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        y1, error, dense, solver_state, result = self.solver.step(
            terms, t0, t1, y0, args, solver_state, True
        )
        return self.project(y1), error, dense, solver_state, result

    def func(self, terms, t0, y0, args):
        return self.solver.func(terms, t0, y0, args)


class _FirstStep(diffrax.AbstractAdaptiveStepSizeController):
    """A `diffrax.PIDController` whose first step is ``dt0`` (an array): diffrax's own initial
    step-size guess traces the vector field a second time, and a ``dt0`` given to
    ``diffeqsolve`` is checked by a host callback, which keeps the program out of JAX's
    persistent compilation cache."""

    pid: diffrax.PIDController
    dt0: Float[Array, ""]

    @property
    def rtol(self):
        return self.pid.rtol

    @property
    def atol(self):
        return self.pid.atol

    @property
    def norm(self):
        return self.pid.norm

    def wrap(self, direction):
        return _FirstStep(self.pid.wrap(direction), self.dt0)

    def init(self, terms, t0, t1, y0, dt0, args, func, error_order):
        return self.pid.init(terms, t0, t1, y0, self.dt0, args, func, error_order)

    def adapt_step_size(self, t0, t1, y0, y1_candidate, args, y_error, error_order, state):
        return self.pid.adapt_step_size(t0, t1, y0, y1_candidate, args, y_error, error_order, state)


class _Options(NamedTuple):
    """What fixes the compiled program's structure (static)."""

    method: str
    stabilization: str
    gains: tuple[float, float]
    independent: tuple[int, ...]
    solver: diffrax.AbstractSolver
    max_steps: int
    adjoint: diffrax.AbstractAdjoint
    assemble: bool
    saves: int
    multipliers: bool


class _Start(NamedTuple):
    """The initial state as solved from, for the checks made after the program: ``Phi(q0)``,
    ``J qd0``, the scale of the latter (`kinematics.residuals_at`), whether ``assemble``
    converged and the turns of the locked frame pairs (`kinematics.locked_turns`) and the gaps of
    the joints reduced across loops (`kinematics.reduced_gaps`)."""

    phi: Float[Array, " m"]
    velocity: Float[Array, " m"]
    velocity_scale: Float[Array, ""]
    assembled: Bool[Array, ""]
    turns: Float[Array, " w"]
    gaps: Float[Array, " g"]


@contextlib.contextmanager
def _runtime_checks_as_nan():
    """Trace ``eqx.error_if`` as a NaN-returning select instead of a host callback (equinox's
    ``EQX_ON_ERROR=nan``, for this trace only). A host callback keeps a program out of JAX's
    persistent compilation cache; inside the solve the checks are diffrax's of ``saveat``, which
    `simulate` makes itself before compiling."""
    previous, equinox_errors.EQX_ON_ERROR = equinox_errors.EQX_ON_ERROR, "nan"
    try:
        yield
    finally:
        equinox_errors.EQX_ON_ERROR = previous


@compilation.jit(options=compilation.SINGLE_STATE)
def _integrate(mech, q0, qd0, t1, ts, inputs, tolerances, options):
    """The whole simulation as one program: assembly (if asked), the solve, and the saved-state
    measurements in one pass over the states. ``t1``, ``ts`` (``None``: ``options.saves`` evenly
    spaced), ``inputs = (tau, ctrl)`` samples and ``tolerances = (rtol, atol, dt0)`` are
    traced."""
    rtol, atol, dt0 = tolerances
    assembled = jnp.asarray(True)
    if options.assemble and mech.topology.loops:
        q0, _, assembled = kinematics.try_assemble(mech, q0, fixed=options.independent)
        qd0 = kinematics.project_velocity(mech, q0, qd0, fixed=options.independent)
    if ts is None:  # jnp.linspace(0, t1, saves) to the last bit, in fewer operations
        grid = np.arange(options.saves - 1) / (options.saves - 1)
        ts = jnp.concatenate([t1 * grid, t1[None]])
    solver = options.solver
    embedded = options.stabilization == "embedding" and bool(mech.topology.loops)
    split = functools.partial(_split, mech.nq)
    if embedded:
        solver = _Partitioned(solver, lambda y: _joined(_on_manifold(mech, *split(y), 3)))

    def field(t, y, args):  # the parameters come in ``args``, as BacksolveAdjoint needs
        (q, qd), (mech, inputs, t1) = split(y), args
        solution = _accelerations(mech, q, qd, _inputs(inputs, t1)(t, q, qd), options)
        return _joined((configuration.rate(mech, q, qd), _rejecting(solution)))

    def stage(t, y, y0, args, hg, s):
        """ROS34PW2's stage solve (`rosenbrock`) with ``W`` the Jacobian of the joints' dampers,
        smoothed friction and springs at the step's start, ``[[0, R], [-G K P, -G D]]``
        (``D`` the dampers plus the friction's slope at ``qd0``): the dynamics with the
        armature raised by ``hg D + hg^2 K`` and the joint forces by ``-D s_qd - K (P s_q +
        hg (qd + s_qd))`` (``P`` picks the scalar coordinates, where ``R P = I``)."""
        (q, qd), (q_start, qd_start), (s_q, s_qd) = split(y), split(y0), split(s)
        mech, inputs, t1 = args
        slip = jnp.tanh(qd_start / mech.friction_velocity)
        damping = mech.damping + mech.frictionloss / mech.friction_velocity * (1.0 - slip**2)
        raised = mech.armature + hg * damping + hg**2 * mech.stiffness
        force = damping * s_qd + mech.stiffness * (
            configuration.scalar_coordinates(mech, s_q) + hg * (qd + s_qd)
        )
        tau, ctrl = _inputs(inputs, t1)(t, q, qd)
        implicit = eqx.tree_at(lambda m: m.armature, mech, raised)
        qdd = _rejecting(_accelerations(implicit, q, qd, (tau - force, ctrl), options))
        rate = configuration.rate(mech, q, qd) + configuration.rate(mech, q_start, hg * qdd + s_qd)
        return _joined((rate, qdd))

    controller = _FirstStep(diffrax.PIDController(rtol=rtol, atol=atol), jax.lax.stop_gradient(dt0))
    term = diffrax.ODETerm(field)
    if isinstance(options.solver, rosenbrock.ROS34PW2):
        term = rosenbrock.LinearlyImplicitTerm(field, stage)
        controller = diffrax.ClipStepSizeController(controller, step_ts=ts)
    sol = diffrax.diffeqsolve(
        term,
        solver,
        0.0,
        t1,
        None,
        _joined((q0, qd0)),
        args=(mech, inputs, t1),
        saveat=diffrax.SaveAt(ts=ts),
        adjoint=options.adjoint,
        stepsize_controller=controller,
        max_steps=options.max_steps,
        throw=False,
    )
    q, qd = split(sol.ys)
    if embedded:
        q, qd = jax.vmap(lambda q, qd: _on_manifold(mech, q, qd, 4))(q, qd)
    drive = _inputs(inputs, t1)

    def measured(state):
        t, q, qd = state
        motion = tree.body_motion(mech, q, qd, accelerations=False)  # for loops and energy
        phi, velocity, scale = kinematics.residuals_at(mech, motion)
        lam = None
        if options.multipliers:  # a second copy of the dynamics in the program
            lam = _accelerations(mech, q, qd, drive(t, q, qd), options).lam
        return lam, phi, velocity, scale, energy.total_energy(mech, q, qd, motion)

    # The initial state (for the closure check) and the saved states, one after the other: a
    # loop compiles the dynamics as one state's (2.1 s against 3.0 s vmapped, 3-RRR).
    lam, phi, velocity, scale, total = jax.lax.map(
        measured,
        (
            jnp.concatenate([ts[:1], sol.ts]),
            jnp.concatenate([q0[None], q]),
            jnp.concatenate([qd0[None], qd]),
        ),
    )
    residual = jnp.stack(
        [jnp.linalg.norm(phi[1:], axis=1), jnp.linalg.norm(velocity[1:], axis=1)], 1
    )
    result = jnp.where(
        sol.result == diffrax.RESULTS.successful,
        SUCCESS,
        jnp.where(sol.result == diffrax.RESULTS.max_steps_reached, MAX_STEPS, FAILED),
    )
    reached = jnp.max(jnp.where(jnp.isfinite(q[:, 0]), sol.ts, 0.0))
    stats = Stats(
        sol.stats["num_steps"],
        sol.stats["num_accepted_steps"],
        sol.stats["num_rejected_steps"],
        result,
        reached,
    )
    norm = configuration.quaternion_norms(mech, q)
    lam = None if lam is None else lam[1:]
    simulation = Simulation(sol.ts, q, qd, lam, residual, total[1:], norm, stats)
    turns, gaps = kinematics.false_closures(mech, q0)
    return simulation, _Start(phi[0], velocity[0], scale[0], assembled, turns, gaps)


def simulate(
    mech: Mechanism,
    q0: Float[Array, " nq"],
    qd0: Float[Array, " n"],
    t1: float,
    *,
    tau: Callable | Array | None = None,
    ctrl: Callable | Array | None = None,
    method: str = "auto",
    solver: diffrax.AbstractSolver | None = None,
    rtol: float = 1e-8,
    atol: float = 1e-8,
    dt0: float | None = None,
    saveat: Float[Array, " T"] | diffrax.SaveAt | None = None,
    stabilization: str = "baumgarte",
    baumgarte: tuple[float, float] = (10.0, 10.0),
    max_steps: int = 16_384,
    assemble: bool = False,
    closure_tol: float = 1e-9,
    independent: tuple[int, ...] | None = None,
    throw: bool = False,
    adjoint: diffrax.AbstractAdjoint | None = None,
    multipliers: bool = False,
) -> Simulation:
    """Simulate ``mech`` from ``(q0, qd0)`` over ``[0, t1]``: the whole trajectory is one jitted
    program (differentiable; ``vmap``-able) that evaluates the dynamics in one place, the solver's
    step; the saved states' residuals and energy come from one pass over them after it.
    ``multipliers=True`` computes the multipliers ``lam`` at the saved states in that pass too:
    a second copy of the dynamics, which XLA compiles again (a 5 s 3-RRR run: 5.7 instead of
    3.8 s of XLA compilation on the 2-core machine); for a few states, ``forward.solve`` with the
    same ``method`` and ``baumgarte`` gains gives them.

    ``tau``: joint forces, ``None`` (zero), constant ``(n,)``, samples ``(K, n)`` evenly spaced over
    ``[0, t1]`` (linear interpolation) or a function ``tau(t, q, qd)``; ``ctrl``: the control
    actuators' inputs (MuJoCo's ``ctrl``, `loopdyn.actuators`), given the same ways, or None:
    none act. ``method``: see
    `forward`. ``solver``: any diffrax solver (default ``Tsit5``) with a PID step-size controller at
    ``rtol``/``atol``, first step ``dt0`` (default ``t1 * 1e-5``; the controller grows it up to
    tenfold per step), or `loopdyn.ROS34PW2` (`loopdyn.rosenbrock`): linearly implicit in the
    joints' damping and stiffness, for models whose light damped or sprung bodies make an
    explicit solver's steps tiny (Cassie's 2 s fall: 225 steps at rtol 1e-2, where Tsit5 takes
    over 3,700 at any tolerance; benchmarks/results/cassie.md); order 3, so at tight
    tolerances Tsit5 takes fewer steps; its steps land on the save times. ``saveat``: times
    (default 201 evenly spaced, ``t1`` included) or a ``diffrax.SaveAt(ts=...)``.
    ``stabilization``: ``"none"``, ``"baumgarte"`` with gains ``baumgarte = (alpha, beta)`` in
    1/s, or ``"embedding"`` (module docstring). ``independent``: the coordinates held by
    ``assemble`` and by ``method="embedding"`` (default `forward.independent_coordinates` at
    ``q0``).

    Compiled once per mechanism topology, method, stabilization, gains, solver, adjoint,
    ``max_steps``, number of saves and kind of ``tau`` and ``ctrl`` (a function, or the number
    of samples: ``None`` and a constant are one); new ``q0``, ``qd0``, ``t1``, ``saveat`` times,
    ``rtol``, ``atol``, ``dt0``, ``tau`` and ``ctrl`` samples and mechanism parameters reuse the
    program. It holds no
    host callback, so JAX's persistent compilation cache can keep it across processes: before the
    first call, ``jax.config.update("jax_compilation_cache_dir", path)`` and
    ``jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.1)`` (JAX skips programs
    that compile faster than that, 1 s by default). The ``loopdyn`` command line does this.
    The solve is a loop of small per-state operations: call
    ``loopdyn.compilation.use_loop_kernels()`` before the first computation, so that XLA compiles
    it into one kernel (a 5 s 3-RRR run took 7.9 instead of 42 ms, `loopdyn.compilation`).

    ``q0`` must close the loops to ``closure_tol`` and ``qd0`` satisfy ``J qd0 = 0`` to
    ``closure_tol`` times ``1 +`` the largest speed of a cut frame, or a ``ValueError`` names the
    worst loop; ``assemble=True`` closes them instead (independent coordinates held). A failed
    solve (singular configuration, NaN, too many steps) returns with ``stats.result`` set,
    ``message`` saying when and what to do, and ``inf`` rows after the failure; ``throw=True``
    raises ``RuntimeError`` with that message instead.
    These checks need concrete values: under ``jit`` or ``vmap`` they are skipped (``throw``
    then raises at run time), and ``saveat`` times outside ``[0, t1]`` give NaN.

    ``adjoint``: how gradients pass through the solve (module docstring, "Gradients"); default
    ``diffrax.RecursiveCheckpointAdjoint()``, ``diffrax.ForwardMode()`` for ``jax.jacfwd``.
    """
    q0, qd0 = check_arrays(mech, "simulate", q0=q0, qd0=qd0)
    check_finite("simulate", q0=q0, qd0=qd0)
    forward.check_method(method, "simulate")
    if stabilization not in STABILIZATIONS:
        raise ValueError(
            f"simulate: stabilization must be one of {STABILIZATIONS}, got {stabilization!r}"
        )
    for name, value in (("t1", t1), ("rtol", rtol), ("atol", atol), ("dt0", dt0)):
        if value is not None and _concrete(value) and not float(value) > 0.0:
            raise ValueError(f"simulate: {name} must be positive, got {value}")
    adjoint = diffrax.RecursiveCheckpointAdjoint() if adjoint is None else adjoint
    if not isinstance(adjoint, diffrax.AbstractAdjoint):
        raise TypeError(f"simulate: adjoint must be a diffrax adjoint, got {adjoint!r}")
    if isinstance(adjoint, diffrax.BacksolveAdjoint) and (
        stabilization == "embedding" or isinstance(solver, rosenbrock.ROS34PW2)
    ):
        what = (
            "differentiate stabilization='embedding' (the projection after each step is not "
            "part of the vector field)"
            if stabilization == "embedding"
            else "run solver=ROS34PW2 (the adjoint equations have no stage solve of their own)"
        )
        raise ValueError(
            f"simulate: adjoint=BacksolveAdjoint cannot {what}; use the default "
            "RecursiveCheckpointAdjoint or ForwardMode"
        )
    if mech.topology.loops and independent is None and (method == "embedding" or assemble):
        independent = forward.independent_coordinates(mech, q0, prefer_actuated=assemble)
    dtype = q0.dtype
    ts = saveat.subs.ts if isinstance(saveat, diffrax.SaveAt) else saveat
    if ts is not None:
        ts = jnp.asarray(ts, dtype)
        if _concrete((ts, t1)) and not _increasing_within(np.asarray(ts), float(t1)):
            raise ValueError(f"simulate: saveat must be increasing times within [0, t1 = {t1:g}]")
    inputs = (
        _checked_input("tau", tau, mech.coordinate_names, q0, qd0),
        None if ctrl is None else _checked_input("ctrl", ctrl, mech.ctrl_names, q0, qd0),
    )
    options = _Options(
        method,
        stabilization,
        tuple(float(g) for g in baumgarte),
        tuple(independent or ()),
        solver if solver is not None else diffrax.Tsit5(),
        max_steps,
        adjoint,
        bool(assemble),
        201,
        bool(multipliers),
    )
    t1 = jnp.asarray(t1, dtype)
    dt0 = 1e-5 * t1 if dt0 is None else dt0
    tolerances = tuple(jnp.asarray(x, dtype) for x in (rtol, atol, dt0))
    with _runtime_checks_as_nan():
        result, start = _integrate(mech, q0, qd0, t1, ts, inputs, tolerances, options)
    if not _concrete(start):
        if assemble:  # raises at run time, as kinematics.assemble does under jit
            message = "simulate: assemble=True did not close the loops"
            result = eqx.error_if(result, ~start.assembled, message)
    elif not bool(start.assembled):
        kinematics.assemble(mech, q0, fixed=independent)  # raises, naming the loop
    else:
        _check_closed(mech, start, closure_tol)
        kinematics.check_locked(mech, start.turns, "simulate")
        kinematics.check_gaps(mech, start.gaps, "simulate")
        if mech.topology.loops and not result.succeeded and float(result.stats.t_reached) == 0.0:
            try:  # a start at a singular configuration: name the loop
                kinematics.check_jacobian(mech, q0)
            except ValueError as error:
                raise ValueError(f"simulate: the initial state is singular: {error}") from None
    if _concrete(result.q):
        _warn_limits(mech, result)
    if throw:
        if not _concrete(result.stats.result):
            return eqx.error_if(
                result, result.stats.result != SUCCESS, "simulate: " + _REMEDIES[FAILED]
            )
        if not result.succeeded:
            raise RuntimeError(f"simulate: {result.message}")
    return result


def _warn_limits(mech, result):
    """Warn, naming the joints, where saved states pass a coordinate's `Mechanism.limits`
    (loopdyn does not enforce them)."""
    angles = np.asarray(configuration.scalar_coordinates(mech, result.q))
    limits = np.asarray(mech.limits)
    past = (angles < limits[:, 0]) | (angles > limits[:, 1])
    if past.any():
        first = [(float(result.ts[np.argmax(past[:, k])]), k) for k in np.flatnonzero(past.any(0))]
        named = ", ".join(f"{mech.coordinate_names[k]!r} at t = {t:g} s" for t, k in first)
        warnings.warn(
            f"simulate: saved states pass joint limits, which loopdyn does not enforce: {named}",
            stacklevel=3,  # simulate's caller
        )


def _checked_input(name, value, names, q0, qd0):
    """``tau`` or ``ctrl`` (one entry per ``names``) as `_integrate` takes it: samples
    ``(K, n)`` (``None``: zeros, and a constant ``(n,)`` are one sample) or the function, its
    shapes checked before anything compiles."""
    n, what = len(names), "coordinate" if name == "tau" else "control actuator"
    if callable(value):
        out = jax.eval_shape(value, jnp.zeros((), q0.dtype), q0, qd0)
        if getattr(out, "shape", None) != (n,):
            raise ValueError(
                f"simulate: {name}(t, q, qd) must return shape ({n},) (one entry per {what} "
                f"{list(names)}), got {getattr(out, 'shape', type(out).__name__)}"
            )
        return value
    value = jnp.zeros(n, q0.dtype) if value is None else jnp.asarray(value, q0.dtype)
    if value.ndim not in (1, 2) or value.shape[-1] != n or value.size == 0:
        raise ValueError(
            f"simulate: {name} must have shape ({n},) or (K, {n}) (one entry per {what} "
            f"{list(names)}), got {value.shape}"
        )
    if _concrete(value):
        check_finite("simulate", **{name: value})
    return value.reshape(-1, n)  # a constant is one sample


def _concrete(tree) -> bool:
    return not any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves(tree))


def _increasing_within(ts, t1):
    return bool(np.all(np.diff(ts) >= 0.0) and np.all((ts >= 0.0) & (ts <= t1)))


def _check_closed(mech, start, tol):
    """Refuse initial states that do not satisfy the loop constraints, naming the worst loop."""
    top = mech.topology
    if not top.loops:
        return
    for what, residual, scale in (
        ("q0 does not close", start.phi, 1.0),
        ("qd0 violates J qd0 = 0 at", start.velocity, float(start.velocity_scale)),
    ):
        residual = np.asarray(residual)
        norms = [np.linalg.norm(residual[top.rows(i)]) for i in range(len(top.loops))]
        worst = int(np.argmax(norms))
        if norms[worst] > tol * scale:
            raise ValueError(
                f"simulate: {what} the loop of cut joint {top.loops[worst].name!r} "
                f"(residual {norms[worst]:.3e} > closure_tol {tol:g}); pass assemble=True to close "
                "it, or kinematics.assemble / project_velocity"
            )


def save(path, simulation: Simulation, mech: Mechanism | None = None, **extra):
    """Write a simulation to ``path`` (``.npz``) atomically: a temporary file in the same folder,
    renamed over ``path`` once complete, so an interrupted run never leaves a truncated file.
    With ``mech``, the file also names the columns (``configuration_names`` of ``q``,
    ``coordinate_names`` of ``qd``) and gives the units of every array (``units``, a JSON object:
    per entry for ``q``, ``qd`` and ``tau``)."""
    arrays = {
        "ts": simulation.ts,
        "q": simulation.q,
        "qd": simulation.qd,
        **({} if simulation.lam is None else {"lam": simulation.lam}),
        "loop_residual": simulation.loop_residual,
        "energy": simulation.energy,
        "quaternion_norm": simulation.quaternion_norm,
        **{f"stats_{k}": v for k, v in vars(simulation.stats).items()},
        **extra,
    }
    if mech is not None:
        units = {
            "ts": "s",
            "q": list(mech.configuration_units),
            "qd": [f"{unit}/s" for unit in mech.coordinate_units],
            "tau": list(mech.force_units),
            "lam": "N for point rows, N m for angle rows",
            "loop_residual": ["m (|Phi|, angle rows in rad)", "m/s (|J qd|)"],
            "energy": "J",
            "quaternion_norm": "1",
        }
        arrays["coordinate_names"] = np.array(mech.coordinate_names)
        arrays["configuration_names"] = np.array(mech.configuration_names)
        arrays["units"] = np.array(json.dumps(units))
    write_atomic(path, lambda file: np.savez(file, **{k: np.asarray(v) for k, v in arrays.items()}))
