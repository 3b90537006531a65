"""Loop topology of a mechanism, fixed at build time (pure Python, no JAX).

From the spanning tree (``parent``) and the cut joints this module derives everything the
closed-loop algorithms need to know structurally (seed 000 §2-§3, seed 002 §2):

- **subsystems**: the branches of the spanning tree that start at the ground. Bodies are numbered
  depth-first, so each subsystem is a contiguous range of bodies, hence of coordinates.
- **loops**: one per cut joint, the path from each side of the cut joint up the tree to the two
  sides' common ancestor (or the ground). The loop's *coordinates* are those of the joints on that
  path: the only ones that move one cut-joint frame relative to the other.
- **block pattern** of J (seed 000 eqs. 13-16, 26, 37): the block J_{i,j} of loop i and subsystem j
  is non-zero iff one of the loop's coordinates belongs to subsystem j. Paths to the ground never
  leave a subsystem, so coordinates above a common ancestor belong to the same subsystem too.
- **SSLM elimination order** of the loops for the block Gaussian elimination of the GICM
  (seed 000 eqs. 23-25, 34-36), and **determinate order** of the subsystems for inverse dynamics
  (seed 002 §2 and §5). Both rules are documented on the functions below.

Constraint rows per cut joint (``m_i``): spatial revolute 5, prismatic 5, universal 4, spherical 3,
weld 6; planar revolute 2, prismatic 2, weld 3. A spherical cut joint in a planar mechanism is
treated as a planar revolute (2 rows): in the plane a ball joint imposes exactly the coincidence of
its two centres, which is what a planar revolute imposes, so refusing it would only reject models
(e.g. MJCF ``connect`` equalities) that are correct. A universal cut joint has no planar meaning
and is refused.
"""

from __future__ import annotations

import dataclasses
import itertools

SPATIAL_ROW_COUNT = {"revolute": 5, "prismatic": 5, "universal": 4, "spherical": 3, "weld": 6}
PLANAR_ROW_COUNT = {"revolute": 2, "prismatic": 2, "spherical": 2, "weld": 3}


@dataclasses.dataclass(frozen=True)
class Loop:
    """The independent loop closed by cut joint ``cut`` (index into ``Mechanism.cut_joints``),
    or a coupling of coordinates (kind ``"coupling"``, ``cut`` counting on after the cut joints:
    coupling ``cut - len(cut_joints)``, no bodies).

    ``bodies`` run around the loop from the cut joint's body a up to ``ancestor`` and down to its
    body b (``ancestor`` is -1 for the ground, which is not listed); ``coordinates`` are the
    joints on the loop (sorted); ``rows`` is the constraint row count ``m_i``; ``subsystems`` are
    the subsystems j with a non-zero block J_{i,j}. Away from closure the translation rows (world
    axes, `kinematics`) also turn with the coordinates above an ancestor body, which lie in the
    same subsystem; those columns of J vanish at closure.
    """

    cut: int
    name: str
    kind: str
    bodies: tuple[int, ...]
    ancestor: int
    coordinates: tuple[int, ...]
    rows: int
    subsystems: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class Topology:
    """Static loop structure of a mechanism (hashable; see the module docstring).

    ``row_slices[i]`` and ``coordinate_slices[j]`` are ``(start, stop)`` ranges of loop i in the
    stacked constraint vector and of subsystem j in ``q`` (`rows` and `coordinates` give them as
    slices). ``elimination_order`` and ``fill_in`` come from `elimination_order`;
    ``determinate_order`` and ``determinate_loops`` from `determinate_order` by seed 002's count
    (``None`` when it gets stuck); `loopdyn.inverse` plans by rank, which this count cannot see.
    """

    subsystems: tuple[tuple[int, ...], ...]
    loops: tuple[Loop, ...]
    row_slices: tuple[tuple[int, int], ...]
    coordinate_slices: tuple[tuple[int, int], ...]
    elimination_order: tuple[int, ...]
    fill_in: tuple[tuple[int, int], ...]
    determinate_order: tuple[int, ...] | None
    determinate_loops: tuple[tuple[int, ...], ...] | None
    num_coordinates: int

    @property
    def num_rows(self) -> int:
        """Total number of constraint rows ``m``."""
        return sum(loop.rows for loop in self.loops)

    @property
    def dof(self) -> int:
        """Coordinates minus constraint rows (Grubler count). The true mobility is larger where rows
        are dependent at a configuration; `kinematics.constraint_rank` tells."""
        return self.num_coordinates - self.num_rows

    @property
    def subsystem_of(self) -> tuple[int, ...]:
        """Subsystem of each body (= coordinate)."""
        return tuple(j for j, members in enumerate(self.subsystems) for _ in members)

    @property
    def incidence(self) -> tuple[tuple[int, ...], ...]:
        """For each loop i, the subsystems j with a non-zero block J_{i,j}."""
        return tuple(loop.subsystems for loop in self.loops)

    @property
    def blocks(self) -> tuple[tuple[int, int], ...]:
        """The non-zero blocks ``(i, j)`` of J, loop by loop."""
        return tuple((i, j) for i, loop in enumerate(self.loops) for j in loop.subsystems)

    def block_shape(self, i: int, j: int) -> tuple[int, int]:
        """Shape ``(m_i, n_j)`` of block J_{i,j}."""
        start, stop = self.coordinate_slices[j]
        return self.loops[i].rows, stop - start

    def rows(self, i: int) -> slice:
        """Rows of loop i in the stacked constraint vector."""
        return slice(*self.row_slices[i])

    def coordinates(self, j: int) -> slice:
        """Coordinates of subsystem j in ``q``."""
        return slice(*self.coordinate_slices[j])

    @property
    def loop_graph(self) -> tuple[tuple[int, ...], ...]:
        """Neighbours of each loop: the loops sharing a subsystem with it (non-zero GICM blocks)."""
        return _loop_graph(self.loops)


