"""The mechanism model: bodies, joints, the spanning tree and the cut joints.

A mechanism is built once with `MechanismBuilder` and becomes a `Mechanism`, an equinox Module
whose static fields are the topology (hashable, fixed at build time, so `jit` specialises on them)
and whose array fields are the physical parameters (pytree leaves, so `jax.grad` reaches them).

Frames. Every body has its own frame, in which its centre of mass and inertia are given. A joint
has one frame on each of the two bodies it connects: ``position``/``rotation`` on the parent body
and ``child_position``/``child_rotation`` on the child body. The two frames coincide at ``q = 0``;
a revolute joint then turns the child frame about ``axis`` (given in the joint frame), a prismatic
joint slides it along ``axis``.

Spanning tree (the documented rule). A body's tree joint is the first joint declared with that body
as child and not marked ``cut=True``; every other joint (a second joint into the same body, a joint
into the ground, or one marked ``cut=True``) is a cut joint that closes a loop (seed 000 §2).
Bodies are numbered in depth-first order from the ground, children in declaration order, so each
subsystem (a branch of the spanning tree starting at the ground) is a contiguous range.

Spherical and universal tree joints are chains of revolutes through massless bodies named
``joint[k]``, as in the seeds; their coordinates are ``joint[0]``, ``joint[1]``, ...

Ball and free tree joints carry a unit quaternion, so the configuration ``q`` (``nq`` entries)
is longer than the velocity ``v`` (``nv`` entries, one per body of the tree: `coordinate_names`),
laid out as MuJoCo's ``qpos`` and ``qvel``. A ball joint's three velocities are the child joint
frame's angular velocity in its own axes, its configuration the quaternion ``(w, x, y, z)`` of
the child joint frame in the parent joint frame; a free joint adds before them the position of the
child joint frame's origin in the parent joint frame and its rate (parent axes). Inside, each
velocity drives one body: the ball's three through massless bodies ``joint[1]``, ``joint[2]``
that share the child's frame (the first carries the quaternion's rotation), the free joint's
translation through ``joint[1..3]`` (`loopdyn.configuration` maps between ``q`` and ``v``).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from . import equalities
from .equalities import Dormant
from .topology import Topology, analyse

GROUND = "ground"
TREE_KINDS = ("revolute", "prismatic")
QUATERNION_KINDS = ("ball", "free")  # tree joints with a quaternion: nq != nv
CUT_KINDS = ("revolute", "prismatic", "spherical", "universal", "weld")
CHAIN_AXES = {"spherical": np.eye(3), "universal": np.eye(3)[:2]}
# The joints' passive elements, in `_Joint.passive`'s order (fields of `Mechanism`).
PASSIVE = ("armature", "damping", "stiffness", "springref", "frictionloss")
# Default velocity scale (rad/s or m/s) of the smooth dry friction `forces.joint_forces`.
FRICTION_VELOCITY = 0.01


@dataclasses.dataclass(frozen=True)
class CutJoint:
    """Static description of a loop-closing joint between bodies ``body_a`` and ``body_b``
    (indices into ``Mechanism.body_names``, -1 for the ground)."""

    name: str
    kind: str
    body_a: int
    body_b: int


@functools.cache
def configuration_layout(nv: int, quaternion_slots: tuple[int, ...]):
    """Where each velocity's configuration sits in ``q``: ``scalar[i]`` is the index in ``q`` of
    body ``i``'s coordinate, or ``nq`` for the three bodies a quaternion turns (their joint angle
    is 0, the rotation comes from the quaternion); ``start[k]`` is the index of quaternion ``k``'s
    ``w`` (it turns bodies ``quaternion_slots[k] .. + 2``)."""
    scalar, start, at, i = np.zeros(nv, dtype=np.int64), [], 0, 0
    while i < nv:
        if i in quaternion_slots:
            start.append(at)
            at, i = at + 4, i + 3
        else:
            scalar[i] = at
            at, i = at + 1, i + 1
    for s in quaternion_slots:
        scalar[s : s + 3] = at
    return scalar, np.array(start, dtype=np.int64)


def configuration_names(coordinate_names, quaternion_slots) -> tuple[str, ...]:
    """Names of the entries of ``q`` (see `Mechanism.configuration_names`)."""
    names, i = [], 0
    while i < len(coordinate_names):
        if i in quaternion_slots:
            joint = coordinate_names[i].rsplit("[", 1)[0]
            names += [f"{joint}[q{axis}]" for axis in "wxyz"]
            i += 3
        else:
            names.append(coordinate_names[i])
            i += 1
    return tuple(names)


class Mechanism(eqx.Module):
    """A multibody mechanism: static topology plus array parameters (see module docstring).

    Arrays are indexed by body ``i`` (tree order); body ``i`` is moved by velocity ``v[i]``
    through its tree joint from ``parent[i]`` (-1: ground), and by ``q[i]`` when the mechanism has
    no quaternions (``quaternion_slots``: the first body of each ball; `configuration_layout`).
    Cut-joint arrays are indexed like ``cut_joints``; ``reduced_points`` lists the spherical cut
    joints whose structurally redundant point rows were dropped, with the directions in cut frame
    a that remain, in frame b for the cut joints in ``reduced_on_b``; ``reduced_across`` names
    those whose rows were redundant across loops (`loopdyn.redundancy`). ``q0`` (``nq``) is the reference configuration the
    model was described in (like MuJoCo's ``qpos0``): a starting point for assembly and
    simulation. Springs are linear
    point-to-point spring-dampers between ``spring_point_a`` on body ``spring_bodies[k][0]`` and
    ``spring_point_b`` on body ``spring_bodies[k][1]`` (body coordinates, -1: ground).
    Each coordinate's passive joint elements, as MuJoCo's: ``armature`` (a rotor inertia added to
    the diagonal of the mass matrix), ``damping`` and ``stiffness`` about ``springref`` (the
    generalized force ``-damping qd - stiffness (q - springref)``, `forces.joint_forces`), and
    a smooth stand-in for MuJoCo's dry friction, ``-frictionloss tanh(qd / friction_velocity)``;
    ``limits``, each coordinate's ``(low, high)`` range (``-inf, inf``: none), are not enforced
    (`loopdyn.simulate` warns when a saved state passes one).
    ``gravcomp``: each body's gravity compensation, MuJoCo's ``gravcomp`` (an upward force
    ``-gravcomp mass gravity`` at its centre of mass, `forces.gravcomp_forces`); it acts only
    when some body had it at build time (``gravcomp_bodies``, static).
    Control actuators (``ctrl_*``, MuJoCo's ``<actuator>`` with a joint transmission): actuator
    ``k`` acts through the row ``ctrl_arm[k]`` of coefficients on the coordinates (a unit
    vector for a joint, a fixed tendon's coefficients) with gear ``ctrl_gear[k]``; its input is
    ``ctrl[k]``, its force ``gain . (1, l, v) ctrl + bias . (1, l, v)`` with length
    ``l = gear arm . q`` and velocity ``v = gear arm . qd``, ``ctrl`` clamped to ``ctrl_range`` where
    ``ctrl_limited`` and the force to ``ctrl_force_range`` where ``ctrl_force_limited``
    (`loopdyn.actuators`). They are apart from ``actuator_names``, the coordinates whose input
    is the generalized force ``tau`` itself.
    Couplings (MuJoCo's joint and fixed-tendon equalities, `MechanismBuilder.add_coupling`) are
    one-row constraints ``(u - u0) - sum_k poly_k (w - w0)^k = 0`` among coordinates, with
    ``u = coupling_first . q``, ``w = coupling_second . q`` and ``(u0, w0) =
    coupling_reference``; they are loops of kind ``"coupling"`` after the cut joints' (`topology`).
    Equalities (cut joints and couplings, in ``equality_order``) can be off: ``dormant`` keeps
    those (`loopdyn.equalities`), which impose no rows until `switch_equalities` switches them
    on. ``internal_bodies`` are the massless bodies inside multi-DOF joints.
    ``axis_names``: what the world's x, y and z axes are in the axes of the file the model was
    loaded from (``("x", "z", "-y")`` for a planar model drawn in an MJCF file's xz-plane, which
    `loopdyn.io.mjcf` turns into the xy-plane); world and body-frame vectors keep their numbers,
    only their axes' names change.
    """

    mass: Float[Array, " n"]
    com: Float[Array, "n 3"]
    inertia: Float[Array, "n 3 3"]
    axis: Float[Array, "n 3"]
    parent_rotation: Float[Array, "n 3 3"]
    parent_position: Float[Array, "n 3"]
    child_rotation: Float[Array, "n 3 3"]
    child_position: Float[Array, "n 3"]
    gravity: Float[Array, " 3"]
    cut_axis: Float[Array, "m 3"]
    cut_rotation_a: Float[Array, "m 3 3"]
    cut_position_a: Float[Array, "m 3"]
    cut_rotation_b: Float[Array, "m 3 3"]
    cut_position_b: Float[Array, "m 3"]
    q0: Float[Array, " nq"]
    spring_point_a: Float[Array, "s 3"]
    spring_point_b: Float[Array, "s 3"]
    spring_stiffness: Float[Array, " s"]
    spring_damping: Float[Array, " s"]
    spring_rest_length: Float[Array, " s"]
    armature: Float[Array, " n"]
    damping: Float[Array, " n"]
    stiffness: Float[Array, " n"]
    springref: Float[Array, " n"]
    coupling_first: Float[Array, "c n"]
    coupling_second: Float[Array, "c n"]
    coupling_poly: Float[Array, "c 5"]
    coupling_reference: Float[Array, "c 2"]
    frictionloss: Float[Array, " n"]
    friction_velocity: Float[Array, " n"]
    limits: Float[Array, "n 2"]
    gravcomp: Float[Array, " n"]
    ctrl_gear: Float[Array, " u"]
    ctrl_gain: Float[Array, "u 3"]
    ctrl_bias: Float[Array, "u 3"]
    ctrl_range: Float[Array, "u 2"]
    ctrl_force_range: Float[Array, "u 2"]
    ctrl_arm: Float[Array, "u n"]

    planar: bool = eqx.field(static=True)
    body_names: tuple[str, ...] = eqx.field(static=True)
    parent: tuple[int, ...] = eqx.field(static=True)
    joint_kinds: tuple[str, ...] = eqx.field(static=True)
    coordinate_names: tuple[str, ...] = eqx.field(static=True)
    joint_names: tuple[str, ...] = eqx.field(static=True)
    actuator_names: tuple[str, ...] = eqx.field(static=True)
    cut_joints: tuple[CutJoint, ...] = eqx.field(static=True)
    topology: Topology = eqx.field(static=True)
    spring_names: tuple[str, ...] = eqx.field(static=True)
    spring_bodies: tuple[tuple[int, int], ...] = eqx.field(static=True)
    gravcomp_bodies: tuple[int, ...] = eqx.field(static=True)
    ctrl_names: tuple[str, ...] = eqx.field(static=True)
    ctrl_limited: tuple[bool, ...] = eqx.field(static=True)
    ctrl_force_limited: tuple[bool, ...] = eqx.field(static=True)
    axis_names: tuple[str, str, str] = eqx.field(static=True, default=("x", "y", "z"))
    quaternion_slots: tuple[int, ...] = eqx.field(static=True, default=())
    reduced_points: tuple[tuple[int, tuple[tuple[float, ...], ...]], ...] = eqx.field(
        static=True, default=()
    )
    reduced_on_b: tuple[int, ...] = eqx.field(static=True, default=())
    reduced_across: tuple[int, ...] = eqx.field(static=True, default=())
    coupling_names: tuple[str, ...] = eqx.field(static=True, default=())
    equality_order: tuple[str, ...] = eqx.field(static=True, default=())
    dormant: tuple[Dormant, ...] = eqx.field(static=True, default=())
    internal_bodies: tuple[int, ...] = eqx.field(static=True, default=())

    @property
    def nv(self) -> int:
        """Size of the velocity ``v`` (and of accelerations and generalized forces)."""
        return len(self.body_names)

    @property
    def nq(self) -> int:
        """Size of the configuration ``q``: ``nv`` plus one per quaternion (ball, free joint)."""
        return len(self.body_names) + len(self.quaternion_slots)

    @property
    def configuration_names(self) -> tuple[str, ...]:
        """Name of each entry of ``q``: the coordinate's name, and for a quaternion
        ``joint[qw]``, ``joint[qx]``, ``joint[qy]``, ``joint[qz]`` (`coordinate_names` name the
        velocities)."""
        return configuration_names(self.coordinate_names, self.quaternion_slots)

    @property
    def plane_axes(self) -> tuple[str, str]:
        """Names of the world's first two axes, the plane of a planar mechanism, in the axes of
        the file it came from: ``("x", "z")`` for a model drawn in a file's xz-plane (see
        ``axis_names``), ``("x", "y")`` otherwise. Label in-plane pairs (positions, forces) by these."""
        return self.axis_names[:2]

    @property
    def num_bodies(self) -> int:
        return len(self.body_names)

    @property
    def dim(self) -> int:
        """Size of a twist or wrench: 3 for planar mechanisms, 6 for spatial ones."""
        return 3 if self.planar else 6

    @property
    def children(self) -> tuple[tuple[int, ...], ...]:
        return tuple(
            tuple(k for k, p in enumerate(self.parent) if p == i) for i in range(self.num_bodies)
        )

    @property
    def actuated(self) -> tuple[int, ...]:
        """Indices into q of the actuated coordinates."""
        return tuple(self.coordinate_names.index(a) for a in self.actuator_names)

    @property
    def coordinate_units(self) -> tuple[str, ...]:
        """Unit of each coordinate (velocity component): "m" for a prismatic joint (or a free
        joint's translation), else "rad" (rates: "/s" added)."""
        return tuple("m" if kind == "prismatic" else "rad" for kind in self.joint_kinds)

    @property
    def configuration_units(self) -> tuple[str, ...]:
        """Unit of each entry of ``q``: a coordinate's, and "1" for a quaternion's entries."""
        units = dict(zip(self.coordinate_names, self.coordinate_units))
        return tuple(units.get(name, "1") for name in self.configuration_names)

    @property
    def force_units(self) -> tuple[str, ...]:
        """Unit of each generalized force: "N" for a prismatic joint, else "N m"."""
        return tuple("N" if unit == "m" else "N m" for unit in self.coordinate_units)

    def body_index(self, name: str) -> int:
        if name not in self.body_names:
            raise ValueError(f"unknown body {name!r}; bodies are {list(self.body_names)}")
        return self.body_names.index(name)


@dataclasses.dataclass
class _Body:
    name: str
    mass: float
    com: np.ndarray
    inertia: np.ndarray
    internal: bool = False
    gravcomp: float = 0.0


@dataclasses.dataclass
class _Joint:
    name: str
    kind: str
    parent: str
    child: str
    axis: np.ndarray
    position: np.ndarray
    rotation: np.ndarray
    child_position: np.ndarray
    child_rotation: np.ndarray
    cut: bool
    actuated: bool
    coordinate: str
    passive: tuple[float, ...] = (0.0, 0.0, 0.0, 0.0, 0.0)  # armature .. frictionloss
    friction_velocity: float = FRICTION_VELOCITY
    limits: tuple[float, float] = (-math.inf, math.inf)
    quaternion: bool = False  # the first of a ball's three bodies: turned by a quaternion


@dataclasses.dataclass
class _Actuator:
    name: str
    transmission: dict[str, float]  # coordinate name -> coefficient (one joint, or a tendon)
    gear: float
    gain: np.ndarray
    bias: np.ndarray
    ctrlrange: np.ndarray | None
    forcerange: np.ndarray | None


def _vector(value, size, what):
    arr = np.asarray(value, dtype=np.float64)
    if arr.shape != (size,):
        raise ValueError(f"{what}: expected shape ({size},), got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{what} contains NaN or inf: {arr.tolist()}")
    return arr


def _rotation(value, what):
    """A 3x3 rotation, or for convenience an angle in radians about z."""
    if value is None:
        return np.eye(3)
    arr = np.asarray(value, dtype=np.float64)
    if arr.shape == ():
        c, s = math.cos(float(arr)), math.sin(float(arr))
        arr = np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])
    if arr.shape != (3, 3):
        raise ValueError(
            f"{what}: expected an angle or a 3x3 rotation matrix, got shape {arr.shape}"
        )
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{what} contains NaN or inf")
    if not np.allclose(arr.T @ arr, np.eye(3), atol=1e-9) or np.linalg.det(arr) < 0:
        raise ValueError(f"{what} is not a proper rotation matrix (R^T R != I or det R < 0)")
    return arr


def _inertia(value, planar, what):
    arr = np.asarray(value, dtype=np.float64)
    if arr.shape == ():
        if not planar:
            raise ValueError(f"{what}: a scalar inertia is only meaningful for a planar mechanism")
        # Planar link as a thin lamina in the xy-plane: Ixx + Iyy = Izz.
        arr = np.diag([arr / 2, arr / 2, arr])
    elif arr.shape == (3,):
        arr = np.diag(arr)
    if arr.shape != (3, 3):
        raise ValueError(
            f"{what}: expected a scalar, 3 principal moments or a 3x3 matrix, got {arr.shape}"
        )
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{what} contains NaN or inf")
    if not np.allclose(arr, arr.T, rtol=1e-9, atol=1e-12):
        raise ValueError(f"{what} is not symmetric: {arr.tolist()}")
    moments = np.linalg.eigvalsh(arr)
    if moments[0] <= 0:
        raise ValueError(f"{what} is not positive-definite (principal moments {moments.tolist()})")
    tol = 1e-9 * moments[-1]
    if moments[0] + moments[1] < moments[2] - tol:
        raise ValueError(
            f"{what} violates the triangle inequality I1 + I2 >= I3 of principal moments "
            f"{moments.tolist()}: no physical body has it"
        )
    return arr


class MechanismBuilder:
    """Readable construction of a `Mechanism`.

    >>> b = MechanismBuilder(planar=True)
    >>> b.add_body("crank", mass=1.0, com=(0.05, 0, 0), inertia=1e-3)
    >>> b.add_joint("A", "revolute", "ground", "crank", actuated=True)
    >>> mech = b.build()
    """

    def __init__(self, planar: bool = False, gravity=None):
        self.planar = planar
        if gravity is None:
            gravity = (0.0, -9.81, 0.0) if planar else (0.0, 0.0, -9.81)
        self.gravity = _vector(gravity, 3, "gravity")
        if planar and self.gravity[2] != 0.0:
            raise ValueError(
                f"gravity {self.gravity.tolist()} leaves the plane of a planar mechanism"
            )
        self._bodies: dict[str, _Body] = {}
        self._joints: list[_Joint] = []
        self._springs: list[tuple] = []
        self._couplings: list[tuple] = []
        self._inactive: set[str] = set()  # equalities added switched off
        self._actuators: list[_Actuator] = []

    def add_body(
        self, name: str, mass: float, com=(0.0, 0.0, 0.0), inertia=None, gravcomp: float = 0.0
    ) -> MechanismBuilder:
        """Add a body with ``mass``, centre of mass ``com`` (body frame) and ``inertia`` about the
        centre of mass: a 3x3 matrix, 3 principal moments, or for planar mechanisms a scalar Izz.
        ``gravcomp``: the fraction of its weight held up at its centre of mass (MuJoCo's body
        ``gravcomp``: 1 cancels gravity, more floats it)."""
        if name == GROUND or name in self._bodies:
            raise ValueError(f"body name {name!r} is already used")
        if not isinstance(mass, numbers.Real) or not np.isfinite(mass) or mass <= 0:
            raise ValueError(
                f"body {name!r}: mass must be positive and finite (a number), got {mass!r}"
            )
        if inertia is None:
            raise ValueError(f"body {name!r}: inertia is required")
        if not isinstance(gravcomp, numbers.Real) or not np.isfinite(gravcomp):
            raise ValueError(f"body {name!r}: gravcomp must be a finite number, got {gravcomp!r}")
        self._bodies[name] = _Body(
            name,
            float(mass),
            _vector(com, 3, f"body {name!r}: com"),
            _inertia(inertia, self.planar, f"body {name!r}: inertia"),
            gravcomp=float(gravcomp),
        )
        return self

    def add_frame(self, name: str) -> MechanismBuilder:
        """Add a massless body: an intermediate frame for chaining several joints between two
        bodies (as spherical and universal joints do). Its child must carry inertia."""
        if name == GROUND or name in self._bodies:
            raise ValueError(f"body name {name!r} is already used")
        self._bodies[name] = _Body(name, 0.0, np.zeros(3), np.zeros((3, 3)), internal=True)
        return self

    def add_joint(
        self,
        name: str,
        kind: str,
        parent: str,
        child: str,
        axis=None,
        position=(0.0, 0.0, 0.0),
        rotation=None,
        child_position=(0.0, 0.0, 0.0),
        child_rotation=None,
        cut: bool = False,
        actuated: bool = False,
        armature: float = 0.0,
        damping: float = 0.0,
        stiffness: float = 0.0,
        springref: float = 0.0,
        frictionloss: float = 0.0,
        friction_velocity: float = FRICTION_VELOCITY,
        limits=None,
        active: bool = True,
    ) -> MechanismBuilder:
        """Add a joint from ``parent`` to ``child`` (see the module docstring for the frames).
        A revolute or prismatic tree joint may carry passive elements: ``armature`` (rotor
        inertia, kg m^2 or kg), ``damping`` (N m s or N s), ``stiffness`` (N m or N/m) pulling
        towards ``springref`` (rad or m), as MuJoCo's joint attributes of the same names, and
        ``frictionloss`` (N m or N), dry friction smoothed over ``friction_velocity`` (rad/s or
        m/s; `forces.joint_forces`: not MuJoCo's friction constraint at low speed); a ball or
        free joint its ``armature`` and ``damping``, on each of its velocities. A ball cut
        joint is a spherical one. ``limits``: a revolute or prismatic tree joint's ``(low,
        high)`` range (rad or m), not enforced: `loopdyn.simulate` warns when a saved state
        passes it. ``active=False`` adds a cut joint switched off (`loopdyn.equalities`)."""
        if kind == "ball" and (cut or child == GROUND or self._has_tree_joint(child)):
            kind = "spherical"
        taken = {j.name for j in self._joints} | {j.coordinate for j in self._joints}
        count = {**{k: len(a) for k, a in CHAIN_AXES.items()}, "ball": 3, "free": 6}
        new = [name] + [f"{name}[{k}]" for k in range(count.get(kind, 0))]
        clash = [n for n in new if n in taken]
        if clash:
            raise ValueError(
                f"joint name {clash[0]!r} is already used (by a joint or a coordinate)"
            )
        kinds = TREE_KINDS + QUATERNION_KINDS + CUT_KINDS
        if kind not in kinds:
            raise ValueError(
                f"joint {name!r}: unknown kind {kind!r}; expected one of {sorted(set(kinds))}"
            )
        for role, body in (("parent", parent), ("child", child)):
            if body != GROUND and body not in self._bodies:
                raise ValueError(
                    f"joint {name!r}: unknown {role} body {body!r}; add it first "
                    f"(known: {[GROUND, *self._bodies]})"
                )
        if parent == child:
            raise ValueError(
                f"joint {name!r} connects body {parent!r} to itself: a loop needs two bodies"
            )
        if axis is None:
            axis = (1.0, 0.0, 0.0) if kind == "prismatic" else (0.0, 0.0, 1.0)
        axis = np.asarray(axis, dtype=np.float64)
        if axis.shape != (3,) or not np.all(np.isfinite(axis)) or np.linalg.norm(axis) < 1e-12:
            raise ValueError(
                f"joint {name!r}: axis must be a finite non-zero 3-vector, got {axis.tolist()}"
            )
        axis = axis / np.linalg.norm(axis)
        common = {
            "parent": parent,
            "child": child,
            "axis": axis,
            "position": _vector(position, 3, f"joint {name!r}: position"),
            "rotation": _rotation(rotation, f"joint {name!r}: rotation"),
            "child_position": _vector(child_position, 3, f"joint {name!r}: child_position"),
            "child_rotation": _rotation(child_rotation, f"joint {name!r}: child_rotation"),
            "cut": bool(cut) or child == GROUND or self._has_tree_joint(child),
        }
        if not active and not common["cut"]:
            raise ValueError(f"joint {name!r}: only a cut joint can be switched off (active=False)")
        if actuated and (common["cut"] or kind not in TREE_KINDS):
            raise ValueError(
                f"joint {name!r}: only revolute or prismatic tree joints can be actuated"
            )
        passive = (armature, damping, stiffness, springref, frictionloss)
        for what, value in zip(PASSIVE + ("friction_velocity",), passive + (friction_velocity,)):
            if not isinstance(value, numbers.Real) or not np.isfinite(value):
                raise ValueError(f"joint {name!r}: {what} must be a finite number, got {value!r}")
            if what != "springref" and value < 0:
                raise ValueError(f"joint {name!r}: {what} must be >= 0, got {value}")
        if friction_velocity <= 0:
            raise ValueError(
                f"joint {name!r}: friction_velocity must be > 0, got {friction_velocity}"
            )
        if any(passive) and (common["cut"] or kind not in TREE_KINDS + QUATERNION_KINDS):
            raise ValueError(
                f"joint {name!r}: armature, damping, stiffness and frictionloss act on the "
                "coordinate of a revolute, prismatic, ball or free tree joint"
            )
        limits = self._limits(name, kind, common, limits)
        if kind in QUATERNION_KINDS:
            if self.planar or common["cut"] or any(passive[2:]):
                why = (
                    "does not fit a planar mechanism"
                    if self.planar
                    else "can only be a tree joint"
                    if common["cut"]
                    else "takes armature and damping only (no stiffness, springref or frictionloss)"
                )
                raise ValueError(f"joint {name!r}: a {kind} joint {why}")
            self._add_quaternion_joint(name, kind, common, passive)
        elif kind in CHAIN_AXES and not common["cut"]:
            if self.planar:
                raise ValueError(
                    f"joint {name!r}: a {kind} tree joint does not fit a planar mechanism"
                )
            self._add_chain(name, kind, common)
        elif kind not in TREE_KINDS and not common["cut"]:
            raise ValueError(f"joint {name!r}: a {kind} joint can only be a cut joint (cut=True)")
        else:
            self._joints.append(
                _Joint(
                    name=name,
                    kind=kind,
                    actuated=actuated,
                    coordinate=name,
                    passive=tuple(float(v) for v in passive),
                    friction_velocity=float(friction_velocity),
                    limits=limits,
                    **common,
                )
            )
        if not active:
            self._inactive.add(name)
        return self

    @staticmethod
    def _limits(name, kind, common, limits):
        """A joint's checked ``(low, high)`` range, or no limits."""
        if limits is None:
            return (-math.inf, math.inf)
        if common["cut"] or kind not in TREE_KINDS:
            raise ValueError(f"joint {name!r}: limits belong to a revolute or prismatic tree joint")
        low, high = (float(x) for x in np.asarray(limits, dtype=np.float64).reshape(2))
        if not low < high:
            raise ValueError(f"joint {name!r}: limits {[low, high]} need low < high")
        return (low, high)

    def add_spring(
        self,
        name: str,
        body_a: str,
        body_b: str,
        point_a=(0.0, 0.0, 0.0),
        point_b=(0.0, 0.0, 0.0),
        stiffness: float = 0.0,
        damping: float = 0.0,
        rest_length: float = 0.0,
    ) -> MechanismBuilder:
        """A linear spring-damper between ``point_a`` on ``body_a`` and ``point_b`` on ``body_b``
        (body coordinates): tension ``stiffness (L - rest_length) + damping dL/dt``."""
        if any(sp[0] == name for sp in self._springs):
            raise ValueError(f"spring name {name!r} is already used")
        for body in (body_a, body_b):
            if body != GROUND and body not in self._bodies:
                raise ValueError(f"spring {name!r}: unknown body {body!r}")
        for what, value in (
            ("stiffness", stiffness),
            ("damping", damping),
            ("rest_length", rest_length),
        ):
            if not np.isfinite(value) or value < 0:
                raise ValueError(f"spring {name!r}: {what} must be finite and >= 0, got {value}")
        self._springs.append(
            (
                name,
                body_a,
                body_b,
                _vector(point_a, 3, f"spring {name!r}: point_a"),
                _vector(point_b, 3, f"spring {name!r}: point_b"),
                float(stiffness),
                float(damping),
                float(rest_length),
            )
        )
        return self

    def add_coupling(
        self, name: str, first, second=None, polycoef=(0.0, 1.0, 0.0, 0.0, 0.0), active=True
    ) -> MechanismBuilder:
        """Couple coordinates by ``u - u0 = sum_k polycoef[k] (w - w0)^k`` (MuJoCo's joint and
        fixed-tendon equalities): ``u`` and ``w`` are linear combinations of hinge or slide
        coordinates, ``first`` and ``second``, each a coordinate name or a mapping from names to
        coefficients; ``u0``, ``w0`` their values at ``q0``. Without ``second`` the coupling
        holds ``u - u0 = polycoef[0]``. Up to five polynomial coefficients (constant first).
        ``active=False`` adds it switched off (`loopdyn.equalities`)."""
        taken = {c[0] for c in self._couplings} | {j.name for j in self._joints}
        if name in taken:
            raise ValueError(f"coupling name {name!r} is already used")
        terms = []
        for role, value in (("first", first), ("second", second)):
            value = {} if value is None else {value: 1.0} if isinstance(value, str) else value
            if role == "first" and not value:
                raise ValueError(f"coupling {name!r}: first names no coordinate")
            for coordinate, coef in value.items():
                if not isinstance(coef, numbers.Real) or not np.isfinite(coef):
                    raise ValueError(
                        f"coupling {name!r}: coefficient of {coordinate!r} must be a finite "
                        f"number, got {coef!r}"
                    )
            terms.append({str(k): float(v) for k, v in value.items()})
        poly = np.asarray(polycoef, dtype=np.float64).ravel()
        if not 1 <= poly.size <= 5 or not np.all(np.isfinite(poly)):
            raise ValueError(
                f"coupling {name!r}: polycoef must be 1 to 5 finite numbers, got {poly.tolist()}"
            )
        self._couplings.append((name, *terms, np.pad(poly, (0, 5 - poly.size))))
        if not active:
            self._inactive.add(name)
        return self

    @staticmethod
    def _coefficients(joints, terms, owner):
        """A row ``(n,)`` of coefficients from ``{coordinate name: coefficient}`` of hinge or
        slide tree joints (a fixed tendon's, a coupling's side); ``owner`` names the element in
        errors."""
        coordinate = {j.coordinate: k for k, j in enumerate(joints)}
        row = np.zeros(len(joints))
        for c, coef in terms.items():
            k = coordinate.get(c)
            turned = k is not None and any(j.quaternion for j in joints[max(k - 2, 0) : k + 1])
            if k is None or joints[k].kind not in TREE_KINDS or turned:
                raise ValueError(
                    f"{owner}: {c!r} is not the coordinate of a hinge or slide tree joint; "
                    f"coordinates are {list(coordinate)}"
                )
            row[k] = coef
        return row

    def _coupling_arrays(self, joints, q0):
        """``(first, second)`` ``(c, n)`` coefficient rows and each coupling's reference values
        ``(u0, w0)`` at ``q0`` (``(c, 2)``)."""
        scalar, _ = configuration_layout(
            len(joints), tuple(k for k, j in enumerate(joints) if j.quaternion)
        )
        rows, reference = [], []
        for name, first, second, _ in self._couplings:
            pair = [self._coefficients(joints, t, f"coupling {name!r}") for t in (first, second)]
            rows.append(pair)
            if not np.any(pair[0]) and not np.any(pair[1]):
                raise ValueError(f"coupling {name!r}: every coefficient is zero")
            at_q0 = np.append(q0, 0.0)[scalar]
            reference.append([pair[0] @ at_q0, pair[1] @ at_q0])
        shaped = np.array(rows).reshape(-1, 2, len(joints))
        return shaped[:, 0], shaped[:, 1], np.array(reference).reshape(-1, 2)

    def add_actuator(
        self,
        name: str,
        joint,
        gear: float = 1.0,
        gain=(1.0, 0.0, 0.0),
        bias=(0.0, 0.0, 0.0),
        ctrlrange=None,
        forcerange=None,
    ) -> MechanismBuilder:
        """A control actuator on the coordinate of revolute or prismatic tree joint ``joint``, or
        on a fixed tendon given as ``{coordinate: coefficient}`` (its length ``sum coef q``), as
        MuJoCo's actuators with a joint or tendon transmission (`loopdyn.actuators`): its input
        is one entry of ``ctrl``, its force ``gain . (1, l, v) ctrl + bias . (1, l, v)`` with
        ``l = gear q`` (the tendon's length for a tendon) and ``v = gear qd``, ``gear`` times it
        acting on the coordinate (times each coefficient for a tendon). MuJoCo's ``gaintype``
        fixed is ``gain = (gainprm[0], 0, 0)`` and ``biastype`` none is ``bias = 0``; a
        ``<motor>`` is the default, a ``<position kp kv>`` is ``gain = (kp, 0, 0)``,
        ``bias = (0, -kp, -kv)``, a ``<velocity kv>`` is ``gain = (kv, 0, 0)``,
        ``bias = (0, 0, -kv)``. ``ctrlrange``, ``forcerange``: ``(low, high)`` clamps of the
        input and of the force, or None for none."""
        if any(a.name == name for a in self._actuators):
            raise ValueError(f"actuator name {name!r} is already used")
        transmission = {joint: 1.0} if isinstance(joint, str) else dict(joint)
        for coordinate, coef in transmission.items():
            joints = [j for j in self._joints if j.coordinate == coordinate]
            if not joints or joints[0].cut or joints[0].kind not in TREE_KINDS:
                raise ValueError(
                    f"actuator {name!r}: joint {coordinate!r} is not a revolute or prismatic tree "
                    "joint; add it first (coordinates: "
                    f"{[j.coordinate for j in self._joints if not j.cut]})"
                )
            if not isinstance(coef, numbers.Real) or not np.isfinite(coef):
                raise ValueError(
                    f"actuator {name!r}: coefficient of {coordinate!r} must be a finite number, "
                    f"got {coef!r}"
                )
        if not isinstance(gear, numbers.Real) or not np.isfinite(gear) or gear == 0:
            raise ValueError(
                f"actuator {name!r}: gear must be a finite non-zero number, got {gear!r}"
            )
        ranges = []
        for what, value in (("ctrlrange", ctrlrange), ("forcerange", forcerange)):
            value = None if value is None else _vector(value, 2, f"actuator {name!r}: {what}")
            if value is not None and value[0] > value[1]:
                raise ValueError(
                    f"actuator {name!r}: {what} {value.tolist()} has its low end above its high end"
                )
            ranges.append(value)
        self._actuators.append(
            _Actuator(
                name,
                transmission,
                float(gear),
                _vector(gain, 3, f"actuator {name!r}: gain"),
                _vector(bias, 3, f"actuator {name!r}: bias"),
                *ranges,
            )
        )
        return self

    def _ctrl_fields(self, joints, stack):
        """The `Mechanism` fields of the control actuators (``ctrl_*``)."""
        acts = self._actuators
        arm = [self._coefficients(joints, a.transmission, f"actuator {a.name!r}") for a in acts]
        return {
            "ctrl_arm": stack(arm, (len(joints),)),
            "ctrl_gear": stack([a.gear for a in acts], ()),
            "ctrl_gain": stack([a.gain for a in acts], (3,)),
            "ctrl_bias": stack([a.bias for a in acts], (3,)),
            "ctrl_range": stack(
                [np.zeros(2) if a.ctrlrange is None else a.ctrlrange for a in acts], (2,)
            ),
            "ctrl_force_range": stack(
                [np.zeros(2) if a.forcerange is None else a.forcerange for a in acts], (2,)
            ),
            "ctrl_names": tuple(a.name for a in acts),
            "ctrl_limited": tuple(a.ctrlrange is not None for a in acts),
            "ctrl_force_limited": tuple(a.forcerange is not None for a in acts),
        }

    def _has_tree_joint(self, body):
        return any(j.child == body and not j.cut for j in self._joints)

    def _add_chain(self, name, kind, common):
        """A multi-DOF tree joint as revolutes about the joint frame's axes through massless bodies
        whose frames are the joint frame."""
        axes = CHAIN_AXES[kind]
        links = (
            [common["parent"]] + [f"{name}[{k}]" for k in range(1, len(axes))] + [common["child"]]
        )
        taken = [body for body in links[1:-1] if body in self._bodies]
        if taken:
            raise ValueError(
                f"joint {name!r}: its {kind} chain needs body name {taken[0]!r}, already used"
            )
        for body in links[1:-1]:
            self.add_frame(body)
        for k, axis in enumerate(axes):
            first, last = k == 0, k == len(axes) - 1
            self._joints.append(
                _Joint(
                    name=name,
                    kind="revolute",
                    parent=links[k],
                    child=links[k + 1],
                    axis=axis,
                    position=common["position"] if first else np.zeros(3),
                    rotation=common["rotation"] if first else np.eye(3),
                    child_position=common["child_position"] if last else np.zeros(3),
                    child_rotation=common["child_rotation"] if last else np.eye(3),
                    cut=False,
                    actuated=False,
                    coordinate=f"{name}[{k}]",
                )
            )

    def _add_quaternion_joint(self, name, kind, common, passive):
        """A ball joint as three bodies turned about the child joint frame's x, y, z axes, which
        share the child's frame (the first carries the quaternion's rotation), after a free
        joint's three slides along the parent joint frame's axes."""
        eye, zero = np.eye(3), np.zeros(3)
        slots = []  # (kind, axis, parent frame, child frame, quaternion)
        if kind == "free":
            start = (common["position"], common["rotation"])
            slots = [
                ("prismatic", eye[k], start if k == 0 else (zero, eye), (zero, eye), False)
                for k in range(3)
            ]
        child = (common["child_position"], common["child_rotation"])
        first = (common["position"], common["rotation"]) if kind == "ball" else (zero, eye)
        slots += [("revolute", eye[k], first if k == 0 else child, child, k == 0) for k in range(3)]
        links = [common["parent"]] + [f"{name}[{k}]" for k in range(1, len(slots))]
        taken = [body for body in links[1:] if body in self._bodies]
        if taken:
            raise ValueError(f"joint {name!r} needs body name {taken[0]!r}, already used")
        for body in links[1:]:
            self.add_frame(body)
        elements = (float(passive[0]), float(passive[1]), 0.0, 0.0, 0.0)
        for k, (slot, axis, (p, r), (c, cr), quaternion) in enumerate(slots):
            self._joints.append(
                _Joint(
                    name=name,
                    kind=slot,
                    parent=links[k],
                    child=(links + [common["child"]])[k + 1],
                    axis=axis,
                    position=p,
                    rotation=r,
                    child_position=c,
                    child_rotation=cr,
                    cut=False,
                    actuated=False,
                    coordinate=f"{name}[{k}]",
                    passive=elements,
                    quaternion=quaternion,
                )
            )

    def build(self, q0=None) -> Mechanism:
        """Check the model and freeze it into a `Mechanism`. ``q0``: reference configuration, a
        mapping from configuration name to value (missing ones are 0, a missing quaternion is
        the identity) or an array of ``nq`` in body order."""
        if not self._bodies:
            raise ValueError("the mechanism has no bodies")
        tree = {j.child: j for j in self._joints if not j.cut}
        for name in self._bodies:
            if name not in tree:
                raise ValueError(f"body {name!r} is disconnected: no joint has it as its child")
        carriers = {j.parent for j in tree.values()}
        for body in self._bodies.values():
            if body.internal and body.name not in carriers:
                raise ValueError(
                    f"massless body {body.name!r} has no child body: nothing carries inertia "
                    "beyond it, so its joint has no dynamics (the mass matrix would be singular)"
                )
        for name in self._bodies:  # every chain of tree joints must end at the ground
            seen, body = [], name
            while body != GROUND:
                if body in seen:
                    cycle = [tree[b] for b in seen[seen.index(body) :]]
                    last = max(cycle, key=self._joints.index)
                    raise ValueError(
                        f"joint {last.name!r} would make the tree part cyclic "
                        f"({' -> '.join(seen[seen.index(body) :] + [body])}) with no path to the ground; "
                        "declare one joint of the loop with cut=True and connect the loop to the ground"
                    )
                seen.append(body)
                body = tree[body].parent
        order = []

        def visit(body):
            for j in self._joints:
                if not j.cut and j.parent == body:
                    order.append(j.child)
                    visit(j.child)

        visit(GROUND)
        index = {name: k for k, name in enumerate(order)}
        index[GROUND] = -1
        joints = [tree[b] for b in order]
        bodies = [self._bodies[b] for b in order]
        cuts = [j for j in self._joints if j.cut]
        if self.planar:
            check_planar(joints)

        def stack(values, shape):
            return jnp.asarray(np.array(values, dtype=np.float64).reshape((-1, *shape)))

        def joint_names():
            names = []
            for j in self._joints:
                if j.name not in names:
                    names.append(j.name)
            return tuple(names)

        coordinates = tuple(j.coordinate for j in joints)
        quaternions = tuple(k for k, j in enumerate(joints) if j.quaternion)
        reference = self._reference(q0, coordinates, quaternions)
        first, second, coupling_reference = self._coupling_arrays(joints, reference)
        parents = tuple(index[j.parent] for j in joints)
        # Built with every equality off, then switched on (`loopdyn.equalities`): one derivation
        # of the loop structure for building and switching.
        off = [
            Dormant(j.name, j.kind, index[j.parent], index[j.child], equalities.cut_data(j))
            for j in cuts
        ]
        off += [
            Dormant(c[0], "coupling", -1, -1, equalities.coupling_data(f, w, c[3], r))
            for c, f, w, r in zip(self._couplings, first, second, coupling_reference)
        ]
        none = np.zeros(0)
        mech = Mechanism(
            q0=jnp.asarray(reference),
            mass=stack([b.mass for b in bodies], ()),
            com=stack([b.com for b in bodies], (3,)),
            inertia=stack([b.inertia for b in bodies], (3, 3)),
            axis=stack([j.axis for j in joints], (3,)),
            parent_rotation=stack([j.rotation for j in joints], (3, 3)),
            parent_position=stack([j.position for j in joints], (3,)),
            child_rotation=stack([j.child_rotation for j in joints], (3, 3)),
            child_position=stack([j.child_position for j in joints], (3,)),
            gravity=jnp.asarray(self.gravity),
            cut_axis=stack(none, (3,)),
            cut_rotation_a=stack(none, (3, 3)),
            cut_position_a=stack(none, (3,)),
            cut_rotation_b=stack(none, (3, 3)),
            cut_position_b=stack(none, (3,)),
            spring_point_a=stack([sp[3] for sp in self._springs], (3,)),
            spring_point_b=stack([sp[4] for sp in self._springs], (3,)),
            spring_stiffness=stack([sp[5] for sp in self._springs], ()),
            spring_damping=stack([sp[6] for sp in self._springs], ()),
            spring_rest_length=stack([sp[7] for sp in self._springs], ()),
            **{field: stack([j.passive[k] for j in joints], ()) for k, field in enumerate(PASSIVE)},
            friction_velocity=stack([j.friction_velocity for j in joints], ()),
            limits=stack([j.limits for j in joints], (2,)),
            gravcomp=stack([b.gravcomp for b in bodies], ()),
            gravcomp_bodies=tuple(k for k, b in enumerate(bodies) if b.gravcomp),
            **self._ctrl_fields(joints, stack),
            coupling_first=stack(none, (len(joints),)),
            coupling_second=stack(none, (len(joints),)),
            coupling_poly=stack(none, (5,)),
            coupling_reference=stack(none, (2,)),
            spring_names=tuple(sp[0] for sp in self._springs),
            spring_bodies=tuple((index[sp[1]], index[sp[2]]) for sp in self._springs),
            planar=self.planar,
            body_names=tuple(order),
            parent=tuple(index[j.parent] for j in joints),
            joint_kinds=tuple(j.kind for j in joints),
            coordinate_names=coordinates,
            joint_names=joint_names(),
            actuator_names=tuple(j.coordinate for j in self._joints if j.actuated),
            cut_joints=(),
            topology=analyse(parents, (), self.planar),
            quaternion_slots=quaternions,
            equality_order=tuple(d.name for d in off),
            dormant=tuple(off),
            internal_bodies=tuple(k for k, b in enumerate(bodies) if b.internal),
        )
        return equalities.structured(mech, {d.name for d in off} - self._inactive)

    @staticmethod
    def _reference(q0, coordinates, quaternions):
        names = configuration_names(coordinates, quaternions)
        identity = {n: 1.0 for n in names if n.endswith("[qw]")}
        if q0 is None or isinstance(q0, dict):
            unknown = set(q0 or {}) - set(names)
            if unknown:
                raise ValueError(
                    f"q0 names unknown coordinates {sorted(unknown)}; known: {list(names)}"
                )
            q0 = [{**identity, **(q0 or {})}.get(c, 0.0) for c in names]
        q0 = _vector(q0, len(names), "q0")
        _, starts = configuration_layout(len(coordinates), quaternions)
        for a in starts:
            norm = np.linalg.norm(q0[a : a + 4])
            if not norm > 1e-9:
                raise ValueError(f"q0: the quaternion {names[a][:-4]!r} is zero")
            q0[a : a + 4] /= norm
        return q0


def check_planar(joints):
    """Planar mechanisms: joint frames turn about z only, revolute axes are +-z, prismatic axes
    lie in the plane."""
    z = np.array([0.0, 0.0, 1.0])
    for j in joints:
        for what, r in (("rotation", j.rotation), ("child_rotation", j.child_rotation)):
            if not np.allclose(r @ z, z, atol=1e-12):
                raise ValueError(
                    f"joint {j.name!r}: {what} turns out of the plane of a planar mechanism"
                )
        along_z = abs(abs(j.axis @ z) - 1.0) < 1e-12
        in_plane = abs(j.axis @ z) < 1e-12
        ok = in_plane if j.kind == "prismatic" else along_z or j.kind in ("weld", "spherical")
        if not ok:
            raise ValueError(
                f"joint {j.name!r}: axis {j.axis.tolist()} does not fit a planar mechanism "
                "(revolute axes along z, prismatic axes in the xy-plane)"
            )
        if j.kind == "universal":
            raise ValueError(f"joint {j.name!r}: a universal joint does not fit a planar mechanism")
