"""Shared construction helpers of the example mechanisms (private).

Every factory describes its mechanism *in an assembled pose*: where each body frame is and where
each joint is, in world coordinates. Joint placements on both bodies follow from that, so the
reference configuration ``q0`` closes every loop by construction (to rounding), and no iteration
is needed except where a seed prints a configuration that does not close exactly (the 3-RRR).
"""

from __future__ import annotations

import math

import equinox as eqx
import numpy as np

from .. import compilation, kinematics
from ..mechanism import GROUND, Mechanism, MechanismBuilder

# compiled once per topology, as one state's program (`compilation.SINGLE_STATE`)
_try_assemble = compilation.jit(kinematics.try_assemble, options=compilation.SINGLE_STATE)


def wrap(angle: float) -> float:
    """Angle in (-pi, pi]."""
    return math.pi - (math.pi - angle) % (2.0 * math.pi)


def unit(angle: float) -> np.ndarray:
    """Planar unit vector at ``angle`` from the x axis."""
    return np.array([math.cos(angle), math.sin(angle)])


def circle_intersection(c1, r1, c2, r2, side: float) -> np.ndarray:
    """The point at distance ``r1`` from ``c1`` and ``r2`` from ``c2`` on the left (``side=+1``)
    or right (``-1``) of the direction ``c1 -> c2``; ``ValueError`` when the circles miss."""
    c1, c2 = np.asarray(c1, float), np.asarray(c2, float)
    d = np.linalg.norm(c2 - c1)
    if not abs(r1 - r2) <= d <= r1 + r2:
        raise ValueError(
            f"links of lengths {r1:g} and {r2:g} cannot span the distance {d:g}: "
            "the loop cannot close at this input"
        )
    along = (d * d + r1 * r1 - r2 * r2) / (2.0 * d)
    e = (c2 - c1) / d
    across = side * math.sqrt(max(r1 * r1 - along * along, 0.0))
    return c1 + along * e + across * np.array([-e[1], e[0]])


def assembled(mech: Mechanism, fixed) -> Mechanism:
    """``mech`` with ``q0`` replaced by the closed configuration that Newton's method reaches from
    it, holding the ``fixed`` coordinates (`kinematics.try_assemble`; to 1e-12 in float64, to
    1e-5 where float64 is not enabled)."""
    tol = 1e-12 if mech.q0.dtype == np.float64 else 1e-5
    result = _try_assemble(mech, mech.q0, fixed, tol)
    if not bool(result.converged):
        raise ValueError(
            f"the loops do not close from the given configuration (|Phi| = "
            f"{float(result.residual):.3e}): check the lengths"
        )
    return eqx.tree_at(lambda m: m.q0, mech, result.q)


def rod_inertia(mass: float, length: float) -> float:
    """Centroidal moment of inertia ``m L^2 / 12`` of a uniform slender rod."""
    return mass * length**2 / 12.0


