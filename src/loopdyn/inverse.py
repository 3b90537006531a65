"""Closed-loop inverse dynamics with every joint reaction: seed 002's two-level recursion.

Given a state ``(q, qd, qdd)`` that satisfies the loop constraints at position, velocity and
acceleration level, the unknowns are the actuator forces ``u`` and the multipliers ``lambda`` of
the cut joints. With the spanning tree's joint forces ``tau_id = I qdd + C qd + g - N^T f_spring
- tau_joints`` from the recursive Newton-Euler pass (seed 002 eq. 10, left-hand side; the
joints' armature in ``I``, their dampers and springs in ``tau_joints``), they satisfy

    tau_id = B u + J^T lambda                       (seed 002 eqs. 10, 14; seed 000 eq. 10)

with ``B`` the selection of the actuated coordinates. Two ways to solve it (``method``):

- ``"system"``: all unknowns in one solve of the ``n x (a + m)`` matrix ``[B  J^T]`` (seed 002
  eq. 14, "system approach"; 7x7 for the carpet scraper);
- ``"subsystem"`` (default): the subsystem-level recursion of seed 002 §2 and §5. Each step
  solves the rows of one subsystem for its actuator forces and the multipliers of the loops not
  yet known, whose values then enter the later steps as known external forces (4x4, 2x2, 1x1 for
  the scraper). A subsystem is taken when it is determinate, decided by the rank of its step
  matrix at closed configurations (`solve_plan`), not by counting unknowns: an idle or passive
  freedom (a coupler spinning between two ball joints, a pendulum hanging from a link) makes a
  square step singular. Subsystems that never become determinate are solved together as one
  system (the four-bar: one 3x3 step); the answer is the same, only the sizes differ.

More actuators than degrees of freedom get the minimum-norm actuator forces (a warning says so);
a motion that the actuators cannot produce is refused with the unbalanced generalized force
(fewer actuators than degrees of freedom are fine where the motion is producible: idle and
passive freedoms). A configuration where the forces are not determined (a change point of a
loop, an actuator singularity) is refused with the loop named, never answered with NaN.

Then the body-level recursion (seed 002 eqs. 11-12): with the multipliers applied to the cut
bodies as known external wrenches, the wrench every tree joint carries is the sum over its
subtree of inertia wrenches minus applied wrenches (the tips -> base pass of `tree`).

Reactions (``InverseDynamics.reactions``), one per entry of ``mech.joint_names``: the wrench that
the joint's parent body exerts on its child body through the joint, in world axes, about the
joint point (planar ``[n_z, f_x, f_y]``, spatial ``[n; f]``, the order of `loopdyn.spatial`). It
includes the actuator's force: its component along the joint's motion is the actuator force (zero
for a passive joint). The joint point is the child's joint frame origin; for a cut joint the
parent is body a and the child body b (``Mechanism.cut_joints``), the point is frame b's origin.
A spherical or universal tree joint (a chain through massless bodies) reports the wrench on its
last body, the real child.

`augmented` computes the same numbers by seed 002's "traditional" method, one dense solve of
all rigid bodies' Newton-Euler equations for every reaction at once (21x21 for the scraper): the
independent check in the tests and the baseline of benchmarks/inverse.py.

Citations and the notation table: docs/references.md.
"""

from __future__ import annotations

import itertools
import warnings
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from . import compilation, configuration, dense, forces, kinematics, spatial, topology, tree
from ._checks import check_arrays, check_finite
from .mechanism import Mechanism

METHODS = ("subsystem", "system")
_ROWS = np.array(spatial.PLANAR_ROWS)


class InverseDynamics(NamedTuple):
    """Outcome of `inverse_dynamics` (a pytree: batches under ``vmap`` field by field).

    ``actuator_forces`` ``(a,)``: aligned with ``mech.actuator_names``. ``tau`` ``(n,)``: the same
    as generalized forces on all coordinates (zero where passive), what forward dynamics takes.
    ``multipliers`` ``(m,)``: lambda of every cut joint stacked in loop-row order (cut joint i:
    rows ``mech.topology.rows(i)``); a point row's multiplier is the force body a exerts on body
    b, world axes. ``reactions`` ``(len(mech.joint_names), d)``: see the module docstring.
    ``ground_force`` (planar ``(2,)``, spatial ``(3,)``) and ``ground_moment`` (planar ``()``,
    spatial ``(3,)``, about the world origin): the resultant wrench the ground exerts on the
    mechanism through its joints and springs. ``residual``: largest unbalanced generalized force
    ``|tau_id - B u - J^T lambda|`` (zero up to rounding for a motion the actuators produce).
    ``closure``: largest loop-constraint residual of the state (position, velocity and
    acceleration level, scaled as `inverse_dynamics` checks them).
    """

    actuator_forces: Float[Array, " a"]
    tau: Float[Array, " n"]
    multipliers: Float[Array, " m"]
    reactions: Float[Array, "j d"]
    ground_force: Array
    ground_moment: Array
    residual: Float[Array, ""]
    closure: Float[Array, ""]


