"""Loop-closure kinematics: body poses, cut-joint constraints Phi(q), their Jacobian J, the bias
J' qd, assembly by Newton's method, velocity projection and singularity checks.

Constraint rows. Cut joint c joins frame a on body a to frame b on body b (``Mechanism.cut_*``;
the ground for index -1). With ``R_a, R_b`` the frames' world rotations and ``p_a, p_b`` their
world origins, every row is one of three kinds:

- ``point(k)``: ``(p_b - p_a)_k``, component k of the gap between the origins, in world axes;
- ``across(n)``: ``(R_a n) . (p_b - p_a)``, the gap across the direction ``n`` of frame a
  (``across_b(n)``: ``(R_b n) . (p_b - p_a)``, across ``n`` of frame b);
- ``angle(u, w)``: ``(R_a u) . (R_b w)``, zero while ``u`` of frame a is perpendicular to ``w``
  of frame b.

Their time derivatives are linear in the world angular velocities ``omega`` and point velocities
``v`` of the cut frames: ``(v_b - v_a)_k``, ``(R_a n) . (v_b - v_a) + omega_a . ((R_a n) x gap)``
(``omega_b`` for ``across_b``) and ``(omega_b - omega_a) . ((R_b w) x (R_a u))``, exactly, at
every q and not only at closure.
J is built from those with the joint twists ``p_i`` of the spanning tree carried to the cut
frames (``J = J_hat N`` with the DeNOC matrix ``N``, seed 000 §2.2 and eqs. 13-16), and
``J' qd`` from the twist-rates of the tree recursion (seed 000 eq. 9, ``Psi = -J' qd``): the
bodies' poses, joint twists, twists and twist-rates all come from one pass, `tree.body_motion`.

Rows of each kind of cut joint (``x, y, z`` the axes of the joint frame, ``s`` its axis,
``s1, s2`` two unit vectors completing ``s`` to an orthonormal basis):

=========  =========================================  =======================================
kind       spatial rows                               planar rows
=========  =========================================  =======================================
revolute   point x, y, z; angle(s, s1), angle(s, s2)  point x, y
prismatic  across s1, s2; angle(x,y), (y,z), (z,x)    across z x s; angle(x, y)
universal  point x, y, z; angle(x, y)                 (refused)
spherical  point x, y, z                              point x, y (as a planar revolute)
weld       point x, y, z; angle(x,y), (y,z), (z,x)    point x, y; angle(x, y)
=========  =========================================  =======================================

A spherical cut joint whose point rows are structurally redundant (a planar sub-loop closed by a
``connect``, or rows dependent on another loop's, `loopdyn.redundancy`) keeps ``across n`` rows
for the directions ``n`` of frame a listed in ``mech.reduced_points`` instead (``across_b n``
for the cut joints in ``mech.reduced_on_b``). A universal cut joint keeps the joint frame's x axis on body a perpendicular to its y axis on
body b, the cross of the tree's universal joints. Signs: the multiplier of a ``point`` row is the
force that body a exerts on body b at the cut joint, in world axes (planar: the 2-vectors of the
seeds); that of an ``across`` row its component along ``R_a n`` (``R_b n``); that of an ``angle`` row is the moment ``lambda (R_b w) x (R_a u)`` on body b.
"""

from __future__ import annotations

import functools
import operator
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int

from . import chunking, compilation, configuration, dense, placement, spatial, tree
from .mechanism import Mechanism

_E = np.eye(3)


def body_poses(
    mech: Mechanism, q: Float[Array, " n"]
) -> tuple[Float[Array, "n 3"], Float[Array, "n 3 3"]]:
    """World position ``(n, 3)`` of every body frame origin and its rotation ``(n, 3, 3)``, in the
    order of ``mech.body_names`` (positions first)."""
    return tree.forward_kinematics(mech, q)


def _spatial(mech, x):
    """Spatial 6-vectors from the twists of `tree` (planar ones are embedded in the xy-plane)."""
    if not mech.planar:
        return x
    return spatial.from_planar(x)


def _with_ground(x, ground):
    """Append the ground's value as the last row, so that body index -1 selects the ground."""
    return jnp.concatenate([x, jnp.broadcast_to(jnp.asarray(ground, x.dtype), (1, *x.shape[1:]))])


