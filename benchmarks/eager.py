"""Where an eager single-state call's time goes: `loopdyn.forward_dynamics` and
`loopdyn.inverse_dynamics` on concrete inputs, beside the pieces they are made of, all in one
process on one core, float64, interleaved round by round (a shared machine's load then hits
every row alike; report the ratios of this run).

- the entry point with JAX inputs and with NumPy inputs (argument checks, one compiled
  program, the singular-state check), and with NumPy inputs converted by ``jnp.asarray`` first
  (what the checks did with them before: about 18 µs an array);
- its compiled program called directly with the mechanism as its 38 leaves (the entry point
  hands them over packed into one array, `loopdyn.compilation.eager`);
- ``jax.jit`` of a trivial function of one and of 38 arguments: JAX's dispatch floor;
- the same program inside one compiled loop, per evaluation: the work itself.

    .venv/bin/python benchmarks/eager.py [--quick] [--out PATH]

Writes benchmarks/results/eager.{md,json} atomically.
"""

import os
import sys

_CPUS = sorted(os.sched_getaffinity(0))
os.sched_setaffinity(0, {_CPUS[0]})  # before XLA starts its thread pools: one core

import jax

jax.config.update("jax_enable_x64", True)

import argparse
import json
import statistics
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


def cases(name):
    """``{label: (call, evaluations per call)}`` for mechanism ``name`` at ``q0``."""
    mech = getattr(mechanisms, name)()
    n = mech.nv
    q, qd, tau = mech.q0, jnp.linspace(0.1, -0.2, n), jnp.linspace(1.0, -1.0, n)
    numpy = tuple(np.asarray(x) for x in (q, qd, tau))
    leaves, structure = jax.tree.flatten(mech)

    def by_leaves(leaves, q, qd, tau):
        return forward.solve(jax.tree.unflatten(structure, leaves), q, qd, tau)

    def loop(leaves, q, qd, tau):
        def body(_, acc):
            return acc + by_leaves(leaves, q + 1e-9 * acc, qd, tau).qdd

        return jax.lax.fori_loop(0, LOOP, body, jnp.zeros_like(qd))

    jit = lambda f: jax.jit(f, compiler_options=compilation.SINGLE_STATE)  # as the entry point
    leaves_call, loop_call = jit(by_leaves), jit(loop)
    one, many = jax.jit(lambda x: x + 1.0), jax.jit(lambda *x: x[0] + 1.0)
    ready = lambda x: jax.block_until_ready(x)
    return {
        "forward_dynamics, JAX inputs": (lambda: loopdyn.forward_dynamics(mech, q, qd, tau), 1),
        "forward_dynamics, NumPy inputs": (lambda: loopdyn.forward_dynamics(mech, *numpy), 1),
        "forward_dynamics, NumPy inputs converted by jnp.asarray first (the previous path)": (
            lambda: loopdyn.forward_dynamics(mech, *(jnp.asarray(x) for x in numpy)),
            1,
        ),
        "inverse_dynamics (check=False), JAX inputs": (
            lambda: ready(loopdyn.inverse_dynamics(mech, q, qd, tau, check=False)),
            1,
        ),
        "its program alone, the mechanism as 38 leaves (the entry point packs them)": (
            lambda: ready(leaves_call(leaves, q, qd, tau)),
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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few rounds")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/eager.md")
    args = parser.parse_args()
    rounds, number = (5, 100) if args.quick else (30, 300)
    info = machine()
    results = {}
    for name in ("four_bar", "three_rrr"):
        results[name] = measure(cases(name), rounds, number)
        for label, r in results[name].items():
            print(f"{name}: {label}: {r['min_s'] * 1e6:.1f} us (median {r['median_s'] * 1e6:.1f})")
    info["load_average_end"] = os.getloadavg()
    raw = {"machine": info, "rounds": rounds, "calls_per_round": number, "results": results}
    write_atomic(args.out.with_suffix(".json"), json.dumps(raw, indent=1, default=str))
    write_atomic(args.out, markdown(raw))
    print(f"wrote {args.out}")


def markdown(raw):
    m, load = raw["machine"], lambda t: ", ".join(f"{x:.2f}" for x in t)
    lines = [
        "# Eager single-state calls: where the time goes",
        "",
        f"Written by `benchmarks/eager.py`: {m['cpu']}, one core of {m['cores']}, JAX {m['jax']}, "
        f"float64, {m['date']}; load average {load(m['load_average'])} at the start, "
        f"{load(m['load_average_end'])} at the end (a shared machine: compare within this run). "
        f"Every row timed {raw['calls_per_round']} calls a round, rows interleaved, "
        f"{raw['rounds']} rounds: the fastest round (the median in brackets), µs per call (the "
        "loop row: per evaluation). Mechanisms at `q0`, SSLM.",
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
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
