"""Recursive dynamics of the spanning tree (serial and branched subsystems), DeNOC style.

Twists propagate base -> tips, ``t_i = A_i t_parent + p_i qd_i`` (seed 004 eqs. 20-23), and
wrenches accumulate tips -> base, ``tau = N^T w`` (seed 000 eqs. 4-7; seed 002 eqs. 17-33 for
serial and tree-type systems), with the Newton-Euler wrench ``w_i = M_i dt_i + W_i M_i t_i`` of
each body (seed 004 eq. 10, seed 000 eq. 1). ``I = N^T M N`` (seed 000 eq. 7) comes from the
composite-body recursion and ``qdd`` from forces from the O(n) articulated-body recursion. Gravity
enters as an acceleration of the ground.

Every twist, wrench and extended mass matrix is referred to the ground frame (origin and axes).
There the twist propagation matrix ``A_i`` is the identity (``t_i = t_parent + p_i qd_i``), so each
body's change of frame is applied once, to all bodies together, and the sequential passes are left
with a few vector operations per body. Results asked for in body coordinates (twists, twist-rates,
joint wrenches) are transformed back at the end.

Batches are native: ``q``, ``qd``, ``qdd``, ``tau`` have shape ``(n,)`` or ``(..., n)`` and
external wrenches ``f_ext`` (body coordinates, at the body frame origin) ``(n, d)`` or
``(..., n, d)``, ``d = mech.dim``; outputs carry the same leading batch axes. Inside, every array
is laid out ``(body, components..., batch)``: the batch is the trailing, contiguous axis, so each
small-matrix operation is an elementwise loop over states that XLA vectorises. Large batches run
in chunks of `chunking.chunks` states (a ``lax.map``), so each chunk's arrays stay in cache. Planar
mechanisms use planar 3-vector algebra throughout. Under ``jax.vmap`` (over states, the mechanism,
or both) a ``custom_vmap`` rule folds the mapped axis into this native batch, so ``vmap`` costs
what a native batch costs. The public functions are jitted (`compilation.jit`): compiled once
per mechanism structure and batch shape.

The sequential passes run over the tree's levels (a body's depth, its root's subtree shifted
down where that keeps the levels narrow: `_shifts`), all bodies of a level at once, as a
``lax.scan`` (so the program, and its compile time, does not grow with the number of bodies;
trees of at most `UNROLL_LEVELS` levels run it as a Python loop instead, each level taking its
bodies and parents by static indices without padding slots, as a loop costs more than it saves
there: a 5 s 3-RRR `simulate` ran 8.0-8.8 against 9.5 ms as an unrolled scan). For a spatial
mechanism one base -> tips pass gives the poses, subspaces, twists and twist-rates together; a
planar one's rotations commute, so it sums angles, origins, twists and twist-rates in four light
passes and computes everything else once for all bodies between them (`_planar_motion`). The
sines and versines of the joint (planar: world) angles are computed all at once, by
`trigonometry.sin_versine` (vectorised arithmetic, materialised once; XLA's own ``sin`` is a
scalar library call that it would recompute inside every element of the matrix products).
"""

import functools
import itertools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from . import chunking, compilation, configuration, placement, spatial, trigonometry
from .mechanism import Mechanism, configuration_layout

UNROLL_LEVELS = 4  # trees this shallow run their level passes unrolled (B = 4096, one core:
# 2-3 levels 10-20 % faster, 4 levels 1-6 %, 8 or more slower and longer to compile)
_ROWS = np.array(spatial.PLANAR_ROWS)


# Small-matrix algebra on (..., components, batch) arrays: the batch is the last axis.


def _mv(a, v):
    """``a @ v`` (matrices ``(..., r, c, B)``, vectors ``(..., c, B)``)."""
    return jnp.sum(a * v[..., None, :, :], axis=-2)


def _mm(a, b):
    """``a @ b`` for ``(..., r, k, B)`` and ``(..., k, c, B)``."""
    return jnp.sum(a[..., :, :, None, :] * b[..., None, :, :, :], axis=-3)


def _dot(u, v):
    return jnp.sum(u * v, axis=-2)


def _transpose(a):
    return jnp.swapaxes(a, -2, -3)


def _outer(u, v):
    return u[..., :, None, :] * v[..., None, :, :]


def _stack(*components):
    """A vector ``(..., k, B)`` from its components, broadcast to one shape."""
    return jnp.stack(jnp.broadcast_arrays(*components), axis=-2)


def _cross(a, b):
    """``a x b`` for 3-vectors ``(..., 3, B)``."""
    a0, a1, a2 = a[..., 0, :], a[..., 1, :], a[..., 2, :]
    b0, b1, b2 = b[..., 0, :], b[..., 1, :], b[..., 2, :]
    return jnp.stack([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], axis=-2)


def _cross_motion(planar, t, u):
    """``t x u`` for twists ``t``, ``u``; planar ``[w_z, v_x, v_y]``: ``[0, v_y u_w - w u_vy,
    w u_vx - v_x u_w]``."""
    if planar:
        w, vx, vy = t[..., 0, :], t[..., 1, :], t[..., 2, :]
        uw, ux, uy = u[..., 0, :], u[..., 1, :], u[..., 2, :]
        return _stack(jnp.zeros_like(w), vy * uw - w * uy, w * ux - vx * uw)
    w, v, uw, uv = t[..., :3, :], t[..., 3:, :], u[..., :3, :], u[..., 3:, :]
    return jnp.concatenate([_cross(w, uw), _cross(w, uv) + _cross(v, uw)], axis=-2)


def _cross_force(planar, t, f):
    """``t x* f`` for a twist ``t`` and a wrench ``f``; planar: ``[v_x f_y - v_y f_x, -w f_y,
    w f_x]``."""
    if planar:
        w, vx, vy = t[..., 0, :], t[..., 1, :], t[..., 2, :]
        fx, fy = f[..., 1, :], f[..., 2, :]
        return _stack(vx * fy - vy * fx, -w * fy, w * fx)
    w, v, n, force = t[..., :3, :], t[..., 3:, :], f[..., :3, :], f[..., 3:, :]
    return jnp.concatenate([_cross(w, n) + _cross(v, force), _cross(w, force)], axis=-2)


# Depth levels: the order of the sequential passes.


class _Levels(NamedTuple):
    """The tree's levels as ``(L, w)`` slots (``w`` the widest level): ``body`` is the body in
    each slot (``n``, a valid copy of a body, in the padding), ``parent`` the slot of its parent
    in the level above (``w``, the ground, for a root below level 0), ``slot`` ``(n,)`` is each
    body's flat slot ``level * w + column``, and ``children``
    ``(L, w, c)`` lists for each slot of the level above the slots of its children in this level
    (``w``, a zero row, where it has fewer than ``c``). A body's level is its depth plus its
    root's shift (`_shifts`)."""

    body: np.ndarray
    parent: np.ndarray
    slot: np.ndarray
    children: np.ndarray