class Step(NamedTuple):
    """One solve of the subsystem-level recursion (static): the rows of ``coordinates`` (those of
    ``subsystems``) solved for the forces of the ``actuators`` (coordinate indices) and the
    multipliers of ``loops``; ``shape`` is the matrix size (rows, unknowns)."""

    subsystems: tuple[int, ...]
    coordinates: tuple[int, ...]
    actuators: tuple[int, ...]
    loops: tuple[int, ...]
    shape: tuple[int, int]


def _step(mech, subsystems, loops):
    top = mech.topology
    coordinates = tuple(k for j in subsystems for k in top.subsystems[j])
    actuators = tuple(k for k in mech.actuated if k in coordinates)
    unknowns = len(actuators) + sum(top.loops[i].rows for i in loops)
    return Step(
        tuple(subsystems), coordinates, actuators, tuple(loops), (len(coordinates), unknowns)
    )


# The fields the loop Jacobian depends on (not masses, gravity or springs): the rank decisions of
# `solve_plan` depend on these only.
_GEOMETRY = (
    "axis",
    "parent_rotation",
    "parent_position",
    "child_rotation",
    "child_position",
    "cut_axis",
    "cut_rotation_a",
    "cut_position_a",
    "cut_rotation_b",
    "cut_position_b",
    "q0",
)
_RANK_RTOL = 1e-9  # singular values below this fraction of the largest count as zero
_plans: dict = {}  # (structure, geometry bytes), and structure -> subsystem plan
_loop_programs: dict = {}  # structure -> compiled (Phi, J) at q


def _geometry_key(mech):
    """The bytes of the mechanism's geometry, or ``None`` when it is traced."""
    try:
        return tuple(np.asarray(getattr(mech, f)).tobytes() for f in _GEOMETRY)
    except jax.errors.TracerArrayConversionError:
        return None


def _geometry(mech):
    """``mech`` with its geometry as numpy arrays and its other arrays zeroed (so that a traced
    mass or inertia does not stop the rank decisions)."""
    arrays = {
        f: np.asarray(x) if f in _GEOMETRY else np.zeros(np.shape(x))
        for f in mech.__dataclass_fields__
        if isinstance(x := getattr(mech, f), jax.Array | np.ndarray)
    }
    return eqx.tree_at(lambda m: [getattr(m, f) for f in arrays], mech, list(arrays.values()))


def _loop_closure(mech, q):
    residual, jac, _ = kinematics.loop_terms(mech, q, jnp.zeros(mech.nv, q.dtype))
    return residual, jac


def _closed_jacobians(mech, count=3, seed=0, tol=1e-12, max_iter=30):
    """J at up to ``count`` closed configurations: ``q0`` and random guesses near it, each closed
    by Newton's method with minimum-norm steps. Runs a compiled program directly (also inside a
    trace, where the geometry is concrete)."""
    structure = jax.tree_util.tree_structure(mech)
    if structure not in _loop_programs:
        _loop_programs[structure] = (
            compilation.array_jit(_loop_closure).lower(mech, mech.q0).compile()
        )
    program = _loop_programs[structure]
    rng = np.random.default_rng(seed)
    q0 = np.asarray(mech.q0, dtype=float)
    out = []
    moves = [0.1 * rng.standard_normal(mech.nv) for _ in range(count - 1)]

    def integrate(q, v):  # on concrete values, also inside a trace
        with jax.ensure_compile_time_eval():
            return np.asarray(configuration.integrate(mech, q, v))

    for start in [q0] + [integrate(q0, m) for m in moves]:
        q = start
        for _ in range(max_iter):
            residual, jac = (np.asarray(x) for x in program(mech, q))
            if not np.all(np.isfinite(jac)):
                break
            if np.linalg.norm(residual) <= tol * (1.0 + np.linalg.norm(q)):
                out.append(jac)
                break
            step = np.linalg.lstsq(jac, residual, rcond=None)[0]
            q = integrate(q, -step)
    return out


def _matrix(mech, step, jac):
    """The matrix ``[B  J^T]`` of a step (its rows: the step's coordinates)."""
    top, cols = mech.topology, np.array(step.coordinates, dtype=int)
    select = np.eye(mech.num_bodies)[np.ix_(cols, np.array(step.actuators, dtype=int))]
    return np.concatenate([select] + [jac[top.rows(i)][:, cols].T for i in step.loops], axis=1)


def _rank(matrix):
    return int(_rank_of(np.linalg.svd(matrix, compute_uv=False)))


def _rank_of(s):
    """The rank that singular values ``s`` give (NumPy or JAX arrays)."""
    return (s > _RANK_RTOL * s.max(initial=0.0)).sum()


