"""Shaking-force and shaking-moment balancing by counterweights.

A counterweight is a point mass ``m_c`` at ``r_c`` (body coordinates) on a chosen body, optionally
a thin uniform disc of radius ``rho`` in the body's x-y plane (inertia ``m_c rho^2/4, m_c rho^2/4,
m_c rho^2/2`` about its centre). Pseudo-inertias add (`loopdyn.parameters.pseudo_inertia`), so the
body with its counterweight has ``P = P_body + P_c``, from which come its new mass, centre of
mass and inertia (`add_counterweights`, a differentiable pure function).

Balancing works on a fixed motion: the drive prescribes the actuated coordinates, the loops the
others (`loopdyn.prescribed`), and counterweights change no length, so the positions, velocities
and accelerations stay as they are. Over the ``T`` samples of one cycle, inverse dynamics
(`loopdyn.inverse`) gives the dynamic shaking force ``F_t = -dP/dt``, moment ``M_t = -dL/dt``
(`loopdyn.shaking`, weight left out) and driving forces ``tau_t``. With ``rms(x) = sqrt(mean_t
|x_t|^2)`` and the unbalanced values ``F_0, M_0, tau_0``, the objective is

    J = w_F (rms F / F_0)^2 + w_M (rms M / M_0)^2 + w_tau (rms tau / tau_0)^2          (1)

a sum of squares of the residuals ``sqrt(w_F / T) F_t / F_0, ...``. The outputs are linear in the
inertial parameters, so one forward-mode derivative of the inverse dynamics along the motion
(`linearise`) gives them for any counterweights exactly. The residuals are minimised under the
bounds ``lo <= x <= hi`` on every counterweight mass and position coordinate (`Slot`) by SciPy's
trust-region reflective least squares with the exact Jacobian (Branch, Coleman and Li, A
subspace, interior, and conjugate gradient method for large-scale bound-constrained
minimization problems, SIAM J. Sci. Comput. 21 (1999) 1-23): counterweights often end at a bound
(the heaviest allowed mass), where a smooth reparameterisation such as a sigmoid only crawls
towards it. A counterweight at zero mass has no say in its position, so a zero lower mass bound
can leave one stuck there: a small positive one avoids that.
A bound ``rms tau <= (1 + delta) tau_0`` on the increase of the driving torque is kept by an
augmented Lagrangian: with ``g = rms tau / ((1 + delta) tau_0) - 1``, (1) gains the residual
``sqrt(rho) max(0, g + lambda / (2 rho))`` and after each solve ``lambda <- max(0, lambda + 2 rho
g)`` until ``g <= 0`` to tolerance (Nocedal and Wright, Numerical Optimization, 2nd ed., 2006,
§17.4). `trade_off` sweeps the weights and marks the Pareto points in (force, moment, torque).

Full force balance (shaking force zero along the whole motion) means a stationary total centre
of mass. For the four-bar with ground pivots ``A = 0`` and ``D = d`` (real), crank ``a``, coupler
``b``, rocker ``c`` and angles ``theta_1, theta_2, theta_3``, write each link's mass moment in its
own frame (x along the link) as a complex number: ``mu_1`` (crank about A), ``m_2 z_2`` (coupler,
COM ``z_2`` from B), ``mu_3`` (rocker about D). Eliminating ``e^{i theta_2} = (d + c e^{i
theta_3} - a e^{i theta_1}) / b`` from the total mass moment
``mu_1 e^{i theta_1} + m_2 (a e^{i theta_1} + z_2 e^{i theta_2}) + mu_3 e^{i theta_3} + m_3' d``
leaves it constant exactly when

    mu_1 = m_2 a (z_2 / b - 1),        mu_3 = -m_2 z_2 c / b                                 (2)

(Berkof and Lowen, A new method for completely force balancing simple linkages, ASME J. Eng.
Ind. 91 (1969) 21-26): counterweights on crank and rocker alone balance the force for any
coupler mass and centre of mass; the coupler's inertia plays no part (it enters the moment
only). The tests check the optimum against (2).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from . import compilation, inverse, parameters, prescribed, shaking
from .mechanism import Mechanism


@dataclasses.dataclass(frozen=True)
class Slot:
    """Where a counterweight may go: on ``body`` (name), mass in ``mass = (lo, hi)`` [kg],
    position (body coordinates) in the box ``position = ((x_lo, x_hi), (y_lo, y_hi))`` [m] for
    planar mechanisms, with a third pair ``z`` for spatial ones; ``radius`` [m] of the disc (0: a
    point mass). Hashable (a static argument of compiled functions)."""

    body: str
    mass: tuple[float, float]
    position: tuple[tuple[float, float], ...]
    radius: float = 0.0


class Counterweights(eqx.Module):
    """Counterweights on bodies ``bodies`` (indices, static): ``mass`` ``(k,)``, ``position``
    ``(k, 3)`` in body coordinates, ``radius`` ``(k,)`` of the disc."""

    mass: Float[Array, " k"]
    position: Float[Array, "k 3"]
    radius: Float[Array, " k"]
    bodies: tuple[int, ...] = eqx.field(static=True)


class Terms(NamedTuple):
    """RMS over the cycle of the dynamic shaking force [N], shaking moment [N m] and driving
    forces (Euclidean norm over the actuators) [N m or N]."""

    force: Array
    moment: Array
    torque: Array


class Weights(NamedTuple):
    """Weights ``w_F, w_M, w_tau`` of the objective (1)."""

    force: float = 1.0
    moment: float = 0.0
    torque: float = 0.0


class Balanced(NamedTuple):
    """Outcome of `balance`: the ``counterweights`` and the ``mechanism`` carrying them; RMS
    ``terms`` with them and ``unbalanced`` without; the ``objective`` (1); trust-region
    ``iterations`` (all solves together), ``converged``; ``at_bound`` ``(k, 1 + d)`` (mass, then
    position coordinates) on a bound; ``torque_multiplier`` of the
    torque bound (0 without one)."""

    counterweights: Counterweights
    mechanism: Mechanism
    terms: Terms
    unbalanced: Terms
    objective: float
    iterations: int
    converged: bool
    at_bound: np.ndarray
    torque_multiplier: float


class TradeOff(NamedTuple):
    """Outcome of `trade_off`: ``weights`` ``(P, 3)``, ``terms`` ``(P, 3)`` (RMS force, moment,
    torque of each optimum), ``pareto`` ``(P,)`` (no other point is at least as good in all three
    and better in one), the ``solutions``, and the ``unbalanced`` terms ``(3,)``."""

    weights: np.ndarray
    terms: np.ndarray
    pareto: np.ndarray
    solutions: tuple[Balanced, ...]
    unbalanced: np.ndarray


def disc_inertia(mass, radius) -> Float[Array, "... 3 3"]:
    """Inertia about its centre of a thin uniform disc in the body's x-y plane."""
    mass, radius = jnp.asarray(mass), jnp.asarray(radius)
    moments = mass[..., None] * radius[..., None] ** 2 * jnp.array([0.25, 0.25, 0.5])
    return moments[..., None, :] * jnp.eye(3)


