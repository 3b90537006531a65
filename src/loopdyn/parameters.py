"""Physically consistent parameterisations of a `Mechanism` for optimisation, and the choice of
which parameters are free.

`free` names the free parameters body by body and joint by joint and returns a `Free`: a static
(hashable) description that maps the mechanism to an unconstrained vector and back
(`to_vector`, `from_vector`, differentiable), and gives the equinox filter spec of the leaves it
touches (`Free.spec`, for ``eqx.partition``/``eqx.combine``). Every vector maps to a physical
mechanism:

- mass ``m = exp(theta)`` (positive);
- planar rotational inertia about the centre of mass ``Izz = exp(theta)`` (positive; with
  ``m > 0`` every such planar body exists, e.g. as a lamina);
- spatial inertia: the 4x4 pseudo-inertia ``P = [[S, h], [h^T, m]]`` with ``h = m c`` and
  ``S = tr(I_O)/2 1 - I_O`` (``I_O`` the rotational inertia about the body frame origin) is
  positive definite exactly when a positive mass density realises the body (Wensing, Kim and
  Slotine, IEEE RA-L 3 (2018) 60-67). ``P = L L^T`` with ``L`` lower triangular, its diagonal
  ``exp(theta)`` and its 6 entries below it ``theta`` (log-Cholesky, Rucker and Wensing, IEEE
  RA-L 7 (2022) 4860-4867): 10 numbers per body for mass, centre of mass and inertia together;
- centre-of-mass offsets and joint placements: the coordinates themselves (planar: x and y).

Names of the vector's entries: `Free.labels`. The inertial conventions of `loopdyn.mechanism`
(inertia about the centre of mass, in body coordinates) are those of the module docstring there.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from . import dense
from .mechanism import Mechanism

_TRIL = np.tril_indices(4, -1)


@dataclasses.dataclass(frozen=True)
class Block:
    """One group of entries of the unconstrained vector (static).

    ``kind``: ``"log"`` (one positive scalar ``field[index]``), ``"value"`` (the entries
    ``field[index + (k,)]`` for ``k`` in ``components``) or ``"pseudo"`` (mass, centre of mass
    and inertia of body ``index[0]`` by the log-Cholesky factor of its pseudo-inertia)."""

    kind: str
    field: str
    index: tuple[int, ...]
    components: tuple[int, ...] = ()
    labels: tuple[str, ...] = ()

    @property
    def size(self) -> int:
        return len(self.labels)


@dataclasses.dataclass(frozen=True)
class Free:
    """The free parameters of a mechanism (from `free`): hashable, so it can be a static
    argument of ``jit``. ``labels``: the name of every entry of the unconstrained vector."""

    blocks: tuple[Block, ...]

    @property
    def size(self) -> int:
        return sum(b.size for b in self.blocks)

    @property
    def labels(self) -> tuple[str, ...]:
        return tuple(label for b in self.blocks for label in b.labels)

    @property
    def fields(self) -> tuple[str, ...]:
        """The `Mechanism` leaves touched (``pseudo`` blocks touch mass, com and inertia)."""
        out = []
        for b in self.blocks:
            for f in ("mass", "com", "inertia") if b.kind == "pseudo" else (b.field,):
                if f not in out:
                    out.append(f)
        return tuple(out)

    def spec(self, mech: Mechanism):
        """Filter spec for ``eqx.partition(mech, spec)``: ``True`` on the leaves this selection
        touches (the whole array: every body's masses when one body's mass is free)."""
        spec = jax.tree_util.tree_map(lambda _: False, mech)
        fields = self.fields
        return eqx.tree_at(lambda m: [getattr(m, f) for f in fields], spec, [True] * len(fields))


def _names(value, what) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, Sequence):
        raise TypeError(f"free: {what} must be a list of names, got {value!r}")
    return tuple(value)


def _body(mech, name, what):
    if name not in mech.body_names:
        raise ValueError(f"free: {what}: unknown body {name!r}; bodies are {list(mech.body_names)}")
    i = mech.body_names.index(name)
    if float(mech.mass[i]) <= 0.0:
        raise ValueError(f"free: {what}: body {name!r} is massless (a joint frame); it has no mass")
    return i


def _joint(mech, name, side, what):
    """``(field, index)`` of the frame position of joint ``name`` on its parent (side ``"a"``) or
    child (``"b"``) body."""
    if name in mech.coordinate_names:
        i = mech.coordinate_names.index(name)
        return ("parent_position" if side == "a" else "child_position"), i
    cuts = [c.name for c in mech.cut_joints]
    if name in cuts:
        return ("cut_position_a" if side == "a" else "cut_position_b"), cuts.index(name)
    known = list(mech.coordinate_names) + cuts
    raise ValueError(f"free: {what}: unknown joint {name!r}; joints are {known}")


def free(
    mech: Mechanism,
    masses: Sequence[str] = (),
    inertias: Sequence[str] = (),
    com: Sequence[str] = (),
    placements: Sequence[str] = (),
    child_placements: Sequence[str] = (),
) -> Free:
    """Choose the free parameters by name.

    ``masses``, ``inertias``, ``com``: body names (``mech.body_names``). ``placements``: joints
    (tree coordinates or cut joints) whose frame position on the parent body (body ``a`` of a cut
    joint) is free, e.g. the far end of a link, i.e. its length; ``child_placements``: the same on
    the child body (body ``b``). Planar mechanisms free x and y only. For a spatial body named in
    ``inertias``, mass, centre of mass and inertia are one 10-entry pseudo-inertia block (module
    docstring), so it must not also be in ``masses`` or ``com``.

    >>> sel = free(four_bar(), masses=["crank", "coupler"], placements=["C"])
    >>> theta = to_vector(mech, sel); mech2 = from_vector(theta, mech, sel)
    """
    masses, inertias = _names(masses, "masses"), _names(inertias, "inertias")
    com = _names(com, "com")
    placements = _names(placements, "placements")
    child_placements = _names(child_placements, "child_placements")
    axes = (0, 1) if mech.planar else (0, 1, 2)
    blocks = []
    if not mech.planar:
        for what, names in (("masses", masses), ("com", com)):
            both = [name for name in names if name in inertias]
            if both:
                raise ValueError(
                    f"free: body {both[0]!r} is in both {what} and inertias: a spatial body's "
                    "inertia block (pseudo-inertia) already holds its mass and centre of mass; "
                    "name it in inertias only"
                )
    for name in masses:
        i = _body(mech, name, "masses")
        blocks.append(Block("log", "mass", (i,), labels=(f"{name}.log_mass",)))
    for name in com:
        i = _body(mech, name, "com")
        labels = tuple(f"{name}.com_{mech.axis_names[k]}" for k in axes)
        blocks.append(Block("value", "com", (i,), axes, labels))
    for name in inertias:
        i = _body(mech, name, "inertias")
        if mech.planar:
            blocks.append(Block("log", "inertia", (i, 2, 2), labels=(f"{name}.log_izz",)))
        else:
            labels = tuple(f"{name}.log_chol_{k}{k}" for k in range(4)) + tuple(
                f"{name}.chol_{r}{c}" for r, c in zip(*_TRIL)
            )
            blocks.append(Block("pseudo", "inertia", (i,), labels=labels))
    for names, side in ((placements, "a"), (child_placements, "b")):
        for name in names:
            field, i = _joint(mech, name, side, "placements" if side == "a" else "child_placements")
            labels = tuple(f"{name}.{field}_{mech.axis_names[k]}" for k in axes)
            blocks.append(Block("value", field, (i,), axes, labels))
    seen = set()
    for b in blocks:
        key = (b.kind, b.field, b.index)
        if key in seen:
            raise ValueError(f"free: {b.labels[0].split('.')[0]!r} is named twice for {b.field}")
        seen.add(key)
    return Free(tuple(blocks))


def pseudo_inertia(mass, com, inertia_com) -> Float[Array, "4 4"]:
    """The 4x4 pseudo-inertia ``[[S, m c], [m c^T, m]]`` of a body (module docstring) from its
    mass, centre of mass and 3x3 inertia about the centre of mass (body coordinates)."""
    about_origin = inertia_com + mass * (jnp.dot(com, com) * jnp.eye(3) - jnp.outer(com, com))
    s = 0.5 * jnp.trace(about_origin) * jnp.eye(3) - about_origin
    h = mass * com
    return jnp.block([[s, h[:, None]], [h[None, :], jnp.reshape(mass, (1, 1))]])


def from_pseudo_inertia(p: Float[Array, "4 4"]):
    """Mass, centre of mass and inertia about the centre of mass from a pseudo-inertia."""
    mass, h, s = p[3, 3], p[:3, 3], p[:3, :3]
    com = h / mass
    about_origin = jnp.trace(s) * jnp.eye(3) - s
    inertia_com = about_origin - mass * (jnp.dot(com, com) * jnp.eye(3) - jnp.outer(com, com))
    return mass, com, 0.5 * (inertia_com + inertia_com.T)


def _check(mech, sel, function):
    if not isinstance(mech, Mechanism):
        raise TypeError(f"{function}: mech must be a Mechanism, got {type(mech).__name__}")
    if not isinstance(sel, Free):
        raise TypeError(f"{function}: sel must be a Free (from parameters.free), got {sel!r}")
    for b in sel.blocks:
        if b.index[0] >= getattr(mech, b.field).shape[0]:
            raise ValueError(f"{function}: sel was built for another mechanism ({b.labels[0]})")


def to_vector(mech: Mechanism, sel: Free) -> Float[Array, " k"]:
    """The unconstrained vector of the free parameters of ``mech`` (entries `Free.labels`)."""
    _check(mech, sel, "to_vector")
    parts = []
    for b in sel.blocks:
        if b.kind == "log":
            parts.append(jnp.log(getattr(mech, b.field)[b.index])[None])
        elif b.kind == "value":
            parts.append(getattr(mech, b.field)[b.index][np.array(b.components)])
        else:
            i = b.index[0]
            chol = dense.cholesky(pseudo_inertia(mech.mass[i], mech.com[i], mech.inertia[i]))
            parts.append(jnp.concatenate([jnp.log(jnp.diagonal(chol)), chol[_TRIL]]))
    return jnp.concatenate(parts) if parts else jnp.zeros(0, mech.mass.dtype)


def from_vector(theta: Float[Array, " k"], mech: Mechanism, sel: Free) -> Mechanism:
    """``mech`` with the free parameters set from the unconstrained vector ``theta`` (any real
    values give a physical mechanism); differentiable in ``theta``. ``mech`` supplies every
    other parameter."""
    _check(mech, sel, "from_vector")
    theta = jnp.asarray(theta)
    if theta.shape != (sel.size,):
        raise ValueError(
            f"from_vector: theta must have shape ({sel.size},) (entries {list(sel.labels)}), "
            f"got {theta.shape}"
        )
    leaves = {f: getattr(mech, f) for f in sel.fields}
    start = 0
    for b in sel.blocks:
        x = theta[start : start + b.size]
        start += b.size
        if b.kind == "log":
            leaves[b.field] = leaves[b.field].at[b.index].set(jnp.exp(x[0]))
        elif b.kind == "value":
            row = leaves[b.field][b.index].at[np.array(b.components)].set(x)
            leaves[b.field] = leaves[b.field].at[b.index].set(row)
        else:
            chol = jnp.diag(jnp.exp(x[:4])).at[_TRIL].set(x[4:])
            mass, com, inertia = from_pseudo_inertia(chol @ chol.T)
            i = b.index[0]
            leaves["mass"] = leaves["mass"].at[i].set(mass)
            leaves["com"] = leaves["com"].at[i].set(com)
            leaves["inertia"] = leaves["inertia"].at[i].set(inertia)
    fields = sel.fields
    return eqx.tree_at(lambda m: [getattr(m, f) for f in fields], mech, [leaves[f] for f in fields])
