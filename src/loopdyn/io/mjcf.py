"""MJCF import: MuJoCo's own parser compiles the model, which then becomes a `Mechanism`.

The mapping, MuJoCo -> loopdyn:

- Bodies keep MuJoCo's names and body frames, so at the same configuration
  `tree.forward_kinematics` equals MuJoCo's ``xpos``/``xmat`` (turned by ``R``: see Planar). The
  inertia about the centre of mass ``body_ipos`` is ``body_inertia`` (principal moments) turned by
  ``body_iquat``. The world body is the ground.
- A body without joints is welded to its parent. Its mass and inertia are merged into the nearest
  moving ancestor, and it is no loopdyn body of its own; a body welded to the world is part of the
  ground.
- Joints: hinge -> revolute, slide -> prismatic, ball -> ball, free -> free (unit quaternions,
  `loopdyn.mechanism`). The joint frame sits at ``jnt_pos`` with the body's orientation (a free
  joint's at the body's origin, in the world: MuJoCo allows free joints
  only in the world's children). Several joints in one body act in order, as in
  MuJoCo, through massless bodies ``body[k]`` (k = 0 .. count - 2): the body frame after the
  first k + 1 joints.
- Coordinates: ``q`` and ``v`` are MuJoCo's ``qpos`` and ``qvel``, entry by entry (a hinge's
  angle, a slide's shift, a ball's quaternion ``(w, x, y, z)`` and its angular velocity in the
  body's axes, a free joint's position and quaternion, its linear velocity in world axes and
  angular velocity in the body's), and accelerations are ``qacc``; ``mech.q0`` is MuJoCo's
  ``qpos0`` (a hinge's or slide's ``ref``, a free body's placement in the file). At ``q0`` the
  bodies sit as the file draws them.
- ``<equality><connect>`` becomes a spherical cut joint, or a revolute one about z in a planar
  mechanism. ``<equality><weld>`` becomes a weld cut joint. Both are anchored on bodies
  (``eq_data``: MuJoCo computes body2's point or pose at ``qpos0``) or on sites (the site points
  or frames must coincide). ``solref`` and ``solimp`` only shape MuJoCo's soft constraints;
  they are not used, since loopdyn's constraints are exact. A weld's ``torquescale`` of 0 leaves
  the rotation free (MuJoCo drops the weld's rotational residual), so that weld becomes a point
  constraint like a connect; any other value locks the rotation, exactly. A connect whose two
  points, or a weld whose ``relpose`` puts its ends, apart at ``qpos0`` gets a warning with its
  name and the distance: MuJoCo would pull them together as it simulates, while loopdyn keeps
  them as drawn (``q0`` then violates the loop). Body-anchored connects, and welds without
  ``relpose``, are closed at ``qpos0`` by construction, since MuJoCo puts body2's point at the
  anchor whatever the drawing (which silently sets the link's length).
- ``<equality><joint>`` and ``<equality><tendon>`` of fixed tendons become couplings of
  coordinates (`MechanismBuilder.add_coupling`): ``y - y0 = polycoef(x - x0)`` with ``y0``, ``x0``
  at ``qpos0``, exact like the cut joints. A fixed tendon by itself adds nothing (its stiffness,
  damping or friction are refused); spatial tendons are refused.
- Actuators with a joint transmission on a hinge or slide, or a fixed tendon's, and no
  activation dynamics
  (``<motor>``, ``<position>``, ``<velocity>``, ``<general>`` with gaintype fixed or affine and
  biastype none or affine) become control actuators, in MuJoCo's order (``mech.ctrl_names``):
  gear, gain and bias (zeros past ``gainprm[0]`` for a fixed gain, all zeros for no bias),
  ``ctrlrange`` where ``ctrllimited`` (unless ``<flag clampctrl="disable"/>``) and
  ``forcerange`` where ``forcelimited``. `loopdyn.forward_dynamics`'s ``ctrl`` is then
  MuJoCo's ``ctrl`` (`loopdyn.actuators`). A motor (fixed gain, no bias) also makes its
  coordinate actuated, as before: the input ``tau`` is the joint force itself, unclamped.
- A body's ``gravcomp`` becomes its ``Mechanism.gravcomp`` (the bodies welded into one loopdyn
  body must share it). A joint's ``actuatorgravcomp`` changes only where MuJoCo books the force
  (``qfrc_actuator``, not ``qfrc_passive``), not the motion, unless the joint clamps its
  actuator force (``actuatorfrcrange``); loopdyn counts it as passive.
- A joint's ``actuatorfrcrange`` (a clamp of the sum of its actuators' forces) is not applied:
  a joint that has one and is driven by a loaded actuator gets a warning naming it.
- Gravity: ``opt.gravity``, or zero when the gravity flag is disabled.
- Planar: at ``qpos0`` every hinge axis is along one world direction n, every slide axis is
  perpendicular to it, no joint is a ball, every joint frame turns about n only, and gravity is
  perpendicular to n (or zero). ``planar`` forces the choice: True on a spatial model is an error;
  False builds a planar model as spatial. loopdyn's planar algebra lives in the xy-plane, so a
  plane other than the xy-plane (the xz-plane with hinges about y and gravity along -z, as MuJoCo
  models are usually drawn) is turned into it by one constant rotation ``R`` of the whole model
  (`world_rotation` returns it): world vectors ``v`` become ``R v``, body-frame vectors too, and
  relative rotations ``M`` become ``R M R^T``. The rows of ``R`` are the plane's right, up
  (against gravity) and normal directions; for the usual xz drawing ``R (x, y, z) = (x, z, -y)``,
  so gravity becomes ``(0, -9.81, 0)``. Coordinates, the mass matrix and the bias forces are
  unchanged by it; loop rows and their multipliers are in the turned world axes, and
  `kinematics.body_poses` returns the turned poses, the file's being ``(R^T p, R^T R_b R)``.
  The mechanism's ``axis_names`` name the turned axes in the file's terms (``("x", "z", "-y")``
  for the usual drawing), and results, summaries and figures label in-plane pairs by them.
  Spatial models and planar ones in the xy-plane are not turned (``R`` is the identity). A
  closed-loop mechanism that moves in parallel planes but fails this test (gravity out of its
  plane, or a body frame tilted out of it, e.g. a finger mirrored by a half turn about an in-plane
  axis) loads as a spatial model, its connects' rows along the plane's normal dropped
  (`loopdyn.redundancy`); with a weld among its loops it is refused unless ``planar=False``, as
  the weld's angle rows about the plane's axes would vanish identically.
- A hinge's or slide's ``armature``, ``damping`` and ``stiffness`` (about ``springref``), and a
  ball's or free joint's ``armature`` and ``damping``, become the coordinates' passive elements
  (`loopdyn.mechanism.Mechanism`), as MuJoCo applies them. A hinge's or slide's
  ``frictionloss`` (MuJoCo's dry-friction constraint) is refused, or with
  ``frictionloss="smooth"`` loaded as the smooth law of `loopdyn.forces.joint_forces`, which
  differs from MuJoCo's at low speed (it cannot hold a loaded joint at rest).
- Unnamed bodies, joints, equalities and actuators are named ``body<id>``, ``joint<id>``,
  ``equality<id>`` and ``actuator<id>``, with MuJoCo's element id.

Joint limits are ignored with a warning (loopdyn enforces none); a hinge's or slide's range is
kept (``Mechanism.limits``) and `loopdyn.simulate` warns when a saved state passes it. An
inactive equality (``active="false"``, or switched off by `load_mjcf`'s ``active``) is kept
switched off: it imposes nothing until `loopdyn.switch_equalities` switches it on, as MuJoCo's
``eq_active`` does at run time (`loopdyn.equalities`).
What loopdyn cannot represent is listed all at once, each element named, in one
``ValueError``: a ball or free joint's
stiffness or friction loss, polynomial stiffness or damping, a hinge's or slide's friction loss
(unless ``frictionloss="smooth"``), mocap bodies, gravity compensation that differs within one
loopdyn body, spatial tendons and tendon forces, flexes, explicit contact pairs, equality
constraints other than connect, weld, joint and fixed-tendon ones, actuators with
activation dynamics, another transmission, gain or bias, armature, damping or delay, and fluid
forces. With ``unsupported="warn"`` the model loads without them (one warning lists what the
simulation leaves out: those equalities and actuators are dropped, the forces and contacts do
not act, mocap bodies stay where drawn); flexes are refused either way. Geoms count only through
the inertia MuJoCo
computed from them. Their collisions are ignored (loopdyn has no contact), and so are sensors,
cameras, lights, the time step and the integrator. Keyframes are states of the loaded mechanism
(`keyframes`).
"""

