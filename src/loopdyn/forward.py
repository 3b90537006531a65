"""Closed-loop forward dynamics: joint accelerations ``qdd`` and loop-closure multipliers ``lam``.

The mechanism is its spanning tree plus loop-closure constraints ``Phi(q) = 0`` (`kinematics`).
With ``phi = tau - C qd - g + N^T f`` (joint forces, velocity and gravity terms, spring and user
wrenches) the equations of motion and the acceleration constraints are (seed 000 eqs. 9-10)::

    I qdd = phi + J^T lam,        J qdd = Psi = -J' qd (+ a stabilising correction).

Five methods solve them and give the same numbers (the first four on every mechanism):

- ``"system"``: the dense KKT matrix ``[[I, -J^T], [J, 0]]`` (seed 000 eq. 10).
- ``"slm"``: system-level multipliers: ``(J I^-1 J^T) lam = Psi - J I^-1 phi``, then
  ``qdd = I^-1 (phi + J^T lam)`` (seed 000 eqs. 11-12).
- ``"sslm"``: subsystem-level multipliers (seed 000 §3, eqs. 19-25): the tree splits into subsystems
  whose inertia matrices ``I_j`` are the diagonal blocks of ``I``; each gives
  ``phi_hat_j = I_j^-1 phi_j`` and ``I_hat_{i,j}^T = I_j^-1 J_{i,j}^T`` for the loops i acting on
  it, only for the non-zero blocks of J. The GICM blocks
  ``G_{r,s} = sum_j J_{r,j} I_hat_{s,j}^T`` are reduced by block Gaussian elimination in the
  static order of `topology.elimination_order` (seed 000 eqs. 34-36 and Appendix A.4), and the
  accelerations are ``qdd_j = phi_hat_j + sum_i I_hat_{i,j}^T lam_i`` (seed 000 eq. 21). The
  tree gives ``phi`` and the ``I_j`` from one pass each way, and ``phi_hat_j`` comes from the
  factor of ``I_j`` that the ``I_hat`` need anyway (an articulated-body pass for ``phi_hat``
  instead made the 3-RRR's lowered program 2,551 instead of 2,284 operations and its evaluation
  5-9 % slower, single and batched). Blocks of equal shape are stacked and handled
  by one batched operation each, and a chain or forest of equal-size loops is eliminated by a
  ``lax.scan`` (`_plan`), so the compiled program grows with the number of block shapes, not
  with the number of loops (up to `_PER_BLOCK_LOOPS` loops it runs block by block). Where every
  loop couples with every other (all through one subsystem; also one loop, or two coupled
  ones), the GICM is dense and is factorised whole (`_mode`).
- ``"embedding"``: minimal coordinates: with independent coordinates ``q_i`` and dependent ``q_d``,
  ``qd = T qd_i`` and ``qdd = T qdd_i + c`` with ``T = [1; -J_d^-1 J_i]``, ``J c = Psi``,
  ``c_i = 0``; the reduced equations ``T^T I T qdd_i = T^T (phi - I c)`` need no multipliers
  (seed 003 §2, constraint embedding). The multipliers are reported as the least-squares solution
  of ``J^T lam = I qdd - phi``.
- ``"recursive"``: exact elimination over the body graph (bodies as nodes, tree and cut joints
  between two bodies as edges) from its leaves to its roots and back, O(bodies) like the
  articulated-body recursion, whatever the number of loops through one subsystem (`recursive`).
  It applies where that graph is a forest and no coordinates are coupled
  (`recursive.supported`; otherwise ``ValueError`` naming why).

``"auto"``, the default, is ``"recursive"`` where it applies and some subsystem acted on by loops
has more than `AUTO_SUBSYSTEM` coordinates, ``"slm"`` where the whole mechanism is one subsystem
(a floating base: SSLM's blocks are then SLM's whole matrices, and its bookkeeping costs; Cassie
batched 31.6 against 50.1 µs per state), and ``"sslm"`` otherwise (`choose_method`): a static
choice by structure. SSLM factorises each subsystem's inertia as one dense block and couples all
the loops through it in one dense GICM block, so its work grows with the cube of the largest
subsystem that loops share; the recursion's grows with the number of bodies, at a higher cost per
body. Measured (experiments/auto_method.md): on the ladder of k four-bars drawn as MJCF draws it
(every loop through one chain of k + 1 coordinates) SSLM was faster at k = 4 and the recursion
from k = 6 on; where loops share at most 6 coordinates (the four-bar, 3-RRR, RSSR, quarter car and
Stewart platform; `mechanisms.ladder` in experiments/recursive_ladder.md) SSLM was faster,
batched by 2.0-4.4x. Where a single loop of the body graph passes through a local dead centre
while the whole mechanism stays regular, ``"recursive"`` flags the state singular where
``"sslm"`` solves it; pass ``method="sslm"`` there.

The multipliers ``lam`` are stacked loop by loop in the rows of `kinematics.loop_residual`; a
point row of a cut joint is the force that body a exerts on body b, in world axes.
"""

from __future__ import annotations

import functools
import itertools
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float

from . import (
    actuators,
    chunking,
    compilation,
    dense,
    forces,
    kinematics,
    placement,
    recursive,
    tree,
)
from ._checks import check_arrays, check_finite
from .mechanism import Mechanism

