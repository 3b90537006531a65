"""``loopdyn inverse <mechanism | model.xml>``: driving forces, every joint reaction and the
shaking force and moment over a cycle of prescribed motion.

The actuated coordinates turn (or slide) at constant ``--speed`` from ``q0`` (one speed per
actuator; a single speed drives the first actuator and holds the others), the other coordinates
follow from the loops (`loopdyn.prescribed`), and the inverse dynamics of seed 002 gives the
actuator forces, multipliers and reactions at every state (`loopdyn.inverse`); the shaking wrench
comes from the ground reactions (`loopdyn.shaking`). Prints a summary, writes the results as JSON
and a figure, both atomically (a temporary file renamed into place).

The subcommand is added to the ``loopdyn`` parser by `add_parser` and executed by `run`; the
helpers (`constant_speed`, `cycle`, `results`, `figure`) serve the experiments and
the notebook too.
"""

from __future__ import annotations

import math
import pathlib
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp
import numpy as np

from . import inverse, prescribed, shaking
from .io.files import load, save_figure, write_json


def add_parser(subparsers):
    """Add the ``inverse`` subcommand to ``subparsers`` (from ``ArgumentParser.add_subparsers``);
    returns its parser."""
    cmd = subparsers.add_parser(
        "inverse",
        help="driving forces, joint reactions and shaking force over a cycle",
        description=__doc__.split("\n\n")[1],
    )
    cmd.add_argument("mechanism", help="library name (e.g. carpet_scraper) or MJCF file (.xml)")
    cmd.add_argument(
        "--speed",
        type=float,
        nargs="+",
        default=[4.712],
        help="constant speed of each actuated coordinate [rad/s or m/s]; one value drives the "
        "first actuator and holds the others (default 4.712 rad/s, 45 rpm)",
    )
    cmd.add_argument(
        "--cycle",
        type=float,
        help="duration [s] (default: one revolution of the first actuator, 2 pi / speed)",
    )
    cmd.add_argument("--dt", type=float, default=0.01, help="time step of the grid [s]")
    cmd.add_argument(
        "--hold",
        default="",
        help="comma-separated coordinates held at q0 beside the driven actuators, where the "
        "mechanism has more degrees of freedom than actuators (idle or passive freedoms)",
    )
    cmd.add_argument("--method", choices=inverse.METHODS, default="subsystem")
    cmd.add_argument("--out", type=pathlib.Path, help="results (.json, written atomically)")
    cmd.add_argument("--plot", type=pathlib.Path, help="figure (.png, written atomically)")
    return cmd


def constant_speed(mech, speeds, hold=()):
    """The drive ``t -> q_p(0) + speeds t`` of the prescribed coordinates: the actuated ones,
    turning at ``speeds`` (one per actuator, or one value for the first, the others held), and the
    coordinates named in ``hold``, held at ``mech.q0`` (for idle or passive freedoms beyond the
    actuators, e.g. a coupler's spin between two ball joints). ``q_p(0)`` from ``mech.q0``; the
    prescribed coordinates in index order, as `loopdyn.prescribed` takes them."""
    count = len(mech.actuated)
    if count == 0:
        raise ValueError("this mechanism has no actuated joint to drive")
    speeds = [float(s) for s in np.atleast_1d(speeds)]
    if len(speeds) == 1:
        speeds += [0.0] * (count - 1)
    if len(speeds) != count:
        raise ValueError(
            f"--speed: give 1 or {count} speeds (actuators {list(mech.actuator_names)}), "
            f"got {len(speeds)}"
        )
    unknown = [name for name in hold if name not in mech.coordinate_names]
    if unknown:
        raise ValueError(f"--hold: unknown coordinates {unknown}; {list(mech.coordinate_names)}")
    rate = dict(zip(mech.actuated, speeds))
    chosen = sorted(set(mech.actuated) | {mech.coordinate_names.index(name) for name in hold})
    start = np.asarray(mech.q0)[np.array(chosen)]
    rate = jnp.asarray([rate.get(k, 0.0) for k in chosen])

    def drive(t):
        return start + rate * t

    return drive


def cycle(mech, speeds, duration=None, dt=0.01, method="subsystem", hold=()):
    """Prescribed constant-speed motion over ``duration`` (default one revolution of the first
    actuator) on the grid ``0, dt, ...`` up to ``duration``, the coordinates in ``hold`` held
    (`constant_speed`), and its inverse dynamics: ``(motion, result)``."""
    speeds = np.atleast_1d(speeds)
    if duration is None:
        if speeds[0] == 0:
            raise ValueError("--cycle is needed when the first speed is zero")
        duration = 2 * math.pi / abs(float(speeds[0]))
    steps = max(2, int(duration / dt + 1e-9) + 1)  # both ends: 1.34 s at 0.01 s -> 134
    t = jnp.arange(steps) * dt
    coordinates = [*mech.actuator_names, *hold] if hold else None
    return prescribed.prescribed_inverse_dynamics(
        mech, constant_speed(mech, speeds, hold), t, coordinates=coordinates, method=method
    )


