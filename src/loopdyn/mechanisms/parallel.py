"""Parallel manipulators: the planar 3-RRR of seeds 004 and 000 and the spatial 6-UPS
Stewart-Gough platform. Geometry and assumptions: docs/mechanisms.md.
"""

from __future__ import annotations

import math

import numpy as np

from ..mechanism import GROUND, Mechanism, MechanismBuilder
from ._sketch import SpatialSketch, assembled, bar, frame_along, wrap

# -------------------------------------------------------------------------------------------------
# The 3-RRR planar parallel manipulator (seed 004 §4-5, Table I; seed 000 §4.2, Tables 1-2,
# Appendix A.2), in seed 000's spanning tree.
#
# Links follow seed 000's numbering: #1 proximal, #2 distal and #3 platform of leg I, #4 and #5 the
# distal links of legs II and III hanging from the platform (subsystem I); #6 and #7 the proximal
# links of legs II and III (subsystems II and III). Coordinates ``theta1`` ... ``theta7`` are seed
# 000's joint angles: ``theta1``, ``theta6``, ``theta7`` the actuated base angles (absolute), the
# others relative. Cut joints 6 (#4-#6) and 7 (#5-#7). See docs/mechanisms.md.

#: Seed 004 §5.1: actuated base angles of legs I, II, III (theta1-theta3 there).
ACTUATED = (math.pi / 3, 4 * math.pi / 3, 11 * math.pi / 6)
#: Seed 004 §5.1: relative distal angles of legs I-III (theta4-theta6 there) and the platform's
#: centroid x7, y7 and angle theta7 (the direction of its side from leg I's joint to leg II's).
PASSIVE = (-0.865, -2.102, -0.976)
PLATFORM = (0.728, 0.233, 3.916)


def seed000_angles(actuated=ACTUATED, passive=PASSIVE, platform_angle=PLATFORM[2]):
    """Seed 004's joint angles as seed 000's coordinates ``theta1`` ... ``theta7``."""
    (t1, t2, t3), (t4, t5, t6) = actuated, passive
    return {
        "theta1": t1,
        "theta2": wrap(t4),
        "theta3": wrap(platform_angle - t1 - t4),
        "theta4": wrap(t2 + t5 + math.pi - platform_angle),
        "theta5": wrap(t3 + t6 + math.pi - platform_angle - math.pi / 3),
        "theta6": t2,
        "theta7": t3,
    }


def three_rrr(
    actuated=ACTUATED,
    *,
    base_side: float = 1.0,
    proximal_length: float = 0.4,
    proximal_mass: float = 3.0,
    proximal_inertia: float = 0.04,
    distal_length: float = 0.6,
    distal_mass: float = 4.0,
    distal_inertia: float = 0.12,
    platform_side: float = 0.4,
    platform_mass: float = 8.0,
    platform_inertia: float = 0.0817,
) -> Mechanism:
    """The 3-RRR assembled with its base angles at ``actuated`` (legs I, II, III; seed 004 §5.1),
    from seed 004's passive angles by Newton's method.

    Fixed pivots at the vertices (0, 0), (s, 0), (s/2, s sqrt(3)/2) of the base triangle of side
    ``base_side`` (1 m, reconstructed from seed 004 §5.1); links are uniform (COM at mid-length),
    the platform's COM at its centroid; inertias are centroidal (seed 004 Table I). Gravity -y.
    Subsystems {#1, #2, #3, #4, #5}, {#6}, {#7}: J has the blocks of seed 000 eq. 37.
    """
    lp, ld, lt = proximal_length, distal_length, platform_side
    pivots = ((0.0, 0.0), (base_side, 0.0), (base_side / 2, base_side * math.sqrt(3) / 2))
    b = MechanismBuilder(planar=True)
    proximal = {"mass": proximal_mass, "com": (lp / 2, 0, 0), "inertia": proximal_inertia}
    distal = {"mass": distal_mass, "com": (ld / 2, 0, 0), "inertia": distal_inertia}
    b.add_body("proximal1", **proximal)
    b.add_body("distal2", **distal)
    b.add_body(
        "platform3",
        platform_mass,
        com=(lt / 2, lt / (2 * math.sqrt(3)), 0),
        inertia=platform_inertia,
    )
    b.add_body("distal4", **distal)
    b.add_body("distal5", **distal)
    b.add_body("proximal6", **proximal)
    b.add_body("proximal7", **proximal)
    # Platform frame: origin at leg I's vertex, x along the side to leg II's vertex.
    b.add_joint("theta1", "revolute", GROUND, "proximal1", position=(*pivots[0], 0), actuated=True)
    b.add_joint("theta2", "revolute", "proximal1", "distal2", position=(lp, 0, 0))
    b.add_joint("theta3", "revolute", "distal2", "platform3", position=(ld, 0, 0))
    b.add_joint("theta4", "revolute", "platform3", "distal4", position=(lt, 0, 0))
    b.add_joint(
        "theta5",
        "revolute",
        "platform3",
        "distal5",
        position=(lt / 2, lt * math.sqrt(3) / 2, 0),
        rotation=math.pi / 3,
    )
    b.add_joint("theta6", "revolute", GROUND, "proximal6", position=(*pivots[1], 0), actuated=True)
    b.add_joint("theta7", "revolute", GROUND, "proximal7", position=(*pivots[2], 0), actuated=True)
    b.add_joint(
        "joint6",
        "revolute",
        "distal4",
        "proximal6",
        position=(ld, 0, 0),
        child_position=(lp, 0, 0),
        cut=True,
    )
    b.add_joint(
        "joint7",
        "revolute",
        "distal5",
        "proximal7",
        position=(ld, 0, 0),
        child_position=(lp, 0, 0),
        cut=True,
    )
    guess = b.build(q0=seed000_angles(actuated))
    return assembled(guess, fixed=("theta1", "theta6", "theta7"))


