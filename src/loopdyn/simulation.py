"""Constraint-stabilised simulation of closed-loop mechanisms: one jitted diffrax solve.

The state is ``y = (q, qd)`` and the vector field is ``(qd, qdd)`` with ``qdd`` from
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

from collections.abc import Callable

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from . import dense, energy, forward, kinematics
from ._checks import check_arrays, check_finite
from .io.files import write_atomic
from .mechanism import Mechanism

STABILIZATIONS = ("none", "baumgarte", "embedding")

SUCCESS, MAX_STEPS, FAILED = 0, 1, 2
_REMEDIES = {
    MAX_STEPS: "max_steps was reached: raise max_steps, loosen rtol/atol, or use an implicit "
    "solver (e.g. diffrax.Kvaerno5()) if stiff spring-dampers make the problem stiff",
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
    """A trajectory at the save times ``ts``: ``q``, ``qd`` (aligned with
    ``mech.coordinate_names``), the multipliers ``lam`` (loop rows), ``loop_residual`` with columns
    ``|Phi(q)|`` (position) and ``|J qd|`` (velocity), the total mechanical ``energy`` and the
    solver `Stats`. Rows after a failure (see ``stats.result``) hold ``inf``."""

    ts: Float[Array, " T"]
    q: Float[Array, "T n"]
    qd: Float[Array, "T n"]
    lam: Float[Array, "T m"]
    loop_residual: Float[Array, "T 2"]
    energy: Float[Array, " T"]
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
        q = q.at[dependent].add(-step)
    jac = kinematics.loop_jacobian(mech, q)
    qd = qd.at[dependent].set(0.0)
    return q, qd.at[dependent].set(-dense.solve(jac[:, dependent], jac @ qd))


def _torque(tau, t1):
    """``tau`` as a function of ``(t, q, qd)``: ``None`` (zero), a constant ``(n,)``, samples
    ``(K, n)`` evenly spaced over ``[0, t1]`` (linearly interpolated), or a callable."""
    if callable(tau):
        return tau
    if tau is None:
        return lambda t, q, qd: jnp.zeros_like(q)
    tau = jnp.asarray(tau)
    if tau.ndim == 1:
        return lambda t, q, qd: tau.astype(q.dtype)
    grid = jnp.linspace(0.0, t1, tau.shape[0])
    return lambda t, q, qd: jax.vmap(lambda column: jnp.interp(t, grid, column), 1)(tau)


def _accelerations(mech, q, qd, tau, method, stabilization, gains, independent):
    """The solution of the (stabilised) constrained equations at one state."""
    baumgarte = gains if stabilization == "baumgarte" else None
    return forward.solve(
        mech, q, qd, tau, method=method, baumgarte=baumgarte, independent=independent
    )


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


@eqx.filter_jit
def _integrate(mech, q0, qd0, t1, ts, tau, options):
    method, stabilization, gains, independent, solver, rtol, atol, dt0, max_steps, adjoint = options
    torque = _torque(tau, t1)
    embedded = stabilization == "embedding" and mech.cut_joints
    if embedded:
        solver = _Partitioned(solver, lambda y: _on_manifold(mech, *y, 3))

    def field(t, y, args):  # the parameters come in ``args``, as BacksolveAdjoint needs
        (q, qd), (mech, tau) = y, args
        torque = _torque(tau, t1)
        solution = _accelerations(
            mech, q, qd, torque(t, q, qd), method, stabilization, gains, independent
        )
        nan = jnp.where(solution.singular, jnp.nan, 0.0)  # rejects the step: never a silent NaN
        return qd, solution.qdd + nan

    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(field),
        solver,
        0.0,
        t1,
        dt0,
        (q0, qd0),
        args=(mech, tau),
        saveat=diffrax.SaveAt(ts=ts),
        adjoint=adjoint,
        stepsize_controller=diffrax.PIDController(rtol=rtol, atol=atol),
        max_steps=max_steps,
        throw=False,
    )
    q, qd = sol.ys
    if embedded:
        q, qd = jax.vmap(lambda q, qd: _on_manifold(mech, q, qd, 4))(q, qd)

    def measured(t, q, qd):
        phi, jac, _ = kinematics.loop_terms(mech, q, qd)
        solution = _accelerations(
            mech, q, qd, torque(t, q, qd), method, stabilization, gains, independent
        )
        residual = jnp.stack([jnp.linalg.norm(phi), jnp.linalg.norm(jac @ qd)])
        return solution.lam, residual, energy.total_energy(mech, q, qd)

    lam, residual, total = jax.vmap(measured)(sol.ts, q, qd)
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
    return Simulation(sol.ts, q, qd, lam, residual, total, stats)


def simulate(
    mech: Mechanism,
    q0: Float[Array, " n"],
    qd0: Float[Array, " n"],
    t1: float,
    *,
    tau: Callable | Array | None = None,
    method: str = "sslm",
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
) -> Simulation:
    """Simulate ``mech`` from ``(q0, qd0)`` over ``[0, t1]``: the whole trajectory is one jitted
    diffrax solve (compiled once per topology and options; differentiable; ``vmap``-able).

    ``tau``: joint forces, ``None`` (zero), constant ``(n,)``, samples ``(K, n)`` evenly spaced over
    ``[0, t1]`` (linear interpolation) or a function ``tau(t, q, qd)``. ``method``: see
    `forward`. ``solver``: any diffrax solver (default ``Tsit5``) with a PID step-size controller at
    ``rtol``/``atol``. ``saveat``: times (default 201 evenly spaced, ``t1`` included) or a
    ``diffrax.SaveAt(ts=...)``. ``stabilization``: ``"none"``, ``"baumgarte"`` with gains
    ``baumgarte = (alpha, beta)`` in 1/s, or ``"embedding"`` (module docstring). ``independent``:
    the coordinates held by ``assemble`` and by ``method="embedding"`` (default
    `forward.independent_coordinates` at ``q0``).

    ``q0`` must close the loops to ``closure_tol`` and ``qd0`` satisfy ``J qd0 = 0`` to the same
    relative tolerance, or a ``ValueError`` names the worst loop; ``assemble=True`` closes them
    instead (independent coordinates held). A failed solve (singular configuration, NaN, too many
    steps) returns with ``stats.result`` set, ``message`` saying when and what to do, and ``inf``
    rows after the failure; ``throw=True`` raises ``RuntimeError`` with that message instead.

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
    if not float(t1) > 0.0:
        raise ValueError(f"simulate: t1 must be positive, got {t1}")
    adjoint = diffrax.RecursiveCheckpointAdjoint() if adjoint is None else adjoint
    if not isinstance(adjoint, diffrax.AbstractAdjoint):
        raise TypeError(f"simulate: adjoint must be a diffrax adjoint, got {adjoint!r}")
    if isinstance(adjoint, diffrax.BacksolveAdjoint) and stabilization == "embedding":
        raise ValueError(
            "simulate: adjoint=BacksolveAdjoint cannot differentiate stabilization='embedding' "
            "(the projection after each step is not part of the vector field); use the default "
            "RecursiveCheckpointAdjoint"
        )
    if mech.cut_joints and independent is None and (method == "embedding" or assemble):
        independent = forward.independent_coordinates(mech, q0, prefer_actuated=assemble)
    if assemble and mech.cut_joints:
        q0 = kinematics.assemble(mech, q0, fixed=independent)
        qd0 = kinematics.project_velocity(mech, q0, qd0, fixed=independent)
    _check_closed(mech, q0, qd0, closure_tol)
    if saveat is None:
        ts = jnp.linspace(0.0, t1, 201)
    else:
        ts = jnp.asarray(saveat.subs.ts if isinstance(saveat, diffrax.SaveAt) else saveat)
    options = (
        method,
        stabilization,
        tuple(float(g) for g in baumgarte),
        tuple(independent or ()),
        solver if solver is not None else diffrax.Tsit5(),
        rtol,
        atol,
        dt0,
        max_steps,
        adjoint,
    )
    result = _integrate(mech, q0, qd0, t1, ts.astype(q0.dtype), tau, options)
    if throw:
        if isinstance(result.stats.result, jax.core.Tracer):
            return eqx.error_if(
                result, result.stats.result != SUCCESS, "simulate: " + _REMEDIES[FAILED]
            )
        if not result.succeeded:
            raise RuntimeError(f"simulate: {result.message}")
    return result