def pseudo_inertias(weights: Counterweights) -> Float[Array, "k 4 4"]:
    """The pseudo-inertia of every counterweight (`loopdyn.parameters.pseudo_inertia`)."""
    disc = disc_inertia(weights.mass, weights.radius)
    return jax.vmap(parameters.pseudo_inertia)(weights.mass, weights.position, disc)


def _added(mech, bodies, added):
    """``mech`` with the pseudo-inertias ``added`` ``(k, 4, 4)`` added to those of ``bodies``."""
    mass, com, inertia = mech.mass, mech.com, mech.inertia
    for k, i in enumerate(bodies):
        total = parameters.pseudo_inertia(mass[i], com[i], inertia[i]) + added[k]
        m, c, rotational = parameters.from_pseudo_inertia(total)
        mass, com, inertia = mass.at[i].set(m), com.at[i].set(c), inertia.at[i].set(rotational)
    return eqx.tree_at(lambda m: (m.mass, m.com, m.inertia), mech, (mass, com, inertia))


def add_counterweights(mech: Mechanism, weights: Counterweights) -> Mechanism:
    """``mech`` with the counterweights attached (pseudo-inertias add; module docstring).
    Differentiable in the counterweights and in ``mech``; several on one body add up."""
    k = len(weights.bodies)
    for name, shape in (("mass", (k,)), ("position", (k, 3)), ("radius", (k,))):
        if getattr(weights, name).shape != shape:
            raise ValueError(
                f"add_counterweights: weights.{name} must have shape {shape} (one per body in "
                f"weights.bodies), got {getattr(weights, name).shape}"
            )
    return _added(mech, weights.bodies, pseudo_inertias(weights))