def _shifts(parent, depth):
    """Each root's first level: the tallest subtree at level 0, then each next tallest where it
    widens the levels it spans the least (the earliest such), never past the tallest's last
    level. A ladder of k rockers beside a chain of k + 1 bodies takes 2 columns, not k + 1."""
    n, root = len(parent), []
    for i, p in enumerate(parent):
        root.append(i if p < 0 else root[p])
    counts = {}  # root -> bodies per depth below it
    for i in range(n):
        counts.setdefault(root[i], []).append(depth[i])
    counts = {r: np.bincount(d) for r, d in counts.items()}
    levels = max(len(c) for c in counts.values())
    width, shift = np.zeros(levels, dtype=int), {}
    for r in sorted(counts, key=lambda r: (-len(counts[r]), r)):
        c = counts[r]
        widths = [np.max(width[s : s + len(c)] + c) for s in range(levels - len(c) + 1)]
        shift[r] = int(np.argmin(widths))
        width[shift[r] : shift[r] + len(c)] += c
    return [shift[root[i]] for i in range(n)]


@functools.cache
def _levels(parent: tuple[int, ...]) -> _Levels:
    n = len(parent)
    depth = []
    for p in parent:
        depth.append(0 if p < 0 else depth[p] + 1)
    level_of = [d + s for d, s in zip(depth, _shifts(parent, depth))]
    groups = [[i for i in range(n) if level_of[i] == level] for level in range(max(level_of) + 1)]
    width = max(len(g) for g in groups)
    body = np.full((len(groups), width), n)
    up = np.zeros((len(groups), width), dtype=np.int32)
    slot = np.zeros(n, dtype=np.int64)
    below = [[[] for _ in range(width)] for _ in groups]  # [level][parent slot] -> child slots
    for level, g in enumerate(groups):
        body[level, : len(g)] = g
        slot[g] = level * width + np.arange(len(g))
        if level:
            up[level, : len(g)] = [
                groups[level - 1].index(parent[i]) if parent[i] >= 0 else width for i in g
            ]
            for column, above in enumerate(up[level, : len(g)]):
                if above < width:
                    below[level][above].append(column)
    count = max(len(c) for level in below for c in level)
    children = np.full((len(groups), width, max(count, 1)), width, dtype=np.int32)
    for level, slots in enumerate(below):
        for above, columns in enumerate(slots):
            children[level, above, : len(columns)] = columns
    return _Levels(body, up, slot, children)


def _take(tree, index):
    return jax.tree.map(lambda x: placement.take(x, index), tree)


def _by_level(mech, tree):
    """Per-body arrays ``(n, ...)`` rearranged into level slots ``(L, w, ...)``."""
    levels = _levels(mech.parent)
    if levels.body.shape[1] == 1:  # a serial chain: levels are bodies
        return jax.tree.map(lambda x: x[:, None], tree)
    body = np.where(levels.body < mech.num_bodies, levels.body, 0)  # empty slots: any body
    return _take(tree, body)


def _by_body(mech, tree):
    """Level slots ``(L, w, ...)`` back to per-body arrays ``(n, ...)``."""
    levels = _levels(mech.parent)
    flat = jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), tree)
    return flat if levels.body.shape[1] == 1 else _take(flat, levels.slot)


def _gather(tree, index, width):
    """Rows ``index`` of per-slot arrays (no gather when every level has one slot)."""
    return tree if width == 1 else _take(tree, index)


class _Unrolled(NamedTuple):
    """The levels of a shallow tree for passes unrolled in Python (no padding slots): ``bodies``
    of each level, ``parents`` the column of each one's parent in the level above (its length,
    a ground row, for a root), ``children`` the `_child_sums` arguments of each level (``(len,
    c)`` columns of each one's children in the level below, its length (a zero row) where it
    has fewer than ``c``, and whether any has; None where the level below is empty), and
    ``order`` the position of each body in the levels' concatenation."""

    bodies: list
    parents: list
    children: list
    order: np.ndarray


@functools.cache
def _unrolled(parent: tuple[int, ...]) -> _Unrolled:
    levels = _levels(parent)
    n = len(parent)
    bodies = [row[row < n] for row in levels.body]
    column = {int(b): j for row in bodies for j, b in enumerate(row)}
    parents = [
        np.array([column.get(parent[b], len(above)) for b in row]) if level else None
        for level, (row, above) in enumerate(zip(bodies, [None] + bodies[:-1]))
    ]
    children = []
    for row, below in itertools.pairwise(bodies):
        lists = [[j for j, c in enumerate(below) if parent[c] == b] for b in row]
        table = np.full((len(row), max(len(x) for x in lists)), len(below))
        for i, x in enumerate(lists):
            table[i, : len(x)] = x
        children.append((table, bool(np.any(table == len(below)))) if table.size else None)
    children.append(None)  # the last level has none
    return _Unrolled(bodies, parents, children, np.argsort(np.concatenate(bodies)))


def _rows(tree, index, size):
    """Rows ``index`` of per-row arrays of ``size`` rows (static; none taken for all in order)."""
    if np.array_equal(index, np.arange(size)):
        return tree
    return _take(tree, index)


def _joined(n, order, outs):
    """Per-level outputs concatenated and put in body order."""
    return jax.tree.map(lambda *parts: _rows(jnp.concatenate(parts), order, n), *outs)


def _ground_rows(step, ground, inputs):
    """``ground`` broadcast to the values ``step`` returns for one level's ``inputs``, and its
    first row (appended where a root sits below level 0)."""
    value, _ = jax.eval_shape(step, ground, inputs)
    value = jax.tree.map(lambda g, v: jnp.broadcast_to(g, v.shape).astype(v.dtype), ground, value)
    return value, jax.tree.map(lambda v: v[:1], value)


def _down(mech, step, ground, inputs):
    """Base -> tips: ``value_i, out_i = step(value_parent, inputs_i)`` with ``ground`` the
    ground's value, all bodies of a level at once in a ``lax.scan`` over levels (unrolled for
    shallow trees: `_down_unrolled`); returns the outputs ``(n, ...)``."""
    levels = _levels(mech.parent)
    if len(levels.body) <= UNROLL_LEVELS:
        return _down_unrolled(mech, step, ground, inputs)
    width = levels.body.shape[1]
    xs = (_by_level(mech, inputs), jnp.asarray(levels.parent))
    above, ground_row = _ground_rows(step, ground, _take(xs[0], 0))
    grounds = bool(np.any(levels.parent == width))  # roots below level 0

    def level(above, x):
        inputs, parents = x
        if grounds:
            above = jax.tree.map(lambda v, g: jnp.concatenate([v, g]), above, ground_row)
        return step(_gather(above, parents, width), inputs)

    return _by_body(mech, jax.lax.scan(level, above, xs)[1])


def _down_unrolled(mech, step, ground, inputs):
    """`_down` as a Python loop over the levels, each level's inputs and parents' values taken
    by static indices: no padding slots and no per-level slicing of stacked arrays."""
    n, u = mech.num_bodies, _unrolled(mech.parent)
    first = _rows(inputs, u.bodies[0], n)
    value, ground_row = _ground_rows(step, ground, first)
    outs = []
    for level, (bodies, parents) in enumerate(zip(u.bodies, u.parents)):
        if level:
            size = len(u.bodies[level - 1])
            if parents.max() == size:  # a root below level 0: the ground's row appended
                value = jax.tree.map(lambda v, g: jnp.concatenate([v, g]), value, ground_row)
            value = _rows(value, parents, size)
        value, out = step(value, first if level == 0 else _rows(inputs, bodies, n))
        outs.append(out)
    return _joined(n, u.order, outs)


