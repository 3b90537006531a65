"""Prescribed motion: the driven coordinates as functions of time, every other coordinate from
the loop constraints, and the inverse dynamics along the way.

With the prescribed coordinates ``q_a(t)`` (by default the actuated ones) and the others ``q_d``:

- positions: ``Phi(q) = 0`` by Newton's method with ``q_a`` held (`kinematics.try_assemble`),
  each time step starting from the previous one's solution, so the solution follows one
  assembly branch (a ``lax.scan`` over the grid);
- velocities: ``J qd = 0``, i.e. ``J_d qd_d = -J_a qd_a``;
- accelerations: ``J qdd = Psi = -J' qd``, i.e. ``J_d qdd_d = Psi - J_a qdd_a``
  (seed 000 eq. 9; seed 004 eqs. 5-7, the velocity and acceleration levels of the constraints).

``J_d`` must be square (as many prescribed coordinates as degrees of freedom) and regular along
the motion; near a dead centre of the prescribed coordinates it is not, and ``conditioning``
says so. The drive is either a callable ``t -> q_a`` whose first and second time derivatives
come from ``jax.jvp`` (exact, no finite differences), or three arrays ``(q_a, qd_a, qdd_a)``
sampled on the grid. `prescribed_inverse_dynamics` adds the inverse dynamics of every state
(`loopdyn.inverse`, seed 002) in the same compiled, vectorised program. See docs/references.md
for the seeds.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from . import compilation, dense, inverse, kinematics
from .mechanism import Mechanism, configuration_layout


class Motion(NamedTuple):
    """A motion on a time grid: ``t`` ``(T,)``; ``q``, ``qd``, ``qdd`` ``(T, n)`` aligned with
    ``mech.coordinate_names``; ``closure`` ``(T,)`` the position residual ``|Phi(q)|`` reached
    by assembly; ``conditioning`` ``(T,)`` the smallest singular value of ``J_d`` divided by
    the largest (near zero: a dead centre of the prescribed coordinates)."""

    t: Float[Array, " T"]
    q: Float[Array, "T n"]
    qd: Float[Array, "T n"]
    qdd: Float[Array, "T n"]
    closure: Float[Array, " T"]
    conditioning: Float[Array, " T"]


def drive_derivatives(drive: Callable, t: Float[Array, " T"]):
    """Values, first and second derivatives of ``drive`` (``t -> (k,)``) on the grid ``t``, by
    forward-mode differentiation (``jax.jvp`` twice)."""

    def first(s):
        return jax.jvp(drive, (s,), (jnp.ones_like(s),))

    def both(s):
        (value, rate), (_, acceleration) = jax.jvp(first, (s,), (jnp.ones_like(s),))
        return value, rate, acceleration

    return jax.vmap(both)(t)


def prescribed_coordinates(mech: Mechanism, coordinates=None) -> tuple[int, ...]:
    """Indices of the prescribed coordinates (names or indices; default the actuated ones),
    checked: as many as the constraint rows leave free."""
    if coordinates is None:
        chosen = tuple(mech.actuated)
    else:
        free = set(kinematics.free_coordinates(mech, coordinates))
        chosen = tuple(k for k in range(mech.num_bodies) if k not in free)
    scalar = configuration_layout(mech.nv, mech.quaternion_slots)[0]
    turned = [mech.coordinate_names[k] for k in chosen if scalar[k] >= mech.nq]
    if turned:
        raise ValueError(
            f"prescribed_motion: {turned} are angular velocities of ball or free joints, which "
            "have no angle of their own to prescribe (their configuration is a quaternion)"
        )
    dependent = mech.num_bodies - len(chosen)
    if dependent != mech.topology.num_rows:
        names = [mech.coordinate_names[k] for k in chosen]
        raise ValueError(
            f"prescribed_motion: {len(chosen)} prescribed coordinates {names} leave {dependent} "
            f"to the {mech.topology.num_rows} loop constraint rows; prescribe exactly "
            f"{mech.num_bodies - mech.topology.num_rows} coordinates (the degrees of freedom): "
            "name them with coordinates=[...] (loopdyn inverse: --hold for the ones beside the "
            "actuators)"
        )
    return chosen


def _sampled(drive, t, k):
    """The drive as three ``(T, k)`` arrays, whether given as a callable or as arrays."""
    if callable(drive):
        values = drive_derivatives(drive, t)
    else:
        values = tuple(jnp.asarray(x, t.dtype) for x in drive)
        if len(values) != 3:
            raise ValueError(
                "prescribed_motion: drive must be a callable t -> q_a or the three arrays "
                f"(q_a, qd_a, qdd_a), got {len(values)} arrays"
            )
    names = ("values", "rates", "accelerations")
    out = []
    for name, x in zip(names, values):
        x = jnp.reshape(x, (t.shape[0], -1)) if x.ndim < 2 else x
        if x.shape != (t.shape[0], k):
            raise ValueError(
                f"prescribed_motion: drive {name} must have shape ({t.shape[0]}, {k}) "
                f"(one row per time, one column per prescribed coordinate), got {x.shape}"
            )
        out.append(x)
    return out


def _motion(mech, t, q_a, qd_a, qdd_a, q_guess, chosen, tol, max_iter):
    """The traceable core of `prescribed_motion` (``chosen`` static)."""
    held = np.asarray(chosen, dtype=int)
    others = np.asarray([k for k in range(mech.num_bodies) if k not in chosen], dtype=int)

    entries = configuration_layout(mech.nv, mech.quaternion_slots)[0][held]  # held ones in q

    def place(q_prev, value):  # positions, one branch: start from the previous solution
        result = kinematics.try_assemble(mech, q_prev.at[entries].set(value), chosen, tol, max_iter)
        return result.q, (result.q, result.residual)

    _, (q, closure) = jax.lax.scan(place, q_guess, q_a)

    def rates(q, qd_a, qdd_a):
        jac = kinematics.loop_jacobian(mech, q)
        jac_d, jac_a = jac[:, others], jac[:, held]
        qd = jnp.zeros(mech.nv, q.dtype).at[held].set(qd_a)
        qd = qd.at[others].set(dense.solve(jac_d, -jac_a @ qd_a))
        psi = -kinematics.loop_bias(mech, q, qd)
        qdd = jnp.zeros(mech.nv, q.dtype).at[held].set(qdd_a)
        qdd = qdd.at[others].set(dense.solve(jac_d, psi - jac_a @ qdd_a))
        s = dense.singular_values(jac_d)
        return qd, qdd, s[-1] / s[0]

    qd, qdd, conditioning = jax.vmap(rates)(q, qd_a, qdd_a)
    return Motion(t, q, qd, qdd, closure, conditioning)


def state_at(mech: Mechanism, drive: Callable, t, q_guess, coordinates=None, tol=1e-12):
    """``(q, qd, qdd)`` of the prescribed motion at one time ``t`` (a scalar), assembled from
    ``q_guess`` (e.g. the current state of a simulation): traceable, for use inside ``jit`` or an
    ODE right-hand side, such as a feedforward ``tau(t, q, qd)`` from `loopdyn.inverse.solve`.
    No checks: the result's closure is not reported."""
    chosen = prescribed_coordinates(mech, coordinates)
    t = jnp.reshape(jnp.asarray(t, mech.q0.dtype), (1,))
    q_a, qd_a, qdd_a = _sampled(drive, t, len(chosen))
    motion = _motion(mech, t, q_a, qd_a, qdd_a, q_guess, chosen, tol, 50)
    return motion.q[0], motion.qd[0], motion.qdd[0]


