"""Single-loop linkages (four-bar, slider-crank, spatial RSSR) and a ladder of four-bar loops for
scaling studies.

Links are uniform bars: frame at the proximal joint, x axis along the bar, centre of mass at
mid-length, centroidal inertia ``m L^2 / 12``. Default four-bar: the Hoekens crank-rocker of the
carpet scraper (seed 002 §6.1.1; docs/mechanisms.md).
"""

from __future__ import annotations

import math

import numpy as np

from ..mechanism import GROUND, Mechanism
from ._sketch import (
    PlanarSketch,
    SpatialSketch,
    bar,
    circle_intersection,
    frame_along,
    rod_inertia,
    unit,
)


def _bar(sketch, name, start, end, mass, angle=None):
    """A uniform bar from world point ``start`` to ``end`` (``angle``: its direction, if given
    unwrapped)."""
    d = np.subtract(end, start)
    length = float(np.linalg.norm(d))
    angle = math.atan2(d[1], d[0]) if angle is None else angle
    sketch.body(name, start, angle, mass, (length / 2, 0.0), rod_inertia(mass, length))


def four_bar(
    crank_angle: float = 0.0,
    *,
    crank: float = 0.038,
    coupler: float = 0.1152,
    rocker: float = 0.1152,
    ground: float = 0.089,
    crank_mass: float = 1.5,
    coupler_mass: float = 2.5,
    rocker_mass: float = 3.0,
) -> Mechanism:
    """Crank-rocker four-bar assembled at ``crank_angle``: crank pivot A at the origin, rocker
    pivot D at (``ground``, 0), coupler-rocker pin C above the line B -> D. Joints A (actuated),
    B (crank-coupler), D (rocker); C is the cut joint. Subsystems {crank, coupler}, {rocker}."""
    a, d = np.zeros(2), np.array([ground, 0.0])
    b = a + crank * unit(crank_angle)
    c = circle_intersection(b, coupler, d, rocker, +1.0)
    sketch = PlanarSketch()
    _bar(sketch, "crank", a, b, crank_mass, crank_angle)
    _bar(sketch, "coupler", b, c, coupler_mass)
    _bar(sketch, "rocker", d, c, rocker_mass)
    sketch.revolute("A", GROUND, "crank", a, actuated=True)
    sketch.revolute("B", "crank", "coupler", b)
    sketch.revolute("D", GROUND, "rocker", d)
    sketch.revolute("C", "coupler", "rocker", c, cut=True)
    return sketch.build()


def slider_crank(
    crank_angle: float = 0.0,
    *,
    crank: float = 0.1,
    rod: float = 0.4,
    offset: float = 0.0,
    crank_mass: float = 1.0,
    rod_mass: float = 2.0,
    slider_mass: float = 1.5,
    slider_inertia: float = 1e-3,
) -> Mechanism:
    """Slider-crank assembled at ``crank_angle``: crank pivot at the origin, slider on the line
    y = ``offset`` along +x. Joints ``crank`` (actuated), ``rod`` (crank pin), ``slider``
    (prismatic; coordinate: the x of the piston pin); the piston pin ``pin`` is the cut joint.
    Subsystems {crank, rod}, {slider}."""
    b = crank * unit(crank_angle)
    reach = rod**2 - (offset - b[1]) ** 2
    if reach < 0:
        raise ValueError(
            f"slider_crank: the rod ({rod}) cannot reach the slider line y = {offset} "
            f"at crank angle {crank_angle}"
        )
    c = np.array([b[0] + math.sqrt(reach), offset])
    sketch = PlanarSketch()
    _bar(sketch, "crank", np.zeros(2), b, crank_mass, crank_angle)
    _bar(sketch, "rod", b, c, rod_mass)
    sketch.body("slider", c, 0.0, slider_mass, inertia=slider_inertia)
    sketch.revolute("crank", GROUND, "crank", np.zeros(2), actuated=True)
    sketch.revolute("rod", "crank", "rod", b)
    sketch.prismatic("slider", GROUND, "slider", point=(0.0, offset))
    sketch.revolute("pin", "rod", "slider", c, cut=True)
    return sketch.build()