# -------------------------------------------------------------------------------------------------
# The 6-UPS Stewart-Gough platform: six legs, each a universal joint on the base, an actuated
# prismatic joint (cylinder and rod) and a spherical joint on the platform.
#
# The platform is in the spanning tree through leg 1 (``S1`` is a spherical tree joint); legs 2-6
# close on it by the spherical cut joints ``S2`` ... ``S6``. 21 coordinates, 15 constraint rows:
# 6 DOF, driven by the leg lengths ``P1`` ... ``P6``. Dimensions chosen: docs/mechanisms.md.


def _ring(radius, centre_deg, half_deg, z):
    """Joint points in pairs at ``centre +- half`` degrees (pair k at centre + 120 k)."""
    angles = [math.radians(centre_deg + 120 * k + s * half_deg) for k in range(3) for s in (-1, 1)]
    return [np.array([radius * math.cos(a), radius * math.sin(a), z]) for a in angles]


def stewart(
    *,
    base_radius: float = 0.5,
    platform_radius: float = 0.3,
    height: float = 0.6,
    base_half_angle: float = 12.0,
    platform_half_angle: float = 12.0,
    platform_mass: float = 10.0,
    cylinder_mass: float = 2.0,
    rod_mass: float = 1.0,
    cylinder_length: float = 0.4,
    rod_length: float = 0.4,
) -> Mechanism:
    """The platform drawn level at ``height`` above the base, centred on the z axis (gravity -z).
    Base joints in pairs at 0, 120, 240 degrees +- ``base_half_angle``, platform joints at 60,
    180, 300 +- ``platform_half_angle``; each base joint pairs with the nearest platform joint.
    The platform is a thin uniform disc of ``platform_radius``; cylinders (radius
    0.03 m) reach ``cylinder_length`` up the leg from the base joint, rods (radius 0.015 m)
    ``rod_length`` down from the platform joint. Coordinates: universal ``Uk[0]``, ``Uk[1]``
    and spherical ``S1[0..2]`` angles zero, prismatic ``Pk`` the leg length, in the drawn pose.
    """
    base = _ring(base_radius, 0.0, base_half_angle, 0.0)
    top = _ring(platform_radius, 60.0, platform_half_angle, height)
    top = top[-1:] + top[:-1]  # base joint 0 (at -half) pairs with the platform joint at -60 + half
    centre = np.array([0.0, 0.0, height])
    disc = platform_mass * platform_radius**2 * np.diag([0.25, 0.25, 0.5])
    sketch = SpatialSketch()
    sketch.body("platform", centre, platform_mass, centre, disc)
    for k, (b, t) in enumerate(zip(base, top), start=1):
        u = (t - b) / np.linalg.norm(t - b)
        sketch.body(
            f"cylinder{k}", b, cylinder_mass, *bar(cylinder_mass, b, b + cylinder_length * u, 0.03)
        )
        sketch.body(f"rod{k}", t, rod_mass, *bar(rod_mass, t - rod_length * u, t, 0.015))
        sketch.joint(f"U{k}", "universal", GROUND, f"cylinder{k}", b, frame=frame_along(u))
        sketch.prismatic(f"P{k}", f"cylinder{k}", f"rod{k}", actuated=True)
        sketch.joint(f"S{k}", "spherical", f"rod{k}", "platform", t, cut=k > 1)
    return sketch.build()
