"""Vehicle mechanisms: the excavator linkage of seed 000 Fig. 1 and the double-wishbone
quarter car of seed 003. Geometry and assumptions: docs/mechanisms.md.
"""

from __future__ import annotations

import math

import equinox as eqx
import jax
import numpy as np

from .. import compilation, dense, energy, forces, kinematics
from ..mechanism import GROUND, Mechanism
from ._sketch import PlanarSketch, SpatialSketch, bar, frame_along, rod_inertia

# -------------------------------------------------------------------------------------------------
# A 3-DOF excavator-like planar linkage with four loops (seed 000 §2, Fig. 1 and eq. 14).
#
# The figure is lost; the joint graph is rebuilt from the loops the text lists by joint number
# (1-2-15-6-1, 7-14-13-12-7, 3-4-5-8-7-15-3, 9-10-11-2-1-9), the links it names per subsystem and
# the actuated joints 4, 10, 13 (hydraulic cylinders, prismatic). Bodies are named by role and
# seed link number: a parallel arm #1 and a levelling link #2 that carry the boom #6 with the ground
# (loop 1), the stick #5 with its cylinder #8-#9 on the boom (loop 2), the bucket #7 driven by the
# cylinder #3-#4 from the levelling link (loop 3), the boom cylinder #10-#11 from the ground to the
# levelling link (loop 4). Geometry in docs/mechanisms.md.

#: World position (m) of every joint in the reference pose, by seed joint number (the prismatic
#: joints 4, 10, 13 have none).
EXCAVATOR_POINTS = {
    1: (0.0, 0.8),
    2: (2.05, 1.6),
    3: (1.98, 2.15),
    5: (3.3, 0.95),
    6: (0.0, 1.2),
    7: (2.5, 2.2),
    8: (3.1, 0.7),
    9: (0.5, 0.5),
    11: (2.02, 1.76),
    12: (1.4, 2.05),
    14: (2.35, 2.6),
    15: (2.0, 2.0),
}
EXCAVATOR_MASSES = {
    "parallel_arm1": 40.0,
    "levelling_link2": 20.0,
    "bucket_barrel3": 15.0,
    "bucket_rod4": 8.0,
    "stick5": 120.0,
    "boom6": 250.0,
    "bucket7": 100.0,
    "stick_barrel8": 20.0,
    "stick_rod9": 10.0,
    "boom_barrel10": 30.0,
    "boom_rod11": 15.0,
}
#: Bucket: centre of mass from its pivot (joint 8) and radius of gyration (m).
BUCKET_COM, BUCKET_GYRATION = (0.25, -0.15), 0.35