def _up(mech, step, own, inputs):
    """Tips -> base: ``out_i, to_parent_i = step(own_i + sum of the children's to_parent,
    inputs_i)``, all bodies of a level at once in a reversed ``lax.scan`` over levels (unrolled
    for shallow trees: `_up_unrolled`); returns the outputs ``(n, ...)``."""
    levels = _levels(mech.parent)
    if len(levels.body) <= UNROLL_LEVELS:
        return _up_unrolled(mech, step, own, inputs)
    width = levels.body.shape[1]
    xs = (_by_level(mech, (own, inputs)), jnp.asarray(levels.children))
    _, to_parent = jax.eval_shape(step, *_take(xs[0], 0))
    below = jax.tree.map(lambda v: jnp.zeros(v.shape, v.dtype), to_parent)

    def level(below, x):
        (own, inputs), children = x
        out, to_parent = step(jax.tree.map(jnp.add, own, below), inputs)
        if width > 1:  # each slot above sums its children's (a root's goes to the ground)
            to_parent = jax.tree.map(lambda v: _child_sums(v, children), to_parent)
        return to_parent, out

    return _by_body(mech, jax.lax.scan(level, below, xs, reverse=True)[1])


def _up_unrolled(mech, step, own, inputs):
    """`_up` as a Python loop over the levels, tips first, by static indices
    (`_down_unrolled`)."""
    n, u = mech.num_bodies, _unrolled(mech.parent)
    outs, to_parent = [], None
    for bodies, children in zip(u.bodies[::-1], u.children[::-1]):
        total, x = _rows((own, inputs), bodies, n)
        if children is not None:  # each body adds its children's
            total = jax.tree.map(lambda t, v, c=children: t + _child_sums(v, *c), total, to_parent)
        out, to_parent = step(total, x)
        outs.append(out)
    return _joined(n, u.order, outs[::-1])


def _child_sums(values, children, padded=True):
    """``(w, ...)`` sums of the ``values`` ``(w, ...)`` of one level over the rows ``children``
    ``(w, c)`` (`_Levels`; row ``w`` is zero when ``padded``): a gather, linear in the width (a
    one-hot product over the slots was quadratic: a forest of k trees)."""
    if padded:
        values = jnp.concatenate([values, jnp.zeros_like(values[:1])])
    if children.shape[1] == 1:
        return placement.take(values, children[:, 0])
    return jnp.sum(placement.take(values, children), axis=1)


def _subtree_sums(mech, x):
    """Tips -> base: each body's value plus its descendants' (the ``N^T`` sums)."""
    return _up(mech, lambda total, _: (total, total), x, None)


# Kinematics.


def _pose_terms(mech):
    """The q-independent terms of the joint poses, by Rodrigues' formula between the fixed joint
    frames: ``R = R0 + sin(q) R1 + (1 - cos q) R2`` and ``r = r0 + sin(q) r1 + (1 - cos q) r2 +
    q r3`` (``R1 = R2 = 0`` for prismatic joints, ``r3 = 0`` for revolute ones)."""
    revolute = np.array([k == "revolute" for k in mech.joint_kinds])
    turn = jax.vmap(spatial.skew)(mech.axis) * revolute[:, None, None]
    first, last = mech.parent_rotation, jnp.swapaxes(mech.child_rotation, -1, -2)
    rotations = [first @ last, first @ turn @ last, first @ turn @ turn @ last]
    positions = [-(r @ mech.child_position[..., None])[..., 0] for r in rotations]
    positions[0] = positions[0] + mech.parent_position
    slide = (first @ mech.axis[..., None])[..., 0] * (~revolute)[:, None]
    return rotations, positions + [slide]


def _angles(mech, params, q):
    """``(sin a, 1 - cos a, a)``, each ``(n, 1, B)``, of every body's joint coordinate ``a`` from
    the configuration ``q`` ``(nq, B)`` (``a = 0`` for the bodies of a ball joint), and for a
    mechanism with quaternions the change ``(n, 3, 3, B)``, ``(n, 3, B)`` they make to the poses
    of the first bodies of ball joints: ``R = P Q C^T`` where the angle gives ``P C^T``."""
    a = configuration.scalar_coordinates(mech, q, axis=0)
    sin, versine = trigonometry.sin_versine(a)
    angles = (sin[:, None], versine[:, None], a[:, None])
    if not mech.quaternion_slots:
        return angles
    parent, child_t, child_position = params.quaternion
    start = configuration_layout(mech.nv, mech.quaternion_slots)[1]
    turn = configuration.quaternion_matrix(*(q[start + k] for k in range(4)), axis=1)
    turn = turn - jnp.eye(3, dtype=q.dtype)[..., None]
    rotation = _mm(_mm(parent, turn), child_t)
    changes = (rotation, -_mv(rotation, child_position))
    slots = np.asarray(mech.quaternion_slots)
    scatter = lambda x: placement.put(jnp.zeros((mech.nv,) + x.shape[1:], x.dtype), slots, x)
    return angles + tuple(scatter(x) for x in changes)


def _planar_terms(mech):
    """The q-independent terms of a planar mechanism's joint poses: each joint's fixed turn
    (``P C^T``, about z) as an angle, the sign of its revolute axis along z (0 for other joints),
    its origin in the parent's frame, its sliding direction there (0 for revolute joints) and
    the child frame's origin in the joint's child-side frame: the joint turns the child by
    ``offset + turn a`` and moves its origin to ``near + slide a - R far``."""
    revolute = np.array([k == "revolute" for k in mech.joint_kinds])
    fixed = mech.parent_rotation @ jnp.swapaxes(mech.child_rotation, -1, -2)
    slide = (mech.parent_rotation @ mech.axis[..., None])[..., 0] * (~revolute)[:, None]
    offset = jnp.arctan2(fixed[:, 1, 0], fixed[:, 0, 0])
    return offset, mech.axis[:, 2] * revolute, mech.parent_position, slide, mech.child_position


def _about_z(sin, cos):
    """Rotations ``(..., 3, 3, B)`` about z from their sines and cosines ``(..., B)``."""
    zero, one = jnp.zeros_like(sin), jnp.ones_like(sin)
    rows = [[cos, -sin, zero], [sin, cos, zero], [zero, zero, one]]
    return jnp.stack([jnp.stack(r, axis=-2) for r in rows], axis=-3)


def _turned(sin, cos, v):
    """``R v`` for rotations about z given by ``sin``, ``cos`` ``(..., B)`` and 3-vectors ``v``
    ``(..., 3, B)``: fewer products than with ``R`` (batches of random planar chains ran 15 %
    faster so at 4 and 16 bodies, one core, 2026-12-07)."""
    x, y = v[..., 0, :], v[..., 1, :]
    return _stack(cos * x - sin * y, sin * x + cos * y, v[..., 2, :])


def _joint_poses(mech, params, q):
    """Rotation ``(k, 3, 3, B)`` and origin ``(k, 3, B)`` of bodies in their parents' frames from
    the configuration ``q`` ``(nq, B)``: `_pose_terms` with `_angles`, planar `_planar_terms`."""
    if mech.planar:
        offset, turn, near, slide, far = params.terms
        a = configuration.scalar_coordinates(mech, q, axis=0)
        sin, versine = trigonometry.sin_versine(offset + turn * a)
        cos = 1.0 - versine
        return _about_z(sin, cos), near + slide * a[:, None] - _turned(sin, cos, far)
    (r0, r1, r2), (p0, p1, p2, p3) = params.terms
    angles = _angles(mech, params, q)
    sin, vers, q = angles[:3]
    rotation = r0 + sin[:, None] * r1 + vers[:, None] * r2
    position = p0 + sin * p1 + vers * p2 + q * p3
    if len(angles) == 3:
        return rotation, position
    return rotation + angles[3], position + angles[4]


