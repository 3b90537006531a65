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
in chunks of `CHUNK` states (a ``lax.map``), so each chunk's arrays stay in cache. Planar
mechanisms use planar 3-vector algebra throughout. (Under ``jax.vmap`` the functions still work,
with the mapped axis leading; pass batches directly for speed.)

The sequential passes run over the tree's depth levels, all bodies of a level at once. A shallow
tree unrolls its levels at trace time; a deep one (more than `UNROLL_LEVELS` levels) runs them in a
``lax.scan``, so the program, and its compile time, does not grow with the number of bodies.
Path sums and subtree sums of a serial chain are cumulative sums.
"""

import functools
import itertools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from . import spatial
from .mechanism import Mechanism

UNROLL_LEVELS = 12  # deeper trees run their passes as a lax.scan over depth levels
CHUNK = 128  # states per chunk of a batch (measured best of 32-256 on a 2-core EPYC)
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


def _const(x):
    """A parameter array without batch: a trailing batch axis of one."""
    return jnp.asarray(x)[..., None]


# Depth levels: the order of the sequential passes.


class _Levels(NamedTuple):
    """The tree's depth levels, in two forms.

    Unrolled passes: ``exact[l] = (bodies, parents)``, the level's bodies (an index into per-body
    arrays) and each one's parent as an index into level ``l - 1`` (None at the base); indices
    are slices where contiguous. ``order`` puts the concatenated levels back in body order.

    Scanned passes: ``body``, ``parent`` ``(L, w)``, with per-body arrays extended by two rows,
    ``n`` (the ground) and ``n + 1`` (a sink): short levels are padded with the sink as body and
    the ground as parent, so padding reads the ground and writes where nothing reads.
    """

    exact: tuple
    order: np.ndarray | None
    body: np.ndarray
    parent: np.ndarray


def _index(indices):
    """A slice for contiguous indices (cheaper than a gather), else the index array."""
    indices = np.asarray(indices)
    if np.all(np.diff(indices) == 1):
        return slice(int(indices[0]), int(indices[-1]) + 1)
    return indices


@functools.cache
def _levels(parent: tuple[int, ...]) -> _Levels:
    n = len(parent)
    depth = []
    for p in parent:
        depth.append(0 if p < 0 else depth[p] + 1)
    groups = [[i for i in range(n) if depth[i] == level] for level in range(max(depth) + 1)]
    exact = [(_index(groups[0]), None)]
    for above, level in itertools.pairwise(groups):
        exact.append((_index(level), _index([above.index(parent[i]) for i in level])))
    order = np.argsort(np.concatenate(groups))
    width = max(len(g) for g in groups)
    body = np.full((len(groups), width), n + 1)
    up = np.full((len(groups), width), n)
    for level, g in enumerate(groups):
        body[level, : len(g)] = g
        up[level, : len(g)] = [parent[i] if parent[i] >= 0 else n for i in g]
    identity = np.array_equal(order, np.arange(n))
    return _Levels(tuple(exact), None if identity else order, body, up)


def _scanned(mech):
    return len(_levels(mech.parent).exact) > UNROLL_LEVELS


def _take(tree, index):
    return jax.tree.map(lambda x: x[index], tree)


def _extend(tree):
    """Per-body arrays with two more rows (ground and sink), copies of body 0: valid values."""
    return jax.tree.map(lambda x: jnp.concatenate([x, x[:1], x[:1]]), tree)


def _in_body_order(levels, outputs):
    """Per-level outputs concatenated and put in body order."""
    joined = jax.tree.map(lambda *x: jnp.concatenate(x), *outputs)
    return joined if levels.order is None else _take(joined, levels.order)


def _down(mech, step, ground, inputs):
    """Base -> tips: ``value_i, out_i = step(value_parent, inputs_i)`` with ``ground`` the
    ground's value, all bodies of a level at once; returns the outputs ``(n, ...)``."""
    levels = _levels(mech.parent)
    if not _scanned(mech):
        outputs, above = [], None
        for bodies, parents in levels.exact:
            value, out = step(
                ground if parents is None else _take(above, parents), _take(inputs, bodies)
            )
            outputs.append(out)
            above = value
        return _in_body_order(levels, outputs)
    inputs = _extend(inputs)
    value, out = jax.eval_shape(step, ground, _take(inputs, slice(0, 1)))
    rows = mech.num_bodies + 2
    values = jax.tree.map(lambda g, v: jnp.broadcast_to(g, (rows,) + v.shape[1:]), ground, value)
    outs = jax.tree.map(lambda o: jnp.zeros((rows,) + o.shape[1:], o.dtype), out)

    def level(carry, index):
        values, outs = carry
        bodies, parents = index
        value, out = step(_take(values, parents), _take(inputs, bodies))
        put = lambda a, b: a.at[bodies].set(b)
        return (jax.tree.map(put, values, value), jax.tree.map(put, outs, out)), None

    index = (jnp.asarray(levels.body), jnp.asarray(levels.parent))
    (_, outs), _ = jax.lax.scan(level, (values, outs), index)
    return _take(outs, slice(0, mech.num_bodies))