def excavator(*, points=None, masses=None) -> Mechanism:
    """The excavator linkage in its reference pose, actuated by the cylinders ``joint4``
    (bucket), ``joint10`` (boom) and ``joint13`` (stick), whose coordinates are their pin-to-pin
    lengths; revolute coordinates are link angles (absolute on the ground, relative elsewhere).

    ``points`` and ``masses`` override entries of `EXCAVATOR_POINTS` (by joint number) and
    `EXCAVATOR_MASSES` (by body name). Links are uniform bars between their first two joints;
    cylinder barrels and rods are bars of 0.6 times the reference length from their pins.
    Subsystems {#1, #2, #3, #4}, {#6, #5, #7, #8, #9}, {#10, #11}; cut joints 15, 14, 5, 11
    close loops 1-4, so J has the blocks of seed 000 eq. 14.
    """
    for given, known, what in (
        (points, EXCAVATOR_POINTS, "joints"),
        (masses, EXCAVATOR_MASSES, "bodies"),
    ):
        unknown = set(given or {}) - set(known)
        if unknown:
            raise ValueError(f"excavator: unknown {what} {sorted(unknown)}; known: {list(known)}")
    p = {k: np.asarray(v, float) for k, v in {**EXCAVATOR_POINTS, **(points or {})}.items()}
    m = {**EXCAVATOR_MASSES, **(masses or {})}
    sketch = PlanarSketch()

    def link(name, start, end):
        d = p[end] - p[start]
        length = float(np.linalg.norm(d))
        sketch.body(
            name,
            p[start],
            math.atan2(d[1], d[0]),
            m[name],
            (length / 2, 0.0),
            rod_inertia(m[name], length),
        )

    def cylinder(barrel, rod, base, end):
        d = p[end] - p[base]
        length, angle = float(np.linalg.norm(d)), math.atan2(d[1], d[0])
        part = 0.6 * length
        sketch.body(
            barrel, p[base], angle, m[barrel], (part / 2, 0.0), rod_inertia(m[barrel], part)
        )
        sketch.body(rod, p[end], angle, m[rod], (-part / 2, 0.0), rod_inertia(m[rod], part))

    link("parallel_arm1", 1, 2)
    link("levelling_link2", 2, 15)
    cylinder("bucket_barrel3", "bucket_rod4", 3, 5)
    link("stick5", 7, 8)
    link("boom6", 6, 7)
    sketch.body("bucket7", p[8], 0.0, m["bucket7"], BUCKET_COM, m["bucket7"] * BUCKET_GYRATION**2)
    cylinder("stick_barrel8", "stick_rod9", 12, 14)
    cylinder("boom_barrel10", "boom_rod11", 9, 11)
    # subsystem I
    sketch.revolute("joint1", GROUND, "parallel_arm1", p[1])
    sketch.revolute("joint2", "parallel_arm1", "levelling_link2", p[2])
    sketch.revolute("joint3", "levelling_link2", "bucket_barrel3", p[3])
    sketch.prismatic("joint4", "bucket_barrel3", "bucket_rod4", actuated=True)
    # subsystem II
    sketch.revolute("joint6", GROUND, "boom6", p[6])
    sketch.revolute("joint7", "boom6", "stick5", p[7])
    sketch.revolute("joint8", "stick5", "bucket7", p[8])
    sketch.revolute("joint12", "boom6", "stick_barrel8", p[12])
    sketch.prismatic("joint13", "stick_barrel8", "stick_rod9", actuated=True)
    # subsystem III
    sketch.revolute("joint9", GROUND, "boom_barrel10", p[9])
    sketch.prismatic("joint10", "boom_barrel10", "boom_rod11", actuated=True)
    # cut joints of loops 1-4
    sketch.revolute("joint15", "levelling_link2", "boom6", p[15], cut=True)
    sketch.revolute("joint14", "stick_rod9", "stick5", p[14], cut=True)
    sketch.revolute("joint5", "bucket_rod4", "bucket7", p[5], cut=True)
    sketch.revolute("joint11", "boom_rod11", "levelling_link2", p[11], cut=True)
    return sketch.build()


# -------------------------------------------------------------------------------------------------
# A double-wishbone quarter-car suspension on a fixed chassis (the quarter-car test model of
# seed 003, with its double A-arm loop and spring-damper; dimensions chosen, docs/mechanisms.md).
#
# Left front corner; x forward, y outboard, z up; the chassis is the ground. The lower arm turns on
# the chassis about an x axis and carries the upright (knuckle, hub and wheel as one body) on the
# lower ball joint; the upper arm turns about a parallel x axis and meets the upright at the upper
# ball joint (cut); the tie rod runs from a universal joint on the chassis to a ball joint on the
# steering arm (cut). 7 coordinates, 6 constraint rows: 1 DOF, the wheel travel.

#: World points of the drawn (design) pose, m.
SUSPENSION_POINTS = {
    "lower_pivot": (0.0, 0.30, 0.15),
    "lower_ball": (0.0, 0.80, 0.12),
    "upper_pivot": (0.0, 0.40, 0.52),
    "upper_ball": (0.0, 0.74, 0.55),
    "tie_rod_inner": (-0.15, 0.38, 0.30),
    "tie_rod_outer": (-0.15, 0.78, 0.32),
    "wheel_centre": (0.0, 0.92, 0.33),
    "spring_chassis": (0.0, 0.50, 0.75),
    "spring_arm": (0.0, 0.62, 0.14),
}


def _upright(points, knuckle_mass, wheel_mass, wheel_radius):
    """Centre of mass and inertia (world axes) of the knuckle (a bar along the kingpin) and the
    wheel (spin axis y: 0.6 m r^2, 0.35 m r^2 about the other axes) as one body."""
    c_k, i_k = bar(knuckle_mass, points["lower_ball"], points["upper_ball"], 0.05)
    c_w = np.asarray(points["wheel_centre"], float)
    i_w = wheel_mass * wheel_radius**2 * np.diag([0.35, 0.6, 0.35])
    mass = knuckle_mass + wheel_mass
    com = (knuckle_mass * c_k + wheel_mass * c_w) / mass

    def shifted(m, c, i):  # parallel axis theorem
        r = c - com
        return i + m * (r @ r * np.eye(3) - np.outer(r, r))

    return mass, com, shifted(knuckle_mass, c_k, i_k) + shifted(wheel_mass, c_w, i_w)