# The methods that apply to every mechanism; "recursive" needs a body graph that is a forest
# (`loopdyn.recursive.supported`).
GENERAL_METHODS = ("system", "slm", "sslm", "embedding")
METHODS = GENERAL_METHODS + ("recursive", "auto")

# "auto" runs "recursive" (where it applies) when loops act on a subsystem of more coordinates
# than this (`choose_method`; the module docstring gives the measurements behind it).
AUTO_SUBSYSTEM = 6

# SSLM over this many loops or fewer runs block by block (`_per_block_multipliers`): at B = 1024
# states on one core the four-bar and the 3-RRR ran 5-20 % faster than stacked (`_plan`),
# whose smaller programs pay off with more loops (experiments/sslm_compact.md).
_PER_BLOCK_LOOPS = 4


class Solution(NamedTuple):
    """What every method returns: accelerations, multipliers and whether the constraints were
    singular at this state (then ``qdd`` and ``lam`` are not meaningful)."""

    qdd: Float[Array, " n"]
    lam: Float[Array, " m"]
    singular: Bool[Array, ""]


def generalized_forces(mech: Mechanism, q, qd, tau, f_ext=None) -> Float[Array, " n"]:
    """``phi = tau + tau_passive - C qd - g + N^T (f_springs + f_ext)``: the right-hand side of
    the tree's equations of motion (seed 000 eqs. 6-8, ``phi_j`` of eq. 20 stacked),
    ``tau_passive`` the joints' dampers, springs and friction and gravity compensation
    (`forces.passive_forces`)."""
    wrenches = _body_wrenches(mech, q, qd, f_ext)
    return tau + forces.passive_forces(mech, q, qd) - tree.bias_forces(mech, q, qd, wrenches)


def _body_wrenches(mech, q, qd, f_ext):
    """Spring-damper wrenches plus the user's body wrenches (``None`` when there are neither)."""
    if not mech.spring_names:
        return f_ext
    springs = forces.spring_wrenches(mech, q, qd)
    return springs if f_ext is None else springs + f_ext


def _pivot_is_small(pivots, block):
    """Whether the Cholesky factor of a positive semi-definite ``block`` has a vanishing pivot
    among its ``pivots`` (`dense.small_pivots` against the block's largest diagonal entry)."""
    return dense.small_pivots(pivots, jnp.max(jnp.abs(jnp.diagonal(block))))


def _psi(phi, velocity, bias, baumgarte):
    """``Psi = -J' qd``, with Baumgarte's correction ``- 2 alpha J qd - beta^2 Phi`` when the gains
    ``baumgarte = (alpha, beta)`` are given (seed 004 §4.3): then the loop residual obeys
    ``Phi'' + 2 alpha Phi' + beta^2 Phi = 0`` instead of drifting."""
    if baumgarte is None:
        return -bias
    alpha, beta = baumgarte
    return -bias - 2.0 * alpha * velocity - beta**2 * phi


def _dense_terms(mech, q, qd, tau, f_ext, baumgarte):
    """What the methods that use the whole J take, from one tree pass: ``J``, ``Psi``, ``I`` and
    ``phi`` (`generalized_forces`)."""
    phi, inertia, motion = tree.system_terms(mech, q, qd, tau, _body_wrenches(mech, q, qd, f_ext))
    residual, jac, bias = kinematics.loop_terms_at(mech, motion)
    return jac, _psi(residual, jac @ qd, bias, baumgarte), inertia, phi


def _dense_kkt(mech, q, qd, tau, f_ext, baumgarte):
    """Seed 000 eq. 10: ``[[I, -J^T], [J, 0]] [qdd; lam] = [phi; Psi]`` solved densely (LU)."""
    jac, psi, inertia, phi = _dense_terms(mech, q, qd, tau, f_ext, baumgarte)
    n, m = mech.num_bodies, psi.shape[0]
    kkt = jnp.block([[inertia, -jac.T], [jac, jnp.zeros((m, m), q.dtype)]])
    rhs = jnp.concatenate([phi, psi])
    solution = dense.solve(kkt, rhs)
    # The KKT matrix is singular exactly when J is rank deficient (I is positive definite).
    s = dense.singular_values(jac)
    singular = ~jnp.all(jnp.isfinite(solution)) | (
        (m > 0)
        & (jnp.min(s, initial=jnp.inf) ** 2 <= dense.PIVOT_RTOL * jnp.max(s, initial=0.0) ** 2)
    )
    return Solution(solution[:n], solution[n:], singular)


def _system_multipliers(mech, q, qd, tau, f_ext, baumgarte):
    """Seed 000 eqs. 11-12 with one Cholesky factorisation of the whole ``I``."""
    jac, psi, inertia, phi = _dense_terms(mech, q, qd, tau, f_ext, baumgarte)
    solved, _ = dense.spd_solve(inertia, jnp.concatenate([phi[:, None], jac.T], axis=1))
    phi_hat, i_hat_t = solved[:, 0], solved[:, 1:]
    gicm = jac @ i_hat_t
    lam, pivots = dense.spd_solve(gicm, psi - jac @ phi_hat)
    return Solution(phi_hat + i_hat_t @ lam, lam, _pivot_is_small(pivots, gicm))


