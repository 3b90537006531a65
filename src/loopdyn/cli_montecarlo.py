"""``loopdyn montecarlo <mechanism | model.xml>``: a Monte Carlo study over mass and length
tolerances (`loopdyn.montecarlo`), stored chunk by chunk in a zarr group, resumable, on every
device, optionally over several processes (`jax.distributed`).

Each run samples every mass within ``--mass-tol`` (relative) and every joint placement within
``--length-tol`` (metres), closes the loops with the actuated coordinates held and simulates
free motion from rest over ``--t`` seconds (or, with ``--speed``, runs the inverse dynamics of a
constant-speed cycle). Prints the counts by result code and the mean, standard deviation and
quantiles of the chosen summaries, and writes their histograms.

The subcommand is added to the ``loopdyn`` parser by `add_parser` and executed by `run`.
"""

from __future__ import annotations

import math
import pathlib
import time

import jax

jax.config.update("jax_enable_x64", True)


def add_parser(subparsers):
    """Add the ``montecarlo`` subcommand to ``subparsers``; returns its parser."""
    cmd = subparsers.add_parser(
        "montecarlo",
        help="Monte Carlo study over mass and length tolerances (zarr store, resumable)",
        description=__doc__.split("\n\n")[1],
    )
    cmd.add_argument("mechanism", help="library name (e.g. three_rrr) or MJCF file (.xml)")
    cmd.add_argument("--n", type=int, default=1000, help="number of runs")
    cmd.add_argument("--mass-tol", type=float, default=0.05, help="relative mass tolerance")
    cmd.add_argument("--length-tol", type=float, default=0.001, help="placement tolerance [m]")
    cmd.add_argument("--t", type=float, default=5.0, help="simulated time or cycle length [s]")
    cmd.add_argument("--out", type=pathlib.Path, required=True, help="zarr store (directory)")
    cmd.add_argument("--resume", action="store_true", help="continue an interrupted study")
    cmd.add_argument(
        "--chunk",
        type=int,
        help="runs per batch and store chunk (default: about n/20, at least 16 per device, "
        "at most 1000)",
    )
    cmd.add_argument("--seed", type=int, default=0)
    cmd.add_argument("--rtol", type=float, default=1e-6)
    cmd.add_argument("--atol", type=float, default=1e-6)
    cmd.add_argument("--method", default="auto", help="forward-dynamics method")
    cmd.add_argument("--saves", type=int, default=51, help="saved instants per run")
    cmd.add_argument("--trajectories", action="store_true", help="store q and qd at the saves")
    cmd.add_argument(
        "--speed",
        type=float,
        nargs="+",
        help="inverse dynamics instead: constant speed of the actuators [rad/s or m/s] "
        "(as for `loopdyn inverse`), on a grid of --dt over --t seconds",
    )
    cmd.add_argument("--dt", type=float, default=0.01, help="grid step of --speed cycles [s]")
    cmd.add_argument(
        "--stats",
        nargs="+",
        help="summaries or columns to print and plot, e.g. q_final energy_drift 'q_final[theta1]' "
        "(default: all)",
    )
    cmd.add_argument("--plot", type=pathlib.Path, help="histograms (.png; default <out>.png)")
    cmd.add_argument(
        "--host-devices",
        type=int,
        help="split the CPU into this many XLA devices (e.g. one per core) in this process; "
        "across hosts use --coordinator instead",
    )
    cmd.add_argument("--coordinator", help="jax.distributed coordinator host:port (multi-host)")
    cmd.add_argument("--num-processes", type=int, default=1)
    cmd.add_argument("--process-id", type=int, default=0)
    cmd.add_argument("--quiet", action="store_true", help="no progress bar")
    cmd.add_argument("--verbose", action="store_true", help="a line per computed chunk")
    return cmd


def _chosen(stats, wanted):
    """The statistics columns named by ``wanted`` (summary names or column labels)."""
    columns = stats["columns"]
    if not wanted:
        return list(columns)
    picked = []
    for w in wanted:
        match = [c for c in columns if c == w or c.split("[")[0] == w]
        if not match:
            names = sorted({c.split("[")[0] for c in columns})
            raise SystemExit(f"loopdyn montecarlo: unknown summary {w!r}; summaries are {names}")
        picked += [c for c in match if c not in picked]
    return picked


def print_statistics(stats, labels):
    """Counts by code, then one line per column: mean, std and the stored quantiles."""
    codes = ", ".join(f"{name} {count}" for name, count in stats["codes"].items())
    print(f"  {stats['done']} of {stats['runs']} runs done: {codes}")
    first = stats["columns"][labels[0]] if labels else {}
    heads = list(first)
    print(f"  {'summary':28s}" + "".join(f"{h:>14s}" for h in heads) + "  unit")
    for label in labels:
        row = stats["columns"][label]
        values = (math.nan if row[h] is None else row[h] for h in heads)
        unit = stats["units"].get(label, "")
        print(f"  {label:28s}" + "".join(f"{v:14.6g}" for v in values) + f"  {unit}")


def run(args):
    """Execute ``loopdyn montecarlo`` with the parsed ``args``."""
    if args.host_devices:  # before JAX starts its backends (JAX raises if it has started)
        jax.config.update("jax_num_cpu_devices", args.host_devices)
    if args.coordinator:
        jax.distributed.initialize(
            coordinator_address=args.coordinator,
            num_processes=args.num_processes,
            process_id=args.process_id,
        )
    from . import montecarlo
    from .cli_inverse import constant_speed
    from .io.files import load

    mech = load(args.mechanism)
    try:
        sampler = montecarlo.tolerances(mech, args.mass_tol, args.length_tol)
        drive = None if args.speed is None else constant_speed(mech, args.speed)
        options = montecarlo.Options(
            kind="simulate" if drive is None else "inverse",
            t1=args.t,
            saves=args.saves,
            rtol=args.rtol,
            atol=args.atol,
            method=args.method,
            drive=drive,
            dt=args.dt,
            trajectories=args.trajectories,
        )
        devices = jax.local_devices()
        chunk = args.chunk or montecarlo.default_chunk(args.n, len(devices))
        kind = "simulations" if drive is None else "inverse-dynamics cycles"
        print(
            f"{args.mechanism}: {args.n} {kind} of {args.t:g} s, mass +-{args.mass_tol:g} "
            f"(relative), lengths +-{args.length_tol:g} m; chunks of {min(chunk, args.n)} on "
            f"{len(devices)} {devices[0].platform} device(s), process {jax.process_index()} of "
            f"{jax.process_count()}",
            flush=True,
        )
        start = time.perf_counter()
        stats = montecarlo.run(
            mech,
            sampler,
            args.n,
            args.out,
            options=options,
            chunk=chunk,
            seed=args.seed,
            resume=args.resume,
            progress=not args.quiet,
            verbose=args.verbose,
        )
    except (ValueError, FileExistsError) as error:
        raise SystemExit(f"loopdyn montecarlo: {error}") from None
    elapsed = time.perf_counter() - start
    if jax.process_index() != 0:
        return
    print(f"  {elapsed:.1f} s including compilation; store: {args.out}")
    labels = _chosen(stats, args.stats)
    print_statistics(stats, labels)
    plot = args.plot or args.out.with_suffix(".png")
    montecarlo.histograms(args.out, labels, plot)
    print(f"  histograms: {plot}")