def _motion_to_world(planar, rotation, position, t):
    if planar:  # rotation about z: [w; R v + w z x r]
        w = t[..., 0, :]
        v = _mv(rotation[..., :2, :2, :], t[..., 1:, :])
        x, y = position[..., 0, :], position[..., 1, :]
        return _stack(w, v[..., 0, :] + w * y, v[..., 1, :] - w * x)
    w = _mv(rotation, t[..., :3, :])
    v = _mv(rotation, t[..., 3:, :]) + _cross(position, w)
    return jnp.concatenate([w, v], axis=-2)


def _motion_to_body(planar, rotation, position, t):
    if planar:
        w, x, y = t[..., 0, :], position[..., 0, :], position[..., 1, :]
        v = _mv(
            _transpose(rotation[..., :2, :2, :]), _stack(t[..., 1, :] - w * y, t[..., 2, :] + w * x)
        )
        return _stack(w, v[..., 0, :], v[..., 1, :])
    w, rotation_t = t[..., :3, :], _transpose(rotation)
    v = _mv(rotation_t, t[..., 3:, :] - _cross(position, w))
    return jnp.concatenate([_mv(rotation_t, w), v], axis=-2)


def _force_to_world(planar, rotation, position, f):
    if planar:  # [n + r x f; R f]
        force = _mv(rotation[..., :2, :2, :], f[..., 1:, :])
        fx, fy = force[..., 0, :], force[..., 1, :]
        return _stack(f[..., 0, :] + position[..., 0, :] * fy - position[..., 1, :] * fx, fx, fy)
    force = _mv(rotation, f[..., 3:, :])
    moment = _mv(rotation, f[..., :3, :]) + _cross(position, force)
    return jnp.concatenate([moment, force], axis=-2)


def _force_to_body(planar, rotation, position, f):
    if planar:
        fx, fy = f[..., 1, :], f[..., 2, :]
        moment = f[..., 0, :] - position[..., 0, :] * fy + position[..., 1, :] * fx
        force = _mv(_transpose(rotation[..., :2, :2, :]), f[..., 1:, :])
        return _stack(moment, force[..., 0, :], force[..., 1, :])
    force, rotation_t = f[..., 3:, :], _transpose(rotation)
    moment = _mv(rotation_t, f[..., :3, :] - _cross(position, force))
    return jnp.concatenate([moment, _mv(rotation_t, force)], axis=-2)


class _Inertias(NamedTuple):
    """Every body's extended mass matrix about the ground origin, in ground axes, kept as its
    parts (seed 000 eq. 3 with the body's world centre of mass ``c``): ``mass`` ``(n, B)``,
    first moment ``first = m c`` ``(n, 3, B)``, rotational inertia about the origin
    ``rotational`` ``(n, 3, 3, B)`` (planar: its zz entry ``(n, B)``)."""

    mass: Array
    first: Array
    rotational: Array


def _world_inertias(mech, params, rotation, position) -> _Inertias:
    mass = params.mass
    com = _mv(rotation, params.com) + position
    first = mass[:, None] * com
    if mech.planar:  # rotations about z keep the zz inertia
        cx, cy = com[:, 0], com[:, 1]
        return _Inertias(mass, first, params.inertia[:, 2, 2] + mass * (cx * cx + cy * cy))
    inertia = _mm(_mm(rotation, params.inertia), _transpose(rotation))
    square = jnp.sum(com * com, axis=1)[:, None, None] * jnp.eye(3, dtype=com.dtype)[..., None]
    return _Inertias(mass, first, inertia + mass[:, None, None] * (square - _outer(com, com)))


def _momentum(planar, inertias, t):
    """``M t`` from the parts: ``[I_o w + h x v; m v - h x w]`` with ``h = m c`` (planar:
    ``[I_zz w - h_y v_x + h_x v_y; m v_x - h_y w; m v_y + h_x w]``), without forming ``M``."""
    m, h = inertias.mass, inertias.first
    if planar:
        w, vx, vy, hx, hy = t[..., 0, :], t[..., 1, :], t[..., 2, :], h[:, 0], h[:, 1]
        return _stack(inertias.rotational * w - hy * vx + hx * vy, m * vx - hy * w, m * vy + hx * w)
    w, v = t[..., :3, :], t[..., 3:, :]
    moment = _mv(inertias.rotational, w) + _cross(h, v)
    return jnp.concatenate([moment, m[:, None] * v - _cross(h, w)], axis=-2)


def _inertia_matrix(planar, inertias):
    """The extended mass matrices ``(n, d, d, B)`` from their parts."""
    m, (hx, hy, hz) = inertias.mass, (inertias.first[:, k] for k in range(3))
    zero = jnp.zeros_like(hx)
    if planar:
        rows = [[inertias.rotational, -hy, hx], [-hy, m, zero], [hx, zero, m]]
    else:
        i = inertias.rotational
        rows = [
            [i[:, 0, 0], i[:, 0, 1], i[:, 0, 2], zero, -hz, hy],
            [i[:, 1, 0], i[:, 1, 1], i[:, 1, 2], hz, zero, -hx],
            [i[:, 2, 0], i[:, 2, 1], i[:, 2, 2], -hy, hx, zero],
            [zero, hz, -hy, m, zero, zero],
            [-hz, zero, hx, zero, m, zero],
            [hy, -hx, zero, zero, zero, m],
        ]
    return jnp.stack([jnp.stack(jnp.broadcast_arrays(*r), axis=1) for r in rows], axis=1)


def _subspaces(mech):
    """Joint-rate propagation vectors ``p_i`` ``(n, d)`` in body coordinates."""
    subspaces = spatial.joint_subspaces(
        mech.joint_kinds, mech.axis, mech.child_rotation, mech.child_position
    )
    return subspaces[:, _ROWS] if mech.planar else subspaces


class _Frames(NamedTuple):
    rotation: Array  # (n, 3, 3, B) world rotation of each body frame
    position: Array  # (n, 3, B) world origin
    subspace: Array  # (n, d, B) p_i in world coordinates
    inertia: _Inertias | None  # M_i about the world origin, as its parts (if asked for)
    twist: Array | None  # (n, d, B) t_i (given qd)
    bias: Array | None  # (n, d, B) t_i x p_i qd_i, the velocity-product twist-rate (given qd)
    rate: Array | None  # (n, d, B) twist-rate with gravity (given qd and qdd)


def _gravity(mech):
    """Twist-rate of the ground that stands for gravity, ``-[0; g]``."""
    g = jnp.concatenate([jnp.zeros(3, mech.gravity.dtype), -mech.gravity])
    return g[_ROWS] if mech.planar else g


class _Parameters(NamedTuple):
    """The mechanism's arrays the recursions use; inside, each has a trailing batch axis (of one,
    or one entry per state when the mechanism itself is batched, e.g. under ``jax.vmap``)."""

    terms: tuple  # `_pose_terms` (planar: `_planar_terms`)
    subspace: Array  # (n, d) p_i in body coordinates
    mass: Array  # (n,)
    com: Array  # (n, 3)
    inertia: Array  # (n, 3, 3)
    gravity: Array  # (d,)
    armature: Array  # (n,) added to the diagonal of the mass matrix
    quaternion: tuple | None  # P (k, 3, 3), C^T (k, 3, 3), c (k, 3) of the ball joints' frames


