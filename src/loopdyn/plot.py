"""Matplotlib figures: mechanism skeletons and trajectories."""

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


def draw(mech: Mechanism, q, ax=None, label=None, **style):
    """Draw the mechanism's skeleton at ``q`` in the world's xy-plane, its axes named as in the
    model's file (``mech.plane_axes``); ``label`` names the drawing in a legend."""
    ax = ax or plt.gca()
    style = {"color": "k", "lw": 2, "marker": "o", "ms": 3} | style
    for k, line in enumerate(skeleton(mech, q)):
        ax.plot(line[:, 0], line[:, 1], label=label if k == 0 else None, **style)
    x, y = mech.plane_axes
    ax.set(aspect="equal", xlabel=f"{x} [m]", ylabel=f"{y} [m]")
    return ax


def _limits(mech, q):
    """Axis limits that hold every drawn configuration of ``q`` ``(T, n)``."""
    points = np.concatenate([np.concatenate(skeleton(mech, qk)) for qk in q])
    low, high = points[:, :2].min(0), points[:, :2].max(0)
    pad = 0.08 * float(np.max(high - low)) + 1e-3
    return (low[0] - pad, high[0] + pad), (low[1] - pad, high[1] + pad)


def simulation_figure(mech: Mechanism, sim, tau=None, path=None, title=""):
    """Four panels of a `loopdyn.Simulation`: the mechanism at a few instants, joint angles, the
    driving forces ``tau`` ``(T, n)`` (if given) and the loop residuals over time."""
    ts, q = np.asarray(sim.ts), np.asarray(sim.q)
    tau = None if tau is None else np.asarray(tau)
    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    ax = axes[0, 0]
    for k in np.linspace(0, len(ts) - 1, 5).astype(int):
        alpha = 0.2 + 0.8 * k / max(len(ts) - 1, 1)
        draw(mech, q[k], ax, label=f"t = {ts[k]:.2f} s", alpha=alpha)
    xlim, ylim = _limits(mech, q[:: max(1, len(ts) // 20)])
    ax.set(xlim=xlim, ylim=ylim, title=f"{title} at 5 instants (darker: later)")
    ax.legend(fontsize=7)
    axes[0, 1].plot(ts, q)
    units = " or ".join(sorted(set(mech.configuration_units)))
    axes[0, 1].set(xlabel="t [s]", ylabel=f"joint coordinate [{units}]", title="joint coordinates")
    axes[0, 1].legend(mech.configuration_names, fontsize=7, ncol=2)
    driven = [] if tau is None else [k for k in range(mech.num_bodies) if np.ptp(tau[:, k]) > 0]
    for k in driven:
        axes[1, 0].plot(ts, tau[:, k], label=mech.coordinate_names[k])
    if driven:
        axes[1, 0].legend(fontsize=7)
    else:
        axes[1, 0].text(0.5, 0.5, "free motion: no driving force", ha="center", va="center")
    units = " or ".join(sorted({mech.force_units[k] for k in driven})) or "N m"
    axes[1, 0].set(xlabel="t [s]", ylabel=f"driving force [{units}]", title="driving forces")
    residual = np.maximum(np.asarray(sim.loop_residual), 1e-18)
    axes[1, 1].semilogy(ts, residual[:, 0], label="|Phi(q)| [m]")
    axes[1, 1].semilogy(ts, residual[:, 1], label="|J(q) qd| [m/s]")
    axes[1, 1].set(xlabel="t [s]", ylabel="loop residual [m, m/s]", title="constraint error")
    axes[1, 1].legend(fontsize=8)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=110)
        plt.close(fig)
    return fig


def animation(mech: Mechanism, ts, q, path, frames=60):
    """Write a GIF of the mechanism moving through ``q`` ``(T, n)`` at the times ``ts``."""
    from matplotlib.animation import FuncAnimation, PillowWriter

    ts, q = np.asarray(ts), np.asarray(q)
    picks = np.linspace(0, len(ts) - 1, min(frames, len(ts))).astype(int)
    fig, ax = plt.subplots(figsize=(4.5, 4.5), layout="constrained")  # no label clipped
    xlim, ylim = _limits(mech, q[picks])

    def frame(k):
        ax.clear()
        draw(mech, q[picks[k]], ax)
        ax.set(xlim=xlim, ylim=ylim, title=f"t = {ts[picks[k]]:.2f} s")

    interval = 1000 * float(ts[picks[-1]] - ts[0]) / max(len(picks) - 1, 1)
    FuncAnimation(fig, frame, frames=len(picks)).save(
        path, writer=PillowWriter(fps=max(1, round(1000 / interval)))
    )
    plt.close(fig)