def _subsystem_multipliers(mech, q, qd, tau, f_ext, baumgarte):
    """SSLM (seed 000 §3): subsystem-level ``phi_hat_j``, ``I_hat_{i,j}`` and GICM blocks from
    the non-zero blocks of J only, the GICM reduced as `_plan` chose, then
    ``qdd = phi_hat + I_hat^T lam`` (eq. 21). Equal-size blocks are stacked and each stack is one
    batched operation (gathers and scatters with static indices), so the program grows with the
    number of block shapes, not of blocks; up to `_PER_BLOCK_LOOPS` loops, block by block."""
    top = mech.topology
    if _mode(top) != "scan":
        return _per_block_multipliers(mech, q, qd, tau, f_ext, baumgarte)
    plan = _plan(top)
    phi, inertias, motion = tree.subsystem_stack_terms(  # all phi_j and I_j at once, O(n)
        mech,
        q,
        qd,
        tau,
        tuple((g.size, g.starts) for g in plan.subsystems),
        _body_wrenches(mech, q, qd, f_ext),
    )
    residual, pairs, bias = kinematics.loop_block_stacks_at(mech, motion, plan.pairs)
    flat_jac = jnp.concatenate([x.reshape(-1) for x in pairs])
    # per group: I_j^-1 [J_{i,j}^T ... phi_j] over its acting loops i (eqs. 20, 22)
    phi_hat, solved = jnp.zeros_like(phi), []
    for group, inertia in zip(plan.subsystems, inertias):
        columns = [flat_jac[group.jac_t], placement.take(phi, group.coordinates)[..., None]]
        x, _ = jax.vmap(dense.spd_solve)(inertia, jnp.concatenate(columns, -1))
        phi_hat = placement.put(phi_hat, group.coordinates, x[..., -1])
        solved.append(x[..., :-1])
    terms = jnp.zeros((top.num_rows, 2), q.dtype)  # J qd and J phi_hat
    for stack, (rows, columns) in zip(pairs, plan.pair_indices):
        products = stack @ jnp.stack([qd, phi_hat], axis=1)[columns]
        terms = placement.add_at(terms, rows, products)
    psi = _psi(residual, terms[:, 0], bias, baumgarte)
    flat_solved = jnp.concatenate([x.reshape(-1) for x in solved])
    products = [  # G_{r,s} terms J_{r,j} I_hat_{s,j}^T (eq. 25), one contraction per shape
        flat_jac[left] @ flat_solved[right] for left, right, _ in plan.triples
    ]
    lam, singular = _reduce(top, plan, products, psi - terms[:, 1])
    qdd = phi_hat
    for group, x in zip(plan.subsystems, solved):
        if x.shape[-1]:  # acted on by loops
            update = jnp.einsum("gnm,gm->gn", x, lam[group.rows])
            qdd = placement.add_at(qdd, group.coordinates, update)
    return Solution(qdd, lam, singular)


def _per_block_multipliers(mech, q, qd, tau, f_ext, baumgarte):
    """SSLM block by block, for few loops (`_PER_BLOCK_LOOPS`) and the loop graphs that `_plan`
    does not scan: each ``I_j`` and ``I_hat_{i,j}`` its own operations, then the GICM block by
    block (`_block_elimination`) or, where its elimination fills in completely (`_plan`'s
    ``"dense"``), whole (`_whole_gicm`)."""
    top = mech.topology
    phi, inertias, motion = tree.subsystem_terms(  # all phi_j and I_j at once, O(n)
        mech, q, qd, tau, top.coordinate_slices, _body_wrenches(mech, q, qd, f_ext)
    )
    residual, blocks, bias = kinematics.loop_block_terms_at(mech, motion)
    acting = [[i for i, k in top.blocks if k == j] for j in range(len(top.subsystems))]
    acted_on = [j for j in range(len(top.subsystems)) if acting[j]]
    jac_t, whole, phi_hat = {}, {}, []  # j -> [J_{i,j}^T ...], I_j^-1 [J_{i,j}^T ...] over loops i
    for j, inertia in enumerate(inertias):  # with phi_hat_j = I_j^-1 phi_j (eqs. 20, 22)
        columns = [phi[top.coordinates(j), None]] + [blocks[i, j].T for i in acting[j]]
        x, _ = dense.spd_solve(inertia, jnp.concatenate(columns, axis=1))
        phi_hat.append(x[:, 0])
        if acting[j]:
            jac_t[j], whole[j] = jnp.concatenate(columns[1:], axis=1), x[:, 1:]
    phi_hat = jnp.concatenate(phi_hat)
    # One product per subsystem: J_j [qd_j, phi_hat_j, I_j^-1 J_j^T] over its acting loops'
    # rows, sliced into J_{i,j} qd_j, J_{i,j} phi_hat_j and the GICM terms J_{r,j} I_hat_{s,j}^T
    # (those apart where the GICM is formed whole).
    products, at, whole_gicm = {}, {}, _mode(top) == "dense"
    for j in acted_on:
        both = jnp.stack([qd[top.coordinates(j)], phi_hat[top.coordinates(j)]], axis=1)
        right = both if whole_gicm else jnp.concatenate([both, whole[j]], axis=1)
        products[j] = _product(jac_t[j].T, right)
        offsets = np.cumsum([0] + [top.loops[i].rows for i in acting[j]])
        at[j] = {i: slice(offsets[k], offsets[k + 1]) for k, i in enumerate(acting[j])}
    terms = [
        sum(products[j][at[j][i], :2] for j in loop.subsystems) for i, loop in enumerate(top.loops)
    ]
    psi = _psi(residual, jnp.concatenate([t[:, 0] for t in terms]), bias, baumgarte)
    rhs = psi - jnp.concatenate([t[:, 1] for t in terms])  # Psi_bar (eq. 23)
    if whole_gicm:
        return _whole_gicm(top, {j: acting[j] for j in acted_on}, jac_t, whole, phi_hat, rhs)
    gicm = {}  # the GICM blocks G_{r,s} (eq. 25)
    for r, loop in enumerate(top.loops):
        for s in [r, *top.loop_graph[r]]:
            shared = sorted(set(loop.subsystems) & set(top.loops[s].subsystems))
            gicm[r, s] = sum(products[j][at[j][r], 2:][:, at[j][s]] for j in shared)
    rhs = [rhs[top.rows(r)] for r in range(len(top.loops))]
    lam, singular = _block_elimination(top.elimination_order, gicm, rhs)
    corrections = [  # sum_i I_hat_{i,j}^T lam_i (eq. 21)
        _product(whole[j], jnp.concatenate([lam[i] for i in acting[j]])[:, None])[:, 0]
        for j in acted_on
    ]
    columns = np.concatenate([np.arange(*top.coordinate_slices[j]) for j in acted_on])
    qdd = placement.add_at(phi_hat, columns, jnp.concatenate(corrections))
    return Solution(qdd, jnp.concatenate(lam) if lam else psi, singular)