def _parameters(mech) -> _Parameters:
    slots = np.asarray(mech.quaternion_slots, dtype=int)
    frames = (mech.parent_rotation, jnp.swapaxes(mech.child_rotation, -1, -2), mech.child_position)
    return _Parameters(
        _planar_terms(mech) if mech.planar else _pose_terms(mech),
        _subspaces(mech),
        mech.mass,
        mech.com,
        mech.inertia,
        _gravity(mech),
        mech.armature,
        tuple(x[slots] for x in frames) if slots.size else None,
    )


@functools.cache
def _through(nv, quaternion_slots):
    """``(n,)`` flags of the bodies whose children continue their ball joint (the first two of
    its three), or None without ball joints."""
    if not quaternion_slots:
        return None
    through = np.zeros(nv, dtype=bool)
    for k in quaternion_slots:
        through[k : k + 2] = True
    return through


def _spatial_motion(mech, params, q, qd, qdd, bias):
    """`_frames` of a spatial mechanism in one base -> tips pass: each body's joint pose
    (computed for all bodies before the pass) composed with its parent's, then ``p_i``, ``t_i``,
    ``dt_i``. The three bodies of a ball joint share one frame fixed in its child, so their
    velocity-product term is ``t_start x p_i qd_i`` with ``t_start`` the twist where the joint
    starts (for a one-body joint ``t_parent x p_i qd_i``)."""
    dtype, zero = q.dtype, lambda rows: jnp.zeros((rows, 1), q.dtype)
    through = _through(mech.nv, mech.quaternion_slots)
    inputs = (_joint_poses(mech, params, q), params.subspace, qd, qdd, through)
    ground = (
        jnp.eye(3, dtype=dtype)[..., None],
        zero(3),
        None if qd is None else zero(6),
        None if qd is None or through is None else zero(6),
        None if qdd is None else params.gravity,
    )

    def step(above, inputs):
        (r, x, t, start, dt), ((joint_r, joint_x), local, qd, qdd, through) = above, inputs
        r, x = _mm(r, joint_r), x + _mv(r, joint_x)
        s = _motion_to_world(False, r, x, local)
        product = None
        if qd is not None:
            rate = s * qd[:, None]
            if bias:
                product = _cross_motion(False, t if start is None else start, rate)
            t = t + rate
            if start is not None:
                start = jnp.where(through[:, None, None], start, t)
        if qdd is not None:
            dt = dt + s * qdd[:, None] + product
        return (r, x, t, start, dt), (r, x, s, t, product, dt)

    return _down(mech, step, ground, inputs)


def _prefix(mech, own, ground):
    """Base -> tips sums ``value_i = value_parent + own_i`` (``ground`` the ground's value)."""
    return _down(mech, lambda above, x: (above + x,) * 2, ground, own)


def _planar_motion(mech, params, q, qd, qdd, bias):
    """`_frames` of a planar mechanism: base -> tips sums of the joint angles, of the
    displacements of the frame origins (each in its parent's frame turned by the parent's
    angle), of the rates ``p_i qd_i`` and of the twist-rates; every sine and cosine, ``p_i``
    and velocity product computed at once for all bodies between the sums."""
    offset, turn, near, slide, far = params.terms
    a = configuration.scalar_coordinates(mech, q, axis=0)
    sin, versine = trigonometry.sin_versine(_prefix(mech, offset + turn * a, 0.0))
    cos, parents = 1.0 - versine, np.array([mech.num_bodies if p < 0 else p for p in mech.parent])
    above = lambda x, value: placement.take(
        jnp.concatenate([x, jnp.full_like(x[:1], value)]), parents
    )
    shift = _turned(above(sin, 0.0), above(cos, 1.0), near + slide * a[:, None])
    shift = shift - _turned(sin, cos, far)
    x = _prefix(mech, shift, jnp.zeros((3, 1), q.dtype))
    rotation = _about_z(sin, cos)
    s = _motion_to_world(True, rotation, x, params.subspace)
    t = product = dt = None
    if qd is not None:
        rate = s * qd[:, None]
        t = _prefix(mech, rate, jnp.zeros((3, 1), q.dtype))
        if bias:
            product = _cross_motion(True, t, rate)  # t_parent x rate, as rate x rate = 0
    if qdd is not None:
        dt = _prefix(mech, s * qdd[:, None] + product, params.gravity)
    return rotation, x, s, t, product, dt


def _frames(mech, params, q, qd=None, qdd=None, bias=True, inertia=True):
    """Each body's world pose, joint-rate propagation vector ``p_i``, and given ``qd`` its twist
    ``t_i = t_parent + p_i qd_i`` (seed 004 eqs. 20-23 with ``A_i = 1`` in the ground frame), and
    given ``qdd`` too its twist-rate ``dt_i = dt_parent + p_i qdd_i + t_parent x p_i qd_i`` with
    gravity as the ground's (the velocity-product terms given ``qd`` unless not ``bias``), and
    unless not ``inertia`` the bodies' extended mass matrices (a program inside ``custom_vmap``
    keeps what it does not use). Spatial mechanisms compute them in one pass over the levels
    (`_spatial_motion`); planar ones sum angles, so they compute every product at once between
    four light passes (`_planar_motion`): 3-RRR SSLM 1,627 instead of 1,876 lowered operations,
    batched 0.522 instead of 0.571 us per state (experiments/compact_programs_planar.md), while a
    spatial mechanism's batch ran slower that way (Stewart platform 6.2 instead of 5.0 us per
    state, one core, 2026-12-07)."""
    motion = _planar_motion if mech.planar else _spatial_motion
    r, x, s, t, product, dt = motion(mech, params, q, qd, qdd, bias)
    inertias = _world_inertias(mech, params, r, x) if inertia else None
    return _Frames(r, x, s, inertias, t, product, dt)


def _external(mech, frames, f_ext):
    """External body wrenches ``(n, d, B)`` in the ground frame (zero when ``f_ext`` is None)."""
    if f_ext is None:
        return 0.0
    return _force_to_world(mech.planar, frames.rotation, frames.position, f_ext)


def _wrenches(mech, frames, f_world):
    """Newton-Euler wrench of every body less gravity and external wrenches (ground frame)."""
    momentum = _momentum(mech.planar, frames.inertia, frames.twist)
    return (
        _momentum(mech.planar, frames.inertia, frames.rate)
        + _cross_force(mech.planar, frames.twist, momentum)
        - f_world
    )


# Public functions: argument checks and the batch layout around the cores above.


def _batched(mech, core, f_ext=None, **states):
    """``core(params, *states, f_ext)`` on the internal layout for states of shape ``(*batch, n)``
    (``q``: ``(*batch, nq)``; and ``f_ext`` ``(n, d)`` or ``(*batch, n, d)``); the outputs (a
    pytree) come back as ``(*batch, ...)``. Checks the shapes, naming the argument."""
    n, arrays, batch = mech.num_bodies, [], None
    for name, x in states.items():
        x, size = jnp.asarray(x), mech.nq if name == "q" else n
        if x.ndim == 0 or x.shape[-1] != size:
            what = f"nq = {size}" if size != n else f"{n} bodies"
            raise ValueError(f"{name} has shape {x.shape}; expected (..., {size}) for {what}")
        if batch is not None and x.shape[:-1] != batch:
            raise ValueError(f"{name} has batch shape {x.shape[:-1]}; the other states {batch}")
        batch = x.shape[:-1]
        arrays.append(x)
    if f_ext is not None:
        f_ext = jnp.asarray(f_ext)
        if f_ext.shape[-2:] != (n, mech.dim) or f_ext.shape[:-2] not in ((), batch):
            raise ValueError(
                f"f_ext has shape {f_ext.shape}; expected ({n}, {mech.dim}) or "
                f"{batch + (n, mech.dim)} (body wrenches of the states' batch)"
            )
        arrays.append(jnp.broadcast_to(f_ext, batch + (n, mech.dim)))
    params = _parameters(mech)
    base = tuple(x.ndim for x in jax.tree.leaves(params))
    return _vmappable(core, f_ext is not None, base)(params, arrays)