def results(mech, motion, result, method="subsystem", arrays=True) -> dict:
    """A JSON-ready record of a cycle: time, coordinates, actuator forces, multipliers, every
    reaction (components and magnitudes), ground and shaking wrench, their RMS and peak, the
    solve plan and the accuracy measures. ``arrays=False`` keeps of the time series only ``t``
    and the actuator forces."""
    force, moment = inverse.reaction_magnitudes(mech, result.reactions)
    shake = shaking.shaking(mech, result, motion.q, include_weight=False)
    weighted = shaking.shaking(mech, result)
    x, y, z = mech.axis_names
    layout = (
        f"[n_{z}, f_{x}, f_{y}]" if mech.planar else f"[n_{x}, n_{y}, n_{z}, f_{x}, f_{y}, f_{z}]"
    )

    def listed(x):
        return np.asarray(x).tolist()

    summary = {k: float(v) for k, v in shaking.summary(shake).items()}
    record = {
        "mechanism": {
            "bodies": list(mech.body_names),
            "coordinates": list(mech.coordinate_names),
            "configuration": list(mech.configuration_names),
            "joints": list(mech.joint_names),
            "actuators": list(mech.actuator_names),
            "cut_joints": [c.name for c in mech.cut_joints],
            "planar": mech.planar,
            "world_axes": list(mech.axis_names),
        },
        "units": {
            "t": "s",
            "q": list(mech.configuration_units),
            "actuator_forces": [mech.force_units[k] for k in mech.actuated],
            "multipliers": "N for point rows, N m for angle rows",
            "reactions": "N m for n, N for f",
            "ground_force": "N",
            "ground_moment": "N m",
            "shaking_force": "N",
            "shaking_moment": "N m",
        },
        "method": method,
        "plan": [
            {"subsystems": list(s.subsystems), "loops": list(s.loops), "shape": list(s.shape)}
            for s in inverse.solve_plan(mech, method)
        ],
        "t": listed(motion.t),
        "q": listed(motion.q),
        "actuator_forces": listed(result.actuator_forces),
        "multipliers": listed(result.multipliers),
        "reaction_layout": layout + " in world axes, on the child from the parent, about the joint",
        "reactions": listed(result.reactions),
        "reaction_force_magnitude": listed(force),
        "reaction_moment_magnitude": listed(moment),
        "peak_reaction_force": dict(zip(mech.joint_names, listed(jnp.max(force, axis=0)))),
        "ground_force": listed(result.ground_force),
        "ground_moment": listed(result.ground_moment),
        "shaking_force": listed(weighted.force),
        "shaking_moment": listed(weighted.moment),
        "shaking_force_dynamic": listed(shake.force),
        "shaking_moment_dynamic": listed(shake.moment),
        "shaking_summary_dynamic": summary,
        "accuracy": {
            "max_loop_closure": float(jnp.max(result.closure)),
            "max_unbalanced_generalized_force": float(jnp.max(result.residual)),
            "min_conditioning": float(jnp.min(motion.conditioning)),
        },
    }
    series = ("q", "multipliers", "reactions", "reaction_force_magnitude")
    series += ("reaction_moment_magnitude", "ground_force", "ground_moment")
    series += tuple(
        k for k in record if k.startswith("shaking_") and k != "shaking_summary_dynamic"
    )
    return record if arrays else {k: v for k, v in record.items() if k not in series}


def power_balance(mech, motion, result):
    """Largest ``|tau . qd - dE/dt|`` over the cycle, relative to the largest actuator power: the
    constraint forces do no work, so the actuators supply exactly the rate of change of the
    mechanical energy (`loopdyn.energy`, differentiated along ``(qd, qdd)``; dampers excluded)."""
    from . import energy

    def rate(q, qd, qdd):
        return jax.jvp(lambda q, qd: energy.total_energy(mech, q, qd), (q, qd), (qd, qdd))[1]

    d_energy = jax.vmap(rate)(motion.q, motion.qd, motion.qdd)
    power = jnp.sum(result.tau * motion.qd, axis=-1)
    return float(jnp.max(jnp.abs(power - d_energy)) / jnp.max(jnp.abs(power)))