def _product(a, b):
    """``a @ b`` for small matrices as a multiply-and-sum, which XLA fuses with its neighbours
    (a single state's ``dot`` is a kernel of its own): with one product per subsystem instead of
    one per block, a batch of 4096 3-RRR states took 0.84 instead of 0.89 us per state (medians
    of 15 interleaved runs, one core)."""
    return jnp.sum(a[:, :, None] * b[None, :, :], axis=1)


class _Group(NamedTuple):
    """Subsystems of ``size`` coordinates with equal acting row counts: first coordinates
    ``starts``; static indices of their coordinates ``(g, size)``, of their acting loops' rows
    ``(g, M)`` and of ``[J_{i,j}^T ...]`` ``(g, size, M)`` in the flat stacked blocks."""

    size: int
    starts: tuple[int, ...]
    coordinates: np.ndarray
    rows: np.ndarray
    jac_t: np.ndarray


class _Plan(NamedTuple):
    """Static structure of SSLM for one topology (`_plan`): the subsystem groups; the pairs
    ``(i, j)`` of the non-zero blocks of J grouped by shape, with their rows and coordinates;
    per shape of ``(r, s, j)``, the indices of ``J_{r,j}`` and ``I_hat_{s,j}^T`` in the flat
    stacks and where each product goes; the reduction ``mode``; each row's ``rank`` in
    elimination order."""

    subsystems: tuple[_Group, ...]
    pairs: tuple[tuple[tuple[int, int], ...], ...]
    pair_indices: tuple[tuple[np.ndarray, np.ndarray], ...]
    triples: tuple[tuple[np.ndarray, np.ndarray, list], ...]
    mode: str
    rank: np.ndarray


def _grouped(items, key):
    groups = {}
    for item in items:
        groups.setdefault(key(item), []).append(item)
    return list(groups.values())


def _mode(top) -> str:
    """How SSLM reduces the GICM of ``top``: whole (``"dense"``) for one loop or two coupled
    ones, whose block elimination is the same arithmetic in more operations (3-RRR SSLM 1,607
    -> 1,580 lowered operations, batched 0.502 -> 0.481 us per state, the four-bar's 0.150
    either way, experiments/compact_programs_whole.md; on the MJCF chain ladder with 4 and 5 loops
    whole was slower, 1.26 -> 1.56 and 2.04 -> 2.50 us, one core, 2026-12-07); ``"per_block"``
    up to `_PER_BLOCK_LOOPS` loops; else `_plan`'s mode."""
    loops = top.loops
    if len(loops) == 1 or (len(loops) == 2 and top.loop_graph[0]):
        return "dense"
    return "per_block" if len(loops) <= _PER_BLOCK_LOOPS else _plan(top).mode


