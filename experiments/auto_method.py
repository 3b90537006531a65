"""What method "auto" should run: "slm", "sslm" and "recursive" timed on the library's
mechanisms, on the MJCF chain ladder of k four-bars (every loop through one chain of k + 1
coordinates) and on Cassie (Pinocchio's closed_chain.xml: every loop through the one subsystem
that hangs from the free base), beside what `loopdyn.forward.choose_method` picks.

Per mechanism and method: the time of one forward-dynamics evaluation inside a compiled loop of
LOOP evaluations (a single state, as in a simulation's step; the state moves a little every
evaluation so nothing is hoisted out of the loop), and the time per state of
``jit(vmap(solve))`` over B states (`recursive_ladder.states`), medians over RUNS calls after
one warm-up, compile times apart. One core: run as ``taskset -c 1 python
experiments/auto_method.py``; writes experiments/auto_method.json and .md atomically
(``--report-only``: the Markdown again from the JSON, the structure columns from this code).
"""

import json
import os
import pathlib
import statistics
import sys
import time
import warnings

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp

HERE = pathlib.Path(__file__).parent
sys.path.insert(0, str(HERE.parent / "benchmarks"))
sys.path.insert(0, str(HERE))

from _peers import ladder_chain_mjcf
from recursive_ladder import B, machine, states, write

import loopdyn
from loopdyn import compilation, forward, mechanisms, recursive

LOOP, RUNS = 200, 7


def cassie():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # its joint limits, which loopdyn ignores
        return loopdyn.load_mjcf(HERE.parent / "tests" / "data" / "published" / "closed_chain.xml")


CASES = {
    "four_bar": mechanisms.four_bar,
    "three_rrr": mechanisms.three_rrr,
    "rssr": mechanisms.rssr,
    "quarter_car": mechanisms.quarter_car,
    "stewart": mechanisms.stewart,
    **{
        f"chain_ladder{k}": (lambda k=k: loopdyn.load_mjcf(ladder_chain_mjcf(k))) for k in (4, 6, 8)
    },
    "cassie": cassie,
}


METHODS = ("slm", "sslm", "recursive")


def median_call(f, *args):
    jax.block_until_ready(f(*args))
    times = []
    for _ in range(RUNS):
        start = time.perf_counter()
        jax.block_until_ready(f(*args))
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(mech, method, q, qd, tau):
    def loop(q, qd, tau):
        def body(_, acc):
            moved = q.at[0].add(1e-12 * jnp.sum(acc))
            return acc + forward.solve(mech, moved, qd + 1e-9 * acc, tau, method=method).qdd

        return jax.lax.fori_loop(0, LOOP, body, jnp.zeros_like(qd))

    def batch(q, qd, tau):
        return jax.vmap(lambda *x: forward.solve(mech, *x, method=method).qdd)(q, qd, tau)

    out = {}
    for label, fn, args, per in (
        ("single", compilation.jit(loop), (q[0], qd[0], tau[0]), LOOP),
        ("batched", jax.jit(batch), (q, qd, tau), B),
    ):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        out[f"{label}_compile_s"] = time.perf_counter() - start
        out[f"{label}_us"] = median_call(fn, *args) / per * 1e6
    return out


def report(results):
    m = results["machine"]
    lines = [
        '# Method "auto": slm, sslm or recursive',
        "",
        (
            f"Machine: {m['cpu']}, {m['cores']} cores, pinned to {m['affinity']}; jax {m['jax']}. "
            f"Load average before {results['load_before']}, after {results['load_after']}. "
            "Written by experiments/auto_method.py."
        ),
        "",
        (
            f"*single*: µs per evaluation inside a compiled loop of {LOOP}; *batched*: µs per state of "
            f"`jit(vmap)` over B = {B}; median of {RUNS} calls; -: the method does not apply. "
            "*largest*: coordinates of the largest subsystem that loops act on; *subsystems*: how "
            "many subsystems loops act on; *auto*: `forward.choose_method` (structure columns taken "
            "from the code when the file is written: `--report-only` rewrites them, the timings kept)."
        ),
        "",
        "| mechanism | largest | subsystems | auto | "
        + " | ".join(f"{x} single" for x in METHODS)
        + " | "
        + " | ".join(f"{x} batched" for x in METHODS)
        + " | fastest single / batched |",
        "|---|---:|---:|---|" + "---:|" * (2 * len(METHODS)) + "---|",
    ]
    for name, r in results["cases"].items():
        cells, fastest = [], []
        for x in ("single", "batched"):
            times = {k: r[k][f"{x}_us"] for k in METHODS if r.get(k)}
            cells += [f"{r[k][f'{x}_us']:.2f}" if r.get(k) else "-" for k in METHODS]
            fastest.append(min(times, key=times.get))
        lines.append(
            f"| {name} | {r['largest']} | {r['subsystems']} | {r['auto']} | {' | '.join(cells)} | "
            f"{' / '.join(fastest)} |"
        )
    return "\n".join(lines) + "\n"


def structure(mech):
    """The largest subsystem that loops act on (coordinates) and what "auto" picks there."""
    top = mech.topology
    sizes = [stop - start for start, stop in top.coordinate_slices]
    return {
        "largest": max(sizes[j] for _, j in top.blocks),
        "subsystems": len({j for _, j in top.blocks}),
        "auto": forward.choose_method(mech),
    }


def main():
    if "--report-only" in sys.argv:  # the timings kept; the structure columns from this code
        results = json.loads((HERE / "auto_method.json").read_text())
        for name, row in results["cases"].items():
            row.update(structure(CASES[name]()))
        write(HERE / "auto_method.json", json.dumps(results, indent=1))
        write(HERE / "auto_method.md", report(results))
        return
    results = {"machine": machine(), "load_before": os.getloadavg(), "cases": {}}
    for name, make in CASES.items():
        mech = make()
        q, qd, tau = states(mech)
        row = structure(mech)
        for method in METHODS:
            applies = method != "recursive" or recursive.supported(mech)
            row[method] = measure(mech, method, q, qd, tau) if applies else None
            print(name, method, row[method], flush=True)
        results["cases"][name] = row
    results["load_after"] = os.getloadavg()
    write(HERE / "auto_method.json", json.dumps(results, indent=1))
    write(HERE / "auto_method.md", report(results))


if __name__ == "__main__":
    main()
