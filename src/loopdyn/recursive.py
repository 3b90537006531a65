"""Closed-loop forward dynamics in O(bodies) by a recursion over the body graph (method
``"recursive"`` of `loopdyn.forward`).

The body graph has the bodies as nodes (not the ground) and as edges the tree joints and the cut
joints between two bodies. A tree joint to the ground or a cut joint with one side on the ground
is not an edge: it constrains one body. Where this graph is a forest (`supported`: e.g. the four-
bar, the 3-RRR, the RSSR, the Stewart platform, a ladder of four-bars drawn as one deep chain,
`benchmarks._peers.ladder_chain_mjcf`) the constrained equations are eliminated exactly from the
leaves to a root in each component, like the articulated-body algorithm on a tree, then
substituted back from the roots: the cost is linear in the number of bodies, whatever the number
of loops through one subsystem.

Notation (ground frame, Pluecker coordinates about the world origin, as in `tree`): ``a_b`` is
body b's twist-rate with the ground accelerating by gravity's ``gamma = -[0; g]``; ``M_b`` its
extended mass matrix, ``h_b = t_b x* M_b t_b - f_b`` its velocity-product wrench less external
ones; ``s_i``, ``c_i`` the joint-rate vector and velocity-product term of tree joint i,
``a_i = a_parent + s_i qdd_i + c_i``. A cut-joint row r reads, with the world wrenches
``G_r^b, G_r^a`` of a unit multiplier on its two bodies (`kinematics.row_wrenches`, which are
also its rows of J on the bodies' twists),

    G_r^b . a_b + G_r^a . a_a = Psi_r + G_r^b . a0_b + G_r^a . a0_a,

``a0`` the twist-rates at ``qdd = 0`` (a ground side drops out). Its multiplier is ``lam_r``.

Summary of a subtree rooted at b: the wrench it needs from the edge to its graph parent is
``f_b = I_b a_b + p_b - K_b^T nu_b`` with ``K_b a_b = k_b`` (``c_b <= d`` rows, ``nu_b`` their
multipliers): its articulated inertia, bias and the constraints it leaves on ``a_b``. At body b,
``I_b = M_b + sum I_child``, ``p_b = h_b + sum p_child``, and the rows are its own (the
complement ``T_b`` of ``s_b`` for a tree joint to the ground, ``T_b (a_b - gamma - c_b) = 0``,
with its joint force as the wrench ``w_b tau_b``, ``w_b = s_b / |s_b|^2``; its cut rows to the
ground) and the children's. The edge to the graph parent x is a free relative motion
``a_b = a_x + y`` with edge rows ``E_y y + E_x a_x = e``: for a tree joint (either direction,
``s = +-s_i``, ``c = +-c_i``) ``T (y - c) = 0`` with the force ``w tau_i`` on ``y``, for a cut
joint its rows. Minimising the subtree's Gibbs-Appell function over ``y`` under
``C y = r0 - R a_x``, ``C = [K_b; E_y]``, ``R = [K_b; E_x]``, ``r0 = [k_b; e]``:

    H y + g - C^T m = 0,    H = I_b + armature w w^T,    g = I_b a_x + p_b - w tau + ...

- ``C`` with at least d rows (rank d): a Householder QR ``C = [U1 U2] [C1; 0]`` fixes
  ``y = C1^-1 U1^T (r0 - R a_x)`` and ``m = U1 C1^-T (H y + g) + U2 m2``; the rows
  ``U2^T R a_x = U2^T r0`` pass up with their multipliers ``m2``.
- fewer rows (full row rank): QR ``C^T = [Q1 N] [Rt; 0]``, ``y = Q1 Rt^-T r + N z`` with
  ``(N^T H N) z = -N^T (H Q1 Rt^-T r + g)`` (Cholesky), ``m = Rt^-1 Q1^T (H y + g)``.

Both make ``y`` and ``m`` affine in ``a_x``, and the parent gets
``f_x = I_b (a_x + y) + p_b - R^T m``: ``I_x += I_b + I_b Y - R^T M``. A root's edge is its tree
joint to the ground (``a_x = gamma``). Back substitution from the roots gives ``a``, ``y``,
``qdd_i = w^T (y - c)`` (``w_b^T (a_b - gamma - c_b)`` for a tree joint to the ground) and the
multipliers.

Structural rule (`plan`, fixed at build time by counting rows, generic ranks): every body's rows
``c_b <= d`` and no rows left at a root; a pivot (a diagonal of ``C1``, ``Rt`` or the Cholesky
factor) that vanishes at a state sets ``singular``. This happens at singular configurations, but
also where the elimination order meets a local dead centre of one loop (its rows blind to the
joint they are eliminated at) while the whole mechanism is not singular; `forward.solve`'s other
methods handle those states. Couplings of coordinates are not supported.

Layout (`_levels`, static, cached per `Plan`): the leaves (bodies without children, at any
depth) are eliminated first, all at once, and substituted last; the other bodies go one graph
depth at a time, tips -> roots and back. Within a depth (or among the leaves) the bodies of one
`_Kind` (edge kind, grounded, row counts, their children's groups) form a group: one `_eliminate`
``vmap``-ped over its bodies, their own terms gathered from per-body arrays and their children's
summaries from the depth below or the leaves by static index arrays. Runs of consecutive depths
with the same groups, between depths that hand over arrays of the same shapes, are one
``lax.scan`` (one step a depth; the summaries, or the twist-rates and multipliers handed down,
its carry); the other depths are unrolled. So the program does not grow with a repeated
structure (the chain ladder: depth 0, a scan over the couplers 1..k - 1, depth k, and the k
rockers as one group of leaves; about 3,900 lowered ops at any k) but does with depths that do
not repeat one by one (`mechanisms.ladder`, whose depths alternate two kinds, is unrolled). The
passes are written per state; under ``vmap`` `loopdyn.forward.solve` runs the whole solve in
chunks of `chunking.chunks` states.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from . import dense, kinematics, spatial, tree
from .mechanism import Mechanism


class _Node(NamedTuple):
    """Static structure of body ``body`` in the body graph: its graph ``parent`` (-1: the ground,
    for a root), the ``edge`` to it (``"tree"``: the tree joint of body ``joint``, ``sign`` +1 when
    that is ``body`` itself, -1 when it is the parent's; ``"cut"``: cut joint ``joint``, ``sign``
    0 when the body is its side a, 1 side b), whether its own tree joint goes to the ground and
    is not its edge (``grounded``), its cut joints to the ground ``(cut, side)``, its children and
    row counts: ``rows`` on ``a_b`` (own, then the children's), ``edge_rows``, ``passed`` up."""

    body: int
    parent: int
    edge: str
    joint: int
    sign: int
    grounded: bool
    ground_cuts: tuple[tuple[int, int], ...]
    children: tuple[int, ...]
    rows: int
    edge_rows: int
    passed: int


class Plan(NamedTuple):
    """The recursion's static structure: the `_Node` of every body, the bodies in elimination
    order from the roots (parents before children) and each cut joint's rows in the stacked
    ``lam``."""

    nodes: tuple[_Node, ...]
    order: tuple[int, ...]
    cut_rows: tuple[tuple[int, ...], ...]


def _cut_rows(mech):
    rows = kinematics._rows(mech).cut if mech.cut_joints else np.zeros(0, dtype=int)
    return tuple(tuple(np.flatnonzero(rows == c).tolist()) for c in range(len(mech.cut_joints)))


def unsupported(mech: Mechanism) -> str | None:
    """Why the method ``"recursive"`` does not apply to ``mech`` (None when it does)."""
    try:
        plan(mech)
    except ValueError as error:
        return str(error)
    return None


def supported(mech: Mechanism) -> bool:
    """Whether ``mech`` has the structure `plan` needs: a body graph that is a forest, no
    couplings of coordinates, at most ``d`` rows left on any body and none at a root."""
    return unsupported(mech) is None


def plan(mech: Mechanism) -> Plan:
    """The recursion's `Plan`; ``ValueError`` naming the reason when ``mech`` is not supported."""
    cuts = tuple((c.body_a, c.body_b) for c in mech.cut_joints)
    return _plan(
        mech.parent,
        cuts,
        mech.dim,
        bool(mech.coupling_names),
        mech.body_names,
        _cut_rows(mech),
    )


@functools.cache
def _plan(parent, cuts, d, couplings, names, cut_rows) -> Plan:
    n = len(parent)
    cut_counts = tuple(map(len, cut_rows))
    if couplings:
        raise ValueError("recursive: couplings of coordinates are not supported")
    edges = {b: [] for b in range(n)}  # body -> [(other, kind, joint, sign)]
    links = [(b, p, "tree", b) for b, p in enumerate(parent) if p >= 0]
    links += [(a, b, "cut", c) for c, (a, b) in enumerate(cuts) if a >= 0 and b >= 0]
    root_of = list(range(n))

    def find(b):
        while root_of[b] != b:
            b = root_of[b]
        return b

    for a, b, kind, joint in links:
        ra, rb = find(a), find(b)
        if ra == rb:
            what = f"tree joint of {names[joint]!r}" if kind == "tree" else f"cut joint {joint}"
            raise ValueError(
                f"recursive: the body graph is not a forest: the {what} between {names[a]!r} "
                f"and {names[b]!r} closes a loop through bodies only (not the ground)"
            )
        root_of[ra] = rb
        edges[a].append((b, kind, joint))
        edges[b].append((a, kind, joint))
    ground_cuts = {b: [] for b in range(n)}
    for c, (a, b) in enumerate(cuts):
        if a < 0 and b >= 0:
            ground_cuts[b].append((c, 1))
        elif b < 0 and a >= 0:
            ground_cuts[a].append((c, 0))
    graph_parent, edge_of, children, order = {}, {}, {b: [] for b in range(n)}, []
    for root in range(n):  # the first tree root of each component
        if parent[root] >= 0 or root in graph_parent:
            continue
        graph_parent[root], edge_of[root] = -1, ("tree", root, 1)
        stack = [root]
        while stack:  # depth-first; `order` reversed is children before parents
            x = stack.pop()
            order.append(x)
            for b, kind, joint in edges[x]:
                if b in graph_parent:
                    continue
                if kind == "tree":
                    sign = 1 if joint == b else -1
                else:
                    sign = 0 if cuts[joint][0] == b else 1
                graph_parent[b], edge_of[b] = x, (kind, joint, sign)
                children[x].append(b)
                stack.append(b)
    nodes = [None] * n
    for b in reversed(order):
        kind, joint, sign = edge_of[b]
        grounded = parent[b] < 0 and graph_parent[b] >= 0
        own = (d - 1) * grounded + sum(cut_counts[c] for c, _ in ground_cuts[b])
        rows = own + sum(nodes[child].passed for child in children[b])
        if rows > d:
            raise ValueError(
                f"recursive: {rows} constraint rows left on body {names[b]!r} (more than {d}): "
                "redundant constraints, or an elimination this method does not handle"
            )
        edge_rows = d - 1 if kind == "tree" else cut_counts[joint]
        passed = max(rows + edge_rows - d, 0)
        if graph_parent[b] < 0 and passed:
            raise ValueError(
                f"recursive: {passed} constraint rows left at the root {names[b]!r}: redundant "
                "constraints"
            )
        nodes[b] = _Node(
            b,
            graph_parent[b],
            kind,
            joint,
            sign,
            grounded,
            tuple(ground_cuts[b]),
            tuple(children[b]),
            rows,
            edge_rows,
            passed,
        )
    return Plan(tuple(nodes), tuple(order), cut_rows)


class _Kind(NamedTuple):
    """What the bodies of one group share: the ``edge`` kind, ``grounded``, the number of
    ``ground_rows`` of their cut joints to the ground, per child (in row order)
    ``(leaf, group, rows it passes up)`` (``leaf``: the group is one of the leaves', else one of
    the next depth's), and the row counts of `_Node`."""

    edge: str
    grounded: bool
    ground_rows: int
    children: tuple[tuple[bool, int, int], ...]
    rows: int
    edge_rows: int
    passed: int


class _Segment(NamedTuple):
    """Graph depths ``first, first + 1, ...`` of the bodies with children that share the groups
    ``kinds`` (the depth above them has the groups ``above``). ``data`` holds per group the index
    arrays of its bodies (`_levels`), with a leading axis over the depths where ``scanned`` (one
    ``lax.scan`` step a depth), else of the one depth ``first``."""

    first: int
    kinds: tuple[_Kind, ...]
    above: tuple[_Kind, ...]
    data: tuple[dict, ...]
    scanned: bool


class _Layout(NamedTuple):
    """The passes' static structure: the `_Segment` s of the bodies with children, and the
    leaves (bodies without children, at any depth) in groups ``leaf_kinds`` with their index
    arrays ``leaves``: eliminated all at once before the depths, substituted after them."""

    segments: tuple[_Segment, ...]
    leaf_kinds: tuple[_Kind, ...]
    leaves: tuple[dict, ...]


def _indices(kind, nodes, cut_rows):
    """Index arrays of a group's bodies ``nodes``: the bodies, their edges (tree: joint and
    sign; cut: its rows and the body's side) and their cut rows to the ground with sides."""
    x = {"body": np.array([n.body for n in nodes])}
    if kind.edge == "tree":
        x["joint"] = np.array([n.joint for n in nodes])
        x["sign"] = np.array([float(n.sign) for n in nodes])
    else:
        x["cut_rows"] = np.array([cut_rows[n.joint] for n in nodes]).reshape(len(nodes), -1)
        x["side"] = np.array([n.sign for n in nodes])
    if kind.ground_rows:
        x["ground_rows"] = np.array(
            [[r for c, _ in n.ground_cuts for r in cut_rows[c]] for n in nodes]
        )
        x["ground_sides"] = np.array(
            [[side for c, side in n.ground_cuts for _ in cut_rows[c]] for n in nodes]
        )
    return x


@functools.cache
def _levels(steps: Plan) -> _Layout:
    """The leaves grouped by `_Kind`; the other bodies by graph depth and, within a depth, by
    `_Kind`; consecutive depths with the same groups, whose neighbours hand them arrays of the
    shapes they hand on, are one scanned `_Segment`."""
    nodes, cut_rows = steps.nodes, steps.cut_rows

    def kind_of(node, kids):
        rows = sum(len(cut_rows[c]) for c, _ in node.ground_cuts)
        return _Kind(node.edge, node.grounded, rows, kids, node.rows, node.edge_rows, node.passed)

    leaf_groups = {}
    for node in nodes:
        if not node.children:
            leaf_groups.setdefault(kind_of(node, ()), []).append(node.body)
    leaf_kinds = tuple(sorted(leaf_groups))
    where = {}  # body -> (leaf, group, position)
    for h, kind in enumerate(leaf_kinds):
        for i, b in enumerate(leaf_groups[kind]):
            where[b] = (True, h, i)
    depth = {}
    for b in steps.order:  # parents first
        depth[b] = 0 if nodes[b].parent < 0 else depth[nodes[b].parent] + 1
    inner = sorted(b for b in depth if nodes[b].children)
    bodies = [[] for _ in range(max((depth[b] + 1 for b in inner), default=0))]
    for b in inner:
        bodies[depth[b]].append(b)
    kinds, members = [None] * len(bodies), [None] * len(bodies)
    for t in reversed(range(len(bodies))):  # tips -> roots: children's groups are known
        groups = {}
        for b in bodies[t]:
            kids = sorted(nodes[b].children, key=lambda c: (where[c], c))
            kind = kind_of(nodes[b], tuple(where[c][:2] + (nodes[c].passed,) for c in kids))
            groups.setdefault(kind, []).append((b, tuple(kids)))
        kinds[t] = tuple(sorted(groups))
        members[t] = [groups[kind] for kind in kinds[t]]
        for g, group in enumerate(members[t]):
            for i, (b, _) in enumerate(group):
                where[b] = (False, g, i)

    def data(t):
        """Index arrays of the groups at depth t (`_indices`), the positions of their children
        (tips -> roots), of the parent among the depth above's bodies and of the passed rows'
        multipliers among those the depth above hands down (roots -> tips)."""
        sizes = [len(group) for group in members[t - 1]] if t else []
        offset = np.cumsum([0] + sizes)
        handed = {}  # child group -> (parent group, slot) in the order they are stacked
        for g, kind in enumerate(kinds[t - 1] if t else ()):
            for j, (leaf, h, _) in enumerate(kind.children):
                if not leaf:
                    handed.setdefault(h, []).append((g, j))
        out = []
        for h, (kind, group) in enumerate(zip(kinds[t], members[t])):
            x = _indices(kind, [nodes[b] for b, _ in group], cut_rows)
            x["children"] = tuple(
                np.array([where[kids[j]][2] for _, kids in group])
                for j in range(len(kind.children))
            )
            if t:
                parents = [where[nodes[b].parent] for b, _ in group]
                x["parent"] = np.array([offset[g] + i for _, g, i in parents])
                if kind.passed:
                    blocks = handed[h]
                    start = np.cumsum([0] + [sizes[g] for g, _ in blocks])
                    slot = {}
                    for (g, j), first in zip(blocks, start):
                        for i, (_, kids) in enumerate(members[t - 1][g]):
                            slot[kids[j]] = first + i
                    x["handed"] = np.array([slot[b] for b, _ in group])
            out.append(x)
        return tuple(out)

    def key(t):
        return kinds[t], tuple(map(len, members[t]))

    def passed_up(t):  # the shapes of the summaries depth t passes up
        return tuple((kind.passed, len(group)) for kind, group in zip(kinds[t], members[t]))

    def handed_down(t):  # the shapes of what depth t hands down to the next
        return tuple(
            (len(group), tuple(child[1:] for child in kind.children if not child[0]))
            for kind, group in zip(kinds[t], members[t])
        )

    def one(t):
        return _Segment(t, kinds[t], kinds[t - 1] if t else (), data(t), False)

    # A scan over depths a..b of one key: its carry comes in from depth b + 1 (tips -> roots)
    # and a - 1 (roots -> tips), which must hand over arrays of the shapes the scan makes.
    last, segments, t = len(bodies) - 1, [], 0
    while t <= last:
        end = t + 1
        while end <= last and key(end) == key(t):
            end += 1
        a, b = t + (t == 0 or handed_down(t - 1) != handed_down(t)), end - 1
        b -= b == last or passed_up(b + 1) != passed_up(b)
        if b - a < 1:  # fewer than two depths: unrolled
            a = b = end
        segments += [one(u) for u in range(t, a)]
        if a < end:
            stacked = [
                jax.tree.map(lambda *x: np.stack(x), *g) for g in zip(*map(data, range(a, b + 1)))
            ]
            segments.append(_Segment(a, kinds[a], kinds[a - 1], tuple(stacked), True))
        segments += [one(u) for u in range(b + 1, end)]
        t = end
    # Where the leaves find their parents' twist-rates and multipliers: `_down` outputs them
    # per group (all depths of a segment stacked), flattened in segment, group, slot order.
    accel, handed, count, blocks = {}, {}, 0, [0] * len(leaf_kinds)
    for seg in segments:
        depths = range(seg.first, seg.first + (len(seg.data[0]["body"]) if seg.scanned else 1))
        for g, kind in enumerate(seg.kinds):
            size, starts = len(members[seg.first][g]), {}
            for j, (leaf, h, passed) in enumerate(kind.children):
                if leaf and passed:
                    starts[j], blocks[h] = blocks[h], blocks[h] + len(depths) * size
            for n, t in enumerate(depths):
                for i, (b, kids) in enumerate(members[t][g]):
                    accel[b] = count + n * size + i
                    for j, first in starts.items():
                        handed[kids[j]] = first + n * size + i
            count += len(depths) * size
    leaves = []
    for kind in leaf_kinds:
        group = [nodes[b] for b in leaf_groups[kind]]
        x = _indices(kind, group, cut_rows)
        x["parent"] = np.array([accel[n.parent] if n.parent >= 0 else count for n in group])
        if kind.passed:
            x["handed"] = np.array([handed[n.body] for n in group])
        leaves.append(x)
    return _Layout(tuple(segments), leaf_kinds, tuple(leaves))


# Small dense algebra, unrolled (dense sizes here are at most 2 d).


def _qr(a):
    """Householder QR of a tall ``a`` ``(m, k)``, ``m >= k``: ``q`` ``(m, m)`` orthogonal and the
    upper-triangular ``r`` ``(k, k)`` with ``a = q [r; 0]`` (below its diagonal, rounding: read
    the upper triangle only). Each reflector is a masked whole vector, not a slice and a scatter."""
    m, k = a.shape
    q, rows = jnp.eye(m, dtype=a.dtype), np.arange(m)
    for j in range(k):
        x = jnp.where(rows >= j, a[:, j], 0.0)
        norm = jnp.sqrt(jnp.sum(x * x) + jnp.finfo(a.dtype).tiny)
        v = x + jnp.where(a[j, j] >= 0, norm, -norm) * (rows == j)
        beta = 2.0 / jnp.sum(v * v)
        a = a - jnp.outer(beta * v, v @ a)
        q = q - jnp.outer(q @ v, beta * v)
    return q, a[:k]


def _upper_solve(r, b, transpose=False):
    """``r^-1 b`` (``r^-T b`` when ``transpose``) for upper-triangular ``r``, ``b`` a matrix."""
    k = r.shape[0]
    entries, rows = dense._entries(r), [b[i] for i in range(k)]
    order = range(k) if transpose else reversed(range(k))
    return jnp.stack(dense._substitute(entries, rows, order, transpose)).reshape(b.shape)


class _Step(NamedTuple):
    """What back substitution needs of one edge: ``y`` and the multipliers ``m`` of ``[K; E]``
    affine in ``a_x`` (``(., d + 1)``, the last column constant) and ``U2`` for the rows passed
    up."""

    y: jax.Array
    m: jax.Array
    u2: jax.Array


def _eliminate(inertia, bias, k_mat, k_vec, e_y, e_x, e_vec, force, armature, w, c):
    """One edge: the subtree summary ``(I, p, K, k)`` at b and the edge ``a_b = a_x + y`` with
    rows ``E_y y + E_x a_x = e``, a force ``force`` on ``y`` and ``armature (w . (y - c))^2 / 2``:
    the summary passed to x ``(I'', p'', K'', k'')``, the `_Step` and whether a pivot vanished."""
    d = inertia.shape[0]
    c_mat = jnp.concatenate([k_mat, e_y])
    r_mat = jnp.concatenate([k_mat, e_x])
    r_aff = jnp.concatenate([-r_mat, jnp.concatenate([k_vec, e_vec])[:, None]], axis=1)
    h = inertia + armature * jnp.outer(w, w)
    g0 = bias - force - armature * w * (w @ c)
    g_aff = jnp.concatenate([inertia, g0[:, None]], axis=1)
    scale = jnp.max(jnp.sum(c_mat * c_mat, axis=0))
    rows = c_mat.shape[0]
    if rows >= d:  # y fixed by the rows; rows - d pass up
        q, c1 = _qr(c_mat)
        u1, u2 = q[:, :d], q[:, d:]
        y = _upper_solve(c1, u1.T @ r_aff)
        m = u1 @ _upper_solve(c1, h @ y + g_aff, transpose=True)
        small = dense.small_pivots(jnp.diagonal(c1), scale)
    else:  # y's free part keeps inertia
        q, rt = _qr(c_mat.T)
        q1, null = q[:, :rows], q[:, rows:]
        rho = q1 @ _upper_solve(rt, r_aff, transpose=True)
        reduced = null.T @ h @ null
        factor = dense.cholesky(reduced)
        z = -dense.cho_solve(factor, null.T @ (h @ rho + g_aff))
        y = rho + null @ z
        m = _upper_solve(rt, q1.T @ (h @ y + g_aff))
        u2 = jnp.zeros((rows, 0), inertia.dtype)
        small = dense.small_pivots(jnp.diagonal(rt), scale) | dense.small_pivots(
            jnp.diagonal(factor), jnp.max(jnp.abs(jnp.diagonal(reduced)))
        )
    passed = inertia + inertia @ y[:, :d] - r_mat.T @ m[:, :d]
    passed = 0.5 * (passed + passed.T)
    passed_bias = inertia @ y[:, d] + bias - r_mat.T @ m[:, d]
    return (passed, passed_bias, u2.T @ r_mat, u2.T @ r_aff[:, d]), _Step(y, m, u2), small


def _complement(s):
    """Rows ``(d - 1, d)`` orthogonal to ``s``: the last rows of its Householder reflection."""
    return _qr(s[:, None])[0][:, 1:].T


class _Terms(NamedTuple):
    """Per-state arrays the passes gather from: per body ``M``, ``h``, ``c``, ``w = s / |s|^2``,
    the rows ``T`` orthogonal to ``s``, armature and joint force; ``gamma``; per cut row its
    wrenches ``(G^b, G^a)`` and right-hand side (None without cut joints)."""

    inertia: jax.Array
    h: jax.Array
    c: jax.Array
    w: jax.Array
    t: jax.Array
    armature: jax.Array
    tau: jax.Array
    gamma: jax.Array
    g_rows: jax.Array | None
    rhs: jax.Array | None


def _rows_times(a, v):
    """``a v`` over leading axes: ``(..., r, k) x (..., k) -> (..., r)``."""
    return jnp.einsum("...rk,...k->...r", a, v)


def _edge(kind, terms, x):
    """``(E_y, E_x, e, force, armature, w, c)`` of the edges of a group of bodies (`_eliminate`'s
    last arguments, with the leading axes of ``x["body"]``)."""
    if kind.edge == "tree":
        j, sign = x["joint"], x["sign"][..., None]
        t, c, w = terms.t[j], sign * terms.c[j], sign * terms.w[j]
        force = w * terms.tau[j][..., None]
        return t, jnp.zeros_like(t), _rows_times(t, c), force, terms.armature[j], w, c
    r, side = x["cut_rows"], x["side"][..., None]
    own, other = terms.g_rows[r, 1 - side], terms.g_rows[r, side]  # side b is index 0
    zero = jnp.zeros(x["body"].shape + terms.gamma.shape, terms.gamma.dtype)
    return own, own + other, terms.rhs[r], zero, zero[..., 0], zero, zero


def _own(kind, terms, x):
    """What a group's bodies take from the per-body `_Terms` (leading axes those of
    ``x["body"]``, all depths of a scanned segment at once): for tips -> roots ``M``, ``h`` and the
    rows ``K, k`` of their own tree joint to the ground and cut joints to the ground, and the edge
    terms; for roots -> tips ``w`` and ``c`` of the edge and of their own joint."""
    b = x["body"]
    inertia, bias, k_rows, k_vec = terms.inertia[b], terms.h[b], [], []
    down = {}
    if kind.grounded:
        t, w, arm = terms.t[b], terms.w[b], terms.armature[b][..., None]
        rate = terms.gamma + terms.c[b]  # a_b - c_b for qdd = 0
        k_rows.append(t)
        k_vec.append(_rows_times(t, rate))
        inertia = inertia + arm[..., None] * w[..., :, None] * w[..., None, :]
        bias = bias - w * (terms.tau[b][..., None] + arm * jnp.sum(w * rate, -1, keepdims=True))
        down["w_own"], down["c_own"] = w, rate
    if kind.ground_rows:
        r, side = x["ground_rows"], x["ground_sides"]
        k_rows.append(terms.g_rows[r, 1 - side])
        k_vec.append(terms.rhs[r])
    d = terms.gamma.shape[0]
    k_mat = jnp.concatenate(k_rows, -2) if k_rows else jnp.zeros(b.shape + (0, d), bias.dtype)
    k_vec = jnp.concatenate(k_vec, -1) if k_vec else jnp.zeros(b.shape + (0,), bias.dtype)
    edge = _edge(kind, terms, x)
    if kind.edge == "tree":
        down["w"], down["c"] = edge[5], edge[6]
    return (inertia, bias, k_mat, k_vec) + edge, down


def _links(x):
    """The positions a pass gathers from the depth next to it or the leaves (`_levels`)."""
    return {name: x[name] for name in ("children", "parent", "handed") if name in x}


def _up(kinds, leaves, below, inputs, links):
    """Tips -> roots at one depth: each group's summaries ``(I, p, K, k)`` from its own terms
    (`_own`) and its children's summaries, from the ``leaves`` or ``below`` (per group at the next
    depth), one batched `_eliminate` a group; returns the summaries, the `_Step` s and whether a
    pivot vanished."""
    summaries, steps, singular = [], [], jnp.asarray(False)
    for kind, (inertia, bias, k_mat, k_vec, *edge), x in zip(kinds, inputs, links):
        k_rows, k_vecs = [k_mat], [k_vec]
        for (leaf, h, _), position in zip(kind.children, x.get("children", ())):
            i_c, p_c, k_c, kv_c = (a[position] for a in (leaves if leaf else below)[h])
            inertia, bias = inertia + i_c, bias + p_c
            k_rows.append(k_c)
            k_vecs.append(kv_c)
        k_mat, k_vec = jnp.concatenate(k_rows, 1), jnp.concatenate(k_vecs, 1)
        summary, step, small = jax.vmap(_eliminate)(inertia, bias, k_mat, k_vec, *edge)
        summaries.append(summary)
        steps.append(step)
        singular = singular | jnp.any(small)
    return tuple(summaries), tuple(steps), singular


def _from_above(above_kinds, above):
    """What the depth above hands down (`_down`'s carry) as the arrays `_down` gathers from: its
    twist-rates stacked, and per group of this depth the multipliers of its passed rows."""
    if above is None:
        return None, {}
    handed = {}
    for kind, slots in zip(above_kinds, above[1]):
        inner = [h for leaf, h, _ in kind.children if not leaf]
        for h, m in zip(inner, slots):
            handed.setdefault(h, []).append(m)
    return jnp.concatenate(above[0]), {h: jnp.concatenate(m) for h, m in handed.items()}


def _down(kinds, gamma, sources, inputs, links, steps):
    """Roots -> tips for groups of bodies: from the parents' twist-rates and the multipliers they
    hand down (``sources``: the arrays ``x["parent"]`` and ``x["handed"]`` index; None at the
    roots), each group's ``a`` and the multipliers it hands to each child (the carry: those of
    its children with children; the outputs: those of its leaves), and its outputs: ``qdd`` of
    its edge and own tree joint, ``lam`` of its cut rows."""
    d, (rates, handed) = gamma.shape[0], sources
    accels, slots_down, outputs = [], [], []
    for h, (kind, own, x, step) in enumerate(zip(kinds, inputs, links, steps)):
        size = step.y.shape[0]
        a_x = jnp.broadcast_to(gamma, (size, d)) if rates is None else rates[x["parent"]]
        ax1 = jnp.concatenate([a_x, jnp.ones((size, 1), a_x.dtype)], axis=1)
        y, m = _rows_times(step.y, ax1), _rows_times(step.m, ax1)
        if kind.passed:
            m = m + _rows_times(step.u2, handed[h][x["handed"]])
        accel = a_x + y
        out = {"accel": accel}
        if kind.edge == "tree":
            out["qdd_edge"] = jnp.sum(own["w"] * (y - own["c"]), axis=1)
        else:
            out["lam_edge"] = m[:, kind.rows :]
        start = 0
        if kind.grounded:
            out["qdd_own"] = jnp.sum(own["w_own"] * (accel - own["c_own"]), axis=1)
            start = d - 1
        if kind.ground_rows:
            out["lam_ground"] = m[:, start : start + kind.ground_rows]
            start += kind.ground_rows
        inner, leaves = [], []
        for leaf, _, count in kind.children:
            if not leaf:
                inner.append(m[:, start : start + count])
            elif count:
                leaves.append(m[:, start : start + count])
            start += count
        out["leaves"] = tuple(leaves)
        accels.append(accel)
        slots_down.append(tuple(inner))
        outputs.append(out)
    return (tuple(accels), tuple(slots_down)), tuple(outputs)


# Where each output of `_down` goes: the index array of `_levels` that places it.
_PLACES = {
    "qdd_edge": "joint",
    "qdd_own": "body",
    "lam_edge": "cut_rows",
    "lam_ground": "ground_rows",
}


def solve(mech: Mechanism, q, qd, tau, f_ext, psi):
    """``(qdd, lam, singular)`` at one state (`loopdyn.forward.solve` with ``"recursive"``);
    ``psi(phi, J qd, J' qd)`` gives the acceleration constraints' right-hand side."""
    structure = plan(mech)
    d, dtype = mech.dim, qd.dtype
    motion, inertia, h = tree.recursion_terms(mech, q, qd, f_ext)
    gamma = tree.ground_acceleration(mech).astype(dtype)
    rate0 = motion.acceleration + gamma  # a0: twist-rates at qdd = 0, with gravity
    parent = np.array(mech.parent)
    above = jnp.where((parent >= 0)[:, None], rate0[parent], gamma)
    c_joint, s = rate0 - above, motion.axes  # a_i = a_parent + s_i qdd_i + c_i
    # Cut-joint rows: G^b, G^a and the right-hand side in the twist-rates a.
    g_rows, rhs = None, None
    if mech.cut_joints:
        ends, rows = kinematics._ends(mech, motion), kinematics._rows(mech)
        e, x = kinematics._directions(ends, rows)
        wrenches = kinematics.row_wrenches(ends, rows)
        if mech.planar:
            wrenches = wrenches[..., np.array(spatial.PLANAR_ROWS)]
        bodies = np.array([[c.body_b, c.body_a] for c in mech.cut_joints])[rows.cut]
        with_ground = lambda v: jnp.concatenate([v, jnp.zeros((1, d), dtype)])
        twist, a0 = with_ground(motion.twist), with_ground(rate0)
        velocity = jnp.einsum("rsk,rsk->r", wrenches, twist[bodies])
        g_rows = wrenches
        bias = kinematics._bias(ends, rows, e, x)
        rhs = psi(kinematics._dot(e, x), velocity, bias) + jnp.einsum(
            "rsk,rsk->r", wrenches, a0[bodies]
        )
    terms = _Terms(
        inertia,
        h,
        c_joint,
        s / jnp.sum(s * s, axis=1, keepdims=True),
        jax.vmap(_complement)(s),
        jnp.asarray(mech.armature, dtype),
        tau,
        gamma,
        g_rows,
        rhs,
    )

    return _passes(structure, terms)


def _passes(structure: Plan, terms: _Terms):
    """``(qdd, lam, singular)`` from one state's `_Terms`: the two passes over `_levels`."""
    layout = _levels(structure)
    segments, gamma = layout.segments, terms.gamma
    d, dtype = gamma.shape[0], gamma.dtype
    # The leaves first, all at once, then the depths.
    leaf_own = [_own(kind, terms, x) for kind, x in zip(layout.leaf_kinds, layout.leaves)]
    leaf_links = tuple(map(_links, layout.leaves))
    leaves, leaf_steps, singular = _up(
        layout.leaf_kinds, (), None, tuple(up for up, _ in leaf_own), leaf_links
    )
    owns = [[_own(kind, terms, x) for kind, x in zip(seg.kinds, seg.data)] for seg in segments]
    below, saved = None, [None] * len(segments)
    for i in reversed(range(len(segments))):  # tips -> roots
        seg, inputs = segments[i], tuple(up for up, _ in owns[i])
        links = tuple(map(_links, seg.data))
        if seg.scanned:

            def level(carry, x, kinds=seg.kinds):
                summaries, steps, small = _up(kinds, leaves, carry[0], *x)
                return (summaries, carry[1] | small), steps

            xs = (inputs, jax.tree.map(jnp.asarray, links))
            (below, singular), saved[i] = jax.lax.scan(level, (below, singular), xs, reverse=True)
        else:
            below, saved[i], small = _up(seg.kinds, leaves, below, inputs, links)
            singular = singular | small

    above, placed, rates, handed = None, [], [], {}
    for seg, own, steps in zip(segments, owns, saved):  # roots -> tips
        inputs, links = tuple(down for _, down in own), tuple(map(_links, seg.data))
        if seg.scanned:

            def level(carry, x, kinds=seg.kinds):
                return _down(kinds, gamma, _from_above(kinds, carry), *x)

            xs = (inputs, jax.tree.map(jnp.asarray, links), steps)
            above, outputs = jax.lax.scan(level, above, xs)
        else:
            sources = _from_above(seg.above, above)
            above, outputs = _down(seg.kinds, gamma, sources, inputs, links, steps)
        for kind, x, out in zip(seg.kinds, seg.data, outputs):
            placed += [
                (name, out[name], x[place]) for name, place in _PLACES.items() if name in out
            ]
            rates.append(out["accel"].reshape(-1, d))
            to_leaves = [h for leaf, h, count in kind.children if leaf and count]
            for h, m in zip(to_leaves, out["leaves"]):
                handed.setdefault(h, []).append(m.reshape(-1, m.shape[-1]))
    sources = (
        jnp.concatenate(rates + [gamma[None]]),  # a root's parent: the ground
        {h: jnp.concatenate(m) for h, m in handed.items()},
    )
    leaf_inputs = tuple(down for _, down in leaf_own)
    _, outputs = _down(layout.leaf_kinds, gamma, sources, leaf_inputs, leaf_links, leaf_steps)
    for x, out in zip(layout.leaves, outputs):
        placed += [(name, out[name], x[place]) for name, place in _PLACES.items() if name in out]
    # qdd and lam placed once, by one static permutation each.
    results = []
    for prefix in ("qdd", "lam"):
        pieces = [(v.reshape(-1), i.reshape(-1)) for n, v, i in placed if n.startswith(prefix)]
        if not pieces:
            results.append(jnp.zeros(0, dtype))
            continue
        values = jnp.concatenate([v for v, _ in pieces])
        results.append(values[np.argsort(np.concatenate([i for _, i in pieces]))])
    return results[0], results[1], singular