from __future__ import annotations

import copy
import dataclasses
import os
import warnings
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from ..mechanism import GROUND, Mechanism, MechanismBuilder

if TYPE_CHECKING:
    import mujoco

_TOL = 1e-12  # planar detection: the tolerance of the builder's own planar check
_GAP = 1e-9  # connect points farther apart at qpos0 than this (times the model's extent) warn
_Z = np.array([0.0, 0.0, 1.0])
# MuJoCo's enums (mjtJoint, mjtEq, mjtObj, mjtDisableBit), fixed in its C API.
_FREE, _BALL, _SLIDE, _HINGE = 0, 1, 2, 3
_JOINT_KINDS = {_FREE: "free", _BALL: "ball", _SLIDE: "prismatic", _HINGE: "revolute"}
_DOFS = {_FREE: 6, _BALL: 3, _SLIDE: 1, _HINGE: 1}
_WRAP_JOINT = 1  # mjtWrap
_WELD = 1
_EQ_TYPES = ("connect", "weld", "joint", "tendon", "flex", "flexvert", "flexstrain", "distance")
_OBJ_BODY, _OBJ_SITE = 1, 6
_DSBL_CONSTRAINT, _DSBL_EQUALITY, _DSBL_FRICTIONLOSS, _DSBL_GRAVITY = 1, 2, 4, 128
_DSBL_CLAMPCTRL = 256
# mjtTrn, mjtGain, mjtBias: the joint transmissions, and the fixed/affine gains and none/affine
# biases that loopdyn.actuators models.
_TRN_JOINT, _TRN_JOINTINPARENT, _TRN_TENDON = 0, 1, 3
_AFFINE = 1
_GAINS, _BIASES = (0, _AFFINE), (0, _AFFINE)


def load_mjcf(
    source: str | os.PathLike | mujoco.MjModel,
    planar: bool | None = None,
    unsupported: str = "error",
    frictionloss: str | None = None,
    active: dict[str, bool] | None = None,
) -> Mechanism:
    """Build a `Mechanism` from MJCF: a file path, the XML text itself (a string starting with
    ``<``) or a compiled ``mujoco.MjModel``. See the module docstring for the mapping. ``planar``:
    None detects it, True or False forces it. ``unsupported``: ``"error"`` raises one
    ``ValueError`` listing every feature loopdyn cannot represent; ``"warn"`` loads the model
    without them and warns once with the list (flexes are refused either way).
    ``frictionloss="smooth"`` loads a hinge's or slide's ``frictionloss`` as the smooth law of
    `loopdyn.forces.joint_forces` (not MuJoCo's dry-friction constraint at low speed); None
    counts it as unsupported. ``active`` switches equalities on or off by name (``{"pin":
    True}``), where the file's ``active`` attribute says otherwise; `loopdyn.switch_equalities`
    switches them on the loaded mechanism (an equality that is off is kept, imposing
    nothing)."""
    return _load(source, planar, unsupported, frictionloss, active)[0]


