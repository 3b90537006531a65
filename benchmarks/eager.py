"""Where an eager single-state call's time goes: `loopdyn.forward_dynamics` and
`loopdyn.inverse_dynamics` on concrete inputs, beside the pieces they are made of, all in one
process on one core, float64, interleaved round by round (a shared machine's load then hits
every row alike; report the ratios of this run).

- the entry point with JAX inputs and with NumPy inputs (argument checks, one compiled
  program, the singular-state check); `loopdyn.inverse_dynamics` with its checks (closure,
  rank, producible motion) and without, at a consistent state;
- its compiled program called directly with the mechanism as its 38 leaves, and as the entry
  point calls it: the leaves packed into one array, one flag read (`loopdyn.compilation.eager`);
- ``jax.jit`` of a trivial function of one and of 38 arguments: JAX's dispatch floor;
- the same program inside one compiled loop, per evaluation: the work itself;
- XLA's cost-analysis flops of the entry point's program, against which XLA's CPU client decides
  whether to hand it to another thread (under 1,000 it runs on the calling thread).

Each row twice: under JAX's default asynchronous dispatch on the CPU (a compiled program runs
on a thread of XLA's pool while Python goes on) and in a second process with
``jax_cpu_enable_async_dispatch`` off (the calling thread runs it: no hand-off between threads
for a call whose result is read at once). JAX fixes the option when its CPU backend starts.

    .venv/bin/python benchmarks/eager.py [--quick] [--out PATH]

Writes benchmarks/results/eager.{md,json} atomically.
"""

import os
import sys

_CPUS = sorted(os.sched_getaffinity(0))
os.sched_setaffinity(0, {_CPUS[0]})  # before XLA starts its thread pools: one core

import jax

jax.config.update("jax_enable_x64", True)
SYNCHRONOUS = "--synchronous" in sys.argv  # the second process (module docstring)
if SYNCHRONOUS:
    jax.config.update("jax_cpu_enable_async_dispatch", False)

import argparse
import json
import statistics
import subprocess
import time
from pathlib import Path

import jax.numpy as jnp
import numpy as np

import loopdyn
from loopdyn import compilation, forward, mechanisms

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from tree_dynamics import machine, write_atomic

LOOP = 100  # evaluations per call of the compiled loop


def state(name):
    """Mechanism ``name`` and the state every row calls at: ``q0``, fixed rates and torques."""
    mech = getattr(mechanisms, name)()
    n = mech.nv
    return mech, mech.q0, jnp.linspace(0.1, -0.2, n), jnp.linspace(1.0, -1.0, n)


def entry_program(mech, q, qd, tau):
    """The program an eager ``forward_dynamics`` call runs, compiled by one call, and its
    mechanism packed as the entry point passes it."""
    loopdyn.forward_dynamics(mech, q, qd, tau)
    (_, _, packed), programs = compilation._packed(mech)
    (program,) = programs.values()
    return program, packed


def program_flops(name):
    """XLA's cost-analysis flops of the entry point's program (XLA's CPU client runs a program
    on the calling thread below 1,000): as compiled, and with XLA's fusions off (a fusion
    recomputes the values it shares with others)."""
    mech, q, qd, tau = state(name)
    program, packed = entry_program(mech, q, qd, tau)
    lowered = program.lower(packed, q, qd, tau, None, None)
    options = compilation.supported(compilation.SINGLE_STATE)
    flops = lambda extra: lowered.compile(compiler_options=options | extra).cost_analysis()
    return {
        "compiled": flops({})["flops"],
        "unfused": flops({"xla_disable_hlo_passes": "fusion"})["flops"],
    }


def cases(name):
    """``{label: (call, evaluations per call)}`` for mechanism ``name`` at ``q0``."""
    mech, q, qd, tau = state(name)
    n = mech.nv
    numpy = tuple(np.asarray(x) for x in (q, qd, tau))
    # a consistent motion for inverse_dynamics: the velocity projected onto the constraints,
    # the accelerations the actuators' torques give
    moving = loopdyn.kinematics.project_velocity(mech, q, qd)
    driven = jnp.zeros(n).at[np.array(mech.actuated)].set(1.0)
    qdd = loopdyn.forward_dynamics(mech, q, moving, driven)[0]
    leaves, structure = jax.tree.flatten(mech)

    def by_leaves(leaves, q, qd, tau):
        return forward.solve(jax.tree.unflatten(structure, leaves), q, qd, tau)

    def loop(leaves, q, qd, tau):
        def body(_, acc):
            return acc + by_leaves(leaves, q + 1e-9 * acc, qd, tau).qdd

        return jax.lax.fori_loop(0, LOOP, body, jnp.zeros_like(qd))

    jit = lambda f: jax.jit(f, compiler_options=compilation.supported(compilation.SINGLE_STATE))
    leaves_call, loop_call = jit(by_leaves), jit(loop)
    packed_call, packed = entry_program(mech, q, qd, tau)
    one, many = jax.jit(lambda x: x + 1.0), jax.jit(lambda *x: x[0] + 1.0)
    ready = lambda x: jax.block_until_ready(x)
    return {
        "forward_dynamics, JAX inputs": (lambda: loopdyn.forward_dynamics(mech, q, qd, tau), 1),
        "forward_dynamics, NumPy inputs": (lambda: loopdyn.forward_dynamics(mech, *numpy), 1),
        "inverse_dynamics, JAX inputs (checked)": (
            lambda: ready(loopdyn.inverse_dynamics(mech, q, moving, qdd)),
            1,
        ),
        "inverse_dynamics (check=False), JAX inputs": (
            lambda: ready(loopdyn.inverse_dynamics(mech, q, moving, qdd, check=False)),
            1,
        ),
        "its program alone, the mechanism as 38 leaves (the entry point packs them)": (
            lambda: ready(leaves_call(leaves, q, qd, tau)),
            1,
        ),
        "its program as the entry point calls it (the mechanism packed, its flag read)": (
            lambda: np.asarray(packed_call(packed, q, qd, tau, None, None)[1]),
            1,
        ),
        "jax.jit, trivial, 1 argument": (lambda: ready(one(q)), 1),
        "jax.jit, trivial, 38 arguments": (lambda: ready(many(*leaves)), 1),
        f"program inside a compiled loop, per evaluation ({LOOP} a call)": (
            lambda: ready(loop_call(leaves, q, qd, tau)),
            LOOP,
        ),
    }