@compilation.by_identity
def _whole_step(mech) -> Step:
    """The one step over every subsystem and loop."""
    top = mech.topology
    return _step(mech, tuple(range(len(top.subsystems))), tuple(range(len(top.loops))))


@compilation.by_identity
def _subsystem_plan(mech):
    """Seed 002's subsystem recursion with determinacy decided by rank: a subsystem is solved
    alone when its step matrix has full column rank at closed configurations near ``q0`` (the
    largest rank over them: generic, not that of a special pose). Counting unknowns is not enough:
    an idle freedom (a coupler spinning about its own axis between two ball joints) has a zero
    column of J, so its subsystem's square step is singular at every configuration. The rest is
    solved as one system. Plans are kept per geometry, and per structure for mechanisms whose
    geometry is traced (under ``jit`` with the mechanism as an argument): the plan of the
    geometries seen eagerly, or the system step where they disagreed or none was seen. ``None``
    means one system step."""
    structure = jax.tree_util.tree_structure(mech)
    geometry = _geometry_key(mech)
    if geometry is None:
        return _plans.get(structure)
    key = (structure, geometry)
    if key not in _plans:
        top, jacobians = mech.topology, _closed_jacobians(_geometry(mech))

        def determinate(j, acting):
            step = _step(mech, (j,), acting)
            rows, unknowns = step.shape
            return unknowns <= rows and any(
                _rank(_matrix(mech, step, jac)) == unknowns for jac in jacobians
            )

        plan = None
        if jacobians:
            order, solved, stuck = topology.determinate_order(
                top.loops, top.subsystems, set(mech.actuated), determinate
            )
            plan = [_step(mech, (j,), loops) for j, loops in zip(order, solved)]
            if stuck:
                known = {i for loops in solved for i in loops}
                rest = tuple(i for i in range(len(top.loops)) if i not in known)
                plan.append(_step(mech, stuck, rest))
            plan = tuple(plan)
        _plans[key] = plan
        _plans[structure] = plan if _plans.get(structure, plan) == plan else None
    return _plans[key]


def solve_plan(mech: Mechanism, method: str = "subsystem") -> tuple[Step, ...]:
    """The sequence of solves `inverse_dynamics` performs (static).

    ``"system"``: one step over everything. ``"subsystem"``: seed 002's recursion, the subsystems
    taken in the order in which they become determinate, decided by rank (`_subsystem_plan`);
    those that never do are solved together as one system at the end. Where the rank cannot be
    decided (no closed configuration near ``q0``, or the geometry traced under ``jit`` before any
    eager call planned this mechanism: call ``solve_plan(mech)`` once outside), the system step.
    Warns when the mechanism is redundantly actuated (more
    actuators than degrees of freedom)."""
    if method not in METHODS:
        raise ValueError(f"inverse_dynamics: method must be one of {METHODS}, got {method!r}")
    if (redundant := _redundant_actuation(mech)) is not None:
        warnings.warn(redundant, stacklevel=3)
    plan = _subsystem_plan(mech) if method == "subsystem" else None
    return (_whole_step(mech),) if plan is None else plan


@compilation.by_identity
def _redundant_actuation(mech) -> str | None:
    """The warning for more actuators than degrees of freedom, or None (once per mechanism: its
    properties cost microseconds to read, an eager call's budget)."""
    top, actuated = mech.topology, mech.actuated
    if len(actuated) <= top.dof:
        return None
    return (
        f"{len(actuated)} actuators {list(mech.actuator_names)} for {top.dof} degrees of "
        "freedom: redundantly actuated, the minimum-norm actuator forces are returned"
    )


def _solve(matrix, rhs, num_actuators):
    """Unknowns ``[u; lambda]`` of ``matrix @ x = rhs``: a square solve, least squares when there
    are fewer unknowns than rows (a consistent motion satisfies the extra rows), and where there
    are more, the actuator forces ``u`` of least norm (lambda free): ``P B u = P rhs`` with ``P``
    the projector off the range of the lambda columns."""
    rows, unknowns = matrix.shape
    if unknowns == rows:
        return dense.solve(matrix, rhs)
    if unknowns < rows:
        return dense.lstsq(matrix, rhs)
    b, lt = matrix[:, :num_actuators], matrix[:, num_actuators:]
    lt_pinv = dense.pinv(lt)
    off = jnp.eye(rows, dtype=rhs.dtype) - lt @ lt_pinv
    u = dense.lstsq(off @ b, off @ rhs)
    return jnp.concatenate([u, lt_pinv @ (rhs - b @ u)])