def world_rotation(
    source: str | os.PathLike | mujoco.MjModel,
    planar: bool | None = None,
    unsupported: str = "error",
    frictionloss: str | None = None,
    active: dict[str, bool] | None = None,
) -> np.ndarray:
    """The constant rotation ``R`` that `load_mjcf` (same arguments) turns the file's world by:
    identity, unless the model is a planar mechanism drawn outside the xy-plane. A loaded body's
    pose ``(p, R_b)`` is the file's ``(R.T @ p, R.T @ R_b @ R)``; a world vector ``v`` of the file
    (a force, a point) is ``R @ v`` in the loaded mechanism."""
    return _load(source, planar, unsupported, frictionloss, active)[1]


class Keyframe(NamedTuple):
    """A ``<keyframe><key>`` of the file: its ``time`` (s), the configuration ``q`` and velocity
    ``v`` (MuJoCo's ``qpos`` and ``qvel``, which are loopdyn's for the loaded mechanism) and the
    actuator inputs ``ctrl``."""

    time: float
    q: np.ndarray
    v: np.ndarray
    ctrl: np.ndarray


def keyframes(source: str | os.PathLike | mujoco.MjModel) -> dict[str, Keyframe]:
    """The file's keyframes by name (unnamed ones ``key<id>``), as states of the mechanism
    `load_mjcf` builds from the same source: ``loopdyn.simulate(mech, key.q, key.v, ...)``."""
    model = _compile(source)
    return {
        _name(model, "key", k): Keyframe(
            float(model.key_time[k]),
            model.key_qpos[k].copy(),
            model.key_qvel[k].copy(),
            model.key_ctrl[k].copy(),
        )
        for k in range(model.nkey)
    }


def _load(source, planar, unsupported, frictionloss, active):
    """The mechanism and the rotation of the file's world into loopdyn's."""
    if frictionloss not in (None, "smooth"):
        raise ValueError(f"frictionloss must be None or 'smooth', got {frictionloss!r}")
    model = _switched(_compile(source), active or {})
    dropped = _refuse_unsupported(model, unsupported, frictionloss)
    frames = _frames(model)
    joints, massless = _tree_joints(model, frames, dropped, frictionloss)
    cuts = _cut_joints(model, frames, dropped)
    gravity = np.zeros(3) if model.opt.disableflags & _DSBL_GRAVITY else model.opt.gravity.copy()
    normal = _plane_normal(model)
    turn = np.eye(3) if planar is False else _plane_rotation(normal, gravity)
    specs = [_turned_spec(turn, spec) for spec in joints + cuts]
    drawn = _inertias(model, frames)
    inertias = {
        name: (mass, turn @ com, turn @ inertia @ turn.T)
        for name, (mass, com, inertia) in drawn.items()
    }
    misfit = _planar_misfit([s for s in specs if s.get("active", True)], turn @ gravity)
    if misfit and normal is not None and abs(gravity @ normal) > _TOL:
        misfit = f"gravity {gravity.tolist()} is not in the plane of motion"
    if planar and misfit:
        raise ValueError(f"the MJCF model is not planar: {misfit}")
    # A connect's extra row is dropped, not a weld's.
    welded = any(s["kind"] != "connect" and s["active"] for s in cuts)
    if planar is None and misfit and welded and normal is not None:
        raise ValueError(
            f"the mechanism moves in planes normal to {normal.round(12).tolist()}, but "
            f"{misfit}: built as a spatial model its weld constraints would be redundant. Keep "
            "gravity in the plane (or none) and body frames turned about its normal only, or "
            "pass planar=False to build it spatially anyway"
        )
    planar = misfit is None if planar is None else planar
    if not planar:
        turn, specs, inertias = np.eye(3), joints + cuts, drawn
    if planar and np.any(turn != np.eye(3)):  # turned: up is against gravity, exactly
        gravity = np.array([0.0, -np.linalg.norm(gravity), 0.0])
    elif planar:
        gravity[2] = 0.0  # in the plane up to rounding: the builder wants it exactly
    builder = MechanismBuilder(planar=planar, gravity=gravity)
    gravcomp = _gravcomp(model, frames)
    for name, (mass, com, inertia) in inertias.items():
        builder.add_body(name, mass=mass, com=com, inertia=inertia, gravcomp=gravcomp.get(name, 0))
    for name in massless:
        builder.add_frame(name)
    for spec in specs:
        if spec["kind"] == "connect":
            spec = {**spec, "kind": "revolute" if planar else "spherical"}
        builder.add_joint(**spec)
    for spec in _couplings(model, dropped):
        builder.add_coupling(**spec)
    for a in range(model.nu):
        if ("actuator", a) not in dropped:
            builder.add_actuator(**_actuator(model, a))
    q0 = {
        key: model.qpos0[model.jnt_qposadr[j] + k]
        for j in range(model.njnt)
        for k, key in enumerate(_configuration_names(model, j))
    }
    mech = dataclasses.replace(builder.build(q0=q0), axis_names=_axis_names(turn))
    _warn_open_connects(model)
    _warn_actuator_force_ranges(model, dropped)
    return mech, turn


def _configuration_names(model, j):
    """loopdyn's names of joint ``j``'s entries of ``qpos`` (`Mechanism.configuration_names`)."""
    name, kind = _name(model, "joint", j), model.jnt_type[j]
    quaternion = [f"{name}[q{axis}]" for axis in "wxyz"]
    return {
        _FREE: [f"{name}[{k}]" for k in range(3)] + quaternion,
        _BALL: quaternion,
    }.get(kind, [name])