@functools.cache
def _plan(top) -> _Plan:
    """How SSLM runs for topology ``top`` (fixed at trace time). The GICM reduction (``mode``):

    - ``"scan"``: loops of one row count that the elimination order takes along a chain (each
      loop's only neighbour left when it is eliminated is the next in the order: no fill-in;
      e.g. `mechanisms.ladder`): `_chain_elimination`, a ``lax.scan`` with a fixed-size body; at
      B = 1024 states it ran as fast as the same steps unrolled (1 to 32 loops, one core).
    - ``"dense"``: where eliminating the loops would couple each with every other (all of them
      through one subsystem, as in the usual MJCF drawing of a ladder: every loop through one
      deep chain) and the GICM has more than `dense.UNROLL` rows: `_per_block_multipliers`,
      then `_whole_gicm` (the GICM assembled whole, one factor). Block by block, that
      elimination's operations grow with the cube of the loops: on the 32-loop MJCF chain
      ladder 36,824 operations, whose one-state program took 128 s to compile or crashed
      (LLVM out of memory mappings); whole, 8,714, compiled in 7.4 s, and batched 131 instead
      of 976 µs per state (experiments/whole_gicm.md).
    - ``"per_block"``: otherwise (also with couplings of coordinates), `_per_block_multipliers`
      (block by block, `_block_elimination`): stacked, with the GICM assembled densely, the
      usual MJCF drawing of a ladder ran 1.8-3.3x slower per state at k = 8 (two loaded runs)
      and compiled longer.
    """
    loops, m = top.loops, top.num_rows
    order, graph = top.elimination_order, top.loop_graph
    position = {r: t for t, r in enumerate(order)}
    later = {r: [s for s in graph[r] if position[s] > position[r]] for r in range(len(loops))}
    chain = all(later[r] in ([], [s]) for r, s in itertools.pairwise(order))
    geometric = all(loop.kind != "coupling" for loop in loops)
    edges = {(min(r, s), max(r, s)) for r in range(len(loops)) for s in graph[r]}
    complete = len(edges | set(top.fill_in)) == len(loops) * (len(loops) - 1) // 2
    if len({loop.rows for loop in loops}) == 1 and chain and geometric:
        mode = "scan"
    elif complete and m > dense.UNROLL:
        mode = "dense"
    else:
        mode = "per_block"
    pairs = _grouped(top.blocks, lambda b: top.block_shape(*b))
    flat, offset, pair_indices = {}, 0, []
    for group in pairs:
        rows_i, size = top.block_shape(*group[0])
        for p, (i, j) in enumerate(group):
            flat[i, j] = offset + p * rows_i * size + np.arange(rows_i * size).reshape(rows_i, size)
        offset += len(group) * rows_i * size
        pair_indices.append(
            (
                np.array([np.arange(*top.row_slices[i]) for i, _ in group]),
                np.array([np.arange(*top.coordinate_slices[j]) for _, j in group]),
            )
        )
    acting = {j: [i for i, k in top.blocks if k == j] for j in range(len(top.subsystems))}
    subsystems, solved, offset = [], {}, 0
    for members in _grouped(
        sorted(acting), lambda j: (top.block_shape(0, j)[1], sum(loops[i].rows for i in acting[j]))
    ):
        size = top.block_shape(0, members[0])[1]
        width = sum(loops[i].rows for i in acting[members[0]])
        for g, j in enumerate(members):
            column = 0
            for i in acting[j]:
                block = np.arange(size)[:, None] * width + column + np.arange(loops[i].rows)
                solved[i, j] = offset + g * size * width + block
                column += loops[i].rows
        offset += len(members) * size * width
        subsystems.append(
            _Group(
                size,
                tuple(top.coordinate_slices[j][0] for j in members),
                np.array([np.arange(*top.coordinate_slices[j]) for j in members]),
                np.array(
                    [
                        np.concatenate(
                            [np.arange(0)] + [np.arange(*top.row_slices[i]) for i in acting[j]]
                        )
                        for j in members
                    ]
                ),
                np.array(
                    [
                        np.concatenate(
                            [np.zeros((size, 0), int)] + [flat[i, j].T for i in acting[j]], 1
                        )
                        for j in members
                    ]
                ),
            )
        )
    wanted = [  # (r, s, j): in "scan" only the diagonal blocks and G_{parent(s), s}
        (r, s, j)
        for r in range(len(loops))
        for s in [r, *graph[r]]
        if mode != "scan" or s == r or later[s] == [r]
        for j in sorted(set(loops[r].subsystems) & set(loops[s].subsystems))
    ]
    rank = np.empty(m, dtype=int)  # each row's place in elimination order
    rank[np.concatenate([np.arange(*top.row_slices[r]) for r in order])] = np.arange(m)

    def target(r, s):  # D_t at t, G_{t+1,t} at count + t (`_chain_elimination`)
        return position[s] + len(order) * (r != s)

    def key(t):
        return loops[t[0]].rows, top.block_shape(0, t[2])[1], loops[t[1]].rows

    triples = tuple(
        (
            np.array([flat[r, j] for r, _, j in group]),
            np.array([solved[s, j] for _, s, j in group]),
            [target(r, s) for r, s, _ in group],
        )
        for group in _grouped(wanted, key)
    )
    return _Plan(
        subsystems=tuple(subsystems),
        pairs=tuple(tuple(g) for g in pairs),
        pair_indices=tuple(pair_indices),
        triples=triples,
        mode=mode,
        rank=rank,
    )


def _reduce(top, plan, products, rhs):
    """``lam`` from ``G lam = rhs`` with the GICM blocks ``G_{r,s}`` given by the stacked
    ``products`` of ``plan.triples`` (summed over the shared subsystems), by `_chain_elimination`
    (``plan.mode`` "scan"); and whether a pivot block is singular (`_pivot_is_small`)."""
    order = plan.rank.argsort()  # the rows in elimination order
    targets = [np.array(t) for _, _, t in plan.triples]
    lam, singular = _chain_elimination(len(top.loops), products, targets, rhs[order])
    return lam[plan.rank], singular


