"""Command line: ``loopdyn demo`` and ``loopdyn simulate <mechanism | model.xml>`` here;
``loopdyn inverse`` (`cli_inverse`), ``loopdyn fit`` (`cli_fit`), ``loopdyn balance``
(`cli_balance`) and ``loopdyn montecarlo`` (`cli_montecarlo`) in their modules.

``python -m loopdyn.cli ...`` works the same without the installed script.

Compiled programs are kept in JAX's persistent compilation cache, in ``$LOOPDYN_CACHE_DIR``
(default ``~/.cache/loopdyn/jax``; ``LOOPDYN_CACHE_DIR=off`` or ``--no-cache`` for none), so a
second run of the same command skips XLA's compilation. Loops are compiled into single kernels
(`compilation.use_loop_kernels`) unless ``XLA_FLAGS`` sets XLA's limit for them."""

import argparse
import os
import pathlib
import time

import jax
import matplotlib

jax.config.update("jax_enable_x64", True)
matplotlib.use("Agg")  # files only: the command line never opens a window

import jax.numpy as jnp
import numpy as np

from . import (
    cli_balance,
    cli_fit,
    cli_inverse,
    cli_montecarlo,
    compilation,
    forward,
    kinematics,
    plot,
    simulation,
)
from .io.files import load
from .rosenbrock import ROS34PW2


def speed_control(mech, rate, gain):
    """``tau(t, q, qd)`` driving the first actuated coordinate towards ``rate`` [rad/s or m/s]
    by a proportional speed controller of ``gain`` [N m s/rad] (a motor held at constant speed),
    and the initial velocities at that speed."""
    if not mech.actuated:
        raise ValueError("--drive needs an actuated joint; this mechanism has none")
    crank = mech.actuated[0]
    qd0 = jnp.zeros(mech.nv, mech.q0.dtype).at[crank].set(rate)
    qd0 = kinematics.project_velocity(mech, mech.q0, qd0, fixed=(crank,))
    return (lambda t, q, qd: jnp.zeros_like(qd).at[crank].set(gain * (rate - qd[crank]))), qd0


def run(mech, t1, *, tau=None, qd0=None, saves=301, **options):
    """Simulate from ``mech.q0`` (at rest unless ``qd0``) twice (compile, then run); print a
    summary; return the simulation and the driving forces at its saves."""
    q0 = mech.q0
    qd0 = jnp.zeros(mech.nv, q0.dtype) if qd0 is None else qd0
    ts = jnp.linspace(0.0, t1, saves)
    timings = []
    print("  compiling ...", flush=True)  # the first call compiles; the second times the run
    for _ in range(2):
        start = time.perf_counter()
        sim = simulation.simulate(mech, q0, qd0, t1, tau=tau, saveat=ts, **options)
        jax.block_until_ready(sim.q)
        timings.append(time.perf_counter() - start)
    torque = (
        np.zeros_like(np.asarray(sim.q))
        if tau is None
        else np.asarray(jax.vmap(tau)(sim.ts, sim.q, sim.qd))
    )
    energy = np.asarray(sim.energy)
    drift = float(np.max(np.abs(energy - energy[0])) / max(abs(energy[0]), 1e-12))
    print(
        f"  {sim.message}; {int(sim.stats.rejected_steps)} rejected\n"
        f"  compile {timings[0] - timings[1]:.1f} s, run {1e3 * timings[1]:.1f} ms\n"
        f"  max loop residual |Phi| {float(np.max(sim.loop_residual[:, 0])):.1e} m, "
        f"|J qd| {float(np.max(sim.loop_residual[:, 1])):.1e}\n"
        f"  energy {energy[0]:.6g} J -> {energy[-1]:.6g} J"
        + ("" if tau is not None else f", relative drift {drift:.1e}")
    )
    return sim, torque


def write(mech, sim, torque, out=None, figure=None, gif=None, title=""):
    if out is not None:
        simulation.save(out, sim, mech, tau=torque)
        print(f"  results: {out}")
    if figure is not None:
        plot.simulation_figure(mech, sim, torque if np.any(torque) else None, figure, title)
        print(f"  figure: {figure}")
    if gif is not None:
        plot.animation(mech, sim.ts, sim.q, gif)
        print(f"  animation: {gif}")


def demo(out: pathlib.Path):
    """The seeds' two examples: the 3-RRR moving freely under gravity from its seed state, and the
    carpet scraper's crank brought to 45 rpm by a speed-controlled motor."""
    out.mkdir(parents=True, exist_ok=True)
    for name, t1, drive, about in (
        ("three_rrr", 5.0, None, "free motion under gravity from the seed state (seed 000)"),
        (
            "carpet_scraper",
            3.0,
            4.712,
            "crank motor held at 45 rpm by a speed controller (seed 002 §6.1.1)",
        ),
    ):
        mech = load(name)
        top = mech.topology
        print(
            f"{name}: {mech.num_bodies} joints, {len(top.loops)} loops, {top.dof} DOF; {about}; "
            f"{t1:g} s, SSLM, Baumgarte"
        )
        tau, qd0 = (None, None) if drive is None else speed_control(mech, drive, 60.0)
        sim, torque = run(mech, t1, tau=tau, qd0=qd0)
        write(
            mech, sim, torque, out / f"{name}.npz", out / f"{name}.png", out / f"{name}.gif", name
        )