def _multipliers(mech, plan, tau_id, jac):
    """Actuator forces and multipliers, step by step (seed 002 §5): each step's known loops enter
    as external generalized forces ``J_i^T lambda_i`` on its rows."""
    top = mech.topology
    lam = [None] * len(top.loops)
    force = {}
    for step in plan:
        cols = np.array(step.coordinates)
        rhs = tau_id[cols]
        for i, loop in enumerate(top.loops):
            if lam[i] is not None and set(loop.subsystems) & set(step.subsystems):
                rhs = rhs - jac[top.rows(i)][:, cols].T @ lam[i]
        select = np.eye(mech.num_bodies)[np.ix_(cols, np.array(step.actuators, dtype=int))]
        matrix = jnp.concatenate(
            [jnp.asarray(select, jac.dtype)] + [jac[top.rows(i)][:, cols].T for i in step.loops],
            axis=1,
        )
        x = _solve(matrix, rhs, len(step.actuators))
        force.update(zip(step.actuators, x[: len(step.actuators)]))
        start = len(step.actuators)
        for i in step.loops:
            lam[i] = x[start : start + top.loops[i].rows]
            start += top.loops[i].rows
    u = jnp.stack([force[k] for k in mech.actuated]) if mech.actuated else jnp.zeros(0, jac.dtype)
    lam = jnp.concatenate(lam) if lam else jnp.zeros(0, jac.dtype)
    return u, lam


def _row_wrenches(mech, q):
    """World wrenches ``[n; f]`` (about the world origin) that a unit multiplier of every
    constraint row applies to body b and body a of its cut joint, ``(r, 2, 6)``, and frame b's
    origin of every cut joint ``(c, 3)``. Per row (rows of `kinematics`): a point or across row
    pushes with ``e`` at frame b's origin (on body a, for a point row, at frame a's; an across_b
    row at frame a's on both bodies: the derivative of the row), an angle row turns body b with
    the moment ``x X e``; body a gets the opposite."""
    ends, rows = kinematics._ends(mech, tree.body_motion(mech, q)), kinematics._rows(mech)
    return kinematics.row_wrenches(ends, rows), ends.position[:, 1]


def _cut_wrenches(mech, q, lam):
    """The wrenches of `_row_wrenches` scaled by the multipliers and summed per cut joint,
    ``(c, 2, 6)``, and frame b's origin of every cut joint ``(c, 3)``."""
    per_row, points = _row_wrenches(mech, q)
    rows = kinematics._rows(mech)
    sums = np.zeros((len(mech.cut_joints), len(rows.cut)))
    sums[rows.cut, np.arange(len(rows.cut))] = 1.0
    return jnp.einsum("cr,rsk->csk", sums, per_row * lam[:, None, None]), points


def _to_world(mech, rotation, position, wrench):
    """Body-coordinate wrenches about the body origins -> spatial world wrenches about the world
    origin."""
    wrench = kinematics._spatial(mech, wrench)
    force = jnp.einsum("nij,nj->ni", rotation, wrench[:, 3:])
    moment = jnp.einsum("nij,nj->ni", rotation, wrench[:, :3]) + jnp.cross(position, force)
    return jnp.concatenate([moment, force], -1)


def _about(point, wrench):
    """A world wrench about the world origin, moved to be about ``point``."""
    return jnp.concatenate(
        [wrench[..., :3] - jnp.cross(point, wrench[..., 3:]), wrench[..., 3:]], -1
    )


def _chain(mech, name):
    """Coordinates of tree joint ``name`` (one, or a chain through massless bodies for a
    spherical or universal joint); empty for a cut joint."""
    if name in mech.coordinate_names:
        return [mech.coordinate_names.index(name)]
    return [k for k, c in enumerate(mech.coordinate_names) if c.startswith(f"{name}[")]


def _joint_sources(mech):
    """For every joint name: ``("tree", body)`` (the real child body) or ``("cut", index)``."""
    out = []
    for name in mech.joint_names:
        chain = _chain(mech, name)
        if chain:
            out.append(("tree", chain[-1]))
        else:
            out.append(("cut", [c.name for c in mech.cut_joints].index(name)))
    return out


def joint_points(mech: Mechanism, q: Float[Array, " n"]) -> Float[Array, "j 3"]:
    """World position of every joint of ``mech.joint_names``: the point the reactions refer to."""
    q = check_arrays(mech, "joint_points", q=q)
    position, rotation = tree.forward_kinematics(mech, q)
    tree_points = position + jnp.einsum("nij,nj->ni", rotation, mech.child_position)
    cut_points = (
        kinematics._ends(mech, tree.body_motion(mech, q)).position[:, 1]
        if mech.cut_joints
        else None
    )
    return jnp.stack(
        [tree_points[k] if kind == "tree" else cut_points[k] for kind, k in _joint_sources(mech)]
    )


def reaction_magnitudes(mech: Mechanism, reactions: Array) -> tuple[Array, Array]:
    """Magnitudes of the reaction forces and moments (``reactions`` ``(..., j, d)`` as
    `InverseDynamics` gives them): ``|f|`` and ``|n_z|`` (planar) or ``|n|`` (spatial), each
    ``(..., j)``."""
    if mech.planar:
        return jnp.linalg.norm(reactions[..., 1:], axis=-1), jnp.abs(reactions[..., 0])
    return jnp.linalg.norm(reactions[..., 3:], axis=-1), jnp.linalg.norm(
        reactions[..., :3], axis=-1
    )