def _chain_elimination(count, products, targets, rhs):
    """Block-tridiagonal Cholesky (Thomas algorithm) of a GICM whose loops, in elimination order,
    each couple to the next one at most (`_plan`, ``"scan"``; seed 000 eqs. 34-36): step t
    factorises its pivot block ``D_t`` (less the Schur complement from step t - 1), solves
    ``D_t^-1 [G_{t,t+1}, rhs_t]`` and hands ``G_{t+1,t} D_t^-1 [G_{t,t+1}, rhs_t]`` on; back
    substitution ``lam_t = D_t^-1 (rhs_t - G_{t,t+1} lam_{t+1})`` in reverse. Both are a
    ``lax.scan`` whose carry is one block. ``targets`` place the ``products`` (``D_t`` at t,
    ``G_{t+1,t}`` at ``count + t``); ``rhs`` and ``lam`` are in elimination order."""
    rows = rhs.shape[0] // count
    blocks = jnp.zeros((2 * count, rows, rows), rhs.dtype)
    for target, product in zip(targets, products):
        blocks = placement.add_at(blocks, target, product)

    def eliminate(carry, step):
        schur, reduced = carry
        block, rhs, coupling = step
        block = block - schur
        columns = jnp.concatenate([coupling.T, (rhs - reduced)[:, None]], 1)
        solved, pivots = dense.spd_solve(block, columns)
        return (coupling @ solved[:, :-1], coupling @ solved[:, -1]), (
            solved,
            _pivot_is_small(pivots, block),
        )

    start = (jnp.zeros((rows, rows), rhs.dtype), jnp.zeros(rows, rhs.dtype))
    steps = (blocks[:count], rhs.reshape(count, rows), blocks[count:])
    _, (solved, small) = jax.lax.scan(eliminate, start, steps)

    def substitute(later, solved):
        lam = solved[:, -1] - solved[:, :-1] @ later
        return lam, lam

    _, lam = jax.lax.scan(substitute, jnp.zeros(rows, rhs.dtype), solved, reverse=True)
    return lam.reshape(-1), jnp.any(small)


def _whole_gicm(top, acting, jac_t, whole, phi_hat, rhs):
    """SSLM's last steps with the GICM whole, for loop graphs whose block elimination would fill
    in completely (`_mode`, ``"dense"``) and so emit operations cubic in the loops:
    ``G = sum_j J_j I_j^-1 J_j^T`` (eq. 25 summed subsystem by subsystem, ``J_j`` the rows of
    the loops ``acting`` on subsystem j, ``jac_t[j] = J_j^T``, ``whole[j] = I_j^-1 J_j^T``)
    assembled by one placement, one Cholesky factor of ``G`` for ``G lam = rhs`` (``Psi_bar``,
    eq. 23), and ``qdd = phi_hat + sum_j I_j^-1 J_j^T lam_j`` (eq. 21)."""
    m = top.num_rows
    rows = {
        j: np.concatenate([np.arange(*top.row_slices[i]) for i in loops])
        for j, loops in acting.items()
    }
    targets = np.concatenate([(r[:, None] * m + r).reshape(-1) for r in rows.values()])
    mul = _product if m <= dense.UNROLL else jnp.matmul  # small: fusible (`_product`)
    products = jnp.concatenate([mul(jac_t[j].T, whole[j]).reshape(-1) for j in acting])
    gicm = placement.add_at(jnp.zeros(m * m, rhs.dtype), targets, products).reshape(m, m)
    lam, pivots = dense.spd_solve(gicm, rhs)
    columns = np.concatenate([np.arange(*top.coordinate_slices[j]) for j in acting])
    lam_j = {j: placement.take(lam, rows[j])[:, None] for j in acting}
    corrections = jnp.concatenate([mul(whole[j], lam_j[j])[:, 0] for j in acting])
    return Solution(
        placement.add_at(phi_hat, columns, corrections), lam, _pivot_is_small(pivots, gicm)
    )


def _block_elimination(order, gicm, rhs):
    """Solve the symmetric positive definite block system ``G lam = rhs`` whose non-zero blocks
    are the keys of ``gicm`` (``(r, s)`` and ``(s, r)``): eliminate the loops in ``order`` (each
    pivot block's solve of its couplings and right-hand side at once, Schur complements onto the
    remaining neighbours, creating the fill-in blocks on the way), then substitute back in
    reverse order: ``lam_k = D_k^-1 rhs_k - sum_r (D_k^-1 G_{k,r}) lam_r``."""
    gicm, rhs = dict(gicm), list(rhs)
    neighbours = {r: {s for (a, s) in gicm if a == r and s != r} for r in range(len(rhs))}
    done, solved, later, singular = set(), {}, {}, jnp.asarray(False)
    for k in order:
        later[k] = sorted(neighbours[k] - done)
        columns = [gicm[k, r] for r in later[k]] + [rhs[k][:, None]]
        x, pivots = dense.spd_solve(gicm[k, k], jnp.concatenate(columns, axis=1))
        singular = singular | _pivot_is_small(pivots, gicm[k, k])
        solved[k] = jnp.split(x, np.cumsum([c.shape[1] for c in columns])[:-1], axis=1)
        for r in later[k]:
            rhs[r] = rhs[r] - gicm[r, k] @ solved[k][-1][:, 0]
            for s, other in zip(later[k], solved[k]):
                update = gicm[r, k] @ other
                gicm[r, s] = gicm[r, s] - update if (r, s) in gicm else -update
            neighbours[r].update(later[k])
            neighbours[r].discard(r)
        done.add(k)
    lam = [None] * len(rhs)
    for k in reversed(order):
        coupled = sum((x @ lam[r] for r, x in zip(later[k], solved[k])), 0.0)
        lam[k] = solved[k][-1][:, 0] - coupled
    return lam, singular