def _vmappable(core, with_f_ext, base):
    """``fn(params, arrays)``, `_native`, also under ``jax.vmap``: there ``vmap`` would batch
    every small operation with the mapped axis leading, so a ``custom_vmap`` rule folds the mapped
    axis into the native batch instead (per-state parameters included: a batched mechanism, e.g.
    Monte Carlo samples). Derivatives (a ``custom_jvp``) differentiate `_native` as written."""

    def native(params, arrays):
        return _native(core, with_f_ext, base, params, arrays)

    @jax.custom_jvp
    def fn(params, arrays):
        return vmapped(params, arrays)

    @fn.defjvp
    def jvp(primals, tangents):
        return jax.jvp(native, primals, tangents)

    @jax.custom_batching.custom_vmap
    def vmapped(params, arrays):
        return native(params, arrays)

    @vmapped.def_vmap
    def rule(axis_size, in_batched, params, arrays):
        batched_params, batched_arrays = in_batched
        arrays = [
            x if b else jnp.broadcast_to(x, (axis_size,) + x.shape)
            for x, b in zip(arrays, batched_arrays)
        ]
        batch = arrays[0].shape[:-1]

        def per_state(x, b, d):  # shared (base shape) or (*batch, *base)
            if not b:
                return x if x.ndim == d else jnp.broadcast_to(x, (axis_size,) + x.shape)
            x = x.reshape(x.shape[:1] + (1,) * (len(batch) + d - x.ndim) + x.shape[1:])
            return jnp.broadcast_to(x, batch + x.shape[len(batch) :])

        leaves, tree = jax.tree.flatten(params)
        flags = jax.tree.leaves(batched_params)
        params = tree.unflatten([per_state(*a) for a in zip(leaves, flags, base)])
        out = fn(params, arrays)
        return out, jax.tree.map(lambda _: True, out)

    return fn


def _native(core, with_f_ext, base, params, arrays):
    """``core`` over states ``arrays`` ``(*batch, ...)``, ``(*batch, n)`` first, with ``params``
    leaves shared (of ndim ``base``) or per state (``(*batch, ...)``). Runs in chunks of
    `chunking.chunks` states laid out ``(n, ..., chunk)`` (a ``lax.map`` when there are several:
    each chunk's arrays stay in cache); one state (no batch axes) is a chunk of one without the
    reshaping (3-RRR SSLM: 42 fewer lowered operations)."""
    batch = arrays[0].shape[:-1]
    size = int(np.prod(batch, dtype=int))
    leaves, tree = jax.tree.flatten(params)
    per_state = [x.ndim > d for x, d in zip(leaves, base)]
    own = [x for x, p in zip(leaves, per_state) if p]
    if not batch and not own:  # one state: a batch axis of one, no chunks
        trailing = [x[..., None] for x in arrays]
        params = tree.unflatten([x[..., None] for x in leaves])
        out = core(params, *trailing, *([] if with_f_ext else [None]))
        return jax.tree.map(lambda o: o[..., 0], out)
    chunk, count = chunking.chunks(size, chunking.state_bytes([*own, *arrays], size))

    def split(x):  # (*batch, ...) -> (count, ..., chunk), padded with the last state
        x = x.reshape((size,) + x.shape[len(batch) :])
        if count * chunk > size:
            x = jnp.concatenate([x, jnp.repeat(x[-1:], count * chunk - size, axis=0)])
        return jnp.moveaxis(x.reshape((count, chunk) + x.shape[1:]), 1, -1)

    shared = [None if p else x[..., None] for x, p in zip(leaves, per_state)]

    def run(args):
        own, states = args
        own = iter(own)
        params = tree.unflatten([next(own) if s is None else s for s in shared])
        return core(params, *states, *([] if with_f_ext else [None]))

    chunks = ([split(x) for x, p in zip(leaves, per_state) if p], [split(x) for x in arrays])
    if count == 1:
        out = jax.tree.map(lambda o: o[None], run(jax.tree.map(lambda x: x[0], chunks)))
    else:
        out = jax.lax.map(run, chunks)

    def join(o):  # (count, ..., chunk) -> (*batch, ...)
        o = jnp.moveaxis(o, -1, 1).reshape((count * chunk,) + o.shape[1:-1])
        return (o[:size] if count * chunk > size else o).reshape(batch + o.shape[1:])

    return jax.tree.map(join, out)


@compilation.jit
def joint_poses(mech: Mechanism, q: Float[Array, "... n"]):
    """Rotation ``(..., n, 3, 3)`` and origin ``(..., n, 3)`` of each body in its parent's frame."""
    return _batched(mech, lambda params, q, _: _joint_poses(mech, params, q), q=q)


@compilation.jit
def forward_kinematics(mech: Mechanism, q: Float[Array, "... n"]):
    """World origin ``(..., n, 3)`` and rotation ``(..., n, 3, 3)`` of every body frame
    (positions first, as everywhere in loopdyn)."""

    def core(params, q, _):
        frames = _frames(mech, params, q, inertia=False)
        return frames.position, frames.rotation

    return _batched(mech, core, q=q)


def motion_subspaces(mech: Mechanism) -> Float[Array, "n d"]:
    """Joint-rate propagation vectors ``p_i`` in body coordinates (seed 004 eqs. 22-23)."""
    return _subspaces(mech)


def body_inertias(mech: Mechanism) -> Float[Array, "n d d"]:
    """Extended mass matrices ``M_i`` about each body frame origin (seed 000 eq. 3)."""
    inertia = spatial.planar_inertia if mech.planar else spatial.spatial_inertia
    return jax.vmap(inertia)(mech.mass, mech.com, mech.inertia)


def propagation_matrices(mech: Mechanism, q: Float[Array, " n"]) -> Float[Array, "n d d"]:
    """Twist propagation matrices ``A_i`` (parent -> body i, body coordinates)."""
    rotation, position = joint_poses(mech, q)
    x = jax.vmap(spatial.motion_transform)(rotation, position)
    return x[:, _ROWS[:, None], _ROWS] if mech.planar else x


def ground_acceleration(mech: Mechanism) -> Float[Array, " d"]:
    """Twist-rate of the ground that stands for gravity: ``-[0; g]``."""
    return _gravity(mech)


def _twists(mech, params, q, qd, _):
    frames = _frames(mech, params, q, qd, inertia=False)
    return _motion_to_body(mech.planar, frames.rotation, frames.position, frames.twist)


@compilation.jit
def twists(mech: Mechanism, q, qd) -> Float[Array, "... n d"]:
    """Twist of every body in its own coordinates (seed 004 eq. 20)."""
    return _batched(mech, functools.partial(_twists, mech), q=q, qd=qd)


