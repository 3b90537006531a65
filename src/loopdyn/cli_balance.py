"""``loopdyn balance <mechanism | model.xml>``: counterweights on chosen links that minimise the
shaking force and/or moment over one crank revolution (`loopdyn.design`).

The actuated coordinate turns at constant speed from ``q0``; counterweights (mass and position in
each link's frame, inside the given bounds) minimise ``w_F (F/F_0)^2 + w_M (M/M_0)^2 + w_tau
(tau/tau_0)^2`` of the RMS dynamic shaking force, shaking moment and driving torque, optionally
with the RMS driving torque at most ``(1 + --max-torque-increase)`` times its unbalanced value.
``--trade-off`` also sweeps the weights and marks the Pareto points. Prints the progress and a
summary, writes the results as JSON and a figure, both atomically.

`add_parser` adds the subcommand, `run` executes it; `record` and `figure` serve the experiments
and the notebook too.
"""

from __future__ import annotations

import math
import pathlib
import time

import numpy as np

from . import design, inverse
from .io.files import load, save_figure, write_json


def _pair(text, what):
    try:
        lo, hi = (float(v) for v in text.split(","))
    except ValueError:
        raise SystemExit(
            f"loopdyn balance: {what} must be two numbers LO,HI, got {text!r}"
        ) from None
    return lo, hi


def _numbers(text, count, what):
    try:
        values = tuple(float(v) for v in text.split(","))
    except ValueError:
        values = ()
    if len(values) != count:
        raise SystemExit(f"loopdyn balance: {what} must be {count} numbers, got {text!r}")
    return values


def add_parser(subparsers):
    """Add the ``balance`` subcommand to ``subparsers``; returns its parser."""
    cmd = subparsers.add_parser(
        "balance",
        help="counterweights minimising shaking force/moment over a crank revolution",
        description=__doc__.split("\n\n")[1],
    )
    cmd.add_argument("mechanism", help="library name (e.g. four_bar) or MJCF file (.xml)")
    cmd.add_argument(
        "--links", required=True, help="comma-separated bodies that carry a counterweight"
    )
    cmd.add_argument(
        "--mass-bounds", default="0,5", help="LO,HI of each counterweight mass [kg] (default 0,5)"
    )
    cmd.add_argument(
        "--position-bounds",
        default="-0.2,0.2",
        help="LO,HI of each position coordinate in the link's frame [m] (default -0.2,0.2)",
    )
    cmd.add_argument("--radius", type=float, default=0.0, help="disc radius [m] (0: point mass)")
    cmd.add_argument("--rpm", type=float, default=45.0, help="crank speed [rev/min]")
    cmd.add_argument("--positions", type=int, default=120, help="samples over the revolution")
    cmd.add_argument(
        "--weights", default="1,0,0", help="w_F,w_M,w_tau of force, moment, torque (default 1,0,0)"
    )
    cmd.add_argument(
        "--max-torque-increase",
        type=float,
        help="bound on the relative increase of the RMS driving torque (e.g. 0.1; negative: a "
        "required reduction)",
    )
    cmd.add_argument("--about", help="X,Y,Z of the moment's point [m] (default the origin)")
    cmd.add_argument("--method", choices=inverse.METHODS, default="subsystem")
    cmd.add_argument(
        "--trade-off",
        type=int,
        metavar="N",
        help="also sweep N moment shares (0..1) at torque weights 0, 0.1, 1",
    )
    cmd.add_argument("--out", type=pathlib.Path, help="results (.json, written atomically)")
    cmd.add_argument("--plot", type=pathlib.Path, help="figure (.png, written atomically)")
    return cmd


def record(mech, motion, slots, result, curve=None, about=None, method="subsystem") -> dict:
    """A JSON-ready record: the counterweights, RMS values before and after and their ratios,
    the time series before and after, and the trade-off points if given."""
    before = [np.asarray(x) for x in design.series(mech, motion, about, method)]
    after = [np.asarray(x) for x in design.series(result.mechanism, motion, about, method)]
    cw = result.counterweights
    names = ("force", "moment", "torque")
    out = {
        "mechanism": {
            "bodies": list(mech.body_names),
            "actuators": list(mech.actuator_names),
            "world_axes": list(mech.axis_names),
        },
        "unbalanced_rms": {k: float(v) for k, v in zip(names, result.unbalanced)},
        "balanced_rms": {k: float(v) for k, v in zip(names, result.terms)},
        "ratio": {k: float(a / b) for k, a, b in zip(names, result.terms, result.unbalanced)},
        "objective": result.objective,
        "iterations": result.iterations,
        "converged": result.converged,
        "torque_multiplier": result.torque_multiplier,
        "counterweights": [
            {
                "body": s.body,
                "mass": float(cw.mass[k]),
                "position": np.asarray(cw.position[k]).tolist(),
                "mass_moment": (float(cw.mass[k]) * np.asarray(cw.position[k])).tolist(),
                "radius": s.radius,
                "bounds": {"mass": list(s.mass), "position": [list(p) for p in s.position]},
                "at_bound": result.at_bound[k].tolist(),
            }
            for k, s in enumerate(slots)
        ],
        "t": np.asarray(motion.t).tolist(),
        "series_before": {k: v.tolist() for k, v in zip(names, before)},
        "series_after": {k: v.tolist() for k, v in zip(names, after)},
    }
    if curve is not None:
        out["trade_off"] = {
            "weights": curve.weights.tolist(),
            "rms": curve.terms.tolist(),
            "pareto": curve.pareto.tolist(),
            "unbalanced_rms": curve.unbalanced.tolist(),
        }
    return out


