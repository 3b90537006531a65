"""The 7-bar carpet scraping mechanism: a Hoekens crank-rocker whose coupler point drives a
pantograph (seed 000 §4.1, Tables 1-2, Appendix A.1; seed 002 §6.1, Table 1).

Links and joints follow seed 000's numbering: links #1 (crank) ... #7, joints 1-7 with coordinates
``theta1`` ... ``theta7`` (``thetak`` at joint k) and the cut joints 8, 9, 10. The geometry is
reconstructed in docs/mechanisms.md.
"""

from __future__ import annotations

import math

import numpy as np

from ..mechanism import GROUND, Mechanism
from ._sketch import PlanarSketch, circle_intersection

#: Seed 000 Table 1, links #1-#7 (m).
LENGTHS = (0.038, 0.1152, 0.2304, 0.3346, 0.239, 0.8365, 0.239)
#: Seed 000 Table 1 / seed 002 Table 1 (kg).
MASSES = (1.5, 3.0, 5.0, 4.2, 3.0, 10.5, 3.0)
#: Seed 002 Table 1: moment of inertia about each link's origin (kg m^2).
INERTIAS = (0.73e-3, 13.30e-3, 22.12e-3, 157.00e-3, 57.00e-3, 2449.00e-3, 57.00e-3)
NAMES = ("crank1", "rocker2", "coupler3", "arm4", "link5", "arm6", "link7")


def carpet_scraper(
    crank_angle: float = 0.0,
    *,
    lengths=LENGTHS,
    masses=MASSES,
    inertias=INERTIAS,
    rocker_pivot=(-0.089, 0.0),
    pantograph_pivot=(0.038, 0.410),
    a45: float = 0.096,
    a67: float = 0.239,
) -> Mechanism:
    """The carpet scraper assembled at ``theta1 = crank_angle`` (seed 000 Table 2: 0).

    ``lengths``, ``masses``, ``inertias`` (about the link origin) are indexed by link #1-#7.
    The crank pivot (joint 1) is the origin; ``rocker_pivot`` and ``pantograph_pivot`` are joints
    2 and 4 (seed 002 §6.1.1). Joint 3 is at the middle of the coupler #3; joint 5 is ``a45``
    along #4 from joint 4, joint 6 at its end; joint 7 is ``a67`` along #6 from joint 6; the
    coupler's far end, #5's and #7's ends meet at one pin (joints 9 and 10). Subsystems: {#1},
    {#2, #3}, {#4, #5, #6, #7}, so J has the blocks of seed 000 eq. 26. Crank actuated.
    """
    if len(masses) != 7 or len(inertias) != 7 or len(lengths) != 7:
        raise ValueError("lengths, masses and inertias need one value per link #1-#7")
    a1, a2, a3, a4, a5, _, a7 = (float(v) for v in lengths)
    o2, o4 = np.asarray(rocker_pivot, float), np.asarray(pantograph_pivot, float)
    # Hoekens loop: joint 3 on the rocker's circle, at half the coupler from the crank pin.
    b = a1 * np.array([math.cos(crank_angle), math.sin(crank_angle)])
    j3 = circle_intersection(o2, a2, b, a3 / 2, +1.0)
    c = j3 + (j3 - b)  # coupler's far end: joints 9 and 10
    # Pantograph: joint 5 at a45 from joint 4 and #5's length from c, elbow to the right of 4->c.
    j5 = circle_intersection(o4, a45, c, a5, -1.0)
    j6 = o4 + a4 / a45 * (j5 - o4)
    j7_options = [circle_intersection(j6, a67, c, a7, s) for s in (1.0, -1.0)]
    parallel = j6 + a67 / a5 * (c - j5)  # 5-6-7-10 is a parallelogram, not a crossed loop
    j7 = min(j7_options, key=lambda p: np.linalg.norm(p - parallel))

    def angle(v):
        return math.atan2(v[1], v[0])

    origins = (np.zeros(2), o2, j3, o4, j5, j6, j7)
    angles = (
        crank_angle,
        angle(j3 - o2),
        angle(c - j3),
        angle(j5 - o4),
        angle(c - j5),
        angle(j7 - j6),
        angle(c - j7),
    )
    sketch = PlanarSketch()
    for k in range(7):
        # COM at mid-length (the coupler's origin, joint 3, is its middle); inertia about the COM.
        com = 0.0 if k == 2 else lengths[k] / 2
        centroidal = inertias[k] - masses[k] * com**2
        if centroidal <= 0:
            raise ValueError(
                f"link #{k + 1}: inertia about its origin {inertias[k]} is below "
                f"m (L/2)^2 = {masses[k] * com**2:.4g}"
            )
        sketch.body(NAMES[k], origins[k], angles[k], masses[k], (com, 0.0), centroidal)
    parent = (GROUND, GROUND, "rocker2", GROUND, "arm4", "arm4", "arm6")
    for k in range(7):
        sketch.revolute(f"theta{k + 1}", parent[k], NAMES[k], origins[k], actuated=k == 0)
    sketch.revolute("joint8", "crank1", "coupler3", b, cut=True)
    sketch.revolute("joint9", "coupler3", "link5", c, cut=True)
    sketch.revolute("joint10", "link5", "link7", c, cut=True)
    return sketch.build()