_STATE = (
    "inverse_dynamics: the state does not satisfy the loop constraints to tol={tol:g} "
    "(Phi(q) = 0, J qd = 0, J qdd = -J' qd); assemble it with kinematics.assemble and "
    "project_velocity, or use prescribed.prescribed_motion"
)
_UNDETERMINED = "inverse_dynamics: the forces are not determined at this configuration"
_LEVELS = ("position", "velocity", "acceleration")


def _unproducible(mech):
    return (
        f"inverse_dynamics: the actuators {list(mech.actuator_names)} cannot produce this motion "
        f"({len(mech.actuated)} actuators for {mech.topology.dof} degrees of freedom)"
    )


@compilation.by_identity
def _layout(mech):
    """``(m, n, rows and columns of [B  J^T])``: the sizes `_Evaluated.checks` is laid out by."""
    return mech.topology.num_rows, mech.nv, _whole_step(mech).shape


def _check(mech, q, evaluated, tol):
    """Raise naming the problem where an eager evaluation fails a check, in this order: a state
    off the loop constraints (the loop and residual named), forces not determined (J rank
    deficient: a change point or dependent loop rows, `kinematics.check_jacobian` names the
    loop; ``[B  J^T]`` rank deficient: an actuator singularity; a non-finite result), a motion
    the actuators cannot produce (the unbalanced generalized force named). One transfer of
    `_Evaluated.checks`; the residuals are read only to name a failure."""
    checks = np.asarray(evaluated.checks)
    position, velocity, acceleration, producible, finite = checks[:5].tolist()
    m, n, (rows, columns) = _layout(mech)
    if max(position, velocity, acceleration) > tol:  # the loop named from the residual itself
        top, scales = mech.topology, checks[5:8]
        for k, level in enumerate(_LEVELS):
            r = np.abs(checks[8 + k * m : 8 + (k + 1) * m]) / scales[k]
            if r.max(initial=0.0) > tol:
                i = next(i for i in range(len(top.loops)) if r[top.rows(i)].max() > tol)
                raise ValueError(
                    f"{_STATE.format(tol=tol)}: the {level} residual of the loop of cut joint "
                    f"{top.loops[i].name!r} is {r[top.rows(i)].max() * scales[k]:.3e}"
                )
    rank, whole_rank, whole_finite = checks[8 + 3 * m + n :].tolist()
    if m and rank < m:
        kinematics.check_jacobian(mech, q, rtol=_RANK_RTOL)  # raises naming the loop
    if m and whole_finite and whole_rank < min(rows, columns):
        raise ValueError(
            f"{_UNDETERMINED}: the actuators {list(mech.actuator_names)} lose control of the "
            "motion here (an actuator singularity: [B  J^T] is rank deficient, the driving "
            "forces would be unbounded or not unique)"
        )
    if finite == 0.0:
        raise ValueError(
            f"{_UNDETERMINED}: the result is not finite (check q, qd, qdd for NaN or inf)"
        )
    if producible > tol:
        r = np.abs(checks[8 + 3 * m : 8 + 3 * m + n])
        worst = mech.coordinate_names[int(r.argmax())]
        raise ValueError(
            f"{_unproducible(mech)}: unbalanced generalized force {r.max():.3e} at coordinate "
            f"{worst!r}"
        )


def _guarded(mech, evaluated, tol):
    """The result with `_check`'s checks under a trace as ``eqx.error_if``s (they run with the
    program; J's rank is not checked there, a non-finite result is)."""
    flags = evaluated.checks[:5]
    checks = (
        (jnp.any(flags[:3] > tol), _STATE.format(tol=tol)),
        (flags[4] == 0.0, _UNDETERMINED + " (non-finite result)"),
        (flags[3] > tol, _unproducible(mech)),
    )

    def guard(x):
        for failed, message in checks:
            x = eqx.error_if(x, failed, message)
        return x

    return jax.tree_util.tree_map(guard, evaluated.result)


class _Evaluated(NamedTuple):
    result: InverseDynamics
    # What the checks read, one array (one transfer for an eager call): the residual of each
    # loop level over its scale (3), |unbalanced| over 1 + |tau_id|, 1 where the result is
    # finite (else 0), the three scales, the residuals Phi, J qd and J qdd + J' qd (m each),
    # the unbalanced forces tau_id - B u - J^T lambda (n) and, for eager calls, the ranks of J
    # and of [B  J^T] and 1 where the latter's singular values are finite.
    checks: Array