def crank_cycle(mech: Mechanism, speed: float, positions: int) -> prescribed.Motion:
    """One revolution of the (single) actuated coordinate at constant ``speed`` [rad/s] from
    ``mech.q0``, sampled at ``positions`` equally spaced times (the end, equal to the start,
    left out, so that means over the samples are means over the cycle)."""
    if len(mech.actuated) != 1:
        raise ValueError(
            f"crank_cycle: needs one actuated coordinate, the mechanism has "
            f"{list(mech.actuator_names)}; build the motion with prescribed.prescribed_motion"
        )
    if not speed or not math.isfinite(speed):
        raise ValueError(f"crank_cycle: speed must be finite and non-zero, got {speed}")
    if positions < 3:
        raise ValueError(f"crank_cycle: positions must be at least 3, got {positions}")
    start = float(mech.q0[mech.actuated[0]])
    t = jnp.arange(positions) * (2 * math.pi / abs(speed) / positions)
    return prescribed.prescribed_motion(mech, lambda t: jnp.atleast_1d(start + speed * t), t)


def _check_motion(mech, motion):
    if not isinstance(motion, prescribed.Motion) or motion.q.shape[1:] != (mech.num_bodies,):
        shape = getattr(getattr(motion, "q", None), "shape", None)
        raise ValueError(
            f"motion must be a prescribed.Motion of this mechanism (q of shape (T, "
            f"{mech.num_bodies})), got {type(motion).__name__} with q of shape {shape}"
        )


@compilation.jit
def series(mech: Mechanism, motion: prescribed.Motion, about=None, method: str = "subsystem"):
    """Dynamic shaking force ``(T, 2|3)``, shaking moment ``(T,)|(T, 3)`` (about the world
    origin, or the world point ``about``) and driving forces ``(T, a)`` along ``motion``. One
    compiled program per topology, motion length and ``about``/``method``."""
    _check_motion(mech, motion)
    result = jax.vmap(lambda q, qd, qdd: inverse.solve(mech, q, qd, qdd, method))(
        motion.q, motion.qd, motion.qdd
    )
    shake = shaking.shaking(mech, result, motion.q, about=about, include_weight=False)
    return shake.force, shake.moment, result.actuator_forces


def terms(mech: Mechanism, motion: prescribed.Motion, about=None, method="subsystem") -> Terms:
    """RMS force, moment and driving force over ``motion`` (`series`)."""
    return Terms(*(shaking.rms(x) for x in series(mech, motion, about, method)))


def bounds(mech: Mechanism, slots: Sequence[Slot]) -> tuple[np.ndarray, np.ndarray]:
    """Lower and upper bounds ``(k, 1 + d)`` of the counterweight values (per slot: mass, then
    the ``d`` position coordinates)."""
    dim = 2 if mech.planar else 3
    lo = np.array([[s.mass[0]] + [p[0] for p in s.position] for s in slots]).reshape(-1, 1 + dim)
    hi = np.array([[s.mass[1]] + [p[1] for p in s.position] for s in slots]).reshape(-1, 1 + dim)
    return lo, hi


def counterweights(
    values: Float[Array, "k d1"], mech: Mechanism, slots: Sequence[Slot]
) -> Counterweights:
    """Counterweights in ``slots`` from their values ``(k, 1 + d)`` (per slot: mass, then the
    ``d`` position coordinates, 2 planar, 3 spatial); the radius is the slot's."""
    dim = 2 if mech.planar else 3
    values = jnp.reshape(values, (len(slots), 1 + dim))
    position = jnp.zeros((len(slots), 3), values.dtype).at[:, :dim].set(values[:, 1:])
    radius = jnp.asarray([s.radius for s in slots], values.dtype)
    bodies = tuple(mech.body_index(s.body) for s in slots)
    return Counterweights(values[:, 0], position, radius, bodies)


def check_slots(mech: Mechanism, slots: Sequence[Slot]) -> tuple[Slot, ...]:
    """``slots`` as a tuple, each checked: known body with mass, ordered finite bounds, one pair
    per position coordinate."""
    slots = tuple(slots)
    if not slots or not all(isinstance(s, Slot) for s in slots):
        raise ValueError(f"balance: slots must be a non-empty list of Slot, got {slots!r}")
    dim = 2 if mech.planar else 3
    for s in slots:
        i = mech.body_index(s.body)
        if float(mech.mass[i]) <= 0.0:
            raise ValueError(f"balance: body {s.body!r} is massless (a joint frame)")
        pairs = (s.mass, *s.position)
        if len(s.position) != dim or any(len(p) != 2 for p in pairs):
            raise ValueError(
                f"balance: slot on {s.body!r}: position needs {dim} (lo, hi) pairs, one per "
                f"coordinate, got {s.position!r}"
            )
        if not all(math.isfinite(lo) and math.isfinite(hi) and lo < hi for lo, hi in pairs):
            raise ValueError(f"balance: slot on {s.body!r}: every bound needs lo < hi: {pairs}")
        if s.mass[0] < 0.0 or s.radius < 0.0:
            raise ValueError(f"balance: slot on {s.body!r}: mass and radius cannot be negative")
    return slots