def _twist_rates(mech, params, q, qd, qdd, _):
    frames = _frames(mech, params, q, qd, qdd, inertia=False)
    dt = frames.rate - params.gravity
    return _motion_to_body(mech.planar, frames.rotation, frames.position, dt)


@compilation.jit
def twist_rates(mech: Mechanism, q, qd, qdd) -> Float[Array, "... n d"]:
    """Twist-rate (time derivative of the twist, without gravity) of every body."""
    return _batched(mech, functools.partial(_twist_rates, mech), q=q, qd=qd, qdd=qdd)


def _body_wrenches(mech, params, q, qd, qdd, f_ext):
    frames = _frames(mech, params, q, qd, qdd)
    return frames, _wrenches(mech, frames, _external(mech, frames, f_ext))


@compilation.jit
def body_wrenches(mech: Mechanism, q, qd, qdd, f_ext=None):
    """In the ground frame: every body's origin ``(..., n, 3)``, rotation ``(..., n, 3, 3)``,
    joint-rate propagation vector ``p_i`` ``(..., n, d)`` and Newton-Euler wrench less gravity
    and external wrenches ``(..., n, d)`` (the wrench its joints must supply)."""

    def core(*args):
        frames, w = _body_wrenches(mech, *args)
        return frames.position, frames.rotation, frames.subspace, w

    return _batched(mech, core, f_ext, q=q, qd=qd, qdd=qdd)


def _joint_wrenches(mech, params, q, qd, qdd, f_ext):
    """Body coordinates: the wrench each tree joint carries (recursive Newton-Euler)."""
    frames, w = _body_wrenches(mech, params, q, qd, qdd, f_ext)
    w = _subtree_sums(mech, w)
    return _force_to_body(mech.planar, frames.rotation, frames.position, w)


@compilation.jit
def joint_wrenches(mech: Mechanism, q, qd, qdd, f_ext=None) -> Float[Array, "... n d"]:
    """Wrench transmitted from each parent to its body through the tree joint (body coordinates):
    the recursive Newton-Euler backward pass (seed 002 eqs. 20-22, 30-33)."""
    return _batched(mech, functools.partial(_joint_wrenches, mech), f_ext, q=q, qd=qd, qdd=qdd)


def _joint_forces(mech, frames, f_ext):
    """``tau = N^T w`` (seed 000 eq. 6): the bodies' wrenches summed tips -> base and projected
    on each joint's ``p_i``."""
    w = _wrenches(mech, frames, _external(mech, frames, f_ext))
    return _up(mech, lambda total, s: (_dot(s, total), total), w, frames.subspace)


def _inverse_dynamics(mech, params, q, qd, qdd, f_ext):
    return _joint_forces(mech, _frames(mech, params, q, qd, qdd), f_ext) + params.armature * qdd


@compilation.jit
def inverse_dynamics(mech: Mechanism, q, qd, qdd, f_ext=None) -> Float[Array, "... n"]:
    """Joint forces ``tau = I qdd + C qd + gravity - (external)`` by the recursive Newton-Euler
    (DeNOC) algorithm (seed 000 eq. 6 without multipliers), the joints' armature in ``I``; their
    dampers and springs are not included (`loopdyn.forces.joint_forces`)."""
    core = functools.partial(_inverse_dynamics, mech)
    return _batched(mech, core, f_ext, q=q, qd=qd, qdd=qdd)


def bias_forces(mech: Mechanism, q, qd, f_ext=None) -> Float[Array, "... n"]:
    """``C qd`` plus gravity (and minus external wrenches): inverse dynamics at ``qdd = 0``."""
    return inverse_dynamics(mech, q, qd, jnp.zeros_like(jnp.asarray(qd)), f_ext)


def mass_matrix(mech: Mechanism, q) -> Float[Array, "... n n"]:
    """Generalized inertia matrix ``I = N^T M N`` (seed 000 eq. 7) by the composite-body
    recursion: ``I_ij = p_j . (C_i p_i)`` for ``j`` on the path from ``i`` to the ground, with
    ``C_i`` the extended mass matrix of the subtree at ``i``, plus the joints' armature on the
    diagonal."""
    return mass_matrix_blocks(mech, q, ((0, mech.num_bodies),))[0]


@functools.cache
def _on_path(parent: tuple[int, ...]) -> np.ndarray:
    """``on_path[i, j]``: ``j`` is ``i`` or one of its ancestors."""
    on_path = np.eye(len(parent), dtype=bool)
    for i, p in enumerate(parent):
        if p >= 0:
            on_path[i] |= on_path[p]
    return on_path


def _ranges(ranges):
    """Coordinate ``ranges`` ``(start, stop)`` as `_inertia_block_stacks` groups of one."""
    return tuple((stop - start, (start,)) for start, stop in ranges)


def _inertia_block_stacks(mech, params, frames, groups, composite):
    """The diagonal blocks of ``I`` over equal-size coordinate ranges, stacked, one gather per
    group: ``groups`` holds ``(size, starts)``; each stack is ``(len(starts), size, size)``.
    ``I_ij = p_j . (C_i p_i)`` for ``j`` on the path from ``i`` to the ground, with ``C_i`` the
    ``composite`` (subtree) extended mass matrix at ``i`` (`_subtree_sums`), the joints'
    armature on the diagonal."""
    force = _momentum(mech.planar, composite, frames.subspace)
    on_path, s, stacks = _on_path(mech.parent), frames.subspace, []
    for size, starts in groups:
        k = np.add.outer(np.asarray(starts, dtype=int), np.arange(size))
        mask = on_path[k[:, :, None], k[:, None, :]][..., None]
        # a dot_general, not a multiply-and-sum: XLA's CPU reduction of the (g, size, size, d)
        # product was most of a single Cassie mass matrix (51 -> 35 us per evaluation)
        products = jnp.einsum("gidb,gjdb->gijb", placement.take(force, k), placement.take(s, k))
        lower = jnp.where(mask, products, 0.0)
        diagonal = np.eye(size, dtype=bool)[..., None]
        armature = placement.take(params.armature, k)[:, :, None]
        stacks.append(lower + jnp.where(diagonal, armature, jnp.swapaxes(lower, 1, 2)))
    return stacks


def _mass_matrix_blocks(mech, ranges, params, q, _):
    frames = _frames(mech, params, q)
    composite = _subtree_sums(mech, frames.inertia)
    stacks = _inertia_block_stacks(mech, params, frames, _ranges(ranges), composite)
    return [stack[0] for stack in stacks]


@compilation.jit
def mass_matrix_blocks(mech: Mechanism, q, ranges) -> list[Float[Array, "... k k"]]:
    """The diagonal blocks of `mass_matrix` over the coordinate ``ranges`` ``(start, stop)``
    (e.g. ``mech.topology.coordinate_slices``: the subsystems' ``I_j``, seed 000 eq. 20), at the
    cost of those blocks only."""
    return _batched(mech, functools.partial(_mass_matrix_blocks, mech, ranges), q=q)


def _forward_dynamics(mech, params, q, qd, tau, f_ext):
    return _articulated(mech, params, _frames(mech, params, q, qd), tau, f_ext)