def _check_closed(mech, q0, qd0, tol):
    """Refuse initial states that do not satisfy the loop constraints, naming the worst loop."""
    leaves = jax.tree_util.tree_leaves((mech, q0, qd0))
    if not mech.cut_joints or any(isinstance(x, jax.core.Tracer) for x in leaves):
        return  # traced (e.g. differentiated with respect to mech): checked where concrete
    phi, jac, _ = (np.asarray(x) for x in kinematics.loop_terms(mech, q0, qd0))
    velocity_scale = 1.0 + float(np.max(np.abs(jac))) * float(np.linalg.norm(qd0))
    top = mech.topology
    for what, residual, scale in (
        ("q0 does not close", phi, 1.0),
        ("qd0 violates J qd0 = 0 at", jac @ np.asarray(qd0), velocity_scale),
    ):
        norms = [np.linalg.norm(residual[top.rows(i)]) for i in range(len(top.loops))]
        worst = int(np.argmax(norms))
        if norms[worst] > tol * scale:
            raise ValueError(
                f"simulate: {what} the loop of cut joint {top.loops[worst].name!r} "
                f"(residual {norms[worst]:.3e} > closure_tol {tol:g}); pass assemble=True to close "
                "it, or kinematics.assemble / project_velocity"
            )


def save(path, simulation: Simulation, **extra):
    """Write a simulation to ``path`` (``.npz``) atomically: a temporary file in the same folder,
    renamed over ``path`` once complete, so an interrupted run never leaves a truncated file."""
    arrays = {
        "ts": simulation.ts,
        "q": simulation.q,
        "qd": simulation.qd,
        "lam": simulation.lam,
        "loop_residual": simulation.loop_residual,
        "energy": simulation.energy,
        **{f"stats_{k}": v for k, v in vars(simulation.stats).items()},
        **extra,
    }
    write_atomic(path, lambda file: np.savez(file, **{k: np.asarray(v) for k, v in arrays.items()}))