def independent_coordinates(
    mech: Mechanism, q=None, prefer_actuated: bool = True
) -> tuple[int, ...]:
    """Independent coordinates for `"embedding"`: with ``prefer_actuated``, the actuated ones when
    they are as many as the degrees of freedom and ``J`` over the others is well conditioned at
    ``q`` (default ``mech.q0``); otherwise those left after a column-pivoted QR of ``J`` picks the
    best-conditioned dependent set. Needs a concrete ``q`` (not under ``jit``)."""
    top = mech.topology
    if not mech.topology.loops:
        return tuple(range(mech.num_bodies))
    q = mech.q0 if q is None else q
    try:
        jac = np.asarray(kinematics.loop_jacobian(mech, q))
    except jax.errors.TracerArrayConversionError:
        raise ValueError(
            "independent_coordinates: needs a concrete state (not a traced one under jit); "
            "compute it outside jit and pass it as `independent`"
        ) from None
    s_all = np.linalg.svd(jac, compute_uv=False)
    rank = int(np.sum(s_all > 1e-8 * s_all[0]))
    if rank < top.num_rows:
        kinematics.check_jacobian(mech, q)  # names the loop
        raise ValueError(f"J has rank {rank} < {top.num_rows} rows: no minimal coordinates")
    actuated = list(mech.actuated)
    if prefer_actuated and len(actuated) == top.dof:
        dependent = [k for k in range(mech.num_bodies) if k not in actuated]
        s = np.linalg.svd(jac[:, dependent], compute_uv=False)
        if s[-1] > 1e-3 * s_all[0]:
            return tuple(actuated)
    import scipy.linalg  # a JAX dependency

    pivots = scipy.linalg.qr(jac, pivoting=True)[2]
    return tuple(sorted(set(range(mech.num_bodies)) - set(pivots[: top.num_rows].tolist())))


def _embedded(mech, q, qd, tau, f_ext, baumgarte, independent):
    """Minimal-coordinate dynamics (see the module docstring); ``independent`` is static."""
    n = mech.num_bodies
    dependent = np.array([k for k in range(n) if k not in independent], dtype=int)
    independent = np.asarray(independent, dtype=int)
    jac, psi, inertia, phi = _dense_terms(mech, q, qd, tau, f_ext, baumgarte)
    jac_d, jac_i = jac[:, dependent], jac[:, independent]
    solved = dense.solve(jac_d, jnp.concatenate([jac_i, psi[:, None]], axis=1))
    t = jnp.zeros((n, independent.size), q.dtype)
    t = t.at[independent, jnp.arange(independent.size)].set(1.0)
    t = t.at[dependent].set(-solved[:, :-1])
    c = jnp.zeros(n, q.dtype).at[dependent].set(solved[:, -1])
    qdd = t @ dense.spd_solve(t.T @ inertia @ t, t.T @ (phi - inertia @ c))[0] + c
    lam = dense.lstsq(jac.T, inertia @ qdd - phi)
    s = dense.singular_values(jac_d)
    singular = ~jnp.all(jnp.isfinite(qdd)) | (
        jnp.min(s, initial=jnp.inf) ** 2 <= dense.PIVOT_RTOL * jnp.max(s, initial=0.0) ** 2
    )
    return Solution(qdd, lam, singular)


def _recursive(mech, q, qd, tau, f_ext, baumgarte):
    """The recursion over the body graph (`loopdyn.recursive`), O(bodies) where it is a forest."""
    problem = recursive.unsupported(mech)
    if problem is not None:
        raise ValueError(f"method 'recursive' does not apply to this mechanism: {problem}")
    psi = functools.partial(_psi, baumgarte=baumgarte)
    return Solution(*recursive.solve(mech, q, qd, tau, _body_wrenches(mech, q, qd, f_ext), psi))


_SOLVERS = {
    "system": _dense_kkt,
    "slm": _system_multipliers,
    "sslm": _subsystem_multipliers,
    "recursive": _recursive,
}


def choose_method(mech: Mechanism) -> str:
    """What ``method="auto"`` runs on ``mech`` (module docstring): ``"recursive"`` where it
    applies and a subsystem acted on by loops has more than `AUTO_SUBSYSTEM` coordinates,
    ``"slm"`` where the mechanism is one subsystem, else ``"sslm"``. Static: decided by the
    topology alone."""
    top = mech.topology
    sizes = [stop - start for start, stop in top.coordinate_slices]
    largest = max((sizes[j] for _, j in top.blocks), default=0)
    with jax.ensure_compile_time_eval():  # inside a trace too: nothing of it enters the program
        applies = largest > AUTO_SUBSYSTEM and recursive.supported(mech)
    if applies:
        return "recursive"
    return "slm" if len(sizes) == 1 else "sslm"