def _switched(model, active):
    """``model`` with its equalities' ``eq_active0`` set by name from ``active`` (a copy when
    anything changes)."""
    names = [_name(model, "equality", e) for e in range(model.neq)]
    unknown = sorted(set(active) - set(names))
    if unknown:
        raise ValueError(f"active: unknown equalities {unknown}; the model has {names}")
    if not active:
        return model
    model = copy.copy(model)
    for name, on in active.items():
        model.eq_active0[names.index(name)] = bool(on)
    return model


def _compile(source):
    try:
        import mujoco
    except ImportError as err:
        raise ImportError("load_mjcf reads MJCF with MuJoCo's parser: pip install mujoco") from err
    if isinstance(source, mujoco.MjModel):
        return source
    if isinstance(source, str) and source.lstrip().startswith("<"):
        load, what, arg = mujoco.MjModel.from_xml_string, "the MJCF text", source
    else:
        arg = os.fspath(source)
        if not os.path.isfile(arg):
            raise FileNotFoundError(f"no MJCF file at {arg!r}")
        load, what = mujoco.MjModel.from_xml_path, repr(arg)
    try:
        return load(arg)
    except ValueError as err:
        raise ValueError(f"MuJoCo could not compile {what}: {err}") from err


def _name(model, kind, i):
    """MuJoCo's name of element ``i`` of ``kind`` ("body", "joint", ...), or ``<kind><i>``."""
    import mujoco

    if kind == "body" and i == 0:
        return GROUND
    return (
        mujoco.mj_id2name(model, getattr(mujoco.mjtObj, f"mjOBJ_{kind.upper()}"), i) or f"{kind}{i}"
    )


class _Unsupported(NamedTuple):
    """One feature loopdyn cannot represent: what it is, whether loading may go on without it
    (``ignorable``: the element is dropped, or its effect left out), and the element dropped
    (``("equality", e)``, ``("actuator", a)``) or ``None``."""

    message: str
    ignorable: bool = True
    drop: tuple[str, int] | None = None


def _unsupported(model, frictionloss) -> list[_Unsupported]:
    """Every element loopdyn cannot represent, in the file's order of kinds."""
    out = [
        _Unsupported(f"{kind} {_name(model, kind, i)!r}: {why}", ignorable)
        for kind, count, why, ignorable in (
            ("flex", model.nflex, "deformable bodies are not supported", False),
            ("pair", model.npair, "loopdyn has no contact (explicit contact pair)", True),
        )
        for i in range(count)
    ]
    if model.opt.density or model.opt.viscosity or np.any(model.opt.wind):
        out.append(_Unsupported("option density/viscosity/wind: fluid forces are not supported"))
    for b in range(1, model.nbody):
        if model.body_mocapid[b] >= 0:
            out.append(
                _Unsupported(f"body {_name(model, 'body', b)!r} is a mocap body (held fixed)")
            )
    out += _gravcomp_problems(model)
    for j in range(model.njnt):
        out += _joint_problems(model, j, frictionloss)
    out += [
        _Unsupported(f"tendon {_name(model, 'tendon', t)!r} {why}") for t, why in _tendons(model)
    ]
    limited = [repr(_name(model, "joint", j)) for j in range(model.njnt) if model.jnt_limited[j]]
    if limited:
        warnings.warn(
            "joint limits (range) are ignored, loopdyn does not enforce them (simulate warns "
            f"when a saved state passes a hinge's or slide's): joint(s) {', '.join(limited)}",
            stacklevel=5,  # load_mjcf's caller
        )
    off = model.opt.disableflags & (_DSBL_CONSTRAINT | _DSBL_EQUALITY)
    for e in range(model.neq):
        name, kind = _name(model, "equality", e), _EQ_TYPES[model.eq_type[e]]
        why = (
            "equality constraints are disabled by <flag>"
            if off
            else f"a {kind} constraint (only connect, weld, joint and fixed-tendon ones load)"
            if kind not in ("connect", "weld", "joint", "tendon")
            or kind == "tendon"
            and not all(_fixed(model, t) for t in _objects(model, e))
            else "constrains neither bodies nor sites"
            if kind in ("connect", "weld") and model.eq_objtype[e] not in (_OBJ_BODY, _OBJ_SITE)
            else None
        )
        if why:
            out.append(_Unsupported(f"equality {name!r}: {why}", drop=("equality", e)))
    for a in range(model.nu):
        why = _actuator_problem(model, a)
        if why:
            out.append(
                _Unsupported(
                    f"actuator {_name(model, 'actuator', a)!r} {why}", drop=("actuator", a)
                )
            )
    return out


def _refuse_unsupported(model, unsupported, frictionloss):
    """Raise one ``ValueError`` listing every unsupported feature (``unsupported="error"``), or
    warn once listing what the loaded mechanism leaves out (``"warn"``); features that cannot be
    left out (flexes) are refused either way. Returns the elements to drop."""
    if unsupported not in ("error", "warn"):
        raise ValueError(f"unsupported must be 'error' or 'warn', got {unsupported!r}")
    problems = _unsupported(model, frictionloss)
    listed = "".join(f"\n  - {p.message}" for p in problems)
    if any(not p.ignorable for p in problems) or (problems and unsupported == "error"):
        hint = (
            ""
            if any(not p.ignorable for p in problems)
            else "\nload_mjcf(..., unsupported='warn') loads it without them"
        )
        raise ValueError(
            f"the MJCF model uses {len(problems)} feature(s) loopdyn cannot represent:{listed}{hint}"
        )
    if problems:
        warnings.warn(
            f"loading without {len(problems)} unsupported feature(s); the simulation leaves "
            f"them out (their forces, contacts and constraints do not act):{listed}",
            stacklevel=4,  # load_mjcf's caller
        )
    return {p.drop for p in problems if p.drop}