@functools.cache
def _paths(parent: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Static ``(n + 1, L)`` indices of the coordinates that move each body (its own joint and its
    ancestors'; ``L`` the deepest path) and the matching 0/1 mask; the last row, the ground, is
    empty. The Jacobian rows gather the joint twists over these paths only."""
    paths = []
    for k in range(len(parent)):
        path = [k]
        while parent[path[-1]] >= 0:
            path.append(parent[path[-1]])
        paths.append(path)
    depth = max(map(len, paths), default=1)
    index = np.zeros((len(parent) + 1, depth), dtype=int)
    mask = np.zeros((len(parent) + 1, depth))
    for k, path in enumerate(paths):
        index[k, : len(path)], mask[k, : len(path)] = path, 1.0
    return index, mask


def _basis(axis):
    """Two unit vectors completing the unit ``axis`` to a right-handed orthonormal basis."""
    helper = jnp.where(
        jnp.abs(axis[0]) < 0.9, jnp.asarray(_E[0], axis.dtype), jnp.asarray(_E[1], axis.dtype)
    )
    first = jnp.cross(axis, helper)
    first = first / jnp.linalg.norm(first)
    return first, jnp.cross(axis, first)


def _row_specs(mech, c):
    """The rows of cut joint c (module docstring table) as ``("point", e_k)``, ``("across", n)``
    and ``("angle", u, w)``."""
    kind, axis = mech.cut_joints[c].kind, mech.cut_axis[c]
    x, y, z = (np.asarray(e, axis.dtype) for e in _E)  # constants: one stacked array in `_rows`
    if mech.planar:
        points = [("point", x), ("point", y)]
        if kind == "prismatic":  # only then: the program would keep an unused cross product
            return [("across", jnp.cross(z, axis)), ("angle", x, y)]
        return {"revolute": points, "spherical": points, "weld": points + [("angle", x, y)]}[kind]
    points = [("point", x), ("point", y), ("point", z)]
    lock = [("angle", x, y), ("angle", y, z), ("angle", z, x)]
    reduced = dict(mech.reduced_points)
    if c in reduced:  # `loopdyn.redundancy`: the point rows that remain, across fixed directions
        kind = "across_b" if c in mech.reduced_on_b else "across"
        return [(kind, jnp.asarray(n, axis.dtype)) for n in reduced[c]]
    if kind in ("revolute", "prismatic"):
        s1, s2 = _basis(axis)
        if kind == "revolute":
            return points + [("angle", axis, s1), ("angle", axis, s2)]
        return [("across", s1), ("across", s2)] + lock
    return {"spherical": points, "universal": points + [("angle", x, y)], "weld": points + lock}[
        kind
    ]


class _Rows(NamedTuple):
    """All rows stacked as ``Phi_r = e_r . x_r``: ``e_r`` is ``u_r`` (point rows, world axes) or
    ``R_a u_r`` (across and angle rows, turning with frame a) or ``R_b u_r`` (across_b rows);
    ``x_r`` is the gap ``p_b - p_a``, or ``R_b w_r`` on angle rows. ``cut`` (static) is each
    row's cut joint; ``turning``, ``on_b`` (``e_r`` turns with frame b) and ``angle`` are 0/1
    masks."""

    cut: np.ndarray
    turning: np.ndarray
    on_b: np.ndarray
    angle: np.ndarray
    u: Array
    w: Array


def _rows(mech) -> _Rows:
    specs = [(c, spec) for c in range(len(mech.cut_joints)) for spec in _row_specs(mech, c)]
    zero = np.zeros(3, mech.cut_axis.dtype)
    # One constant where every row's vectors are (planar joints, fixed directions): the program
    # does not grow with the number of cut joints.
    stack = lambda v: np.stack(v) if all(isinstance(e, np.ndarray) for e in v) else jnp.stack(v)
    return _Rows(
        cut=np.array([c for c, _ in specs], dtype=int),
        turning=np.array([spec[0] != "point" for _, spec in specs], dtype=float)[:, None],
        on_b=np.array([spec[0] == "across_b" for _, spec in specs], dtype=float)[:, None],
        angle=np.array([spec[0] == "angle" for _, spec in specs], dtype=float)[:, None],
        u=stack([spec[1] for _, spec in specs]),
        w=stack([spec[2] if spec[0] == "angle" else zero for _, spec in specs]),
    )


class _Ends(NamedTuple):
    """World kinematics of the cut-joint frames, indexed ``[c, 0]`` (frame a) and ``[c, 1]``
    (frame b) of cut joint c: rotation, origin and, when asked for, the point and angular
    Jacobians ``(3, n)``, or the velocities and accelerations at ``qdd = 0``."""

    rotation: Array
    position: Array
    jac_point: Array | None = None
    jac_angle: Array | None = None
    velocity: Array | None = None
    omega: Array | None = None
    acceleration: Array | None = None
    alpha: Array | None = None


def _cross_z(a, b):
    """``a x b`` for 3-vectors ``a`` along z (last axis; a planar mechanism's angular
    velocities): the values `jnp.cross` gives, in a third of its operations."""
    az = a[..., 2:]
    return jnp.concatenate([-az * b[..., 1:2], az * b[..., :1], jnp.zeros_like(az)], axis=-1)


def _ends(mech, motion, jacobian=False):
    """The frames of all cut joints as `_Ends`, from the bodies' `tree.Motion`.

    Joint twists are taken in world Pluecker coordinates ``S_i = [w_i; v_i]`` (``v_i`` the velocity
    of the body point at the world origin per unit rate), where the twist propagation of the tree
    (seed 004 eqs. 20-23) has identity propagation matrices: a frame moves with its body's twist
    ``t = sum S_k qd_k`` and twist-rate ``dt = sum t_k x S_k qd_k`` (at ``qdd = 0``) over the
    body's path to the ground. The Jacobians are the ``S_i`` of each frame's path carried to the
    frame, ``(c, 2, L, 3)``: entry ``l`` belongs to coordinate ``_paths(...)[0][body, l]``.
    """
    cross = _cross_z if mech.planar else jnp.cross  # planar twists turn about z
    bodies = np.array([[cut.body_a, cut.body_b] for cut in mech.cut_joints], dtype=int).reshape(
        -1, 2
    )
    r_body = _with_ground(motion.rotation, np.eye(3))[bodies]
    local_p = jnp.stack([mech.cut_position_a, mech.cut_position_b], axis=1)
    local_r = jnp.stack([mech.cut_rotation_a, mech.cut_rotation_b], axis=1)
    p = _with_ground(motion.position, np.zeros(3))[bodies]
    # multiplies and sums rather than dots, which a single state runs as calls of their own
    p = p + jnp.sum(r_body * local_p[..., None, :], axis=-1)
    ends = _Ends(jnp.sum(r_body[..., :, :, None] * local_r[..., None, :, :], axis=-2), p)
    if jacobian:
        index, mask = _paths(mech.parent)
        end_mask = jnp.asarray(mask[bodies], p.dtype)[..., None]  # (c, 2, L, 1)
        on_path = _spatial(mech, motion.axes)[index[bodies]]
        jac_point = on_path[..., 3:] + cross(on_path[..., :3], p[:, :, None, :])
        ends = ends._replace(jac_point=jac_point * end_mask, jac_angle=on_path[..., :3] * end_mask)
    if motion.twist is not None:
        t_end = _with_ground(_spatial(mech, motion.twist), np.zeros(6))[bodies]
        omega = t_end[..., :3]
        ends = ends._replace(velocity=t_end[..., 3:] + cross(omega, p), omega=omega)
    if motion.acceleration is not None:
        dt_end = _with_ground(_spatial(mech, motion.acceleration), np.zeros(6))[bodies]
        alpha, omega = dt_end[..., :3], ends.omega
        acceleration = dt_end[..., 3:] + cross(alpha, p) + cross(omega, ends.velocity)
        ends = ends._replace(alpha=alpha, acceleration=acceleration)
    return ends


def _mix(mask, one, zero):
    """``mask * one() + (1 - mask) * zero()`` per row for a static 0/1 ``mask`` ``(m, 1)``: only
    the branch every row takes is computed where they all take the same (``one`` and ``zero``
    are thunks), so a mechanism whose rows are all of one kind pays for that kind only."""
    if not mask.any():
        return zero()
    if mask.all():
        return one()
    return mask * one() + (1.0 - mask) * zero()


def _by_frame(rows, on_a, on_b):
    """Per row: ``on_b`` where the row's ``e`` turns with frame b (across_b rows), else ``on_a``
    (arrays with the rows first); no operation at all where no row turns with frame b."""
    if not rows.on_b.any():
        return on_a
    mask = rows.on_b.reshape((-1,) + (1,) * (jnp.ndim(on_a) - 1))
    return mask * on_b + (1.0 - mask) * on_a


def _directions(ends, rows):
    """Per row: the vectors ``e`` and ``x`` of `_Rows`, in world axes."""
    rotation = lambda side: ends.rotation[rows.cut, side]
    turned = lambda: jnp.einsum("rij,rj->ri", _by_frame(rows, rotation(0), rotation(1)), rows.u)
    e = _mix(rows.turning, turned, lambda: rows.u)
    gap = lambda: (ends.position[:, 1] - ends.position[:, 0])[rows.cut]
    x = _mix(rows.angle, lambda: jnp.einsum("rij,rj->ri", rotation(1), rows.w), gap)
    return e, x


def _dot(a, b):
    return jnp.sum(a * b, axis=-1)


def row_wrenches(ends: _Ends, rows: _Rows) -> Float[Array, "m 2 6"]:
    """World wrenches ``[n; f]`` (about the world origin) that a unit multiplier of every row
    applies to body b and to body a of its cut joint, ``(m, 2, 6)``: a point or across row pushes
    with ``e`` at frame b's origin (on body a, for a point row, at frame a's; an across_b row at
    frame a's on both bodies: the derivative of the row), an angle row turns body b with the
    moment ``x X e``; body a gets the opposite. They are also the rows of J on the bodies'
    twists: ``J_r qd = on_b . t_b + on_a . t_a`` (twists at the world origin)."""
    e, x = _directions(ends, rows)
    p_a, p_b = ends.position[rows.cut, 0], ends.position[rows.cut, 1]
    push, at = 1.0 - rows.angle, _by_frame(rows, p_b, p_a)
    on_b = jnp.concatenate([push * jnp.cross(at, e) + rows.angle * jnp.cross(x, e), push * e], -1)
    lever = (1.0 - rows.turning) * jnp.cross(p_b - p_a, e)
    on_a = -on_b + jnp.concatenate([lever, jnp.zeros_like(lever)], -1)
    return jnp.stack([on_b, on_a], axis=1)


@compilation.jit
def loop_residual(mech: Mechanism, q: Float[Array, " n"]) -> Float[Array, " m"]:
    """Stacked position constraints ``Phi(q)`` of all cut joints, loop by loop (zero when every
    loop is closed; rows in the module docstring)."""
    if not mech.topology.loops:
        return jnp.zeros(0, q.dtype)
    return _residual_at(mech, tree.body_motion(mech, q))


def _residual_at(mech, motion):
    phi = _dot(*_directions(_ends(mech, motion), _rows(mech))) if mech.cut_joints else None
    return _stacked(phi, _couplings(mech, motion)[0])


def _jacobian(ends, rows, e, x, moment=None):
    """``d(e . x) = (e x x) . omega_a + e . dx`` (``omega_b`` for across_b rows) with
    ``dx = v_b - v_a`` (gap) or ``omega_b x x`` (angle rows), per row over the path of frame a
    and that of frame b: ``(m, L)`` each (entries as in `_ends`). An angle row's derivative is
    ``moment . (omega_b - omega_a)``, ``moment = x X e`` unless given (`_closure`)."""
    given, cut = moment, rows.cut
    moment = functools.cache(lambda: jnp.cross(x, e) if given is None else given)
    path = lambda v, jac, side: jnp.sum(v[:, None, :] * jac[cut, side], axis=-1)
    on_b = _mix(
        rows.angle,
        lambda: path(moment(), ends.jac_angle, 1),
        lambda: path(e, ends.jac_point, 1),
    )
    on_a = -_mix(rows.angle, lambda: jnp.zeros_like(on_b), lambda: path(e, ends.jac_point, 0))
    if rows.turning.any():  # e turns with frame a (frame b on across_b rows)
        turns = -rows.turning * moment()
        if rows.on_b.any():
            on_b = on_b + path(rows.on_b * turns, ends.jac_angle, 1)
        on_a = on_a + path((1.0 - rows.on_b) * turns, ends.jac_angle, 0)
    return on_a, on_b


def _row_paths(mech):
    """Static ``(m, 2, L)`` coordinate indices of each row's two path sums (frames a and b)."""
    index = _paths(mech.parent)[0]
    bodies = np.array([[cut.body_a, cut.body_b] for cut in mech.cut_joints], dtype=int)
    return index[bodies[_rows(mech).cut]]


def _dense(mech, on_a, on_b):
    """``J`` ``(m, n)`` from the path rows of `_jacobian` (padding entries carry zeros)."""
    cols = _row_paths(mech)
    jac = jnp.zeros((on_a.shape[0], mech.num_bodies), on_a.dtype)
    rows = np.arange(on_a.shape[0])[:, None]
    jac = placement.add_at(jac, (rows, cols[:, 0]), on_a)
    return placement.add_at(jac, (rows, cols[:, 1]), on_b)


def _blocks(mech, on_a, on_b, coupled=None):
    """The non-zero blocks ``J_{i,j}`` from the path rows: a frame's path lies in the subsystem
    of its body, so each block gathers the rows of loop i whose frame sits on subsystem j; a
    coupling's block is its row of J ``coupled`` over the subsystem's coordinates."""
    top = mech.topology
    cols = _row_paths(mech) if mech.cut_joints else None
    blocks = {}
    for i, j in top.blocks:
        if top.loops[i].kind == "coupling":
            k = top.loops[i].cut - len(mech.cut_joints)
            blocks[i, j] = coupled[k : k + 1, slice(*top.coordinate_slices[j])]
            continue
        rows, start = top.rows(i), top.coordinate_slices[j][0]
        block = jnp.zeros((rows.stop - rows.start, top.coordinate_slices[j][1] - start))
        block = block.astype(on_a.dtype)
        for side, values in ((0, on_a), (1, on_b)):
            body = _frame_body(mech, top.loops[i].cut, side)
            if body >= 0 and top.subsystem_of[body] == j:
                local = np.where(cols[rows, side] >= start, cols[rows, side] - start, 0)
                block = placement.add_at(
                    block, (np.arange(block.shape[0])[:, None], local), values[rows]
                )
        blocks[i, j] = block
    return blocks


def _block_stack(mech, on_a, on_b, pairs):
    """The blocks ``J_{i,j}`` of ``pairs`` (all of one shape) stacked, gathered from the path rows
    with static indices: entry ``(a, c)`` of a block is row a's path entry of coordinate c on
    each side whose frame sits on subsystem j."""
    top, cols = mech.topology, _row_paths(mech)
    _, mask = _paths(mech.parent)
    rows_i, size = top.block_shape(*pairs[0])
    rows = np.array([np.arange(*top.row_slices[i]) for i, _ in pairs])
    stack = 0.0
    for side, values in ((0, on_a), (1, on_b)):
        entry = np.zeros((len(pairs), rows_i, size), dtype=int)
        hit = np.zeros((len(pairs), rows_i, size))
        for p, (i, j) in enumerate(pairs):
            body = _frame_body(mech, top.loops[i].cut, side)
            if body >= 0 and top.subsystem_of[body] == j:
                start = top.coordinate_slices[j][0]
                for entry_l, c in enumerate(cols[rows[p, 0], side]):
                    if mask[body, entry_l]:
                        entry[p, :, c - start], hit[p, :, c - start] = entry_l, 1.0
        stack = stack + values[rows[:, :, None], entry] * hit
    return stack


def loop_block_stacks_at(
    mech: Mechanism, motion: tree.Motion, groups
) -> tuple[Float[Array, " m"], list[Array], Float[Array, " m"]]:
    """`loop_block_terms_at` with the blocks ``J_{i,j}`` of each group of equal-shape pairs
    ``(i, j)`` in ``groups`` stacked ``(len(pairs), m_i, n_j)``: a few gathers per group, so the
    program does not grow with the number of loops."""
    ends, rows = _ends(mech, motion, jacobian=True), _rows(mech)
    e, x = _directions(ends, rows)
    on_a, on_b = _jacobian(ends, rows, e, x)
    stacks = [_block_stack(mech, on_a, on_b, pairs) for pairs in groups]
    return _dot(e, x), stacks, _bias(ends, rows, e, x)


def _geometric(mech, motion):
    """The cut joints' rows: ``Phi``, the path rows ``(on_a, on_b)`` of J (`_jacobian`) and, when
    the motion has twists, ``J' qd``; Nones without cut joints."""
    if not mech.cut_joints:
        return None, (None, None), None
    ends, rows = _ends(mech, motion, jacobian=True), _rows(mech)
    e, x = _directions(ends, rows)
    bias = None if motion.acceleration is None else _bias(ends, rows, e, x)
    return _dot(e, x), _jacobian(ends, rows, e, x), bias


def _locked_rows(mech) -> np.ndarray:
    """Static mask of the angle rows of the cut joints that lock rotation (`_locking`)."""
    rows = _rows(mech)
    return (rows.angle[:, 0] > 0) & np.isin(rows.cut, _locking(mech))


def _closure(mech, q, jacobian=False):
    """``Phi``, or ``(Phi, J)``, for the Newton steps of `assemble`: `loop_terms`' except on the
    angle rows of the cut joints that lock rotation (weld, prismatic), which measure the turn
    ``R = R_a^T R_b`` of frame b from frame a by twice its Gibbs vector, ``g = tan(theta / 2) a``
    for a turn ``theta`` about ``a`` (``g = vee(R - R^T) / (1 + tr R)``): row ``(w x u) . 2 g``.
    At closure these equal the angle rows ``(R_a u) . (R_b w)`` to first order, and J there is
    the same; but the dot products vanish also at a half turn or a cyclic swap of the axes, and
    their derivatives at a quarter turn (a weld drawn a quarter turn open sent Newton to such a
    root), where the Gibbs rows vanish only with the frames aligned, and their derivative,
    ``d(2 g) = (I - [g]x + g g^T) R_a^T (omega_b - omega_a)``, is regular below a half turn."""
    motion = tree.body_motion(mech, q)
    locked = _locked_rows(mech) if mech.cut_joints else np.zeros(0, bool)
    if not locked.any():
        return loop_terms_at(mech, motion)[:2] if jacobian else _residual_at(mech, motion)
    ends, rows = _ends(mech, motion, jacobian=jacobian), _rows(mech)
    e, x = _directions(ends, rows)
    r_a = ends.rotation[rows.cut, 0]
    r = jnp.einsum("rji,rjk->rik", r_a, ends.rotation[rows.cut, 1])
    vee = jnp.stack([r[:, 2, 1] - r[:, 1, 2], r[:, 0, 2] - r[:, 2, 0], r[:, 1, 0] - r[:, 0, 1]])
    tiny = jnp.finfo(r.dtype).tiny  # a half turn: a large residual rather than an infinite one
    g = vee.T / jnp.maximum(1.0 + jnp.trace(r, axis1=1, axis2=2), tiny)[:, None]
    n = jnp.cross(rows.w, rows.u)
    coupled = _couplings(mech, motion)
    phi = _stacked(jnp.where(locked, 2.0 * _dot(n, g), _dot(e, x)), coupled[0])
    if not jacobian:
        return phi
    turned = n + jnp.cross(g, n) + g * _dot(g, n)[:, None]
    moment = jnp.where(locked[:, None], jnp.einsum("rij,rj->ri", r_a, turned), jnp.cross(x, e))
    return phi, _stacked(_dense(mech, *_jacobian(ends, rows, e, x, moment)), coupled[1])


def _couplings(mech, motion):
    """The couplings' rows (after the cut joints'): with ``u = a . s - u0``, ``w = b . s - w0``
    (``s`` the bodies' coordinates) and ``P`` the polynomial, ``Phi = u - P(w)``,
    ``J = a - P'(w) b`` and ``J' qd = -P''(w) (b . qd)^2`` (None without rates); Nones without
    couplings."""
    if not mech.coupling_names:
        return None, None, None
    first, second, poly = mech.coupling_first, mech.coupling_second, mech.coupling_poly
    u = first @ motion.coordinates - mech.coupling_reference[:, 0]
    w = second @ motion.coordinates - mech.coupling_reference[:, 1]
    p0, p1, p2, p3, p4 = (poly[:, k] for k in range(5))
    value = (((p4 * w + p3) * w + p2) * w + p1) * w + p0
    slope = ((4 * p4 * w + 3 * p3) * w + 2 * p2) * w + p1
    jac = first - slope[:, None] * second
    if motion.rates is None:
        return u - value, jac, None
    curvature = (12 * p4 * w + 6 * p3) * w + 2 * p2
    return u - value, jac, -curvature * (second @ motion.rates) ** 2


def _stacked(geometric, coupled):
    """The cut joints' rows followed by the couplings' (either may be None)."""
    parts = [x for x in (geometric, coupled) if x is not None]
    return jnp.concatenate(parts) if len(parts) == 2 else (parts or [None])[0]


def _frame_body(mech, cut, side):
    joint = mech.cut_joints[cut]
    return joint.body_a if side == 0 else joint.body_b


def _gap(rows, rate):
    """Per row: frame b's ``rate`` less frame a's (``rate`` indexed ``[c, side]``)."""
    return (rate[:, 1] - rate[:, 0])[rows.cut]


def _turning(rows, rate):
    """Per row: the ``rate`` of the frame ``e`` turns with (a; b on across_b rows; zero on point
    rows, whose ``e`` is fixed in the world)."""
    return rows.turning * _by_frame(rows, rate[rows.cut, 0], rate[rows.cut, 1])


def _rate(ends, rows, e, x):
    """``(e . x)' = e' . x + e . x'``: the rows' ``J qd`` from the frames' velocities, without
    forming J."""
    dx = _mix(
        rows.angle, lambda: jnp.cross(ends.omega[rows.cut, 1], x), lambda: _gap(rows, ends.velocity)
    )
    if not rows.turning.any():
        return _dot(e, dx)
    return _dot(jnp.cross(_turning(rows, ends.omega), e), x) + _dot(e, dx)


def _bias(ends, rows, e, x):
    """``(e . x)'' = e'' . x + 2 e' . x' + e . x''`` at ``qdd = 0``."""

    def turn(v, omega, alpha):  # first and second time derivatives of a body-fixed direction
        dv = jnp.cross(omega, v)
        return dv, jnp.cross(alpha, v) + jnp.cross(omega, dv)

    on_b = functools.cache(lambda: turn(x, ends.omega[rows.cut, 1], ends.alpha[rows.cut, 1]))
    dx = _mix(rows.angle, lambda: on_b()[0], lambda: _gap(rows, ends.velocity))
    ddx = _mix(rows.angle, lambda: on_b()[1], lambda: _gap(rows, ends.acceleration))
    if not rows.turning.any():  # e fixed in the world: point rows
        return _dot(e, ddx)
    de, dde = turn(e, _turning(rows, ends.omega), _turning(rows, ends.alpha))
    return _dot(dde, x) + 2.0 * _dot(de, dx) + _dot(e, ddx)


def residuals_at(mech: Mechanism, motion: tree.Motion) -> tuple[Array, Array, Array]:
    """``(Phi, J qd, scale)`` from the bodies' motion at ``(q, qd)``, J not formed (`_rate`):
    the loops' position and velocity residuals, and ``1 +`` the largest speed of a cut frame
    (``|v|``, ``|w|``) or coupled coordinate, the size against which ``J qd`` is small or not."""
    phi = velocity = phi_c = velocity_c = None
    scale = jnp.ones((), motion.position.dtype)
    if mech.cut_joints:
        ends, rows = _ends(mech, motion), _rows(mech)
        e, x = _directions(ends, rows)
        phi, velocity = _dot(e, x), _rate(ends, rows, e, x)
        scale = 1.0 + jnp.max(jnp.abs(jnp.concatenate([ends.velocity, ends.omega], -1)))
    if mech.coupling_names:
        phi_c, jac_c, _ = _couplings(mech, motion)
        velocity_c = jac_c @ motion.rates
        scale = jnp.maximum(scale, 1.0 + jnp.max(jnp.abs(motion.rates)))
    if not mech.topology.loops:
        phi = velocity = jnp.zeros(0, scale.dtype)
    return _stacked(phi, phi_c), _stacked(velocity, velocity_c), scale


@compilation.jit
def loop_jacobian(mech: Mechanism, q: Float[Array, " n"]) -> Float[Array, "m n"]:
    """Constraint Jacobian ``J = dPhi/dq`` (seed 000 eqs. 13-16) from the joint twists carried to
    the cut frames, not by automatic differentiation."""
    if not mech.topology.loops:
        return jnp.zeros((0, mech.num_bodies), q.dtype)
    return loop_terms_at(mech, tree.body_motion(mech, q))[1]


@compilation.jit
def loop_jacobian_blocks(mech: Mechanism, q: Float[Array, " n"]) -> dict[tuple[int, int], Array]:
    """The non-zero blocks ``J_{i,j}`` ``(m_i, n_j)`` of loop i and subsystem j (seed 000 eqs.
    14, 16, 26, 37), keyed by ``(i, j)`` as listed in ``mech.topology.blocks``, computed from the
    loops' own paths: the dense ``m x n`` J is never formed."""
    return loop_block_terms_at(mech, tree.body_motion(mech, q))[1]


@compilation.jit
def loop_bias(mech: Mechanism, q: Float[Array, " n"], qd: Float[Array, " n"]) -> Float[Array, " m"]:
    """``J' qd``, the constraint acceleration at ``qdd = 0``, from the twists and twist-rates of
    the tree (`_ends`), not by automatic differentiation. The acceleration constraint is
    ``J qdd = Psi = -J' qd`` (seed 000 eq. 9)."""
    if not mech.topology.loops:
        return jnp.zeros(0, q.dtype)
    return loop_terms_at(mech, tree.body_motion(mech, q, qd))[2]


@compilation.jit
def loop_terms(
    mech: Mechanism, q: Float[Array, " n"], qd: Float[Array, " n"]
) -> tuple[Float[Array, " m"], Float[Array, "m n"], Float[Array, " m"]]:
    """``(Phi, J, J' qd)`` from one kinematic pass: what a constrained dynamics step needs."""
    if not mech.topology.loops:
        return loop_residual(mech, q), loop_jacobian(mech, q), loop_bias(mech, q, qd)
    return loop_terms_at(mech, tree.body_motion(mech, q, qd))


def loop_terms_at(
    mech: Mechanism, motion: tree.Motion
) -> tuple[Float[Array, " m"], Float[Array, "m n"], Float[Array, " m"]]:
    """`loop_terms` from the bodies' motion at ``(q, qd)`` when the tree pass has already run
    (`tree.system_terms` gives it with the dynamics); empty without loops. ``J' qd`` needs
    the motion at ``qd``."""
    if not mech.topology.loops:
        empty = jnp.zeros(0, motion.position.dtype)
        return empty, jnp.zeros((0, mech.nv), empty.dtype), empty
    phi, (on_a, on_b), bias = _geometric(mech, motion)
    jac = None if on_a is None else _dense(mech, on_a, on_b)
    return tuple(_stacked(*pair) for pair in zip((phi, jac, bias), _couplings(mech, motion)))


@compilation.jit
def loop_block_terms(
    mech: Mechanism, q: Float[Array, " n"], qd: Float[Array, " n"]
) -> tuple[Float[Array, " m"], dict[tuple[int, int], Array], Float[Array, " m"]]:
    """`loop_terms` with J as its non-zero blocks (`loop_jacobian_blocks`): what SSLM needs."""
    return loop_block_terms_at(mech, tree.body_motion(mech, q, qd))


def loop_block_terms_at(
    mech: Mechanism, motion: tree.Motion
) -> tuple[Float[Array, " m"], dict[tuple[int, int], Array], Float[Array, " m"]]:
    """`loop_block_terms` from the bodies' motion at ``(q, qd)`` when the tree pass has already
    run (`tree.subsystem_terms` gives it with the dynamics)."""
    phi, paths, bias = _geometric(mech, motion)
    phi_c, jac_c, bias_c = _couplings(mech, motion)
    return _stacked(phi, phi_c), _blocks(mech, *paths, jac_c), _stacked(bias, bias_c)


def free_coordinates(mech: Mechanism, fixed=()) -> tuple[int, ...]:
    """Indices of the coordinates not in ``fixed`` (coordinate indices or names)."""
    if isinstance(fixed, (str, int, np.integer)):
        fixed = (fixed,)
    held = set()
    for f in fixed:
        if isinstance(f, str):
            if f not in mech.coordinate_names:
                known = list(mech.coordinate_names)
                raise ValueError(f"fixed: unknown coordinate {f!r}; coordinates are {known}")
            held.add(mech.coordinate_names.index(f))
        else:
            k = operator.index(f)
            if not 0 <= k < mech.num_bodies:
                raise ValueError(
                    f"fixed: coordinate index {k} out of range 0..{mech.num_bodies - 1}"
                )
            held.add(k)
    return tuple(k for k in range(mech.num_bodies) if k not in held)


DAMPING = 1e-14  # of the mean squared row norm of J: the Newton steps' Levenberg-Marquardt term


def _newton_step(jac, phi):
    """The minimum-norm least-squares step ``-J^+ phi`` in Levenberg-Marquardt's form with a
    vanishing damping ``mu``, ``-J^T (J J^T + mu I)^-1 phi``: one Cholesky factor of the
    ``m x m`` matrix ``J J^T`` instead of an SVD of ``J`` (batched, 2x less time on deep chains),
    and one step of iterative refinement with that factor, which removes ``mu``'s bias (without
    it the residual stalled near 1e-14 instead of rounding). Rows redundant with others add
    nothing (``J^T u = 0`` for ``u`` in the null space of ``J^T``); near a dead centre ``mu``
    bounds the step, as the pseudo-inverse's cut-off does."""
    gram = jac @ jac.T
    scale = jnp.trace(gram) / gram.shape[0]
    damped = gram + DAMPING * jnp.where(scale > 0, scale, 1.0) * jnp.eye(
        gram.shape[0], dtype=gram.dtype
    )
    factor = dense.cholesky(damped)
    y = dense.cho_solve(factor, phi)
    return -jac.T @ (y + dense.cho_solve(factor, phi - gram @ y))


def _newton(mech, q, free, tol, max_iter):
    """Gauss-Newton on ``Phi(q) = 0`` over the free coordinates: minimum-norm least-squares steps
    (`_newton_step`; redundant rows are harmless) with a backtracking (Armijo) line search on
    ``|Phi|`` (`_closure`'s rows: no roots at a wrong turn of a weld); stops at ``|Phi| <= tol``,
    after ``max_iter`` steps, or when no step length decreases ``|Phi|``. Steps are velocities
    (``nv``), taken on the configuration manifold (`configuration.integrate`)."""
    select = np.eye(mech.nv)[:, list(free)]

    def step(state):
        q, phi, k, _ = state
        r = jnp.linalg.norm(phi)
        dq = select @ _newton_step(_closure(mech, q, jacobian=True)[1] @ select, phi)

        def too_long(search):
            alpha, phi_new = search
            return (jnp.linalg.norm(phi_new) > (1.0 - 1e-4 * alpha) * r) & (alpha > 1e-6)

        def halve(search):
            return search[0] / 2, _closure(
                mech, configuration.integrate(mech, q, dq, search[0] / 2)
            )

        start = (jnp.full((), 2.0, q.dtype), jnp.full_like(phi, jnp.inf))
        alpha, phi_new = jax.lax.while_loop(too_long, halve, start)
        better = jnp.linalg.norm(phi_new) < r
        q_new = configuration.integrate(mech, q, dq, alpha)
        return jnp.where(better, q_new, q), jnp.where(better, phi_new, phi), k + 1, ~better

    def going(state):
        _, phi, k, stalled = state
        return (jnp.linalg.norm(phi) > tol) & (k < max_iter) & ~stalled

    return jax.lax.while_loop(going, step, (q, _closure(mech, q), 0, False))[0]


@functools.partial(jax.custom_jvp, nondiff_argnums=(2, 3, 4))
def _closed(mech, q_guess, free, tol, max_iter):
    return _newton(mech, q_guess, free, tol, max_iter)


@_closed.defjvp
def _closed_jvp(free, tol, max_iter, primals, tangents):
    """Implicit function theorem: ``J_free dq_free = -(J_fixed dq_fixed + dPhi/dtheta dtheta)``,
    solved with the pseudo-inverse (the minimum-norm tangent where the free coordinates are more
    than the constraints, as the Newton steps are). The guess of the free coordinates has no
    influence. Solved in velocities, mapped to ``q``'s tangent by `configuration.rate`."""
    mech, q_guess = primals
    d_mech, d_guess = tangents
    q = _closed(mech, q_guess, free, tol, max_iter)
    select = np.eye(mech.nv)[:, list(free)]  # free coordinates -> all (no scatter to transpose)
    dv = configuration.velocity(mech, q, d_guess) * (1.0 - select.sum(axis=1))
    d_phi = jax.jvp(loop_residual, (mech, q), (d_mech, configuration.rate(mech, q, dv)))[1]
    jac = loop_jacobian(mech, q) @ select
    return q, configuration.rate(mech, q, dv - select @ (dense.pinv(jac) @ d_phi))


LOCKED_TURN = 1e-3  # rad: a locked frame pair turned more than this is closed at a wrong turn


def _locking(mech) -> np.ndarray:
    """Indices of the cut joints whose rows lock the frames' relative rotation."""
    kinds = ("weld", "prismatic")
    return np.array([c for c, cut in enumerate(mech.cut_joints) if cut.kind in kinds], dtype=int)


@compilation.jit
def locked_turns(mech: Mechanism, q: Float[Array, " n"]) -> Float[Array, " w"]:
    """The angle (rad) between the two frames of each cut joint that locks their rotation (weld,
    prismatic; in ``mech.cut_joints`` order): zero where the joint is closed. Its angle rows, dot
    products of one frame's axes with the other's, vanish too where the frames are a half turn
    apart or have their axes swapped round (a turn of pi or 2 pi / 3), which is not closed."""
    if _locking(mech).size == 0:
        return jnp.zeros(0, q.dtype)
    return _turns_at(mech, tree.body_motion(mech, q))


def _turns_at(mech, motion):
    rotation = _ends(mech, motion).rotation[_locking(mech)]
    relative = jnp.einsum("cji,cjk->cik", rotation[:, 0], rotation[:, 1])
    return jnp.arccos(jnp.clip((jnp.trace(relative, axis1=1, axis2=2) - 1.0) / 2.0, -1.0, 1.0))


WRONG_GAP = 1e-6  # m: a cut joint reduced across loops with its points this far apart is open


@compilation.jit
def reduced_gaps(mech: Mechanism, q: Float[Array, " n"]) -> Float[Array, " g"]:
    """The distance (m) between the two points of each spherical cut joint whose rows were
    reduced across loops (``mech.reduced_across``, `loopdyn.redundancy`): zero where it is
    closed. Its kept rows vanish also where the points are apart along the dropped direction (a
    free body held by two connects, turned half a turn about the line joining them)."""
    return _gaps_at(mech, tree.body_motion(mech, q))


def false_closures(mech: Mechanism, q: Float[Array, " n"]) -> tuple[Array, Array]:
    """`locked_turns` and `reduced_gaps` at ``q`` from one body-motion pass (traceable), and
    none where the mechanism has neither (empty arrays, nothing traced)."""
    empty = jnp.zeros(0, q.dtype)
    if not (_locking(mech).size or mech.reduced_across):
        return empty, empty
    motion = tree.body_motion(mech, q)
    turns = _turns_at(mech, motion) if _locking(mech).size else empty
    return turns, _gaps_at(mech, motion) if mech.reduced_across else empty


def check_gaps(mech: Mechanism, gaps, function: str):
    """Raise ``ValueError`` naming the cut joint whose points are `WRONG_GAP` or more apart, from
    the concrete `reduced_gaps` ``gaps``."""
    for c, gap in zip(mech.reduced_across, np.asarray(gaps)):
        if gap >= WRONG_GAP:
            raise ValueError(
                f"{function}: the spherical cut joint {mech.cut_joints[c].name!r} has its kept "
                f"rows at zero with its two points {gap:.4g} apart along the direction it "
                "dropped as redundant across loops (`loopdyn.redundancy`): not closed; start "
                "from a configuration nearer the closed one"
            )


def _gaps_at(mech, motion):
    """``|p_b - p_a|`` of each cut joint in ``mech.reduced_across``: its kept rows vanish also
    where its points are apart along a dropped direction (a free body held by two connects, turned
    a half turn about the line joining them), which is not closed."""
    ends = _ends(mech, motion)
    cuts = np.array(mech.reduced_across, dtype=int)
    return jnp.linalg.norm(ends.position[cuts, 1] - ends.position[cuts, 0], axis=-1)


class Assembly(NamedTuple):
    """Outcome of `try_assemble`: the configuration, ``|Phi(q)|`` there and whether it is within
    the tolerance with every locked frame pair aligned (`locked_turns` below `LOCKED_TURN`) and
    the points of every joint reduced across loops together (`WRONG_GAP`)."""

    q: Float[Array, " n"]
    residual: Float[Array, ""]
    converged: Bool[Array, ""]


def try_assemble(
    mech: Mechanism, q_guess: Float[Array, " n"], fixed=(), tol: float = 1e-12, max_iter: int = 50
) -> Assembly:
    """`assemble` without the error: check ``converged`` yourself (for ``jit``/``vmap`` studies).
    Under ``vmap`` on the CPU it runs in chunks of states (`chunking.over_states`), each
    chunk's Newton steps until its own guesses have converged."""
    free = free_coordinates(mech, fixed)
    q_guess = jnp.asarray(q_guess, mech.q0.dtype)
    if q_guess.shape != (mech.nq,):
        raise ValueError(f"q_guess: expected shape ({mech.nq},), got {q_guess.shape}")
    q, residual, aligned = chunking.over_states(
        lambda mech, q_guess: _assembled(mech, q_guess, free, tol, max_iter), mech, q_guess
    )
    return Assembly(q, residual, (residual <= tol) & aligned)


@compilation.jit(options=compilation.SINGLE_STATE)
def _assembled(mech, q_guess, free, tol, max_iter):
    """Compiled once per mechanism topology and options, also when called eagerly (one state:
    `compilation.SINGLE_STATE`, 0.9 instead of 1.5 s to compile for the 3-RRR)."""
    q = _closed(mech, q_guess, free, tol, max_iter) if free and mech.topology.loops else q_guess
    if not mech.topology.loops:
        return q, jnp.zeros((), q.dtype), jnp.asarray(True)
    motion = tree.body_motion(mech, q)
    residual = jnp.linalg.norm(_residual_at(mech, motion))
    aligned = jnp.all(_turns_at(mech, motion) < LOCKED_TURN)
    aligned = aligned & jnp.all(_gaps_at(mech, motion) < WRONG_GAP)
    return q, jax.lax.stop_gradient(residual), jax.lax.stop_gradient(aligned)


def check_locked(mech: Mechanism, turns, function: str):
    """Raise ``ValueError`` naming the cut joint where a locked frame pair is closed at a wrong
    turn, from the concrete `locked_turns` ``turns``."""
    for c, turn in zip(_locking(mech), np.asarray(turns)):
        if turn >= LOCKED_TURN:
            cut = mech.cut_joints[c]
            raise ValueError(
                f"{function}: the {cut.kind} cut joint {cut.name!r} has its angle rows at zero "
                f"with its two frames {turn:.4g} rad apart (a half turn or axes swapped round, "
                "where the rows vanish too): not closed; start from a configuration nearer the "
                "aligned frames"
            )


def assemble(
    mech: Mechanism, q_guess: Float[Array, " n"], fixed=(), tol: float = 1e-12, max_iter: int = 50
) -> Float[Array, " n"]:
    """Close every loop from ``q_guess``, holding the ``fixed`` coordinates (indices or names).

    Newton's method with minimum-norm steps and a backtracking line search on ``|Phi|`` (a
    weld's or prismatic joint's turn measured by its Gibbs vector, `_closure`, so that frames
    drawn up to nearly a half turn apart close aligned); the result is differentiable with
    respect to the fixed coordinates of ``q_guess`` and the mechanism's parameters by the
    implicit function theorem. Raises ``ValueError`` with the residual when the loops do not
    close to ``tol``, and naming the cut joint where a weld's (or prismatic joint's) frames are
    at a wrong turn (`locked_turns`: a guess closed a half turn apart, where Newton cannot
    step) or a joint reduced across loops closes its kept rows with its points apart
    (`WRONG_GAP`); under
    ``jit``/``vmap``/``grad`` the error is raised by ``eqx.error_if`` at run time
    (`try_assemble` returns a flag instead).
    """
    result = try_assemble(mech, q_guess, fixed, tol, max_iter)
    message = (
        f"assemble: the loops do not close to tol={tol:g} within {max_iter} Newton steps: "
        "the geometry cannot close (e.g. a link too short to reach) or the guess is too far "
        "from a closed configuration, or a weld closed at a wrong turn"
    )
    if isinstance(result.residual, jax.core.Tracer):
        return eqx.error_if(
            result.q, ~result.converged, message + "; try_assemble gives the residual"
        )
    if not result.converged and result.residual <= tol:
        check_locked(mech, locked_turns(mech, result.q), "assemble")
        check_gaps(mech, reduced_gaps(mech, result.q), "assemble")
    if not result.converged:
        phi, top = np.asarray(loop_residual(mech, result.q)), mech.topology
        worst = max(range(len(top.loops)), key=lambda i: np.linalg.norm(phi[top.rows(i)]))
        raise ValueError(
            f"{message}; residual norm |Phi| = {float(result.residual):.3e}, largest at the loop "
            f"of cut joint {top.loops[worst].name!r} ({np.linalg.norm(phi[top.rows(worst)]):.3e})"
        )
    return result.q


@compilation.jit
def project_velocity(
    mech: Mechanism, q: Float[Array, " n"], qd: Float[Array, " n"], fixed=()
) -> Float[Array, " n"]:
    """Velocities with ``J qd = 0``: the free ones corrected by the least-squares (minimum-norm)
    change, the ``fixed`` ones (indices or names) kept. Under ``vmap`` on the CPU it runs in
    chunks of states (`chunking.over_states`): in one ``vmap`` of 4096 states of a 64-loop chain
    its intermediates took 71 GB."""
    free = np.asarray(free_coordinates(mech, fixed))
    if not mech.topology.loops or free.size == 0:
        return qd

    def one(mech, q, qd):
        jac = loop_jacobian(mech, q)
        return qd.at[free].add(-dense.pinv(jac[:, free]) @ (jac @ qd))

    return chunking.over_states(one, mech, q, qd)


@compilation.jit
def singular_values(mech: Mechanism, q: Float[Array, " n"], fixed=()) -> Float[Array, " k"]:
    """Singular values of J restricted to the free coordinates, largest first."""
    jac = loop_jacobian(mech, q)[:, np.asarray(free_coordinates(mech, fixed), dtype=int)]
    return dense.singular_values(jac)


def constraint_rank(
    mech: Mechanism, q: Float[Array, " n"], fixed=(), rtol: float = 1e-8
) -> Int[Array, ""]:
    """Numerical rank of J over the free coordinates (singular values above ``rtol`` times the
    largest). Below ``mech.topology.num_rows`` the constraints are singular or redundant there."""
    s = singular_values(mech, q, fixed)
    return jnp.sum(s > rtol * jnp.max(s, initial=0.0))


def check_jacobian(
    mech: Mechanism, q: Float[Array, " n"], fixed=(), rtol: float = 1e-8
) -> np.ndarray:
    """Raise ``ValueError`` where J is singular at ``q`` (eager use, not under ``jit``): a loop
    whose own rows are dependent (redundant constraints, or a change point), loops dependent on
    each other, or, with the ``fixed`` coordinates held, a dead centre where the free coordinates
    cannot follow. Returns the singular values of J over the free coordinates."""
    jac, top = np.asarray(loop_jacobian(mech, q)), mech.topology

    def rank(matrix):
        s = np.linalg.svd(matrix, compute_uv=False)
        return int(np.sum(s > rtol * (s.max(initial=0.0)))), s

    for i, loop in enumerate(top.loops):
        r, s = rank(jac[top.rows(i)])
        if r < loop.rows:
            raise ValueError(
                f"loop {i} (cut joint {loop.name!r}, {loop.kind}): its {loop.rows} constraint rows "
                f"have rank {r} at this configuration (singular values "
                f"{np.array2string(s, precision=3)}): "
                "either the rows are redundant, e.g. a planar loop modelled spatially (use a "
                "spherical or universal cut joint, or planar=True), or the loop is at a change "
                "point where its links line up"
            )
    r, s = rank(jac)
    if r < top.num_rows:
        null = np.linalg.svd(jac)[0][:, r:]  # the dependent combinations of rows
        weight = [np.abs(null[top.rows(i)]).max(initial=0.0) for i in range(len(top.loops))]
        named = [f"{i} ({loop.name!r})" for i, loop in enumerate(top.loops) if weight[i] > 1e-8]
        raise ValueError(
            f"the constraint rows of loops {', '.join(named)} are dependent at this "
            f"configuration: rank {r} < {top.num_rows} rows (redundant loops or a singular pose)"
        )
    free = free_coordinates(mech, fixed)
    r, s = rank(jac[:, list(free)])
    if len(free) < top.num_rows:
        raise ValueError(
            f"only {len(free)} free coordinates for {top.num_rows} constraint rows: "
            "too many coordinates are fixed"
        )
    if r < top.num_rows:
        held = [mech.coordinate_names[k] for k in range(mech.num_bodies) if k not in free]
        raise ValueError(
            f"J over the free coordinates is singular: rank {r} < {top.num_rows} rows, smallest "
            f"singular value {s.min():.3e}: with {held} held this is a dead centre, "
            "where the free coordinates cannot follow the fixed ones"
        )
    return s
