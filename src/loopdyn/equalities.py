"""Equalities switched on and off: cut joints and couplings kept in a mechanism without rows.

A mechanism's equalities are its cut joints (MJCF ``connect`` and ``weld``) and its couplings
(joint and fixed-tendon equalities), in `Mechanism.equality_order`. MuJoCo lets a model carry
equalities that are off (``active="false"``) and switches them at run time (``eq_active``).
loopdyn's loop structure is static: the rows, the subsystems' blocks of J, the elimination order
and the rows dropped as redundant (`loopdyn.redundancy`) are fixed when a mechanism is built, and
programs compile for them. So an equality that is off is kept aside (`Mechanism.dormant`,
`Dormant`) and imposes no row, and `switch_equalities` returns a new mechanism whose structure is
derived again, exactly as building it with that set on would: the same topology, the same
redundancy analysis (rows dropped as dependent on a loop that is now off become needed again),
the multipliers of the equalities that are on. The array parameters carry over. Each set of
equalities compiles its own programs, once per process: switching back reuses them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from . import redundancy
from .topology import analyse

if TYPE_CHECKING:
    from .mechanism import Mechanism


@dataclasses.dataclass(frozen=True)
class Dormant:
    """An equality that is off: a cut joint (``kind`` its joint kind, between bodies ``body_a``
    and ``body_b``; ``data`` its axis, rotation and position on body a, rotation and position on
    body b, as in `Mechanism`'s ``cut_*`` arrays) or a coupling (``kind`` ``"coupling"``;
    ``data`` its ``first`` and ``second`` rows, ``poly`` and ``reference``). Static and hashable:
    no gradient reaches it until it is switched on."""

    name: str
    kind: str
    body_a: int
    body_b: int
    data: tuple[tuple[float, ...], ...]


class _Cut(NamedTuple):
    """A cut joint as the builder and `loopdyn.redundancy` read it."""

    name: str
    kind: str
    body_a: int
    body_b: int
    axis: np.ndarray
    rotation: np.ndarray
    position: np.ndarray
    child_rotation: np.ndarray
    child_position: np.ndarray


class _Coupling(NamedTuple):
    name: str
    first: np.ndarray
    second: np.ndarray
    poly: np.ndarray
    reference: np.ndarray


class _TreeJoint(NamedTuple):
    kind: str
    axis: np.ndarray
    rotation: np.ndarray
    position: np.ndarray
    child_rotation: np.ndarray
    child_position: np.ndarray


_CUT_FIELDS = ("axis", "rotation_a", "position_a", "rotation_b", "position_b")
_CUT_SHAPES = ((3,), (3, 3), (3,), (3, 3), (3,))
_COUPLING_FIELDS = ("first", "second", "poly", "reference")


def states(mech: Mechanism) -> dict[str, bool]:
    """Every equality of ``mech`` (`Mechanism.equality_order`) and whether it is on."""
    off = {d.name for d in mech.dormant}
    return {name: name not in off for name in mech.equality_order}


def switch_equalities(mech: Mechanism, active: Mapping[str, bool]) -> Mechanism:
    """``mech`` with the equalities named in ``active`` switched on (True) or off (False); the
    others stay as they are (`states`). Returns ``mech`` itself when nothing changes.

    Raises ``ValueError`` for an unknown name, inside a trace (``jit``, ``vmap``, ``grad``: the
    switch changes the mechanism's structure, so call it outside them) and where the equalities
    then on do not make a valid mechanism (as building it would, naming the cut joint)."""
    unknown = sorted(set(active) - set(mech.equality_order))
    if unknown:
        raise ValueError(
            f"switch_equalities: unknown equalities {unknown}; the mechanism has "
            f"{list(mech.equality_order)}"
        )
    now = states(mech)
    wanted = {**now, **{name: bool(on) for name, on in active.items()}}
    if wanted == now:
        return mech
    if any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(mech)):
        raise ValueError(
            "switch_equalities changes the mechanism's loop structure: call it outside jit, "
            "vmap and grad"
        )
    if mech.cut_axis.ndim != 2:
        raise ValueError("switch_equalities: the mechanism's arrays are batched; switch one")
    return structured(mech, {name for name, on in wanted.items() if on})


def structured(mech: Mechanism, on: set[str]) -> Mechanism:
    """``mech`` with exactly the equalities ``on`` switched on, its loop structure derived as
    `MechanismBuilder.build` derives it (module docstring)."""
    from .mechanism import CutJoint, check_planar  # mechanism imports this module

    cuts, couplings = _equalities(mech)
    live = [c for c in cuts if c.name in on]
    kept = [c for c in couplings if c.name in on]
    if mech.planar:
        check_planar(live)
    joints = (mech.axis, mech.parent_rotation, mech.parent_position)
    joints += (mech.child_rotation, mech.child_position)
    tree = [_TreeJoint(*row) for row in zip(mech.joint_kinds, *map(np.asarray, joints))]
    reduced = (
        {}
        if mech.planar
        else redundancy.reduced_rows(
            tree,
            mech.parent,
            mech.quaternion_slots,
            [(c, c.body_a, c.body_b) for c in live],
            [(c.first, c.second, c.poly) for c in kept],
        )
    )
    cut_joints = tuple(CutJoint(c.name, c.kind, c.body_a, c.body_b) for c in live)
    structure = analyse(  # loops, subsystems, block pattern; refuses bad loops
        mech.parent,
        cut_joints,
        mech.planar,
        actuated=mech.actuated,
        body_names=mech.body_names,
        internal=[k in mech.internal_bodies for k in range(mech.num_bodies)],
        row_counts={c: len(rows) for c, (rows, _, _) in reduced.items()},
        couplings=[(c.name, _used(c)) for c in kept],
    )
    n = mech.num_bodies

    def stack(values, shape):
        return jnp.asarray(np.array(values, dtype=np.float64).reshape((-1, *shape)))

    arrays = {
        f"cut_{field}": stack([getattr(c, attribute) for c in live], shape)
        for field, attribute, shape in zip(_CUT_FIELDS, _Cut._fields[4:], _CUT_SHAPES)
    }
    shapes = ((n,), (n,), (5,), (2,))
    arrays |= {
        f"coupling_{field}": stack([getattr(c, field) for c in kept], shape)
        for field, shape in zip(_COUPLING_FIELDS, shapes)
    }
    dormant = [Dormant(*c[:4], cut_data(c)) for c in cuts if c.name not in on]
    dormant += [
        Dormant(c.name, "coupling", -1, -1, coupling_data(*c[1:]))
        for c in couplings
        if c.name not in on
    ]
    return dataclasses.replace(
        mech,
        **arrays,
        cut_joints=cut_joints,
        coupling_names=tuple(c.name for c in kept),
        topology=structure,
        reduced_points=tuple((c, rows) for c, (rows, _, _) in sorted(reduced.items())),
        reduced_on_b=tuple(c for c, (_, side, _) in sorted(reduced.items()) if side),
        reduced_across=tuple(c for c, (_, _, across) in sorted(reduced.items()) if across),
        dormant=tuple(dormant),
    )


def _equalities(mech):
    """All cut joints and all couplings of ``mech``, on and off, each in `equality_order`."""
    dormant = {d.name: d for d in mech.dormant}
    cut_arrays = [np.asarray(getattr(mech, f"cut_{f}")) for f in _CUT_FIELDS]
    coupling_arrays = [np.asarray(getattr(mech, f"coupling_{f}")) for f in _COUPLING_FIELDS]
    on_cuts = {
        cut.name: _Cut(cut.name, cut.kind, cut.body_a, cut.body_b, *(x[c] for x in cut_arrays))
        for c, cut in enumerate(mech.cut_joints)
    }
    on_couplings = {
        name: _Coupling(name, *(x[k] for x in coupling_arrays))
        for k, name in enumerate(mech.coupling_names)
    }
    cuts, couplings = [], []
    for name in mech.equality_order:
        if name in on_cuts:
            cuts.append(on_cuts[name])
        elif name in on_couplings:
            couplings.append(on_couplings[name])
        elif dormant[name].kind == "coupling":
            couplings.append(_Coupling(name, *map(np.array, dormant[name].data)))
        else:
            d = dormant[name]
            data = [np.reshape(v, s) for v, s in zip(d.data, _CUT_SHAPES)]
            cuts.append(_Cut(name, d.kind, d.body_a, d.body_b, *data))
    return cuts, couplings


def _data(*arrays) -> tuple[tuple[float, ...], ...]:
    return tuple(tuple(float(v) for v in np.ravel(a)) for a in arrays)


def cut_data(joint) -> tuple[tuple[float, ...], ...]:
    """`Dormant.data` of a cut joint (``axis``, ``rotation``, ``position``, ``child_rotation``,
    ``child_position`` as the builder's joints and `_Cut` hold them)."""
    return _data(*(getattr(joint, f) for f in _Cut._fields[4:]))


def coupling_data(first, second, poly, reference) -> tuple[tuple[float, ...], ...]:
    """`Dormant.data` of a coupling."""
    return _data(first, second, poly, reference)


def _used(coupling: _Coupling) -> tuple[int, ...]:
    """The coordinates a coupling's rows touch."""
    return tuple(int(k) for k in np.flatnonzero((coupling.first != 0) | (coupling.second != 0)))