def _fixed(model, t):
    """Whether tendon ``t`` is a fixed tendon: a linear combination of joint coordinates."""
    wraps = model.wrap_type[model.tendon_adr[t] : model.tendon_adr[t] + model.tendon_num[t]]
    return bool(np.all(wraps == _WRAP_JOINT))


def _tendons(model):
    """``(tendon, why)`` for every tendon loopdyn cannot represent: spatial ones, and passive
    forces of fixed ones (a fixed tendon only enters equalities)."""
    out = []
    for t in range(model.ntendon):
        passive = [
            what
            for what in ("stiffness", "damping", "frictionloss", "armature")
            if hasattr(model, f"tendon_{what}") and np.any(getattr(model, f"tendon_{what}")[t])
        ]
        if not _fixed(model, t):
            out.append((t, "is a spatial tendon (only fixed tendons, of joints, are supported)"))
        elif passive:
            out.append((t, f"has {', '.join(passive)} (tendon forces are not supported)"))
    return out


def _tendon_terms(model, t):
    """Fixed tendon ``t`` as ``{joint name: coefficient}``: its length is their sum of products."""
    wraps = range(model.tendon_adr[t], model.tendon_adr[t] + model.tendon_num[t])
    return {_name(model, "joint", model.wrap_objid[w]): float(model.wrap_prm[w]) for w in wraps}


def _objects(model, e):
    """The one or two elements equality ``e`` constrains (an absent second one is -1)."""
    return [k for k in (model.eq_obj1id[e], model.eq_obj2id[e]) if k >= 0]


def _joint_problems(model, j, frictionloss):
    name, kind = _name(model, "joint", j), model.jnt_type[j]
    dofs = slice(model.jnt_dofadr[j], model.jnt_dofadr[j] + _DOFS[kind])
    turned = kind in (_BALL, _FREE)  # a quaternion: no linear stiffness about springref
    smooth = not turned and frictionloss == "smooth"
    friction = (
        () if model.opt.disableflags & _DSBL_FRICTIONLOSS or smooth else ("dof_frictionloss",)
    )
    return [
        _Unsupported(f"joint {name!r} has {what}")
        for what, fields, index in (
            ("stiffness", ("jnt_stiffness",) if turned else (), j),
            ("polynomial stiffness", ("jnt_stiffnesspoly",), j),
            ("polynomial damping", ("dof_dampingpoly",), dofs),
            (
                "frictionloss (MuJoCo's dry-friction constraint"
                + (")" if turned else "; frictionloss='smooth' loads a smooth approximation)"),
                friction,
                dofs,
            ),
        )
        if any(np.any(getattr(model, f)[index]) for f in fields if hasattr(model, f))
    ]


def _gravcomp_problems(model):
    """Bodies welded into one loopdyn body (`_frames`) whose ``gravcomp`` differ: loopdyn holds
    one fraction per body."""
    parts = {}
    for b in range(1, model.nbody):
        if model.body_mass[b] > 0:
            parts.setdefault(_owner(model, b), set()).add(float(model.body_gravcomp[b]))
    return [
        _Unsupported(
            f"body {_name(model, 'body', b)!r}: the bodies welded into it have different "
            f"gravcomp {sorted(fractions)} (loopdyn holds one fraction per body)",
            ignorable=False,
        )
        for b, fractions in parts.items()
        if b > 0 and len(fractions) > 1
    ]


def _owner(model, b):
    """The moving MuJoCo body that body ``b`` is welded into (itself if it has joints; 0: the
    world)."""
    while b > 0 and model.body_jntnum[b] == 0:
        b = model.body_parentid[b]
    return b


def _gravcomp(model, frames):
    """Each moving body's ``gravcomp`` (one value over its welded parts, `_gravcomp_problems`)."""
    return {
        frames[b][0]: float(model.body_gravcomp[b])
        for b in range(1, model.nbody)
        if model.body_mass[b] > 0 and _owner(model, b) > 0
    }


def _actuator_problem(model, a):
    """Why actuator ``a`` is not one `loopdyn.actuators` models (no activation dynamics, a fixed
    or affine gain and bias, a hinge or slide joint or a fixed tendon transmission), or None."""
    if model.actuator_trntype[a] == _TRN_TENDON:
        if not _fixed(model, model.actuator_trnid[a, 0]):
            return "acts on a spatial tendon (only joints and fixed tendons are supported)"
    elif model.actuator_trntype[a] not in (_TRN_JOINT, _TRN_JOINTINPARENT):
        return "does not act on a joint or a fixed tendon (only those are supported)"
    if model.actuator_dyntype[a] != 0:  # mjDYN_NONE
        return "has activation dynamics (dyntype other than none): loopdyn has no actuator state"
    if model.actuator_gaintype[a] not in _GAINS or model.actuator_biastype[a] not in _BIASES:
        return "has a gain or bias other than fixed/affine (muscle, user or another model)"
    if any(
        np.any(getattr(model, f)[a])
        for f in ("actuator_armature", "actuator_damping", "actuator_dampingpoly", "actuator_delay")
        if hasattr(model, f)
    ):  # fields of MuJoCo >= 4
        return "has armature, damping or a delay"
    if hasattr(model, "actuator_ctrlnum") and model.actuator_ctrlnum[a] != 1:
        return f"takes {model.actuator_ctrlnum[a]} controls (only one per actuator)"
    j = model.actuator_trnid[a, 0]
    if model.actuator_trntype[a] != _TRN_TENDON and model.jnt_type[j] not in (_SLIDE, _HINGE):
        kind = _JOINT_KINDS[model.jnt_type[j]]
        return f"drives the {kind} joint {_name(model, 'joint', j)!r} (only hinges and slides)"
    return None