def figure(record, path=None, title=""):
    """Shaking force (polar), shaking moment and driving torque before and after, and the
    trade-off (RMS force against moment relative to the unbalanced values, coloured by torque)
    where the record has one."""
    from matplotlib.figure import Figure  # no pyplot: any backend, or none, will do

    t = np.asarray(record["t"])
    before, after = record["series_before"], record["series_after"]
    fig = Figure(figsize=(11, 8))
    axes = fig.subplots(2, 2)
    ax = axes[0, 0]
    for series, label in ((before, "unbalanced"), (after, "balanced")):
        f = np.asarray(series["force"])
        f = np.concatenate([f, f[:1]])  # the cycle closes
        ax.plot(f[:, 0], f[:, 1], "-o", ms=2, label=label)
    ax.plot(0, 0, "k+")
    x, y = record["mechanism"]["world_axes"][:2]
    ax.set(
        xlabel=f"F_{x} [N]", ylabel=f"F_{y} [N]", title=f"{title} shaking force (dynamic), polar"
    )
    ax.set_aspect("equal", adjustable="datalim")
    ax.legend(fontsize=7)
    for ax, key, label in (
        (axes[0, 1], "moment", "shaking moment [N m]"),
        (axes[1, 0], "torque", "driving force [N m or N]"),
    ):
        for series, style in ((before, "-"), (after, "--")):
            y = np.asarray(series[key])
            ax.plot(t, y.reshape(len(t), -1), style)
        ax.set(xlabel="t [s]", ylabel=label, title=f"{label.split(' [')[0]}: - before, -- after")
    ax = axes[1, 1]
    if "trade_off" in record:
        curve = record["trade_off"]
        rms = np.asarray(curve["rms"]) / np.asarray(curve["unbalanced_rms"])
        pareto = np.asarray(curve["pareto"])
        points = ax.scatter(rms[:, 0], rms[:, 1], c=rms[:, 2], cmap="viridis", s=30)
        ax.scatter(rms[~pareto, 0], rms[~pareto, 1], marker="x", c="r", s=40, label="dominated")
        fig.colorbar(points, ax=ax, label="RMS torque / unbalanced")
        ax.set(
            xlabel="RMS shaking force / unbalanced",
            ylabel="RMS shaking moment / unbalanced",
            title="trade-off (weights swept)",
        )
        if (~pareto).any():
            ax.legend(fontsize=7)
    else:
        ratios = record["ratio"]
        ax.bar(list(ratios), list(ratios.values()))
        ax.set(ylabel="balanced / unbalanced RMS", title="RMS after balancing")
    return save_figure(fig, path)


def run(args):
    """Execute ``loopdyn balance`` with the parsed ``args``."""
    mech = load(args.mechanism)
    links = [name for name in args.links.split(",") if name]
    mass = _pair(args.mass_bounds, "--mass-bounds")
    box = (_pair(args.position_bounds, "--position-bounds"),) * (2 if mech.planar else 3)
    slots = [design.Slot(name, mass, box, args.radius) for name in links]
    weights = design.Weights(*_numbers(args.weights, 3, "--weights"))
    about = None if args.about is None else np.array(_numbers(args.about, 3, "--about"))
    options = {"about": about, "method": args.method}
    start = time.perf_counter()

    def progress(iteration, objective):
        print(f"  iteration {iteration}: objective {objective:.6e}", flush=True)

    try:
        design.check_slots(mech, slots)  # before any compilation
        motion = design.crank_cycle(mech, args.rpm * 2 * math.pi / 60, args.positions)
        result = design.balance(
            mech,
            motion,
            slots,
            weights,
            args.max_torque_increase,
            progress=progress,
            **options,
        )
        curve = None
        if args.trade_off:
            print(f"  trade-off: {args.trade_off} moment shares x 3 torque weights")
            curve = design.trade_off(
                mech,
                motion,
                slots,
                np.linspace(0.0, 1.0, args.trade_off),
                (0.0, 0.1, 1.0),
                **options,
            )
    except ValueError as error:
        raise SystemExit(f"loopdyn balance: {error}") from None
    elapsed = time.perf_counter() - start
    out = record(mech, motion, slots, result, curve, about, args.method)
    print(
        f"{args.mechanism}: {args.positions} positions over one revolution at {args.rpm:g} rpm, "
        f"{result.iterations} iterations ({'converged' if result.converged else 'NOT converged'})"
        f", {elapsed:.1f} s including compilation"
    )
    for key, unit in (("force", "N"), ("moment", "N m"), ("torque", "N m")):
        print(
            f"  RMS {key}: {out['unbalanced_rms'][key]:.5g} -> {out['balanced_rms'][key]:.5g} "
            f"{unit} (x {out['ratio'][key]:.3g})"
        )
    for cw in out["counterweights"]:
        position = ", ".join(f"{v:.5g}" for v in cw["position"][: len(box)])
        bound = " (at a bound)" if any(cw["at_bound"]) else ""
        axes = ", ".join(mech.axis_names[: len(box)])
        print(
            f"  counterweight on {cw['body']}: {cw['mass']:.5g} kg at ({axes}) = ({position}) m "
            f"in its frame{bound}"
        )
    if curve is not None:
        print(f"  trade-off: {int(curve.pareto.sum())} of {len(curve.pareto)} points Pareto")
    if args.out is not None:
        write_json(args.out, out)
        print(f"  results: {args.out}")
    if args.plot is not None:
        figure(out, args.plot, args.mechanism)
        print(f"  figure: {args.plot}")