def _up(mech, step, own, inputs):
    """Tips -> base: ``out_i, to_parent_i = step(own_i + sum of the children's to_parent,
    inputs_i)``, all bodies of a level at once; returns the outputs ``(n, ...)``."""
    levels = _levels(mech.parent)
    if not _scanned(mech):
        outputs, below = [], None
        for bodies, parents in reversed(levels.exact):
            total = _take(own, bodies)
            if below is not None:
                slots, to_parent = below
                total = jax.tree.map(lambda t, c, i=slots: t.at[i].add(c), total, to_parent)
            out, to_parent = step(total, _take(inputs, bodies))
            outputs.append(out)
            below = (parents, to_parent)
        return _in_body_order(levels, outputs[::-1])
    own, inputs = _extend(own), _extend(inputs)
    out, _ = jax.eval_shape(step, _take(own, slice(0, 1)), _take(inputs, slice(0, 1)))
    outs = jax.tree.map(lambda o: jnp.zeros((mech.num_bodies + 2,) + o.shape[1:], o.dtype), out)

    def level(carry, index):
        totals, outs = carry
        bodies, parents = index
        out, to_parent = step(_take(totals, bodies), _take(inputs, bodies))
        totals = jax.tree.map(lambda a, b: a.at[parents].add(b), totals, to_parent)
        return (totals, jax.tree.map(lambda a, b: a.at[bodies].set(b), outs, out)), None

    index = (jnp.asarray(levels.body), jnp.asarray(levels.parent))
    (_, outs), _ = jax.lax.scan(level, (own, outs), index, reverse=True)
    return _take(outs, slice(0, mech.num_bodies))


def _serial(mech):
    return mech.parent == tuple(range(-1, mech.num_bodies - 1))


def _path_sums(mech, x, ground):
    """Base -> tips: each body's value plus its ancestors' and the ``ground`` value."""
    if _serial(mech):
        return jnp.cumsum(x, axis=0) + ground

    def step(above, x):
        total = above + x
        return total, total

    return _down(mech, step, ground, x)


def _subtree_sums(mech, x):
    """Tips -> base: each body's value plus its descendants' (the ``N^T`` sums)."""
    if _serial(mech):
        return jax.lax.cumsum(x, axis=0, reverse=True)
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


def _joint_poses(mech, q):
    """Rotation ``(n, 3, 3, B)`` and origin ``(n, 3, B)`` of each body in its parent's frame."""
    (r0, r1, r2), (p0, p1, p2, p3) = _pose_terms(mech)
    sin, vers = jnp.sin(q)[:, None], 1.0 - jnp.cos(q)[:, None]
    rotation = _const(r0) + sin[:, None] * _const(r1) + vers[:, None] * _const(r2)
    return rotation, _const(p0) + sin * _const(p1) + vers * _const(p2) + q[:, None] * _const(p3)


