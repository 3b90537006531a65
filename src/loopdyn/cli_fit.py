"""``loopdyn fit <mechanism | model.xml> --data file.npz --free masses=a,b ...``: identify link
masses and inertias from measured data (`loopdyn.fit`).

The data file (``.npz``) holds either a trajectory, ``ts`` ``(T,)`` and ``q`` ``(T, n)`` (with
optional ``qd0`` ``(n,)``, default rest; ``q0`` ``(n,)``, default ``q[0]``; joint torques ``tau``,
``(n,)`` or ``(K, n)`` evenly spaced; ``weight``, the noise level, scalar or ``(n,)``), fitted by
Levenberg-Marquardt through `loopdyn.simulate` (`fit.fit_trajectory`), the parameters of the
model file being the starting guess; or driving forces at known states, ``q``, ``qd``, ``qdd``
``(T, n)`` and ``actuator_forces`` ``(T, a)``, identified by the linear regressor route
(`fit.identify`, all inertial parameters of the bodies named in ``--free``, default all).
Prints progress and a summary (estimates, confidence intervals, what the data cannot determine),
writes the results as JSON and a figure, both atomically.
"""

from __future__ import annotations

import pathlib
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp
import numpy as np

from . import fit, parameters
from .io.files import load, save_figure, write_json

_KINDS = ("masses", "inertias", "com", "placements", "child_placements")


def add_parser(subparsers):
    """Add the ``fit`` subcommand to ``subparsers``; returns its parser."""
    cmd = subparsers.add_parser(
        "fit",
        help="identify link masses and inertias from a measured trajectory or driving forces",
        description=__doc__.split("\n\n")[1],
    )
    cmd.add_argument("mechanism", help="library name (e.g. three_rrr) or MJCF file (.xml)")
    cmd.add_argument("--data", type=pathlib.Path, required=True, help="measured data (.npz)")
    cmd.add_argument(
        "--free",
        nargs="+",
        default=["masses=all"],
        metavar="KIND=NAMES",
        help=f"free parameters, KIND one of {', '.join(_KINDS)}, NAMES comma separated body "
        "(joint) names or 'all' (default masses=all)",
    )
    cmd.add_argument("--confidence", type=float, default=0.95)
    cmd.add_argument("--max-steps", type=int, default=50, help="Levenberg-Marquardt iterations")
    cmd.add_argument("--tol", type=float, default=1e-10, help="integration rtol and atol")
    cmd.add_argument("--out", type=pathlib.Path, help="results (.json, written atomically)")
    cmd.add_argument("--plot", type=pathlib.Path, help="figure (.png, written atomically)")
    return cmd


def selection(mech, items) -> dict[str, list[str]]:
    """``["masses=a,b", "com=all"]`` -> ``{"masses": ["a", "b"], "com": [bodies with mass]}``."""
    chosen = {}
    bodies = [n for n, m in zip(mech.body_names, np.asarray(mech.mass)) if m > 0]
    joints = list(mech.coordinate_names) + [c.name for c in mech.cut_joints]
    for item in items:
        kind, _, names = item.partition("=")
        if kind not in _KINDS or not names:
            raise ValueError(f"--free: expected KIND=NAMES with KIND in {_KINDS}, got {item!r}")
        if names == "all":
            chosen[kind] = joints if "placements" in kind else bodies
        else:
            chosen[kind] = names.split(",")
    return chosen


def _load(path, keys, optional=()):
    try:
        data = np.load(path)
    except OSError as error:
        raise ValueError(f"--data: cannot read {path}: {error}") from None
    missing = [k for k in keys if k not in data]
    if missing:
        raise ValueError(f"--data: {path} lacks {missing} (has {sorted(data.files)})")
    return {k: data[k] for k in (*keys, *optional) if k in data}


def _finite(x):
    """A JSON-ready list with ``None`` for the infinite entries (unidentifiable parameters)."""
    return np.where(np.isfinite(x), x, None).tolist()


def fit_trajectory_data(mech, data, chosen, confidence, max_steps, tol, show=print):
    """Fit ``chosen`` (from `selection`) to a trajectory record; returns the `fit.TrajectoryFit`
    and a JSON-ready record."""
    sel = parameters.free(mech, **chosen)
    ts, q = data["ts"], data["q"]
    q0 = data.get("q0", q[0])
    qd0 = data.get("qd0", np.zeros_like(q0))
    options = {"rtol": tol, "atol": tol}
    if "tau" in data:
        options["tau"] = jnp.asarray(data["tau"])

    def progress(iteration, cost, mu):
        show(f"  iteration {iteration:3d}: cost {cost:.6e}, damping {mu:.1e}", flush=True)

    result = fit.fit_trajectory(
        mech,
        sel,
        ts,
        q,
        jnp.asarray(q0),
        jnp.asarray(qd0),
        weight=data.get("weight", 1.0),
        max_steps=max_steps,
        confidence=confidence,
        progress=progress,
        **options,
    )
    stats = result.statistics
    record = {
        "route": "trajectory",
        "labels": list(result.value_labels),
        "estimate": result.values.tolist(),
        "interval": _finite(result.interval),
        "confidence": confidence,
        "unconstrained_labels": list(stats.labels),
        "unconstrained_estimate": stats.estimate.tolist(),
        "unconstrained_std_error": _finite(stats.std_error),
        "identifiable": stats.identifiable.tolist(),
        "unidentifiable": list(stats.unidentifiable),
        "rank": stats.rank,
        "singular_values": stats.singular_values.tolist(),
        "noise_std": stats.noise_std,
        "cost": result.cost.tolist(),
        "converged": result.converged,
    }
    return result, record