@compilation.jit
def solve(
    mech, q, qd, tau, f_ext=None, method="auto", baumgarte=None, independent=None, ctrl=None
) -> Solution:
    """The traceable core of `forward_dynamics`: no checks. ``baumgarte = (alpha, beta)`` adds
    Baumgarte's stabilising terms to ``Psi`` (`_psi`); ``independent`` is for ``"embedding"``;
    ``ctrl`` drives the control actuators (`actuators.actuator_forces`). Under ``vmap`` on the
    CPU it runs in chunks of `chunking.chunks` states (`chunking.over_states`)."""
    if baumgarte is not None:
        baumgarte = tuple(jnp.asarray(x, q.dtype) for x in baumgarte)
    return chunking.over_states(
        lambda mech, *states: _solve(mech, *states, method, independent),
        mech, q, qd, tau, f_ext, ctrl, baumgarte,
    )  # fmt: skip


def _solve(mech, q, qd, tau, f_ext, ctrl, baumgarte, method, independent) -> Solution:
    """`solve` at one state."""
    tau = tau + forces.passive_forces(mech, q, qd)
    if ctrl is not None:
        tau = tau + actuators.actuator_forces(mech, q, qd, ctrl)
    if not mech.topology.loops:
        qdd = tree.forward_dynamics(mech, q, qd, tau, _body_wrenches(mech, q, qd, f_ext))
        return Solution(qdd, jnp.zeros(0, qdd.dtype), jnp.asarray(False))
    if method == "embedding":
        return _embedded(mech, q, qd, tau, f_ext, baumgarte, independent)
    if method == "auto":
        method = choose_method(mech)
    return _SOLVERS[method](mech, q, qd, tau, f_ext, baumgarte)


def check_method(method: str, function: str = "forward_dynamics") -> str:
    if method not in METHODS:
        raise ValueError(f"{function}: method must be one of {METHODS}, got {method!r}")
    return method


def forward_dynamics(
    mech: Mechanism,
    q: Float[Array, " n"],
    qd: Float[Array, " n"],
    tau: Float[Array, " n"],
    method: str = "auto",
    f_ext: Float[Array, "n d"] | None = None,
    independent: tuple[int, ...] | None = None,
    ctrl: Float[Array, " u"] | None = None,
) -> tuple[Float[Array, " n"], Float[Array, " m"]]:
    """Joint accelerations ``qdd`` (aligned with ``mech.coordinate_names``) and loop-closure
    multipliers ``lam`` (loop by loop, in the rows of `kinematics.loop_residual`) at ``(q, qd)``.

    ``tau``: joint forces/torques, one per coordinate (zero for unactuated joints); gravity, the
    mechanism's spring-dampers, the joints' dampers, springs, friction and armature and gravity
    compensation are included; ``f_ext``: extra body wrenches ``(n, d)`` in body coordinates
    about each body frame origin (the `tree` convention); ``ctrl``: the control actuators'
    inputs, one per ``mech.ctrl_names`` (MuJoCo's ``ctrl``), whose forces
    (`actuators.actuator_forces`) add to ``tau``; None: none act (unlike zeros, at which a
    servo's bias still pulls). ``method``: ``"auto"`` (default: `choose_method`), ``"sslm"``,
    ``"slm"``, ``"system"``, ``"embedding"`` or ``"recursive"`` (module docstring; where the body
    graph is a forest); ``independent`` chooses the independent coordinates of ``"embedding"``
    (default `independent_coordinates`).

    Singular or redundant constraints (a dead centre, dependent loop rows) raise ``ValueError``
    naming the loop when called eagerly, and an ``EquinoxRuntimeError`` under ``jit``; use
    `solve` for a flag instead. Compiled once per mechanism topology and method.
    """
    eager = compilation.runs_eagerly(mech, q, qd, tau, f_ext, ctrl)  # one packed input
    q, qd, tau, f_ext, ctrl = check_arrays(
        mech, "forward_dynamics", eager=eager, q=q, qd=qd, tau=tau, f_ext=f_ext, ctrl=ctrl
    )
    check_method(method)
    if method == "embedding" and independent is None:
        independent = independent_coordinates(mech, q if _is_concrete(q) else None)
    independent = tuple(independent or ())
    if eager:  # the program's one flag: singular (its inputs are finite, or it raised)
        result, singular = _eager.concrete(
            mech, q, qd, tau, f_ext, ctrl, method=method, independent=independent
        )
    else:
        result = solve(mech, q, qd, tau, f_ext, method, independent=independent, ctrl=ctrl)
        singular = result.singular
    if _is_concrete(singular):
        if singular:
            kinematics.check_jacobian(mech, q)  # raises naming the loop where it can
            raise ValueError(
                f"forward_dynamics: the constraints are singular at this state (method {method!r})"
            )
        return result.qdd, result.lam
    message = (
        "forward_dynamics: singular or redundant loop constraints at this state (a dead centre "
        "or dependent loop rows); kinematics.check_jacobian(mech, q) names the loop"
    )
    return eqx.error_if(result.qdd, singular, message), result.lam


def _flagged(solution):
    """``(solution without its flag, the flag)``: `compilation.eager`'s form."""
    return solution._replace(singular=None), solution.singular


_eager = compilation.eager(
    lambda mech, q, qd, tau, f_ext, ctrl, *, method, independent: _flagged(
        solve(mech, q, qd, tau, f_ext, method, independent=independent, ctrl=ctrl)
    ),
    lambda q, qd, tau, f_ext, ctrl: check_finite(
        "forward_dynamics", q=q, qd=qd, tau=tau, f_ext=f_ext, ctrl=ctrl
    ),
)


def _is_concrete(x) -> bool:
    return not isinstance(x, jax.core.Tracer)