def _path_to_ground(parent, body):
    path = []
    while body >= 0:
        path.append(body)
        body = parent[body]
    return path


def loop_sides(parent, a, b) -> tuple[list[int], int, list[int]]:
    """The loop through bodies ``a`` and ``b`` (-1: the ground): the bodies from ``a`` up to
    their common ancestor (excluded), the ancestor (-1 for the ground), and those from ``b`` up
    to it; the joints of the two sides are the loop's coordinates."""
    up_a, up_b = _path_to_ground(parent, a) + [-1], _path_to_ground(parent, b) + [-1]
    ancestor = next(k for k in up_a if k in up_b)
    return up_a[: up_a.index(ancestor)], ancestor, up_b[: up_b.index(ancestor)]


def _loop(parent, cut_index, cut, rows, subsystem_of, body_names, internal):
    """Trace the loop of one cut joint and check that it closes through two rigid bodies."""
    a, b = cut.body_a, cut.body_b

    def name(k):
        return body_names[k] if k >= 0 else "ground"

    if a == b:
        raise ValueError(f"cut joint {cut.name!r} connects body {name(a)!r} to itself")
    side_a, ancestor, side_b = loop_sides(parent, a, b)
    around = side_a + [ancestor] + side_b[::-1]
    if sum(k < 0 or not internal[k] for k in around) < 2:
        raise ValueError(
            f"cut joint {cut.name!r} closes a loop through a single rigid body "
            f"({' - '.join(map(name, around))}; the others are massless bodies of a multi-DOF "
            "joint): a loop must pass through at least two rigid bodies"
        )
    bodies = tuple(k for k in around if k >= 0)
    coordinates = tuple(sorted(side_a + side_b))
    subsystems = tuple(sorted({subsystem_of[k] for k in coordinates}))
    return Loop(cut_index, cut.name, cut.kind, bodies, ancestor, coordinates, rows, subsystems)


def _loop_graph(loops):
    return tuple(
        tuple(
            s
            for s, other in enumerate(loops)
            if s != r and set(other.subsystems) & set(loop.subsystems)
        )
        for r, loop in enumerate(loops)
    )


def elimination_order(loops) -> tuple[tuple[int, ...], tuple[tuple[int, int], ...]]:
    """Order in which SSLM eliminates the loops' multipliers from the GICM, and the fill-in.

    Rule (minimum degree): in the loop graph (loops adjacent when they share a subsystem, i.e. when
    their GICM block is non-zero, seed 000 eq. 25), repeatedly eliminate the remaining loop with
    the fewest remaining neighbours, ties to the lowest index. Eliminating a loop couples all its
    remaining neighbours; couplings that were not there before are the fill-in ``(r, s)``, r < s.
    On chain- and tree-like loop graphs this eliminates leaves first: no fill-in, and the cost grows
    linearly with the number of loops. For the carpet scraper (loops 0-1-2 in a chain) it gives
    0, 1, 2: the elimination of seed 000 eqs. 34-36.
    """
    adjacent = [set(n) for n in _loop_graph(loops)]
    remaining, order, fill = set(range(len(loops))), [], []
    while remaining:
        k = min(remaining, key=lambda r: (len(adjacent[r] & remaining), r))
        neighbours = sorted(adjacent[k] & remaining)
        for r, s in itertools.combinations(neighbours, 2):
            if s not in adjacent[r]:
                adjacent[r].add(s)
                adjacent[s].add(r)
                fill.append((r, s))
        order.append(k)
        remaining.remove(k)
    return tuple(order), tuple(fill)