def identify_torque_data(mech, data, chosen, confidence):
    """The linear route: every inertial parameter of the bodies named in ``chosen``."""
    names = sorted({n for kind in ("masses", "inertias", "com") for n in chosen.get(kind, [])})
    ident = fit.identify(
        mech,
        data["q"],
        data["qd"],
        data["qdd"],
        data["actuator_forces"],
        names or None,
        confidence=confidence,
    )
    record = {
        "route": "torque",
        "labels": list(ident.labels),
        "estimate": ident.estimate.tolist(),
        "interval": _finite(ident.interval),
        "confidence": confidence,
        "std_error": _finite(ident.std_error),
        "identifiable": ident.identifiable.tolist(),
        "unidentifiable": list(ident.unidentifiable),
        "rank": ident.rank,
        "singular_values": ident.singular_values.tolist(),
        "noise_std": ident.noise_std,
    }
    return ident, record


def figure(record, path=None, title=""):
    """Estimates with their intervals (relative to the estimate) and, for a trajectory fit, the
    cost after each iteration."""
    from matplotlib.figure import Figure

    trajectory = record["route"] == "trajectory"
    fig = Figure(figsize=(10 if trajectory else 6, 4.5))
    axes = fig.subplots(1, 2 if trajectory else 1, squeeze=False)[0]
    estimate = np.asarray(record["estimate"], float)
    interval = np.asarray(record["interval"], float)
    shown = np.isfinite(interval[:, 0])
    k = np.flatnonzero(shown)
    ax = axes[0]
    scale = np.where(estimate[k] != 0, np.abs(estimate[k]), 1.0)
    low, high = (estimate[k] - interval[k, 0]) / scale, (interval[k, 1] - estimate[k]) / scale
    ax.errorbar(np.zeros(k.size), k, xerr=[low, high], fmt="o", capsize=3)
    ax.set_yticks(k, [record["labels"][i] for i in k], fontsize=7)
    ax.axvline(0.0, color="k", lw=0.5)
    ax.set(
        xlabel="relative to the estimate",
        title=f"{title} {100 * record['confidence']:g} % intervals (identifiable)",
    )
    if trajectory:
        ax = axes[1]
        ax.semilogy(np.asarray(record["cost"]) + 1e-300, "o-")
        ax.set(xlabel="iteration", ylabel="cost |r|^2 / 2", title="Levenberg-Marquardt")
    return save_figure(fig, path)


def run(args):
    """Execute ``loopdyn fit`` with the parsed ``args``."""
    mech = load(args.mechanism)
    start = time.perf_counter()
    try:
        chosen = selection(mech, args.free)
        with np.load(args.data) as handle:
            torque_data = "actuator_forces" in handle.files
        if torque_data:
            data = _load(args.data, ("q", "qd", "qdd", "actuator_forces"))
            print(f"{args.mechanism}: {len(data['q'])} states with driving forces, linear route")
            ident, record = identify_torque_data(mech, data, chosen, args.confidence)
            print(ident.summary(" or ".join(sorted({mech.force_units[k] for k in mech.actuated}))))
        else:
            data = _load(args.data, ("ts", "q"), ("q0", "qd0", "tau", "weight"))
            print(
                f"{args.mechanism}: trajectory of {len(data['ts'])} samples over "
                f"{float(data['ts'][-1]):.3g} s, Levenberg-Marquardt through simulate"
            )
            result, record = fit_trajectory_data(
                mech, data, chosen, args.confidence, args.max_steps, args.tol
            )
            print(
                f"  {'converged' if result.converged else 'NOT converged'} after "
                f"{len(result.cost) - 1} iterations; rank {record['rank']} of "
                f"{len(record['labels'])}, residual std {record['noise_std']:.3g} rad or m (weighted)"
            )
            for label, value, (low, high) in zip(record["labels"], result.values, result.interval):
                unit = fit.unit(label)
                print(f"  {label:>24} = {value:.6g}  [{low:.6g}, {high:.6g}] {unit}")
            for name in record["unidentifiable"]:
                print(f"  not identifiable: {name}")
    except (ValueError, OSError) as error:
        raise SystemExit(f"loopdyn fit: {error}") from None
    print(f"  {time.perf_counter() - start:.1f} s including compilation")
    if args.out is not None:
        write_json(args.out, record)
        print(f"  results: {args.out}")
    if args.plot is not None:
        figure(record, args.plot, args.mechanism)
        print(f"  figure: {args.plot}")