def _ranks(mech, jac):
    """The ranks of J and of ``[B  J^T]`` (its coordinates in their order: the rank does not
    change) from their singular values, and whether the latter are finite."""
    whole = jnp.concatenate([np.eye(mech.nv)[:, list(mech.actuated)], jac.T], axis=1)
    spectra = [dense.singular_values(x) if x.size else x[:0, 0] for x in (jac, whole)]
    finite = jnp.all(jnp.isfinite(spectra[1]))
    return jnp.stack([_rank_of(spectra[0]), _rank_of(spectra[1]), finite]).astype(jac.dtype)


def _evaluate(mech, q, qd, qdd, plan, spectra=False) -> _Evaluated:
    """The traceable core: no checks (``plan`` static, from `solve_plan`); ``spectra``: also
    the ranks the eager checks read (`_check`)."""
    position, rotation = tree.forward_kinematics(mech, q)
    springs = forces.spring_wrenches(mech, q, qd) if mech.spring_names else None
    carried = tree.joint_wrenches(mech, q, qd, qdd, springs)  # tips -> base, without the loops
    # The joints' own elements: the armature takes armature qdd, dampers, springs, friction and
    # gravity compensation give back forces.passive_forces; the rest is what actuators and loops
    # supply.
    passive = mech.armature * qdd - forces.passive_forces(mech, q, qd)
    tau_id = jnp.sum(tree.motion_subspaces(mech) * carried, axis=-1) + passive
    phi, jac, bias = kinematics.loop_terms(mech, q, qd)
    scales = (1.0, 1.0 + jnp.max(jnp.abs(qd)), 1.0 + jnp.max(jnp.abs(qdd)) + jnp.max(qd**2))
    levels = (phi, jac @ qd, jac @ qdd + bias)
    ratios = jnp.stack([jnp.max(jnp.abs(r), initial=0.0) / s for r, s in zip(levels, scales)])
    u, lam = _multipliers(mech, plan, tau_id, jac)
    tau = jnp.zeros(mech.nv, q.dtype).at[np.array(mech.actuated, dtype=int)].set(u)
    unbalanced = tau_id - tau - jac.T @ lam

    # Body-level recursion (seed 002 eq. 11): the loops' wrenches are external to the bodies
    # they act on, so every tree joint between a cut body and the ground carries them too.
    world = _to_world(mech, rotation, position, carried)
    if mech.cut_joints:
        cut, cut_points = _cut_wrenches(mech, q, lam)
        sides = np.array([[c.body_a, c.body_b] for c in mech.cut_joints])
        on_body = np.zeros((mech.num_bodies, len(mech.cut_joints), 2))
        for c, side in np.argwhere(sides >= 0):
            k = sides[c, side]
            while k >= 0:  # tips -> base
                on_body[k, c, 1 - side] += 1.0
                k = mech.parent[k]
        world = world - jnp.einsum("kcs,csd->kd", on_body, cut)
    joint_point = position + jnp.einsum("nij,nj->ni", rotation, mech.child_position)
    reactions = []
    for kind, k in _joint_sources(mech):
        if kind == "tree":
            reactions.append(_about(joint_point[k], world[k]))
        else:
            reactions.append(_about(cut_points[k], cut[k, 0]))
    reactions = jnp.stack(reactions)

    # Ground: root tree joints, cut joints to the ground, springs to the ground.
    ground = sum(world[k] for k, p in enumerate(mech.parent) if p < 0)
    for c, joint in enumerate(mech.cut_joints):
        if joint.body_a < 0:
            ground = ground + cut[c, 0]
        if joint.body_b < 0:
            ground = ground + cut[c, 1]
    if springs is not None:  # springs between moving bodies cancel in the sum
        ground = ground + jnp.sum(_to_world(mech, rotation, position, springs), axis=0)
    if mech.planar:
        reactions = reactions[:, _ROWS]
        ground_force, ground_moment = ground[3:5], ground[2]
    else:
        ground_force, ground_moment = ground[3:], ground[:3]
    result = InverseDynamics(
        u,
        tau,
        lam,
        reactions,
        ground_force,
        ground_moment,
        jnp.max(jnp.abs(unbalanced), initial=0.0),
        jnp.max(ratios),
    )
    finite = jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(result)]))
    producible = result.residual / (1.0 + jnp.max(jnp.abs(tau_id)))
    flags = jnp.stack([producible, finite.astype(ratios.dtype)])
    parts = [ratios, flags, jnp.stack(jnp.broadcast_arrays(*scales)), *levels, unbalanced]
    return _Evaluated(result, jnp.concatenate(parts + ([_ranks(mech, jac)] if spectra else [])))


_evaluate_once = compilation.eager(
    lambda mech, q, qd, qdd, *, plan, spectra: (_evaluate(mech, q, qd, qdd, plan, spectra), None),
    lambda q, qd, qdd: check_finite("inverse_dynamics", q=q, qd=qd, qdd=qdd),
)