@compilation.jit
def _compiled(mech, t, drive, q_guess, chosen, tol, max_iter, method):
    q_a, qd_a, qdd_a = _sampled(drive, t, len(chosen))
    motion = _motion(mech, t, q_a, qd_a, qdd_a, q_guess, chosen, tol, max_iter)
    if method is None:
        return motion, None
    solve = jax.vmap(lambda q, qd, qdd: inverse.solve(mech, q, qd, qdd, method))
    return motion, solve(motion.q, motion.qd, motion.qdd)


def _prepare(mech, t, q_guess, coordinates, function):
    chosen = prescribed_coordinates(mech, coordinates)
    t = jnp.asarray(t, mech.q0.dtype)
    if t.ndim != 1:
        raise ValueError(f"{function}: t must be a 1-D time grid, got shape {t.shape}")
    q_guess = mech.q0 if q_guess is None else jnp.asarray(q_guess, mech.q0.dtype)
    if q_guess.shape != (mech.nq,):
        raise ValueError(f"{function}: q_guess must have shape ({mech.nq},), got {q_guess.shape}")
    return chosen, t, q_guess


def _checked(motion, tol, function):
    if isinstance(motion.closure, jax.core.Tracer):
        return motion
    worst = float(jnp.max(motion.closure))
    if worst > tol:
        k = int(jnp.argmax(motion.closure))
        raise ValueError(
            f"{function}: the loops do not close at t = {float(motion.t[k]):g} (|Phi| = "
            f"{worst:.3e}): the prescribed coordinates leave the workspace there, or the grid is "
            "too coarse to follow one assembly branch"
        )
    return motion


def prescribed_motion(
    mech: Mechanism,
    drive: Callable | tuple,
    t: Float[Array, " T"],
    q_guess: Float[Array, " n"] | None = None,
    coordinates=None,
    tol: float = 1e-12,
    max_iter: int = 50,
) -> Motion:
    """Positions, velocities and accelerations of every coordinate on the grid ``t`` when the
    ``coordinates`` (default: the actuated ones, as many as the degrees of freedom) follow
    ``drive``: a callable ``t -> (k,)`` (derivatives by ``jax.jvp``) or three ``(T, k)``
    arrays. The first assembly starts from ``q_guess`` (default ``mech.q0``). One compiled
    program (scan over the grid for the positions, vmap for the rest); raises ``ValueError``
    naming the time where the loops do not close (not under ``jit``)."""
    chosen, t, q_guess = _prepare(mech, t, q_guess, coordinates, "prescribed_motion")
    motion, _ = _compiled(mech, t, drive, q_guess, chosen, tol, max_iter, None)
    return _checked(motion, max(tol, 1e-9), "prescribed_motion")


def prescribed_inverse_dynamics(
    mech: Mechanism,
    drive: Callable | tuple,
    t: Float[Array, " T"],
    q_guess: Float[Array, " n"] | None = None,
    coordinates=None,
    method: str = "subsystem",
    tol: float = 1e-12,
    max_iter: int = 50,
) -> tuple[Motion, inverse.InverseDynamics]:
    """`prescribed_motion` and the inverse dynamics (`loopdyn.inverse.solve`) of every state,
    in one compiled program: actuator forces, multipliers, all joint reactions and the ground
    wrench, each with a leading time axis ``(T, ...)``. Like `loopdyn.inverse.solve` it does not
    refuse a motion the actuators cannot produce (a prescribed passive coordinate that needs a
    force to follow its drive): the result's ``residual`` is then above rounding level."""
    chosen, t, q_guess = _prepare(mech, t, q_guess, coordinates, "prescribed_inverse_dynamics")
    inverse.solve_plan(mech, method)  # checks the method, warns once where it should
    motion, result = _compiled(mech, t, drive, q_guess, chosen, tol, max_iter, method)
    return _checked(motion, max(tol, 1e-9), "prescribed_inverse_dynamics"), result
