"""URDF import with loop closures.

URDF describes trees only, so the joints that close a mechanism's loops come beside the file:
as `Closure` records in Python, or in a small TOML sidecar file (`read_closures`). MuJoCo's
compiler reads the URDF (links, joints with their origins and axes, inertials, limits; visual and
collision meshes are discarded, so the mesh files need not be present), each closure is added to
the compiled model as a MuJoCo equality (``connect``: the two bodies share a point, a spherical
cut joint, or a revolute one in a planar mechanism; ``weld``: they keep their relative pose), each
joint named in ``actuated`` gets a motor, and the model becomes a `Mechanism` by `load_mjcf`'s
mapping (see `loopdyn.io.mjcf`): the mechanism's bodies and coordinates are the URDF's links and
joints under their own names, and ``q0`` is the configuration the file draws (every joint at 0).

A sidecar file::

    actuated = ["A"]

    [[closure]]
    name = "C"            # the cut joint's name
    body1 = "coupler"     # URDF link names
    body2 = "rocker"
    anchor = [0.3, 0, 0]  # the shared point in body1's frame [m]
    kind = "connect"      # or "weld" (then anchor is body1's point where body2's frame sits)
"""

from __future__ import annotations

import dataclasses
import os
import tomllib

import numpy as np

from ..mechanism import Mechanism
from .mjcf import load_mjcf

KINDS = ("connect", "weld")


@dataclasses.dataclass(frozen=True)
class Closure:
    """A loop-closing joint between links ``body1`` and ``body2``: ``anchor`` [m] in ``body1``'s
    link frame is the shared point (``connect``), or where ``body2``'s frame sits (``weld``, which
    also keeps the two frames' relative orientation as drawn)."""

    name: str
    body1: str
    body2: str
    anchor: tuple[float, float, float] = (0.0, 0.0, 0.0)
    kind: str = "connect"


def read_closures(path: str | os.PathLike) -> tuple[tuple[Closure, ...], tuple[str, ...]]:
    """The closures and actuated joint names of a TOML sidecar file (module docstring)."""
    with open(path, "rb") as file:
        try:
            data = tomllib.load(file)
        except tomllib.TOMLDecodeError as err:
            raise ValueError(f"{os.fspath(path)!r} is not valid TOML: {err}") from None
    unknown = set(data) - {"closure", "actuated"}
    if unknown:
        raise ValueError(
            f"{os.fspath(path)!r}: unknown keys {sorted(unknown)}; expected 'closure', 'actuated'"
        )
    closures = []
    for k, entry in enumerate(data.get("closure", [])):
        fields = {f.name for f in dataclasses.fields(Closure)}
        if set(entry) - fields or not {"name", "body1", "body2"} <= set(entry):
            raise ValueError(
                f"{os.fspath(path)!r}: closure {k} has keys {sorted(entry)}; expected name, body1, "
                "body2 and optionally anchor [m] and kind"
            )
        closures.append(Closure(**{**entry, "anchor": tuple(entry.get("anchor", (0, 0, 0)))}))
    return tuple(closures), tuple(data.get("actuated", ()))


def load_urdf(
    path: str | os.PathLike,
    closures: tuple[Closure, ...] | str | os.PathLike = (),
    actuated: tuple[str, ...] = (),
    planar: bool | None = None,
) -> Mechanism:
    """A `Mechanism` from a URDF file closed by ``closures`` (`Closure` records, or the path of a
    TOML sidecar file, whose ``actuated`` joints are added to ``actuated``). Raises
    ``ValueError`` naming an unknown link or joint, a closure kind that is not ``connect`` or
    ``weld``, and what `load_mjcf` refuses. ``planar`` as in `load_mjcf`."""
    import mujoco

    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no URDF file at {path!r}")
    if not isinstance(closures, tuple | list):
        closures, more = read_closures(closures)
        actuated = tuple(actuated) + more
    try:
        spec = mujoco.MjSpec.from_file(path)
    except ValueError as err:
        raise ValueError(f"MuJoCo could not read the URDF {path!r}: {err}") from err
    spec.compiler.fusestatic = False  # keep every link, also those without a joint
    links = [b.name for b in spec.bodies if b.name != "world"]
    joints = [j.name for j in spec.joints]
    for closure in closures:
        for link in (closure.body1, closure.body2):
            if link not in links:
                raise ValueError(f"closure {closure.name!r}: unknown link {link!r}; links: {links}")
        if closure.kind not in KINDS:
            raise ValueError(
                f"closure {closure.name!r}: kind must be one of {KINDS}, got {closure.kind!r}"
            )
        equality = spec.add_equality()
        equality.name = closure.name
        equality.type = getattr(mujoco.mjtEq, f"mjEQ_{closure.kind.upper()}")
        equality.objtype = mujoco.mjtObj.mjOBJ_BODY
        equality.name1, equality.name2 = closure.body1, closure.body2
        data = np.zeros(len(equality.data))
        data[:3] = np.asarray(closure.anchor, dtype=float)
        if closure.kind == "weld":  # relative pose left zero: MuJoCo takes it from qpos0
            data[10] = 1.0  # torquescale
        equality.data = data
    for name in actuated:
        if name not in joints:
            raise ValueError(f"actuated joint {name!r} is not in the URDF; joints: {joints}")
        motor = spec.add_actuator()
        motor.name, motor.target = name, name
        motor.trntype = mujoco.mjtTrn.mjTRN_JOINT
    try:
        model = spec.compile()
    except ValueError as err:
        raise ValueError(f"MuJoCo could not compile the URDF {path!r}: {err}") from err
    return load_mjcf(model, planar)