def _poses(mech, q):
    """World rotation ``(n, 3, 3, B)`` and origin ``(n, 3, B)`` of every body frame, composing
    the joint poses base -> tips."""
    joint_rotation, joint_position = _joint_poses(mech, q)
    eye = jnp.eye(3, dtype=q.dtype)[..., None]

    def step(above, joint):
        (r, x), (joint_r, joint_x) = above, joint
        pose = (_mm(r, joint_r), x + _mv(r, joint_x))
        return pose, pose

    return _down(mech, step, (eye, jnp.zeros((3, 1), q.dtype)), (joint_rotation, joint_position))


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


def _world_inertias(mech, rotation, position):
    """Extended mass matrices ``(n, d, d, B)`` of every body about the ground origin, in ground
    axes (seed 000 eq. 3 with the body's world centre of mass and rotated inertia)."""
    mass = _const(mech.mass)
    com = _mv(rotation, _const(mech.com)) + position
    cx, cy, cz = com[:, 0], com[:, 1], com[:, 2]
    if mech.planar:  # rotations about z keep the zz inertia
        izz = _const(mech.inertia[:, 2, 2]) + mass * (cx * cx + cy * cy)
        zero = jnp.zeros_like(izz)
        rows = [
            [izz, -mass * cy, mass * cx],
            [-mass * cy, mass + zero, zero],
            [mass * cx, zero, mass + zero],
        ]
        return jnp.stack([jnp.stack(r, axis=1) for r in rows], axis=1)
    inertia = _mm(_mm(rotation, _const(mech.inertia)), _transpose(rotation))
    parallel = (cx * cx + cy * cy + cz * cz)[:, None, None] * jnp.eye(3, dtype=com.dtype)[..., None]
    upper_left = inertia + mass[:, None, None] * (parallel - _outer(com, com))
    zero = jnp.zeros_like(cx)
    m_skew = mass[:, None, None] * jnp.stack(
        [
            jnp.stack([zero, -cz, cy], 1),
            jnp.stack([cz, zero, -cx], 1),
            jnp.stack([-cy, cx, zero], 1),
        ],
        1,
    )
    lower_right = mass[:, None, None] * jnp.eye(3, dtype=com.dtype)[..., None] + jnp.zeros_like(
        inertia
    )
    return jnp.concatenate(
        [
            jnp.concatenate([upper_left, m_skew], axis=2),
            jnp.concatenate([_transpose(m_skew), lower_right], axis=2),
        ],
        axis=1,
    )


def _subspaces(mech):
    """Joint-rate propagation vectors ``p_i`` ``(n, d)`` in body coordinates."""
    subspaces = [
        spatial.joint_subspace(k, mech.axis[i], mech.child_rotation[i], mech.child_position[i])
        for i, k in enumerate(mech.joint_kinds)
    ]
    subspaces = jnp.stack(subspaces)
    return subspaces[:, _ROWS] if mech.planar else subspaces


class _Frames(NamedTuple):
    rotation: Array  # (n, 3, 3, B) world rotation of each body frame
    position: Array  # (n, 3, B) world origin
    subspace: Array  # (n, d, B) p_i in world coordinates
    inertia: Array  # (n, d, d, B) M_i about the world origin


def _frames(mech, q):
    rotation, position = _poses(mech, q)
    s = _motion_to_world(mech.planar, rotation, position, _const(_subspaces(mech)))
    return _Frames(rotation, position, s, _world_inertias(mech, rotation, position))


def _gravity(mech, dtype):
    """Twist-rate of the ground that stands for gravity, ``-[0; g]``, with a batch axis."""
    g = jnp.concatenate([jnp.zeros(3, dtype), -mech.gravity.astype(dtype)])
    return _const(g[_ROWS] if mech.planar else g)