def _actuator(model, a):
    """Keyword arguments of `MechanismBuilder.add_actuator` for actuator ``a``: gain and bias as
    affine laws (zeros where the type is fixed or none); no control clamp where ``<flag
    clampctrl="disable"/>``."""
    affine_gain = float(model.actuator_gaintype[a] == _AFFINE)
    affine_bias = float(model.actuator_biastype[a] == _AFFINE)
    clamped = model.actuator_ctrllimited[a] and not model.opt.disableflags & _DSBL_CLAMPCTRL
    return {
        "name": _name(model, "actuator", a),
        "joint": (
            _tendon_terms(model, model.actuator_trnid[a, 0])
            if model.actuator_trntype[a] == _TRN_TENDON
            else _name(model, "joint", model.actuator_trnid[a, 0])
        ),
        "gear": float(model.actuator_gear[a, 0]),
        "gain": model.actuator_gainprm[a, :3] * (1.0, affine_gain, affine_gain),
        "bias": model.actuator_biasprm[a, :3] * affine_bias,
        "ctrlrange": model.actuator_ctrlrange[a] if clamped else None,
        "forcerange": model.actuator_forcerange[a] if model.actuator_forcelimited[a] else None,
    }


def _quat_matrix(quat):
    w, x, y, z = np.asarray(quat, dtype=np.float64) / np.linalg.norm(quat)
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    )


def _axis_angle(axis, angle):
    k = np.array([[0, -axis[2], axis[1]], [axis[2], 0, -axis[0]], [-axis[1], axis[0], 0]])
    return np.eye(3) + np.sin(angle) * k + (1 - np.cos(angle)) * (k @ k)


def _place(model, frames, b):
    """Body ``b``'s frame in the loopdyn body its parent belongs to: (name, rotation, origin)."""
    owner, rotation, origin = frames[model.body_parentid[b]]
    return owner, rotation @ _quat_matrix(model.body_quat[b]), origin + rotation @ model.body_pos[b]


def _frames(model):
    """For every MuJoCo body: the loopdyn body it belongs to and its frame's pose there."""
    frames = [(GROUND, np.eye(3), np.zeros(3))]
    for b in range(1, model.nbody):  # parents come first in MuJoCo's body order
        moving = model.body_jntnum[b] > 0
        frames.append(
            (_name(model, "body", b), np.eye(3), np.zeros(3))
            if moving
            else _place(model, frames, b)
        )
    return frames


def _inertias(model, frames):
    """Mass, centre of mass and inertia about it of every moving body, its welded bodies merged."""
    parts = {}
    for b in range(1, model.nbody):
        owner, rotation, origin = frames[b]
        if owner != GROUND:
            turn = rotation @ _quat_matrix(model.body_iquat[b])
            parts.setdefault(owner, []).append(
                (
                    model.body_mass[b],
                    origin + rotation @ model.body_ipos[b],
                    turn @ np.diag(model.body_inertia[b]) @ turn.T,
                )
            )
    merged = {}
    for owner, items in parts.items():
        mass = sum(m for m, _, _ in items)
        com = sum(m * c for m, c, _ in items) / mass
        inertia = sum(
            i + m * (np.dot(c - com, c - com) * np.eye(3) - np.outer(c - com, c - com))
            for m, c, i in items
        )
        merged[owner] = (mass, com, (inertia + inertia.T) / 2)
    return merged


def _tree_joints(model, frames, dropped, frictionloss):
    """Keyword arguments of `MechanismBuilder.add_joint` for every MuJoCo joint, in body order,
    and the names of the massless bodies between the joints of multi-joint bodies. A joint is
    actuated (its input the generalized force) when a motor drives it: an actuator of fixed
    gain and no bias."""
    actuated = {
        model.actuator_trnid[a, 0]
        for a in range(model.nu)
        if ("actuator", a) not in dropped
        and model.actuator_trntype[a] != _TRN_TENDON
        and (model.actuator_gaintype[a], model.actuator_biastype[a]) == (0, 0)
    }
    specs, massless = [], []
    for b in range(1, model.nbody):
        first, count = model.body_jntadr[b], model.body_jntnum[b]
        if count == 0:
            continue
        parent, rotation, origin = _place(model, frames, b)
        body = frames[b][0]
        links = [parent] + [f"{body}[{k}]" for k in range(count - 1)] + [body]
        massless += links[1:-1]
        for k, j in enumerate(range(first, first + count)):
            kind, axis, anchor = model.jnt_type[j], model.jnt_axis[j], model.jnt_pos[j]
            ref = model.qpos0[model.jnt_qposadr[j]] if kind in (_HINGE, _SLIDE) else 0.0
            if kind == _FREE:  # MuJoCo places the body frame in the world by qpos itself
                rotation, origin, anchor = np.eye(3), np.zeros(3), np.zeros(3)
            # Turn (hinge) or shift (slide) the parent's joint frame by -ref: q = qpos.
            specs.append(
                {
                    "name": _name(model, "joint", j),
                    "kind": _JOINT_KINDS[kind],
                    "parent": links[k],
                    "child": links[k + 1],
                    "axis": axis if kind in (_HINGE, _SLIDE) else None,
                    "position": origin
                    + rotation @ (anchor - axis * ref if kind == _SLIDE else anchor),
                    "rotation": rotation @ _axis_angle(axis, -ref) if kind == _HINGE else rotation,
                    "child_position": anchor,
                    "actuated": j in actuated,
                    **_passive(model, j, frictionloss),
                    **(
                        {"limits": model.jnt_range[j].copy()}
                        if model.jnt_limited[j] and kind in (_HINGE, _SLIDE)
                        else {}
                    ),
                }
            )
            rotation, origin = np.eye(3), np.zeros(3)
    return specs, massless