def solve(mech: Mechanism, q, qd, qdd, method: str = "subsystem") -> InverseDynamics:
    """The traceable core of `inverse_dynamics`: no argument or state checks (read ``closure``
    and ``residual`` of the result), no warnings; for use inside ``jit``/``vmap``/``grad``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plan = solve_plan(mech, method)
    return _evaluate(mech, q, qd, qdd, plan).result


def inverse_dynamics(
    mech: Mechanism,
    q: Float[Array, " n"],
    qd: Float[Array, " n"],
    qdd: Float[Array, " n"],
    method: str = "subsystem",
    tol: float = 1e-6,
    check: bool = True,
) -> InverseDynamics:
    """Actuator forces, cut-joint multipliers and the reaction at every joint of a closed-loop
    mechanism moving with ``(q, qd, qdd)`` (module docstring; seed 002 eqs. 10-14).

    The state must satisfy the loop constraints: position, velocity and acceleration residuals
    above ``tol`` (velocity and acceleration relative to ``1 + |qd|`` and ``1 + |qdd| + |qd|^2``)
    are refused with the loop named (``ValueError``; under ``jit``/``vmap`` through
    ``eqx.error_if``), and so is a motion the actuators cannot produce. ``check=False`` skips
    both (the result's ``closure`` and ``residual`` still tell): a jitted program with
    ``eqx.error_if`` holds a host callback, which keeps it out of JAX's persistent compilation
    cache. Called eagerly it runs one compiled program per mechanism topology and method.
    Works under ``jit``, ``vmap`` and ``grad``.
    """
    eager = compilation.runs_eagerly(mech, q, qd, qdd)
    q, qd, qdd = check_arrays(mech, "inverse_dynamics", eager=eager, q=q, qd=qd, qdd=qdd)
    plan = solve_plan(mech, method)
    evaluated, _ = _evaluate_once(mech, q, qd, qdd, plan=plan, spectra=eager and check)
    if not check:
        return evaluated.result
    if isinstance(evaluated.checks, jax.core.Tracer):
        return _guarded(mech, evaluated, tol)
    _check(mech, q, evaluated, tol)
    return evaluated.result


class Augmented(NamedTuple):
    """Outcome of `augmented`: the fields of `InverseDynamics` it computes."""

    actuator_forces: Float[Array, " a"]
    multipliers: Float[Array, " m"]
    reactions: Float[Array, "j d"]
    ground_force: Array
    ground_moment: Array


def augmented_shape(mech: Mechanism) -> tuple[int, int]:
    """``(equations, unknowns)`` of `augmented`'s system: 21x21 for the carpet scraper, 18x18
    for the RSSR (seed 002 Tables 2-3)."""
    rigid = mech.num_bodies - sum(max(len(_chain(mech, j)) - 1, 0) for j in mech.joint_names)
    unknowns = sum(
        mech.dim if set(_chain(mech, j)) & set(mech.actuated) else mech.dim - len(_chain(mech, j))
        for j in mech.joint_names
        if _chain(mech, j)
    )
    return mech.dim * rigid, unknowns + mech.topology.num_rows


def augmented(mech: Mechanism, q, qd, qdd) -> Augmented:
    """Seed 002 §5's "traditional" method: every joint reaction and actuator force at once from
    the unconstrained Newton-Euler equations of all rigid bodies (`augmented_shape`: 21x21 for the
    carpet scraper, 18x18 for the RSSR), with no recursion over the tree: the benchmark's baseline
    and an independent check of `inverse_dynamics`.

    Unknowns per joint (world axes, about the world origin): a passive tree joint, or a chain of
    revolutes through massless bodies (spherical, universal), transmits any wrench that does no
    work on its joint twists (planar 2, spatial 5, 4 or 3 components); an actuated one any wrench,
    whose work on the joint twist is the actuator force; a cut joint transmits its constraint
    rows' wrenches (`_row_wrenches`) times the multipliers. Equations: for each rigid body, the
    wrenches from its parents' joints minus those to its children's equal its inertia wrench less
    gravity and springs. The joints' own elements (armature, dampers, springs, friction) and
    gravity compensation are known joint wrenches: a couple about a revolute axis, a force along
    a prismatic one, whose work on the joint twist is ``tau_passive - armature qdd``
    (`forces.passive_forces`; gravity compensation, a force on the bodies, then changes the
    joint reactions it shows, not the actuator forces or multipliers). One dense solve (LU; least squares where the
    system is not square)."""
    if mech.coupling_names:
        raise ValueError(
            f"augmented: the couplings {list(mech.coupling_names)} constrain coordinates, not "
            "bodies, and this body-level method does not model them: use inverse_dynamics"
        )
    dim, n = mech.dim, mech.num_bodies
    springs = forces.spring_wrenches(mech, q, qd) if mech.spring_names else None
    position, rotation, s, body_wrench = tree.body_wrenches(mech, q, qd, qdd, springs)
    known = forces.passive_forces(mech, q, qd) - mech.armature * qdd
    turns = np.array([kind != "prismatic" for kind in mech.joint_kinds])[:, None]
    part = np.arange(dim)[None] < (1 if mech.planar else 3)  # the angular rows of s
    pure = jnp.where(part == turns, s, 0.0)  # couple about the axis, or force along it
    joint_wrench = pure * (known / jnp.sum(pure * s, axis=-1))[:, None]  # work known on s
    internal = {k for j in mech.joint_names for k in _chain(mech, j)[:-1]}
    rigid = [k for k in range(n) if k not in internal]
    if mech.cut_joints:
        per_row, cut_points = _row_wrenches(mech, q)
        per_row = per_row[:, 0][:, _ROWS] if mech.planar else per_row[:, 0]
        row_cut = kinematics._rows(mech).cut
    # Columns of the unknowns, joint by joint: (basis, parent, child, point, actuated twist).
    columns = []
    tree_points = position + jnp.einsum("nij,nj->ni", rotation, mech.child_position)
    for name in mech.joint_names:
        chain = _chain(mech, name)
        if chain:
            twists = jnp.stack([s[k] for k in chain], axis=1)
            driven = bool(set(chain) & set(mech.actuated))
            # a passive joint's wrenches do no work on its twists: an orthonormal basis of them
            basis = jnp.eye(dim, dtype=q.dtype) if driven else dense.complement(twists)
            ends = (mech.parent[chain[0]], chain[-1])
            columns.append((basis, *ends, tree_points[chain[-1]], s[chain[0]] if driven else None))
        else:
            c = [cut.name for cut in mech.cut_joints].index(name)
            basis = per_row[np.flatnonzero(row_cut == c)].T
            ends = (mech.cut_joints[c].body_a, mech.cut_joints[c].body_b)
            columns.append((basis, *ends, cut_points[c], None))
    row_of = {k: r for r, k in enumerate(rigid)}
    width = [basis.shape[1] for basis, *_ in columns]
    offsets = np.concatenate([[0], np.cumsum(width)])
    matrix = jnp.zeros((dim * len(rigid), int(offsets[-1])), q.dtype)
    for (basis, parent, child, _, _), first in zip(columns, offsets):
        for body, sign in ((child, 1.0), (parent, -1.0)):
            if body >= 0:
                rows = slice(row_of[body] * dim, (row_of[body] + 1) * dim)
                matrix = matrix.at[rows, first : first + basis.shape[1]].set(sign * basis)
    for k, parent in enumerate(mech.parent):  # known wrenches: + on the child, - on the parent
        body_wrench = body_wrench.at[k].add(-joint_wrench[k])
        if parent >= 0:
            body_wrench = body_wrench.at[parent].add(joint_wrench[k])
    rhs = jnp.concatenate([body_wrench[k] for k in rigid])
    if matrix.shape[0] == matrix.shape[1]:
        x = dense.solve(matrix, rhs)
    else:
        x = dense.lstsq(matrix, rhs)
    unknowns = [x[a:b] for a, b in itertools.pairwise(offsets)]
    wrenches = [basis @ xj for (basis, *_), xj in zip(columns, unknowns)]
    actuator, lam = {}, {}
    for (_, _, _, _, twist), xj, w, name in zip(columns, unknowns, wrenches, mech.joint_names):
        chain = _chain(mech, name)
        if twist is not None:
            actuator[chain[0]] = twist @ w
        if not chain:
            lam[[cut.name for cut in mech.cut_joints].index(name)] = xj
    carried = [  # a tree joint carries its own elements' known wrench too
        w + sum((joint_wrench[k] for k in _chain(mech, name)), 0.0)
        for w, name in zip(wrenches, mech.joint_names)
    ]
    spatial_wrenches = kinematics._spatial(mech, jnp.stack(carried))
    points = jnp.stack([point for *_, point, _ in columns])
    reactions = jax.vmap(_about)(points, spatial_wrenches)
    ground = jnp.zeros(6, q.dtype)
    for (_, parent, child, _, _), w in zip(columns, spatial_wrenches):
        ground = ground + (w if parent < 0 else 0.0) - (w if child < 0 else 0.0)
    if springs is not None:
        world = _to_world(mech, rotation, position, springs)
        ground = ground + jnp.sum(world, axis=0)
    if mech.planar:
        reactions, ground_force, ground_moment = reactions[:, _ROWS], ground[3:5], ground[2]
    else:
        ground_force, ground_moment = ground[3:], ground[:3]
    zero = jnp.zeros(0, q.dtype)
    return Augmented(
        jnp.stack([actuator[k] for k in mech.actuated]) if mech.actuated else zero,
        jnp.concatenate([lam[c] for c in range(len(lam))]) if lam else zero,
        reactions,
        ground_force,
        ground_moment,
    )