def _external(mech, frames, f_ext):
    """External body wrenches ``(n, d, B)`` in the ground frame (zero when ``f_ext`` is None)."""
    if f_ext is None:
        return 0.0
    return _force_to_world(mech.planar, frames.rotation, frames.position, f_ext)


def _motion(mech, frames, qd, qdd):
    """World twists and twist-rates (with gravity) ``(n, d, B)``."""
    rate = frames.subspace * qd[:, None]
    t = _path_sums(mech, rate, 0.0)
    acc = frames.subspace * qdd[:, None] + _cross_motion(mech.planar, t, rate)
    return t, _path_sums(mech, acc, _gravity(mech, qd.dtype))


def _wrenches(mech, frames, t, dt, f_world):
    """Newton-Euler wrench of every body less gravity and external wrenches (ground frame)."""
    momentum = _mv(frames.inertia, t)
    return _mv(frames.inertia, dt) + _cross_force(mech.planar, t, momentum) - f_world


# Public functions: argument checks and the batch layout around the cores above.


def _batched(mech, core, f_ext=None, **states):
    """``core(*states, f_ext)`` on the internal layout ``(n, ..., B)``, over the batch in chunks
    of `CHUNK` states (a ``lax.map`` when there are several: each chunk's arrays stay in cache);
    the outputs (a pytree) come back as ``(*batch, ...)``."""
    n, flat, batch = mech.num_bodies, [], None
    for name, x in states.items():
        x = jnp.asarray(x)
        if x.ndim == 0 or x.shape[-1] != n:
            raise ValueError(f"{name} has shape {x.shape}; expected (..., {n}) for {n} bodies")
        if batch is not None and x.shape[:-1] != batch:
            raise ValueError(f"{name} has batch shape {x.shape[:-1]}; the other states {batch}")
        batch = x.shape[:-1]
        flat.append(x.reshape(-1, n))
    if f_ext is not None:
        f_ext = jnp.asarray(f_ext)
        if f_ext.shape[-2:] != (n, mech.dim) or f_ext.shape[:-2] not in ((), batch):
            raise ValueError(
                f"f_ext has shape {f_ext.shape}; expected ({n}, {mech.dim}) or "
                f"{batch + (n, mech.dim)} (body wrenches of the states' batch)"
            )
        flat.append(jnp.broadcast_to(f_ext, batch + (n, mech.dim)).reshape(-1, n, mech.dim))
    size = flat[0].shape[0]
    chunk = min(size, CHUNK)
    count = -(-size // chunk)

    def split(x):  # (size, ...) -> (count, ..., chunk), padded with the last state
        x = jnp.concatenate([x, jnp.repeat(x[-1:], count * chunk - size, axis=0)])
        return jnp.moveaxis(x.reshape((count, chunk) + x.shape[1:]), 1, -1)

    def run(args):
        return core(*args) if f_ext is not None else core(*args, None)

    chunks = [split(x) for x in flat]
    if count == 1:
        out = jax.tree.map(lambda o: o[None], run([x[0] for x in chunks]))
    else:
        out = jax.lax.map(run, chunks)

    def join(o):  # (count, ..., chunk) -> (*batch, ...)
        o = jnp.moveaxis(o, -1, 1).reshape((count * chunk,) + o.shape[1:-1])
        return o[:size].reshape(batch + o.shape[1:])

    return jax.tree.map(join, out)


def joint_poses(mech: Mechanism, q: Float[Array, "... n"]):
    """Rotation ``(..., n, 3, 3)`` and origin ``(..., n, 3)`` of each body in its parent's frame."""
    return _batched(mech, lambda q, _: _joint_poses(mech, q), q=q)


def forward_kinematics(mech: Mechanism, q: Float[Array, "... n"]):
    """World origin ``(..., n, 3)`` and rotation ``(..., n, 3, 3)`` of every body frame
    (positions first, as everywhere in loopdyn)."""
    return _batched(mech, lambda q, _: _poses(mech, q)[::-1], q=q)


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
    return _gravity(mech, mech.gravity.dtype)[:, 0]


def _twists(mech, q, qd, _):
    frames = _frames(mech, q)
    t = _path_sums(mech, frames.subspace * qd[:, None], 0.0)
    return _motion_to_body(mech.planar, frames.rotation, frames.position, t)


def twists(mech: Mechanism, q, qd) -> Float[Array, "... n d"]:
    """Twist of every body in its own coordinates (seed 004 eq. 20)."""
    return _batched(mech, functools.partial(_twists, mech), q=q, qd=qd)


def _twist_rates(mech, q, qd, qdd, _):
    frames = _frames(mech, q)
    dt = _motion(mech, frames, qd, qdd)[1] - _gravity(mech, q.dtype)
    return _motion_to_body(mech.planar, frames.rotation, frames.position, dt)


def twist_rates(mech: Mechanism, q, qd, qdd) -> Float[Array, "... n d"]:
    """Twist-rate (time derivative of the twist, without gravity) of every body."""
    return _batched(mech, functools.partial(_twist_rates, mech), q=q, qd=qd, qdd=qdd)


def _body_wrenches(mech, q, qd, qdd, f_ext):
    frames = _frames(mech, q)
    t, dt = _motion(mech, frames, qd, qdd)
    return frames, _wrenches(mech, frames, t, dt, _external(mech, frames, f_ext))


def body_wrenches(mech: Mechanism, q, qd, qdd, f_ext=None):
    """In the ground frame: every body's origin ``(..., n, 3)``, rotation ``(..., n, 3, 3)``,
    joint-rate propagation vector ``p_i`` ``(..., n, d)`` and Newton-Euler wrench less gravity
    and external wrenches ``(..., n, d)`` (the wrench its joints must supply)."""

    def core(*args):
        frames, w = _body_wrenches(mech, *args)
        return frames.position, frames.rotation, frames.subspace, w

    return _batched(mech, core, f_ext, q=q, qd=qd, qdd=qdd)


def _joint_wrenches(mech, q, qd, qdd, f_ext):
    """Body coordinates: the wrench each tree joint carries (recursive Newton-Euler)."""
    frames, w = _body_wrenches(mech, q, qd, qdd, f_ext)
    w = _subtree_sums(mech, w)
    return _force_to_body(mech.planar, frames.rotation, frames.position, w)


def joint_wrenches(mech: Mechanism, q, qd, qdd, f_ext=None) -> Float[Array, "... n d"]:
    """Wrench transmitted from each parent to its body through the tree joint (body coordinates):
    the recursive Newton-Euler backward pass (seed 002 eqs. 20-22, 30-33)."""
    return _batched(mech, functools.partial(_joint_wrenches, mech), f_ext, q=q, qd=qd, qdd=qdd)


def _inverse_dynamics(mech, q, qd, qdd, f_ext):
    frames, w = _body_wrenches(mech, q, qd, qdd, f_ext)
    return _dot(frames.subspace, _subtree_sums(mech, w))


def inverse_dynamics(mech: Mechanism, q, qd, qdd, f_ext=None) -> Float[Array, "... n"]:
    """Joint forces ``tau = I qdd + C qd + gravity - (external)`` by the recursive Newton-Euler
    (DeNOC) algorithm (seed 000 eq. 6 without multipliers)."""
    core = functools.partial(_inverse_dynamics, mech)
    return _batched(mech, core, f_ext, q=q, qd=qd, qdd=qdd)


def bias_forces(mech: Mechanism, q, qd, f_ext=None) -> Float[Array, "... n"]:
    """``C qd`` plus gravity (and minus external wrenches): inverse dynamics at ``qdd = 0``."""
    return inverse_dynamics(mech, q, qd, jnp.zeros_like(jnp.asarray(qd)), f_ext)


def mass_matrix(mech: Mechanism, q) -> Float[Array, "... n n"]:
    """Generalized inertia matrix ``I = N^T M N`` (seed 000 eq. 7) by the composite-body
    recursion: ``I_ij = p_j . (C_i p_i)`` for ``j`` on the path from ``i`` to the ground, with
    ``C_i`` the extended mass matrix of the subtree at ``i``."""
    return mass_matrix_blocks(mech, q, ((0, mech.num_bodies),))[0]


@functools.cache
def _on_path(parent: tuple[int, ...]) -> np.ndarray:
    """``on_path[i, j]``: ``j`` is ``i`` or one of its ancestors."""
    on_path = np.eye(len(parent), dtype=bool)
    for i, p in enumerate(parent):
        if p >= 0:
            on_path[i] |= on_path[p]
    return on_path


def _mass_matrix_blocks(mech, ranges, q, _):
    frames = _frames(mech, q)
    force = _mv(_subtree_sums(mech, frames.inertia), frames.subspace)
    on_path, s = _on_path(mech.parent), frames.subspace
    blocks = []
    for start, stop in ranges:
        k = slice(start, stop)
        lower = jnp.where(on_path[k, k][..., None], _dot(force[k, None], s[None, k]), 0.0)
        diagonal = np.eye(stop - start, dtype=bool)[..., None]
        blocks.append(lower + jnp.where(diagonal, 0.0, jnp.swapaxes(lower, 0, 1)))
    return blocks


def mass_matrix_blocks(mech: Mechanism, q, ranges) -> list[Float[Array, "... k k"]]:
    """The diagonal blocks of `mass_matrix` over the coordinate ``ranges`` ``(start, stop)``
    (e.g. ``mech.topology.coordinate_slices``: the subsystems' ``I_j``, seed 000 eq. 20), at the
    cost of those blocks only."""
    return _batched(mech, functools.partial(_mass_matrix_blocks, mech, ranges), q=q)


def _forward_dynamics(mech, q, qd, tau, f_ext):
    """The articulated-body recursion on the internal layout (see `forward_dynamics`)."""
    frames = _frames(mech, q)
    s = frames.subspace
    rate = s * qd[:, None]
    t = _path_sums(mech, rate, 0.0)
    bias_acc = _cross_motion(mech.planar, t, rate)
    bias = _cross_force(mech.planar, t, _mv(frames.inertia, t)) - _external(mech, frames, f_ext)

    def backward(total, inputs):  # tips -> base: articulated inertia and bias wrench
        (art, bias_w), (s_i, c, tau_i) = total, inputs
        u_vec = _mv(art, s_i)
        d_inv = 1.0 / _dot(s_i, u_vec)
        u = tau_i - _dot(s_i, bias_w)
        gain = u_vec * d_inv[..., None, :]
        to_parent = (
            art - _outer(u_vec, gain),
            bias_w + _mv(art, c) + gain * (u - _dot(u_vec, c))[..., None, :],
        )
        return (u_vec, d_inv, u), to_parent

    solved = _up(mech, backward, (frames.inertia, bias), (s, bias_acc, tau))

    def forward(above, inputs):  # base -> tips: accelerations
        (s_i, c, (u_vec, d_inv, u)) = inputs
        acc = above + c
        qdd = d_inv * (u - _dot(u_vec, acc))
        return acc + s_i * qdd[..., None, :], qdd

    return _down(mech, forward, _gravity(mech, q.dtype), (s, bias_acc, solved))


def forward_dynamics(mech: Mechanism, q, qd, tau, f_ext=None) -> Float[Array, "... n"]:
    """Joint accelerations of the open tree under ``tau`` and body wrenches ``f_ext`` by the O(n)
    articulated-body recursion: solves ``I qdd = tau - C qd - gravity + N^T f_ext``."""
    core = functools.partial(_forward_dynamics, mech)
    return _batched(mech, core, f_ext, q=q, qd=qd, tau=tau)