def figure(mech, motion, result, path=None, title=""):
    """Four panels: actuator forces, reaction force magnitude per joint, the shaking force
    (dynamic part) as a polar trace, and the shaking moment, over the cycle."""
    from matplotlib.figure import Figure  # no pyplot: any backend, or none, will do

    t = np.asarray(motion.t)
    force, _ = (np.asarray(x) for x in inverse.reaction_magnitudes(mech, result.reactions))
    shake = shaking.shaking(mech, result, motion.q, include_weight=False)
    fig = Figure(figsize=(11, 8))
    axes = fig.subplots(2, 2)
    ax = axes[0, 0]
    for k, name in enumerate(mech.actuator_names):
        ax.plot(t, np.asarray(result.actuator_forces)[:, k], label=name)
    units = sorted({mech.force_units[k] for k in mech.actuated})
    ax.set(
        xlabel="t [s]",
        ylabel=f"actuator force [{' or '.join(units)}]",
        title=f"{title} driving forces",
    )
    ax.legend(fontsize=7)
    ax = axes[0, 1]
    for j, name in enumerate(mech.joint_names):
        cut = name in [c.name for c in mech.cut_joints]
        ax.plot(t, force[:, j], ls="--" if cut else "-", label=name + (" (cut)" if cut else ""))
    ax.set(xlabel="t [s]", ylabel="|reaction force| [N]", title="joint reactions")
    ax.legend(fontsize=6, ncol=2)
    ax = axes[1, 0]
    f = np.asarray(shake.force)
    ax.plot(f[:, 0], f[:, 1], "-o", ms=2)
    ax.plot(0, 0, "k+")
    ax.set(
        xlabel=f"F_{mech.axis_names[0]} [N]",
        ylabel=f"F_{mech.axis_names[1]} [N]",
        title="shaking force (dynamic part), polar",
    )
    ax.set_aspect("equal", adjustable="datalim")
    ax = axes[1, 1]
    m = np.asarray(shake.moment)
    if m.ndim == 1:
        ax.plot(t, m, label=f"M_{mech.axis_names[2]}")
    else:
        for k, axis in enumerate(mech.axis_names):
            ax.plot(t, m[:, k], label=f"M_{axis}")
    ax.set(xlabel="t [s]", ylabel="shaking moment [N m]", title="shaking moment about the origin")
    ax.legend(fontsize=7)
    return save_figure(fig, path)


def run(args):
    """Execute ``loopdyn inverse`` with the parsed ``args``."""
    mech = load(args.mechanism)
    start = time.perf_counter()
    hold = tuple(name for name in args.hold.split(",") if name)
    motion, result = cycle(mech, args.speed, args.cycle, args.dt, args.method, hold)
    jax.block_until_ready(result)
    elapsed = time.perf_counter() - start
    unbalanced = float(jnp.max(result.residual))
    if unbalanced > 1e-6 * (1.0 + float(jnp.max(jnp.abs(result.tau)))):
        raise ValueError(
            f"the actuators {list(mech.actuator_names)} cannot produce this motion: unbalanced "
            f"generalized force up to {unbalanced:.3e} [N m or N]"
            + (f" (holding {list(hold)} needs a force there)" if hold else "")
        )
    record = results(mech, motion, result, args.method)
    plan = " then ".join("{}x{}".format(*s["shape"]) for s in record["plan"])
    forces = np.asarray(result.actuator_forces)
    print(
        f"{args.mechanism}: {len(motion.t)} positions over {float(motion.t[-1]):.3g} s, "
        f"method {args.method} ({plan}), {elapsed:.2f} s including compilation"
    )
    for k, name in enumerate(mech.actuator_names):
        unit = mech.force_units[mech.actuated[k]]
        print(f"  actuator {name}: {forces[:, k].min():.4g} .. {forces[:, k].max():.4g} {unit}")
    for name, peak in record["peak_reaction_force"].items():
        print(f"  joint {name}: peak reaction force {peak:.4g} N")
    s = record["shaking_summary_dynamic"]
    print(
        f"  shaking force (dynamic) RMS {s['force_rms']:.4g} N, peak {s['force_peak']:.4g} N; "
        f"moment RMS {s['moment_rms']:.4g} N m, peak {s['moment_peak']:.4g} N m"
    )
    a = record["accuracy"]
    print(
        f"  loop closure {a['max_loop_closure']:.1e} m (largest of |Phi| and the rate rows "
        f"relative to the motion's size), unbalanced generalized force "
        f"{a['max_unbalanced_generalized_force']:.1e} N m or N"
    )
    if args.out is not None:
        write_json(args.out, record)
        print(f"  results: {args.out}")
    if args.plot is not None:
        figure(mech, motion, result, args.plot, args.mechanism)
        print(f"  figure: {args.plot}")