def measure(calls, rounds, number):
    """Each call timed ``number`` times per round, the calls interleaved, over ``rounds``:
    per-evaluation seconds, minimum and median over the rounds."""
    for call, _ in calls.values():
        for _ in range(20):
            call()
    times = {label: [] for label in calls}
    for _ in range(rounds):
        for label, (call, evaluations) in calls.items():
            start = time.perf_counter()
            for _ in range(max(number // evaluations, 1)):
                call()
            times[label].append((time.perf_counter() - start) / max(number // evaluations, 1))
            times[label][-1] /= evaluations
    return {k: {"min_s": min(v), "median_s": statistics.median(v)} for k, v in times.items()}


def measure_all(rounds, number):
    results = {}
    for name in ("four_bar", "three_rrr"):
        column = f"{name}, {'synchronous' if SYNCHRONOUS else 'default'} dispatch"
        results[column] = measure(cases(name), rounds, number)
        for label, r in results[column].items():
            print(
                f"{column}: {label}: {r['min_s'] * 1e6:.1f} us (median {r['median_s'] * 1e6:.1f})"
            )
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few rounds")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/eager.md")
    parser.add_argument("--synchronous", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    rounds, number = (5, 100) if args.quick else (30, 300)
    if args.synchronous:  # the second process: its rows as JSON on the last line
        print(json.dumps(measure_all(rounds, number)))
        return
    info = machine()
    results = measure_all(rounds, number)
    command = [sys.executable, __file__, "--synchronous"] + (["--quick"] if args.quick else [])
    second = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    results |= json.loads(second.splitlines()[-1])
    info["load_average_end"] = os.getloadavg()
    raw = {"machine": info, "rounds": rounds, "calls_per_round": number, "results": results}
    raw["program_flops"] = {name: program_flops(name) for name in ("four_bar", "three_rrr")}
    write_atomic(args.out.with_suffix(".json"), json.dumps(raw, indent=1, default=str))
    write_atomic(args.out, markdown(raw))
    print(f"wrote {args.out}")


def markdown(raw):
    m, load = raw["machine"], lambda t: ", ".join(f"{x:.2f}" for x in t)
    lines = [
        "# Eager single-state calls: where the time goes",
        "",
        f"Written by `benchmarks/eager.py`: {m['cpu']}, one core of {m['cores']}, JAX {m['jax']}, "
        f"{m['devices']} XLA host device(s), float64, {m['date']}; load average "
        f"{load(m['load_average'])} at the start, "
        f"{load(m['load_average_end'])} at the end (a shared machine: compare within this run). "
        f"Every row timed {raw['calls_per_round']} calls a round, rows interleaved, "
        f"{raw['rounds']} rounds: the fastest round (the median in brackets), µs per call (the "
        "loop row: per evaluation). Mechanisms at `q0`, SSLM. Default dispatch: JAX's "
        "asynchronous dispatch on the CPU; synchronous: a second process with "
        "`jax_cpu_enable_async_dispatch` off (its rows ran after the first process's).",
        "",
        "| | " + " | ".join(raw["results"]) + " |",
        "|---|" + "---:|" * len(raw["results"]),
    ]
    labels = next(iter(raw["results"].values()))
    for label in labels:
        cells = [
            f"{r[label]['min_s'] * 1e6:.1f} ({r[label]['median_s'] * 1e6:.1f})"
            for r in raw["results"].values()
        ]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    flops = "; ".join(
        f"{name} {f['compiled']:,.0f} ({f['unfused']:,.0f} with XLA's fusions off)"
        for name, f in raw["program_flops"].items()
    )
    lines += [
        "",
        "XLA's cost analysis of the entry point's program, floating-point operations (XLA's CPU "
        "client runs a program on the calling thread, without the hand-off, below 1,000; fusions "
        f"recompute the values they share): {flops}.",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