def determinate_order(loops, subsystems, actuated, determinate=None):
    """Order in which the subsystems become determinate in the subsystem recursion of seed 002.

    The unknowns of subsystem j are its actuator forces plus the multipliers (``m_i`` each) of the
    loops acting on it (J_{i,j} non-zero) whose multipliers are not known yet. Rule: repeatedly
    take the lowest-index remaining subsystem that is determinate; solving it determines those
    unknowns, so its loops become known for every other subsystem. ``determinate(j, acting)``
    decides; by default the count of seed 002 (unknowns at most its coordinates, its DOF in the
    spanning tree). Counting is structural only: a step whose matrix is rank deficient at every
    configuration (an idle freedom with a zero column of J) passes it, so `loopdyn.inverse`
    decides by rank instead. With fewer unknowns than rows the extra equations are consistency
    conditions that a consistent ``(q, qd, qdd)`` satisfies, and the step is a least-squares
    solve. Returns the order, per step the loops whose multipliers that step solves, and the
    subsystems that never become determinate (then solved as one system, seed 002 §5).
    """

    def counted(j, acting):
        unknowns = sum(k in actuated for k in subsystems[j]) + sum(loops[i].rows for i in acting)
        return unknowns <= len(subsystems[j])

    determinate = determinate or counted
    known, remaining, order, solved = set(), list(range(len(subsystems))), [], []
    while remaining:
        for j in remaining:
            acting = tuple(
                i for i, loop in enumerate(loops) if j in loop.subsystems and i not in known
            )
            if determinate(j, acting):
                break
        else:
            break
        order.append(j)
        solved.append(acting)
        known.update(acting)
        remaining.remove(j)
    return tuple(order), tuple(solved), tuple(remaining)


def analyse(
    parent,
    cut_joints,
    planar,
    actuated=(),
    body_names=None,
    internal=None,
    row_counts=None,
    couplings=(),
) -> Topology:
    """The `Topology` of a spanning tree ``parent`` (depth-first body order, -1 the ground) closed
    by ``cut_joints`` (`mechanism.CutJoint`); ``actuated`` are the actuated coordinates and
    ``internal`` flags the massless bodies inside multi-DOF joints (they do not count as rigid
    bodies of a loop); ``row_counts`` ``{cut index: rows}`` overrides the row count of cut joints
    whose redundant rows were dropped (`loopdyn.redundancy`). ``couplings`` ``(name,
    coordinates)`` are one-row constraints among coordinates (joint and tendon equalities): each
    is a loop of kind ``"coupling"`` after those of the cut joints, with no bodies. Raises ``ValueError`` naming the cut joint for a loop through a single
    rigid body, a cut joint kind that does not fit a planar mechanism, and a loop whose rows
    outnumber its coordinates (its rows are then dependent at every closed configuration)."""
    n = len(parent)
    body_names = (
        tuple(body_names) if body_names is not None else tuple(f"body {k}" for k in range(n))
    )
    internal = tuple(internal) if internal is not None else (False,) * n
    for k, p in enumerate(parent):
        if not -1 <= p < k:
            raise ValueError(f"body {body_names[k]!r}: parent {p} is not an earlier body or -1")
    roots = [k for k in range(n) if parent[k] < 0] + [n]
    subsystems = tuple(tuple(range(s, e)) for s, e in itertools.pairwise(roots))
    subsystem_of = {k: j for j, members in enumerate(subsystems) for k in members}
    table = PLANAR_ROW_COUNT if planar else SPATIAL_ROW_COUNT
    loops, row_slices, start = [], [], 0
    for c, cut in enumerate(cut_joints):
        if cut.kind not in table:
            raise ValueError(
                f"cut joint {cut.name!r}: a {cut.kind} joint does not fit a "
                f"{'planar' if planar else 'spatial'} mechanism; expected one of {sorted(table)}"
            )
        rows = (row_counts or {}).get(c, table[cut.kind])
        loop = _loop(parent, c, cut, rows, subsystem_of, body_names, internal)
        if len(loop.coordinates) < loop.rows:
            raise ValueError(
                f"cut joint {cut.name!r}: its loop has {len(loop.coordinates)} joint coordinates "
                f"but a {cut.kind} cut joint imposes {loop.rows} constraint rows, so at most "
                f"{len(loop.coordinates)} of them are independent: the constraints are redundant"
                + (
                    ""
                    if planar
                    else " (a planar loop modelled spatially? use a spherical or "
                    "universal cut joint, or build it with planar=True)"
                )
            )
        loops.append(loop)
    for k, (name, coordinates) in enumerate(couplings):
        coordinates = tuple(sorted(coordinates))
        acting = tuple(sorted({subsystem_of[c] for c in coordinates}))
        loops.append(Loop(len(cut_joints) + k, name, "coupling", (), -1, coordinates, 1, acting))
    for loop in loops:
        row_slices.append((start, start + loop.rows))
        start += loop.rows
    order, fill = elimination_order(loops)
    det_order, det_loops, stuck = determinate_order(loops, subsystems, set(actuated))
    return Topology(
        subsystems=subsystems,
        loops=tuple(loops),
        row_slices=tuple(row_slices),
        coordinate_slices=tuple((s[0], s[-1] + 1) for s in subsystems),
        elimination_order=order,
        fill_in=fill,
        determinate_order=None if stuck else det_order,
        determinate_loops=None if stuck else det_loops,
        num_coordinates=n,
    )
