"""Matplotlib figures: mechanism skeletons and trajectories."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from . import tree
from .mechanism import Mechanism


def skeleton(mech: Mechanism, q) -> list[np.ndarray]:
    """World polylines ``(k, 3)``, one per body: from its tree joint to every other joint on it."""
    position, rotation = (np.asarray(a) for a in tree.forward_kinematics(mech, q))
    points = [[np.asarray(mech.child_position[i])] for i in range(mech.num_bodies)]
    for i, p in enumerate(mech.parent):
        if p >= 0:
            points[p].append(np.asarray(mech.parent_position[i]))
    for k, cut in enumerate(mech.cut_joints):
        for body, point in (
            (cut.body_a, mech.cut_position_a[k]),
            (cut.body_b, mech.cut_position_b[k]),
        ):
            if body >= 0:
                points[body].append(np.asarray(point))
    lines = []
    for i, local in enumerate(points):
        star = [local[0]]
        for point in local[1:]:
            star += [point, local[0]]
        lines.append(position[i] + np.asarray(star) @ rotation[i].T)
    return lines


def draw(mech: Mechanism, q, ax=None, **style):
    """Draw the mechanism's skeleton at ``q`` in the xy-plane."""
    ax = ax or plt.gca()
    style = {"color": "k", "lw": 2, "marker": "o", "ms": 3} | style
    for line in skeleton(mech, q):
        ax.plot(line[:, 0], line[:, 1], **style)
    ax.set_aspect("equal")
    return ax


def trajectory_figure(mech: Mechanism, traj, energy=None, path=None):
    """Snapshots of the motion, coordinates over time and (optionally) the energy error."""
    panels = 3 if energy is not None else 2
    fig, axes = plt.subplots(1, panels, figsize=(5 * panels, 4.2))
    for k in np.linspace(0, len(traj.t) - 1, 6).astype(int):
        draw(mech, traj.q[k], axes[0], alpha=0.25 + 0.75 * k / (len(traj.t) - 1))
    axes[0].set_title("snapshots")
    axes[1].plot(traj.t, traj.q)
    axes[1].set(xlabel="t [s]", ylabel="q", title="coordinates")
    axes[1].legend(mech.coordinate_names, fontsize=8)
    if energy is not None:
        axes[2].plot(traj.t, np.asarray(energy) - float(energy[0]))
        axes[2].set(xlabel="t [s]", ylabel="E(t) - E(0) [J]", title="energy error")
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=120)
    return fig