class Linearised(NamedTuple):
    """`series` along a motion as an affine function of the pseudo-inertias added to ``bodies``
    (`linearise`): ``base`` (force, moment, driving forces without them) and ``slopes`` (each
    with trailing axes ``(k, 4, 4)``)."""

    base: tuple[Array, Array, Array]
    slopes: tuple[Array, Array, Array]

    def series(self, weights: Counterweights) -> tuple[Array, Array, Array]:
        """`series` with the counterweights attached (on the bodies the model was built for)."""
        added = pseudo_inertias(weights)
        return tuple(b + jnp.tensordot(s, added, axes=3) for b, s in zip(self.base, self.slopes))


@compilation.jit
def linearise(
    mech: Mechanism, motion: prescribed.Motion, bodies: tuple[int, ...], about, method: str
) -> Linearised:
    """`series` and its derivative with respect to pseudo-inertias added to ``bodies`` (indices,
    static): exact, inverse dynamics being linear in the inertial parameters (`loopdyn.fit`), so
    an optimiser evaluates the shaking of any counterweights by one contraction."""

    def outputs(added):
        return series(_added(mech, bodies, added), motion, about, method)

    zero = jnp.zeros((len(bodies), 4, 4), mech.mass.dtype)
    return Linearised(outputs(zero), jax.jacfwd(outputs)(zero))


class _Problem(NamedTuple):
    """Arrays of one balancing problem (the ``args`` of the residual function)."""

    mech: Mechanism
    model: Linearised
    weights: Array  # (3,)
    scale: Array  # (3,) unbalanced RMS force, moment, torque
    limit: Array  # largest allowed RMS torque (inf: none)
    penalty: Array  # rho
    multiplier: Array  # lambda


def _residuals(x, problem: _Problem, slots):
    parts = problem.model.series(counterweights(x, problem.mech, slots))
    count = parts[0].shape[0]
    out = [
        jnp.ravel(x) * jnp.sqrt(w / count) / s
        for x, w, s in zip(parts, problem.weights, problem.scale)
    ]
    excess = shaking.rms(parts[2]) / problem.limit - 1.0
    shifted = jnp.maximum(0.0, excess + problem.multiplier / (2 * problem.penalty))
    return jnp.concatenate(out + [jnp.sqrt(problem.penalty) * shifted[None]]), excess


@compilation.jit
def _jacobian(x, problem, slots):
    return jax.jacfwd(lambda x: _residuals(x, problem, slots)[0])(x)


_evaluate = compilation.jit(_residuals)


def _numpy_residuals(x, problem, slots, shape):
    return np.asarray(_evaluate(x.reshape(shape), problem, slots)[0])


def _numpy_jacobian(x, problem, slots, shape):
    return np.asarray(_jacobian(x.reshape(shape), problem, slots)).reshape(-1, x.size)


def _scale(x):
    return jnp.where(x > 0, x, 1.0)