class PlanarSketch:
    """A planar mechanism drawn in an assembled pose: each body frame has a world origin and
    angle; each joint a world point. Revolute coordinates are the angle of the child frame from
    the parent frame (absolute for joints on the ground, wrapped to (-pi, pi] otherwise);
    prismatic coordinates the distance of the child origin along the parent's x axis."""

    def __init__(self, gravity=None):
        self.builder = MechanismBuilder(planar=True, gravity=gravity)
        self.poses = {GROUND: (np.zeros(2), 0.0)}
        self.q0 = {}

    def body(self, name, origin, angle, mass, com=(0.0, 0.0), inertia=None):
        """Body with frame at ``origin`` turned by ``angle``; ``com`` in body coordinates."""
        self.builder.add_body(name, mass, com=(*com, 0.0), inertia=inertia)
        self.poses[name] = (np.asarray(origin, float), float(angle))

    def local(self, body, point) -> tuple[float, float, float]:
        """Body coordinates of a world point."""
        origin, angle = self.poses[body]
        x, y = np.asarray(point, float) - origin
        c, s = math.cos(angle), math.sin(angle)
        return (c * x + s * y, -s * x + c * y, 0.0)

    def revolute(self, name, parent, child, point, cut=False, actuated=False):
        self.builder.add_joint(
            name,
            "revolute",
            parent,
            child,
            position=self.local(parent, point),
            child_position=self.local(child, point),
            cut=cut,
            actuated=actuated,
        )
        if not cut:
            turn = self.poses[child][1] - self.poses[parent][1]
            self.q0[name] = turn if parent == GROUND else wrap(turn)

    def prismatic(self, name, parent, child, point=None, actuated=False):
        """Slider along the parent's x axis through ``point`` (default: the parent's origin) to
        the child's origin; the two frames must be parallel in the drawn pose."""
        (o_p, a_p), (o_c, a_c) = self.poses[parent], self.poses[child]
        start = self.local(parent, o_p if point is None else point)
        offset = np.subtract(self.local(parent, o_c), start)
        if abs(wrap(a_c - a_p)) > 1e-12 or abs(offset[1]) > 1e-12:
            raise ValueError(
                f"prismatic joint {name!r}: the origin of {child!r} must lie on the x "
                f"axis of {parent!r} through {point}, with the same orientation"
            )
        self.builder.add_joint(name, "prismatic", parent, child, position=start, actuated=actuated)
        self.q0[name] = float(offset[0])

    def build(self) -> Mechanism:
        return self.builder.build(q0=self.q0)


def frame_along(direction) -> np.ndarray:
    """A rotation whose z column is the unit ``direction`` (x column horizontal where possible)."""
    z = np.asarray(direction, float) / np.linalg.norm(direction)
    helper = np.array([0.0, 0.0, 1.0]) if abs(z[2]) < 0.9 else np.array([1.0, 0.0, 0.0])
    x = np.cross(helper, z)
    x /= np.linalg.norm(x)
    return np.column_stack([x, np.cross(z, x), z])


def bar(mass: float, start, end, radius: float):
    """World centre of mass and centroidal inertia (3x3, world axes) of a uniform solid cylinder
    of ``radius`` from ``start`` to ``end``."""
    start, end = np.asarray(start, float), np.asarray(end, float)
    length = np.linalg.norm(end - start)
    d = (end - start) / length
    along = np.outer(d, d)
    return (start + end) / 2, (
        mass * (3 * radius**2 + length**2) / 12 * (np.eye(3) - along) + mass * radius**2 / 2 * along
    )


class SpatialSketch:
    """A spatial mechanism drawn in an assembled pose with every body frame parallel to the world
    axes: revolute, universal and spherical coordinates are zero in the drawn pose (rotations
    from it), prismatic ones the distance between the two bodies' origins."""

    def __init__(self, gravity=None):
        self.builder = MechanismBuilder(planar=False, gravity=gravity)
        self.origins = {GROUND: np.zeros(3)}
        self.q0 = {}

    def body(self, name, origin, mass, com, inertia):
        """Body with frame origin ``origin``; ``com`` and ``inertia`` in world axes."""
        self.origins[name] = np.asarray(origin, float)
        self.builder.add_body(
            name, mass, com=np.asarray(com, float) - self.origins[name], inertia=inertia
        )

    def joint(
        self, name, kind, parent, child, point, axis=None, frame=None, cut=False, actuated=False
    ):
        """Joint at world ``point``; ``frame``: world rotation of the joint frame (its axes carry
        ``axis`` and the revolute chains of universal and spherical joints)."""
        point = np.asarray(point, float)
        self.builder.add_joint(
            name,
            kind,
            parent,
            child,
            axis=axis,
            position=point - self.origins[parent],
            rotation=frame,
            child_position=point - self.origins[child],
            child_rotation=frame,
            cut=cut,
            actuated=actuated,
        )

    def prismatic(self, name, parent, child, actuated=False):
        """Slider from the parent's origin along the line to the child's origin."""
        d = self.origins[child] - self.origins[parent]
        self.builder.add_joint(name, "prismatic", parent, child, axis=d, actuated=actuated)
        self.q0[name] = float(np.linalg.norm(d))

    def build(self) -> Mechanism:
        return self.builder.build(q0=self.q0)