def _articulated(mech, params, frames, tau, f_ext):
    """The articulated-body recursion on the internal layout (see `forward_dynamics`), from the
    `_frames` at ``(q, qd)``."""
    s, t, bias_acc = frames.subspace, frames.twist, frames.bias
    momentum = _momentum(mech.planar, frames.inertia, t)
    bias = _cross_force(mech.planar, t, momentum) - _external(mech, frames, f_ext)

    def backward(total, inputs):  # tips -> base: articulated inertia and bias wrench
        (art, bias_w), (s_i, c, tau_i, armature) = total, inputs
        u_vec = _mv(art, s_i)
        d_inv = 1.0 / (_dot(s_i, u_vec) + armature)
        u = tau_i - _dot(s_i, bias_w)
        gain = u_vec * d_inv[..., None, :]
        to_parent = (
            art - _outer(u_vec, gain),
            bias_w + _mv(art, c) + gain * (u - _dot(u_vec, c))[..., None, :],
        )
        return (u_vec, d_inv, u), to_parent

    inertia = _inertia_matrix(mech.planar, frames.inertia)
    solved = _up(mech, backward, (inertia, bias), (s, bias_acc, tau, params.armature))

    def forward(above, inputs):  # base -> tips: accelerations
        (s_i, c, (u_vec, d_inv, u)) = inputs
        acc = above + c
        qdd = d_inv * (u - _dot(u_vec, acc))
        return acc + s_i * qdd[..., None, :], qdd

    return _down(mech, forward, params.gravity, (s, bias_acc, solved))


@compilation.jit
def forward_dynamics(mech: Mechanism, q, qd, tau, f_ext=None) -> Float[Array, "... n"]:
    """Joint accelerations of the open tree under ``tau`` and body wrenches ``f_ext`` by the O(n)
    articulated-body recursion: solves ``I qdd = tau - C qd - gravity + N^T f_ext`` (armature in
    ``I``; ``tau`` without the joints' dampers and springs, which `loopdyn.forward` adds)."""
    core = functools.partial(_forward_dynamics, mech)
    return _batched(mech, core, f_ext, q=q, qd=qd, tau=tau)


class Motion(NamedTuple):
    """Every body's motion in the ground frame (origin and axes), as the loop kinematics use it:
    frame origin ``(..., n, 3)`` and rotation ``(..., n, 3, 3)``, joint-rate propagation vector
    ``p_i`` (the joint's twist per unit rate, at the ground origin) ``(..., n, d)`` and, given
    ``qd``, the twist ``(..., n, d)`` and the twist-rate at ``qdd = 0`` without gravity (the
    velocity-product terms) ``(..., n, d)``; each body's joint coordinate ``(..., n)`` (0 for a
    ball's bodies) and, given ``qd``, its rate ``(..., n)``, for the couplings of coordinates."""

    position: Array
    rotation: Array
    axes: Array
    twist: Array | None = None
    acceleration: Array | None = None
    coordinates: Array | None = None
    rates: Array | None = None


def _motion(mech, params, frames, q, qd=None):
    acceleration = None if frames.rate is None else frames.rate - params.gravity[None]
    return Motion(
        frames.position,
        frames.rotation,
        frames.subspace,
        frames.twist,
        acceleration,
        configuration.scalar_coordinates(mech, q, axis=0),
        qd,
    )


@compilation.jit
def body_motion(mech: Mechanism, q, qd=None, accelerations=True) -> Motion:
    """The bodies' `Motion` at ``q`` (and ``qd``; its ``acceleration`` None unless
    ``accelerations``): one base -> tips pass."""

    if qd is None:
        return _batched(
            mech,
            lambda params, q, _: _motion(mech, params, _frames(mech, params, q, inertia=False), q),
            q=q,
        )

    def core(params, q, qd, _):
        qdd = jnp.zeros_like(qd) if accelerations else None
        frames = _frames(mech, params, q, qd, qdd, bias=accelerations, inertia=False)
        return _motion(mech, params, frames, q, qd)

    return _batched(mech, core, q=q, qd=qd)


def _subsystem_terms(mech, groups, params, q, qd, tau, f_ext):
    """``phi = tau - N^T w`` (the joint forces at ``qdd = 0``, `_joint_forces`) and the stacked
    ``I_j`` from one base -> tips pass and one tips -> base pass summing the bodies' wrenches and
    extended mass matrices together."""
    frames = _frames(mech, params, q, qd, jnp.zeros_like(qd))
    wrenches = _wrenches(mech, frames, _external(mech, frames, f_ext))
    composite, total = _subtree_sums(mech, (frames.inertia, wrenches))
    stacks = _inertia_block_stacks(mech, params, frames, groups, composite)
    return tau - _dot(frames.subspace, total), stacks, _motion(mech, params, frames, q, qd)


@compilation.jit
def subsystem_stack_terms(
    mech: Mechanism, q, qd, tau, groups, f_ext=None
) -> tuple[Float[Array, "... n"], list[Float[Array, "... g k k"]], Motion]:
    """What the subsystem-level multipliers take from the tree: ``phi = tau - C qd - g + N^T
    f_ext`` (seed 000 eq. 6 without multipliers), the diagonal blocks ``I_j`` of the mass matrix
    over the subsystems (seed 000 eq. 20), equal sizes stacked (``groups`` holds ``(size,
    starts)``, one stack ``(..., len(starts), size, size)`` each, so the program does not grow
    with the number of subsystems) and the `body_motion` for the loops: one pass each way."""
    core = functools.partial(_subsystem_terms, mech, groups)
    return _batched(mech, core, f_ext, q=q, qd=qd, tau=tau)


def subsystem_terms(
    mech: Mechanism, q, qd, tau, ranges, f_ext=None
) -> tuple[Float[Array, "... n"], list[Float[Array, "... k k"]], Motion]:
    """`subsystem_stack_terms` with one block per coordinate range ``(start, stop)`` of
    ``ranges`` (e.g. ``mech.topology.coordinate_slices``)."""
    phi, stacks, motion = subsystem_stack_terms(mech, q, qd, tau, _ranges(ranges), f_ext)
    return phi, [stack[..., 0, :, :] for stack in stacks], motion


def _recursion_terms(mech, params, q, qd, f_ext):
    frames = _frames(mech, params, q, qd, jnp.zeros_like(qd))
    momentum = _momentum(mech.planar, frames.inertia, frames.twist)
    bias = _cross_force(mech.planar, frames.twist, momentum) - _external(mech, frames, f_ext)
    inertia = _inertia_matrix(mech.planar, frames.inertia)
    return _motion(mech, params, frames, q, qd), inertia, bias


@compilation.jit
def recursion_terms(
    mech: Mechanism, q, qd, f_ext=None
) -> tuple[Motion, Float[Array, "... n d d"], Float[Array, "... n d"]]:
    """What the recursion over the body graph (`loopdyn.recursive`) takes from the tree, from one
    base -> tips pass, in the ground frame: the `body_motion` at ``(q, qd)``, every body's extended
    mass matrix ``M_i`` and its velocity-product wrench less the external ones,
    ``t_i x* M_i t_i - f_ext_i``."""
    return _batched(mech, functools.partial(_recursion_terms, mech), f_ext, q=q, qd=qd)


def system_terms(
    mech: Mechanism, q, qd, tau, f_ext=None
) -> tuple[Float[Array, "... n"], Float[Array, "... n n"], Motion]:
    """What the system-level methods take from the tree (`subsystem_stack_terms`): the
    right-hand side ``phi = tau - C qd - g + N^T f_ext`` (``tau`` less `bias_forces`, seed 000
    eq. 6), `mass_matrix` and the `body_motion` for the loops."""
    phi, (mass,), motion = subsystem_terms(mech, q, qd, tau, ((0, mech.num_bodies),), f_ext)
    return phi, mass, motion