def balance(
    mech: Mechanism,
    motion: prescribed.Motion,
    slots: Sequence[Slot],
    weights: Weights | None = None,
    max_torque_increase: float | None = None,
    about=None,
    method: str = "subsystem",
    initial: Counterweights | None = None,
    tol: float = 1e-15,
    max_evaluations: int = 500,
    progress: Callable[[int, float], None] | None = None,
) -> Balanced:
    """Counterweights in ``slots`` minimising the objective (1) over ``motion`` (e.g.
    `crank_cycle`) with ``weights`` (default: the force alone); if ``max_torque_increase`` is
    given, with the RMS driving force at most ``1 + max_torque_increase`` times its unbalanced
    value (to 1e-10 relative; augmented Lagrangian, module docstring; negative: a required
    reduction). Moment about the world origin or the world point ``about``. Starts from
    ``initial`` (default: the middle of the bounds). ``tol``: the relative tolerances of the
    trust-region solver (change of the objective, of the values, of the projected gradient);
    ``progress(iteration, objective)`` is called after each of its iterations."""
    slots = check_slots(mech, slots)
    _check_motion(mech, motion)
    w = jnp.asarray(tuple(Weights() if weights is None else weights), mech.q0.dtype)
    if w.shape != (3,) or bool(jnp.any(w < 0)) or not bool(jnp.any(w > 0)):
        raise ValueError(f"balance: weights must be three non-negative numbers, not all 0: {w}")
    inverse.solve_plan(mech, method)  # checks the method; warns once where it should
    if max_torque_increase is not None and not max_torque_increase > -1:
        raise ValueError(f"balance: max_torque_increase must be > -1, got {max_torque_increase}")
    if about is not None:
        about = jnp.asarray(about, mech.q0.dtype)
        if about.shape != (3,):
            raise ValueError(f"balance: about must be a world point (3,), got {about.shape}")
    unbalanced = terms(mech, motion, about, method)
    limit = (
        jnp.inf if max_torque_increase is None else (1 + max_torque_increase) * unbalanced.torque
    )
    bodies = tuple(mech.body_index(s.body) for s in slots)
    problem = _Problem(
        mech,
        linearise(mech, motion, bodies, about, method),
        w,
        _scale(jnp.stack(unbalanced)),
        jnp.asarray(limit, w.dtype),
        jnp.asarray(100.0, w.dtype),
        jnp.asarray(0.0, w.dtype),
    )
    lo, hi = bounds(mech, slots)
    x = (lo + hi) / 2
    if initial is not None:
        x = np.concatenate([initial.mass[:, None], initial.position[:, : lo.shape[1] - 1]], 1)
        x = np.clip(x, lo, hi)
    iterations, converged, before = 0, False, math.inf

    def report(intermediate_result):  # this name: SciPy passes the OptimizeResult
        nonlocal iterations
        iterations += 1
        if progress is not None:
            progress(iterations, 2 * float(intermediate_result.cost))

    import scipy.optimize  # here: at import it took 0.28 of `import loopdyn`'s 1.55 s

    for _ in range(1 if max_torque_increase is None else 30):  # augmented Lagrangian
        solution = scipy.optimize.least_squares(
            _numpy_residuals,
            x.ravel(),
            jac=_numpy_jacobian,
            args=(problem, slots, lo.shape),
            bounds=(lo.ravel(), hi.ravel()),
            method="trf",
            x_scale="jac",
            ftol=tol,
            xtol=tol,
            gtol=tol,
            max_nfev=max_evaluations,
            callback=report,
        )
        x, converged = solution.x.reshape(lo.shape), solution.status > 0
        excess = float(_evaluate(x, problem, slots)[1])
        rho, previous = float(problem.penalty), float(problem.multiplier)
        multiplier = max(0.0, previous + 2 * rho * excess)
        if excess <= 1e-10 and abs(multiplier - previous) <= 1e-8 * (1 + multiplier):
            break
        problem = problem._replace(
            multiplier=jnp.asarray(multiplier, w.dtype),
            penalty=jnp.asarray(rho * (10 if excess > 0.25 * before else 1), w.dtype),
        )
        before = excess
    converged = converged and excess <= 1e-10
    found = counterweights(x, mech, slots)
    balanced = add_counterweights(mech, found)
    after = terms(balanced, motion, about, method)
    ratios = jnp.stack(after) / problem.scale
    return Balanced(
        found,
        balanced,
        after,
        unbalanced,
        float(jnp.sum(w * ratios**2)),
        iterations,
        converged,
        np.minimum(x - lo, hi - x) <= 1e-9 * (hi - lo),
        float(problem.multiplier),
    )


def pareto(points: np.ndarray) -> np.ndarray:
    """``(P,)`` mask of the points ``(P, k)`` that no other point dominates (at least as small in
    every column and smaller in one)."""
    points = np.asarray(points)
    worse_or_equal = np.all(points[:, None, :] >= points[None, :, :], axis=-1)
    strictly = np.any(points[:, None, :] > points[None, :, :], axis=-1)
    return ~np.any(worse_or_equal & strictly, axis=1)


def trade_off(
    mech: Mechanism,
    motion: prescribed.Motion,
    slots: Sequence[Slot],
    moment_shares: Sequence[float] = (0.0, 0.25, 0.5, 0.75, 1.0),
    torque_weights: Sequence[float] = (0.0, 0.1, 1.0),
    **options,
) -> TradeOff:
    """`balance` for the weights ``(1 - s, s, w_tau)``, ``s`` in ``moment_shares`` and ``w_tau``
    in ``torque_weights`` (each solve starts from the previous optimum), and the Pareto points
    among them. ``options`` go to `balance` (not ``weights`` or ``initial``)."""
    grid = [(1.0 - s, s, w) for w in torque_weights for s in moment_shares]
    solutions, initial = [], None
    for w in grid:
        solutions.append(balance(mech, motion, slots, Weights(*w), initial=initial, **options))
        initial = solutions[-1].counterweights
    terms = np.array([[float(x) for x in s.terms] for s in solutions])
    return TradeOff(
        np.array(grid),
        terms,
        pareto(terms),
        tuple(solutions),
        np.array([float(x) for x in solutions[0].unbalanced]),
    )