def ladder(
    k: int,
    crank_angle: float = 0.0,
    *,
    crank: float = 0.038,
    coupler: float = 0.1152,
    rocker: float = 0.1152,
    ground: float = 0.089,
    spacing: float = 0.1,
    crank_mass: float = 1.5,
    coupler_mass: float = 2.5,
    rocker_mass: float = 3.0,
) -> Mechanism:
    """``k`` four-bar loops in series, 1 DOF: loop 1 is `four_bar`; loop i > 1 couples rocker
    i-1 to rocker i (pivot ``spacing`` further along x) by a coupler of length ``spacing``, a
    parallelogram, so every rocker follows rocker 1. Bodies ``crank``, ``rocker1..k``,
    ``coupler1..k``; ground pivots ``A0..Ak`` (``A0`` actuated), coupler joints ``B1..Bk`` on
    the input link of each loop, cut joints ``C1..Ck`` on its output rocker. Subsystems
    {crank, coupler1}, {rocker1, coupler2}, ..., {rocker k}: the loop graph is a chain."""
    if not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"ladder: k must be a positive integer, got {k!r}")
    pivots = [np.zeros(2)] + [np.array([ground + i * spacing, 0.0]) for i in range(k)]
    tips = [crank * unit(crank_angle)]
    tips.append(circle_intersection(tips[0], coupler, pivots[1], rocker, +1.0))
    tips += [tips[1] + pivots[i] - pivots[1] for i in range(2, k + 1)]
    links = ["crank"] + [f"rocker{i}" for i in range(1, k + 1)]
    sketch = PlanarSketch()
    for i in range(k + 1):  # input link i with the coupler it drives: subsystem i
        _bar(
            sketch,
            links[i],
            pivots[i],
            tips[i],
            crank_mass if i == 0 else rocker_mass,
            crank_angle if i == 0 else None,
        )
        sketch.revolute(f"A{i}", GROUND, links[i], pivots[i], actuated=i == 0)
        if i < k:
            _bar(sketch, f"coupler{i + 1}", tips[i], tips[i + 1], coupler_mass)
            sketch.revolute(f"B{i + 1}", links[i], f"coupler{i + 1}", tips[i])
    for i in range(1, k + 1):
        sketch.revolute(f"C{i}", f"coupler{i}", links[i], tips[i], cut=True)
    return sketch.build()


# -------------------------------------------------------------------------------------------------
# The spatial RSSR mechanism as the 7R mechanism of seed 002 §6.2 (Figs. 9-10).
#
# Seed 002 numbers the 7R chain: joint 7 drives the crank #6 (subsystem I); joint 1 carries the
# rocker #1, joints 2-3 form the Hooke joint (massless #2) to the coupler #3 (subsystem II); joints
# 4-5-6 form the spherical joint between the coupler and the crank, cut at joint 6. Here joints 2-3
# are one universal joint ``joint23`` (massless body ``joint23[1]``) and joints 4-6 one spherical
# cut joint ``joint456``. The seed gives no dimensions: docs/mechanisms.md documents the choice.


def rssr(
    *,
    crank: float = 0.04,
    coupler: float = 0.15,
    rocker: float = 0.08,
    rocker_pivot=(0.0, 0.12, 0.10),
    crank_mass: float = 0.5,
    coupler_mass: float = 1.0,
    rocker_mass: float = 0.8,
    radius: float = 0.005,
) -> Mechanism:
    """RSSR drawn with the crank along +x. The crank turns about z through the origin
    (``joint7``, actuated; coordinate: crank angle from +x); the rocker about the x axis through
    ``rocker_pivot`` (``joint1``), its tip above the pivot (the branch the mechanism keeps over a
    full crank turn); links are uniform solid cylinders of ``radius``. Other coordinates are zero
    in the drawn pose. Gravity -z. 1 DOF: 4 coordinates, 3 rows of the spherical cut joint."""
    a = np.array([crank, 0.0, 0.0])
    q = np.asarray(rocker_pivot, float)
    w = a - q  # rocker tip r = q + rocker (0, cos psi, sin psi) with |a - r| = coupler
    k = (w @ w + rocker**2 - coupler**2) / (2 * rocker)
    rho, beta = math.hypot(w[1], w[2]), math.atan2(w[2], w[1])
    if abs(k) > rho:
        raise ValueError(f"rssr: a coupler of {coupler} m cannot join the crank pin to the rocker")
    psi = beta - math.acos(k / rho)
    r = q + rocker * np.array([0.0, math.cos(psi), math.sin(psi)])
    sketch = SpatialSketch()
    sketch.body("crank6", np.zeros(3), crank_mass, *bar(crank_mass, np.zeros(3), a, radius))
    sketch.body("rocker1", q, rocker_mass, *bar(rocker_mass, q, r, radius))
    sketch.body("coupler3", r, coupler_mass, *bar(coupler_mass, r, a, radius))
    sketch.joint("joint7", "revolute", GROUND, "crank6", np.zeros(3), axis=(0, 0, 1), actuated=True)
    sketch.joint("joint1", "revolute", GROUND, "rocker1", q, axis=(1, 0, 0))
    sketch.joint("joint23", "universal", "rocker1", "coupler3", r, frame=frame_along(a - r))
    sketch.joint("joint456", "spherical", "coupler3", "crank6", a, cut=True)
    return sketch.build()