def _passive(model, j, frictionloss):
    """Joint ``j``'s armature and damping, and a hinge's or slide's stiffness, springref
    (``qpos_spring``) and, when ``frictionloss="smooth"`` and MuJoCo applies it, frictionloss.
    MuJoCo gives a ball's or free joint's every velocity the same."""
    dof = model.jnt_dofadr[j]
    elements = {
        "armature": float(model.dof_armature[dof]),
        "damping": float(model.dof_damping[dof]),
    }
    if model.jnt_type[j] in (_BALL, _FREE):
        return elements
    friction = frictionloss == "smooth" and not model.opt.disableflags & _DSBL_FRICTIONLOSS
    return {
        **elements,
        "stiffness": float(model.jnt_stiffness[j]),
        "springref": float(model.qpos_spring[model.jnt_qposadr[j]]),
        "frictionloss": float(model.dof_frictionloss[dof]) if friction else 0.0,
    }


def _couplings(model, dropped):
    """Keyword arguments of `MechanismBuilder.add_coupling` for every joint or fixed-tendon
    equality not ``dropped``: ``y - y0 = poly(x - x0)`` of MuJoCo, ``y0``, ``x0`` at ``qpos0``."""

    def terms(kind, k):
        return {_name(model, "joint", k): 1.0} if kind == "joint" else _tendon_terms(model, k)

    specs = []
    for e in range(model.neq):
        kind = _EQ_TYPES[model.eq_type[e]]
        if ("equality", e) in dropped or kind not in ("joint", "tendon"):
            continue
        first, *second = (terms(kind, k) for k in _objects(model, e))
        specs.append(
            {
                "name": _name(model, "equality", e),
                "first": first,
                "second": second[0] if second else None,
                "polycoef": model.eq_data[e][:5].copy(),
                "active": bool(model.eq_active0[e]),
            }
        )
    return specs


def _cut_joints(model, frames, dropped):
    """Keyword arguments of `MechanismBuilder.add_joint` for every equality constraint not
    ``dropped`` (kind "connect" stands for spherical or planar revolute)."""
    specs = []
    for e in range(model.neq):
        if ("equality", e) in dropped or _EQ_TYPES[model.eq_type[e]] in ("joint", "tendon"):
            continue
        weld, data = model.eq_type[e] == _WELD, model.eq_data[e]
        one, two = model.eq_obj1id[e], model.eq_obj2id[e]
        if model.eq_objtype[e] == _OBJ_SITE:
            bodies = model.site_bodyid[one], model.site_bodyid[two]
            local = [(model.site_pos[s], _quat_matrix(model.site_quat[s])) for s in (one, two)]
        elif weld:  # body1's frame (relpos, relquat) meets body2's anchor (MuJoCo's eq_data)
            bodies, local = (
                (one, two),
                [(data[3:6], _quat_matrix(data[6:10])), (data[0:3], np.eye(3))],
            )
        else:  # the anchor on body1 and its match on body2
            bodies, local = (one, two), [(data[0:3], np.eye(3)), (data[3:6], np.eye(3))]
        ends = []
        for b, (position, turn) in zip(bodies, local):
            owner, rotation, origin = frames[b]
            ends.append(
                (owner, origin + rotation @ position, rotation @ turn if weld else rotation)
            )
        (body_a, position_a, rotation_a), (body_b, position_b, rotation_b) = ends
        name = _name(model, "equality", e)
        if body_a == body_b:  # MuJoCo keeps it as a constraint without rows
            warnings.warn(
                f"equality {name!r} ties bodies {[_name(model, 'body', b) for b in bodies]} "
                f"that are welded together (into {body_a!r}): it constrains nothing and is left "
                "out",
                stacklevel=4,
            )
            continue
        specs.append(
            {
                "name": name,
                # torquescale 0 leaves the rotation free: a point constraint, like a connect.
                "kind": "weld" if weld and data[10] != 0.0 else "connect",
                "parent": body_a,
                "child": body_b,
                "position": position_a,
                "rotation": rotation_a,
                "child_position": position_b,
                "child_rotation": rotation_b,
                "cut": True,
                "active": bool(model.eq_active0[e]),
            }
        )
    return specs


def _plane_normal(model):
    """The common direction of all hinge axes at ``qpos0`` when every slide is perpendicular to it
    and there is no ball joint (the mechanism moves in parallel planes), else None."""
    rotation = [np.eye(3)]
    for b in range(1, model.nbody):
        rotation.append(rotation[model.body_parentid[b]] @ _quat_matrix(model.body_quat[b]))
    world = [rotation[model.jnt_bodyid[j]] @ model.jnt_axis[j] for j in range(model.njnt)]
    hinges = [a for a, kind in zip(world, model.jnt_type) if kind == _HINGE]
    if _BALL in model.jnt_type or _FREE in model.jnt_type or not hinges:
        return None
    normal = hinges[0] / np.linalg.norm(hinges[0])
    in_planes = all(np.linalg.norm(np.cross(a, normal)) < 1e-9 for a in hinges) and all(
        abs(a @ normal) < 1e-9 for a, kind in zip(world, model.jnt_type) if kind == _SLIDE
    )
    return normal if in_planes else None


def _plane_rotation(normal, gravity):
    """The rotation of the world that takes the plane of motion (``normal``; None: no plane) to
    the xy-plane: its rows are the plane's right, up and normal directions. Up is against
    gravity (or the world's z turned into the plane when there is none), the normal's sign makes
    the largest component of right = up x normal positive; an xz-plane with gravity along -z
    becomes (x, y, z) -> (x, z, -y). Identity when the plane is the xy-plane already, or when
    gravity leaves the plane (the model is then not planar)."""
    if (
        normal is None
        or np.linalg.norm(np.cross(normal, _Z)) < _TOL
        or abs(gravity @ normal) > _TOL
    ):
        return np.eye(3)
    up = -gravity if np.linalg.norm(gravity) > _TOL else _Z - (_Z @ normal) * normal
    up = up / np.linalg.norm(up)
    right = np.cross(up, normal)
    if right[np.argmax(np.abs(right))] < 0:
        right, normal = -right, -normal
    return np.array([right, up, normal])