def quarter_car(
    *,
    points=None,
    lower_arm_mass: float = 10.0,
    upper_arm_mass: float = 6.0,
    knuckle_mass: float = 25.0,
    wheel_mass: float = 55.0,
    wheel_radius: float = 0.47,
    tie_rod_mass: float = 2.0,
    stiffness: float = 60e3,
    damping: float = 4e3,
) -> Mechanism:
    """The quarter car in its design pose (all coordinates zero), with a coil-over spring-damper
    ``coilover`` from the chassis to the lower arm whose rest length makes the design pose a
    static equilibrium under gravity (-z): the wheel hangs from the fixed chassis, the spring is
    in tension. ``points`` overrides entries of `SUSPENSION_POINTS`. Arms are solid cylinders
    from the middle of their pivot axis to the ball joint, of radius 0.15 m (the half-width of
    the wishbone); the tie rod of radius 0.01 m."""
    unknown = set(points or {}) - set(SUSPENSION_POINTS)
    if unknown:
        raise ValueError(
            f"quarter_car: unknown points {sorted(unknown)}; known: {list(SUSPENSION_POINTS)}"
        )
    p = {k: np.asarray(v, float) for k, v in {**SUSPENSION_POINTS, **(points or {})}.items()}
    sketch = SpatialSketch()
    sketch.body(
        "lower_arm",
        p["lower_pivot"],
        lower_arm_mass,
        *bar(lower_arm_mass, p["lower_pivot"], p["lower_ball"], 0.15),
    )
    sketch.body("upright", p["lower_ball"], *_upright(p, knuckle_mass, wheel_mass, wheel_radius))
    sketch.body(
        "upper_arm",
        p["upper_pivot"],
        upper_arm_mass,
        *bar(upper_arm_mass, p["upper_pivot"], p["upper_ball"], 0.15),
    )
    sketch.body(
        "tie_rod",
        p["tie_rod_inner"],
        tie_rod_mass,
        *bar(tie_rod_mass, p["tie_rod_inner"], p["tie_rod_outer"], 0.01),
    )
    x = (1.0, 0.0, 0.0)
    sketch.joint("lower_pivot", "revolute", GROUND, "lower_arm", p["lower_pivot"], axis=x)
    sketch.joint("lower_ball", "spherical", "lower_arm", "upright", p["lower_ball"])
    sketch.joint("upper_pivot", "revolute", GROUND, "upper_arm", p["upper_pivot"], axis=x)
    sketch.joint(
        "tie_rod_inner",
        "universal",
        GROUND,
        "tie_rod",
        p["tie_rod_inner"],
        frame=frame_along(p["tie_rod_outer"] - p["tie_rod_inner"]),
    )
    sketch.joint("upper_ball", "spherical", "upper_arm", "upright", p["upper_ball"], cut=True)
    sketch.joint("tie_rod_outer", "spherical", "tie_rod", "upright", p["tie_rod_outer"], cut=True)
    length = float(np.linalg.norm(p["spring_arm"] - p["spring_chassis"]))
    sketch.builder.add_spring(
        "coilover",
        GROUND,
        "lower_arm",
        point_a=p["spring_chassis"],
        point_b=p["spring_arm"] - p["lower_pivot"],
        stiffness=stiffness,
        damping=damping,
        rest_length=length,
    )
    return _balanced(sketch.build())


def _balanced(mech: Mechanism) -> Mechanism:
    """Set the rest length of the spring so that ``q0`` is a static equilibrium."""
    rest = _rest_length(mech)
    if not rest > 0:
        raise ValueError(
            f"quarter_car: the spring cannot hold the design pose (rest length "
            f"{float(rest):.4g} m): check the points"
        )
    return eqx.tree_at(lambda m: m.spring_rest_length, mech, rest[None])


@compilation.jit
def _rest_length(mech):
    """At ``q0``, along the motion ``T`` (``J T = 0``), gravity's generalized force balances the
    spring's ``-k (L - L0) dL/dq``: solve for ``L0`` (the spring is built at ``L0 = L``, so the
    gradient of the potential energy there is gravity's alone)."""
    q = mech.q0
    t = dense.complement(kinematics.loop_jacobian(mech, q).T)[:, 0]  # J t = 0
    grad_gravity = jax.grad(energy.potential_energy, argnums=1)(mech, q)
    grad_length = jax.grad(lambda x: forces.spring_lengths(mech, x)[0])(q)
    length = forces.spring_lengths(mech, q)[0]
    return length + (t @ grad_gravity) / (mech.spring_stiffness[0] * (t @ grad_length))
