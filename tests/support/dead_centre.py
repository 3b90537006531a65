"""A four-bar at a dead centre: its links folded flat in line (crank + coupler = ground + rocker)."""

import numpy as np

import loopdyn


def folded_four_bar():
    """The four-bar folded flat at ``q0``, its bodies, joints and actuator named as the library
    four-bar's (the same program structure)."""
    b = loopdyn.MechanismBuilder(planar=True)
    for body, length in (("crank", 0.1), ("coupler", 0.3), ("rocker", 0.2)):
        b.add_body(body, 1.0, (length / 2, 0, 0), 1e-3)
    b.add_joint("A", "revolute", "ground", "crank", actuated=True)
    b.add_joint("B", "revolute", "crank", "coupler", position=(0.1, 0, 0))
    b.add_joint("D", "revolute", "ground", "rocker", position=(0.6, 0, 0))
    b.add_joint(
        "C",
        "revolute",
        "coupler",
        "rocker",
        position=(0.3, 0, 0),
        child_position=(0.2, 0, 0),
        cut=True,
    )
    return b.build(q0=np.array([0.0, 0.0, np.pi]))