def _axis_names(turn):
    """The file's names of the turned world's axes, the rows of ``turn``: "z" or "-y" where a
    row is a file axis, else its direction in the file's axes, e.g. "(0.6, 0, 0.8)"."""
    names = []
    for row in turn:
        k = int(np.argmax(np.abs(row)))
        if abs(abs(row[k]) - 1.0) < _TOL:
            names.append(("-" if row[k] < 0 else "") + "xyz"[k])
        else:
            names.append("(" + ", ".join(f"{c:.3g}" for c in row + 0.0) + ")")
    return tuple(names)


def _turned_spec(turn, spec):
    """Joint keyword arguments with every frame expressed in axes turned by ``turn``: vectors
    ``turn @ v``, relative rotations ``turn @ R @ turn.T`` (world and body frames alike)."""
    out = dict(spec)
    for key in ("axis", "position", "child_position"):
        if out.get(key) is not None:
            out[key] = turn @ out[key]
    for key in ("rotation", "child_rotation"):
        if key in out:
            out[key] = turn @ out[key] @ turn.T
    return out


def _warn_open_connects(model):
    """Warn of every connect or weld equality whose two ends are apart at ``qpos0``: only sites,
    a weld's ``relpose`` (or a compiled model whose ``eq_data`` was edited) can be, since for
    bodies MuJoCo's compiler puts body2's point where body1's anchor is at ``qpos0``."""
    import mujoco

    data = mujoco.MjData(model)  # at qpos0
    mujoco.mj_kinematics(model, data)
    for e in range(model.neq):
        if _EQ_TYPES[model.eq_type[e]] not in ("connect", "weld"):
            continue
        weld, one, two = model.eq_type[e] == _WELD, model.eq_obj1id[e], model.eq_obj2id[e]
        if model.eq_objtype[e] == _OBJ_SITE:
            points = data.site_xpos[one], data.site_xpos[two]
            frames = [data.site_xmat[s].reshape(3, 3) for s in (one, two)]
        else:
            local = (
                (model.eq_data[e, 3:6], model.eq_data[e, 0:3])
                if weld
                else (model.eq_data[e, 0:3], model.eq_data[e, 3:6])
            )
            points = [
                data.xpos[b] + data.xmat[b].reshape(3, 3) @ p for b, p in zip((one, two), local)
            ]
            if weld:
                turn = _quat_matrix(model.eq_data[e, 6:10])
                frames = data.xmat[one].reshape(3, 3) @ turn, data.xmat[two].reshape(3, 3)
        gap = np.linalg.norm(points[0] - points[1])
        if weld and model.eq_data[e, 10] != 0.0:
            turn = frames[0].T @ frames[1]
            gap = max(gap, np.arccos(np.clip((np.trace(turn) - 1.0) / 2.0, -1.0, 1.0)))
        if gap > _GAP * max(1.0, model.stat.extent):
            kind = "weld (relpose)" if weld else "connect"
            warnings.warn(
                f"equality {_name(model, 'equality', e)!r}: the two ends of this {kind} are "
                f"{gap:.6g} apart at qpos0 (the file does not draw its loop closed; m, or rad "
                "for a weld's turn). MuJoCo pulls them together once it simulates; loopdyn keeps "
                "both ends as drawn, so mech.q0 violates this loop: close the drawing, or "
                "assemble q0 (kinematics.assemble)"
                + ("" if model.eq_active0[e] else " once it is switched on (it is off)"),
                stacklevel=4,  # load_mjcf's caller
            )


def _warn_actuator_force_ranges(model, dropped):
    """Warn of the joints whose ``actuatorfrcrange`` MuJoCo would apply to loaded actuators."""
    driven = {
        model.actuator_trnid[a, 0]
        for a in range(model.nu)
        if ("actuator", a) not in dropped and model.actuator_trntype[a] != _TRN_TENDON
    }
    clamped = [_name(model, "joint", j) for j in sorted(driven) if model.jnt_actfrclimited[j]]
    if clamped:
        warnings.warn(
            f"joints {clamped} clamp their actuators' total force (actuatorfrcrange, or a URDF "
            "joint's effort limit): loopdyn does not, so where the actuators' forces sum beyond "
            "it they differ from MuJoCo's",
            stacklevel=4,  # load_mjcf's caller
        )


def _planar_misfit(specs, gravity):
    """Why the joints (builder keyword arguments) and gravity are not planar, or None."""
    if abs(gravity[2]) > _TOL:
        return f"gravity {gravity.tolist()} has a z component"
    for s in specs:
        name, kind = s["name"], s["kind"]
        if kind in ("spherical", "ball", "free"):
            return f"joint {name!r} is a {kind if kind == 'free' else 'ball'} joint"
        for key in ("rotation", "child_rotation"):
            if key in s and not np.allclose(s[key] @ _Z, _Z, rtol=0.0, atol=_TOL):
                return f"joint {name!r}: its frame turns out of the plane of motion"
        if kind == "revolute" and abs(abs(s["axis"] @ _Z) - 1.0) > _TOL:
            return f"hinge {name!r} has axis {s['axis'].tolist()}, not along z"
        if kind == "prismatic" and abs(s["axis"] @ _Z) > _TOL:
            return f"slide {name!r} has axis {s['axis'].tolist()}, not in the xy-plane"
    return None