class Parser(argparse.ArgumentParser):
    """Every loopdyn (sub)command's parser: ``--help`` shows each option's default."""

    def __init__(self, **kwargs):
        kwargs.setdefault("formatter_class", argparse.ArgumentDefaultsHelpFormatter)
        super().__init__(**kwargs)


def positive(text):
    """An argparse type: a float > 0."""
    value = float(text)
    if not value > 0.0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def use_cache(directory: str):
    """JAX's persistent compilation cache in ``directory`` ("off": none), for every program that
    compiles in 0.1 s or more (JAX's default, 1 s, would skip the compact ones)."""
    if directory != "off":
        jax.config.update("jax_compilation_cache_dir", str(pathlib.Path(directory).expanduser()))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.1)


SOLVERS = {"tsit5": None, "ros34pw2": ROS34PW2()}  # simulate's: None is its default, Tsit5


def main(argv=None):
    """Run the command line. Bad input (a missing file, an unknown mechanism, a model loopdyn
    cannot represent, a state off its loops) ends with one line naming the problem and exit
    code 2; a simulation that fails exits with 1."""
    parser = Parser(prog="loopdyn", description=__doc__)
    parser.add_argument(
        "--cache-dir",
        default=os.environ.get("LOOPDYN_CACHE_DIR") or "~/.cache/loopdyn/jax",
        help="compilation cache directory, or off ($LOOPDYN_CACHE_DIR sets the default)",
    )
    parser.add_argument(
        "--no-cache", dest="cache_dir", action="store_const", const="off", help="no cache"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    cmd = sub.add_parser("demo", help="simulate the 3-RRR and the carpet scraper, write figures")
    cmd.add_argument("--out", type=pathlib.Path, default=pathlib.Path("out"), help="directory")
    cmd = sub.add_parser("simulate", help="simulate a mechanism from its q0 at rest")
    cmd.add_argument("mechanism", help="library name (e.g. three_rrr) or MJCF file (.xml)")
    cmd.add_argument("--t", type=positive, default=5.0, help="final time [s]")
    cmd.add_argument("--method", choices=forward.METHODS, default="auto")
    cmd.add_argument("--stabilization", choices=simulation.STABILIZATIONS, default="baumgarte")
    cmd.add_argument(
        "--solver",
        choices=tuple(SOLVERS),
        default="tsit5",
        help="ros34pw2: implicit in the joints' dampers and springs (stiff MJCF models, loose rtol)",
    )
    cmd.add_argument("--rtol", type=positive, default=1e-8, help="relative tolerance per step")
    cmd.add_argument("--atol", type=positive, default=1e-8, help="absolute tolerance [rad, m]")
    cmd.add_argument("--saves", type=int, default=301, help="number of saved instants")
    cmd.add_argument(
        "--drive", type=float, help="hold the first actuator at this speed [rad/s or m/s]"
    )
    cmd.add_argument("--gain", type=float, default=60.0, help="speed controller gain [N m s/rad]")
    cmd.add_argument("--out", type=pathlib.Path, help="results (.npz, written atomically)")
    cmd.add_argument(
        "--multipliers",
        action="store_true",
        help="also write the multipliers lam (compiles longer)",
    )
    cmd.add_argument("--plot", type=pathlib.Path, help="figure (.png)")
    cmd.add_argument("--gif", type=pathlib.Path, help="animation (.gif)")
    cli_inverse.add_parser(sub)
    cli_montecarlo.add_parser(sub)
    cli_fit.add_parser(sub)
    cli_balance.add_parser(sub)
    args = parser.parse_args(argv)
    compilation.use_loop_kernels()
    use_cache(args.cache_dir)
    if args.command == "simulate" and args.saves < 2:
        parser.exit(2, f"loopdyn simulate: --saves must be at least 2, got {args.saves}\n")
    try:
        _dispatch(args)
    except (ValueError, OSError) as error:
        parser.exit(2, f"loopdyn {args.command}: {error}\n")


def _dispatch(args):
    if args.command == "inverse":
        cli_inverse.run(args)
    elif args.command == "montecarlo":
        cli_montecarlo.run(args)
    elif args.command == "fit":
        cli_fit.run(args)
    elif args.command == "balance":
        cli_balance.run(args)
    elif args.command == "demo":
        demo(args.out)
    elif args.command == "simulate":
        mech = load(args.mechanism)
        tau, qd0 = (
            (None, None) if args.drive is None else speed_control(mech, args.drive, args.gain)
        )
        print(f"{args.mechanism}: {args.t:g} s, {args.method}, {args.stabilization}, {args.solver}")
        sim, torque = run(
            mech,
            args.t,
            tau=tau,
            qd0=qd0,
            saves=args.saves,
            method=args.method,
            stabilization=args.stabilization,
            rtol=args.rtol,
            atol=args.atol,
            multipliers=args.multipliers,
            solver=SOLVERS[args.solver],
        )
        write(mech, sim, torque, args.out, args.plot, args.gif, args.mechanism)
        if not sim.succeeded:
            raise SystemExit(1)


if __name__ == "__main__":
    main()
