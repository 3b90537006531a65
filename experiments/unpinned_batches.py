"""Batched calls in a process left on every core (as users run them) against one pinned to a core,
with XLA's default loop handling and with `loopdyn.compilation.use_loop_kernels`.

Issue 23 measured batched tree forward dynamics at 1.04-1.09x Pinocchio's ``abaInParallel`` (one
thread) in a pinned process and 0.80-0.83x unpinned. Here each configuration runs in a fresh
worker process, the four alternating over ROUNDS rounds: ``jax.jit(tree.forward_dynamics)`` on
random serial chains (those of benchmarks/tree_dynamics.py) of n = 16 and 32 bodies and
``jax.jit(jax.vmap(forward.solve))`` (SSLM) on the 3-RRR, B = 4096 states each, beside
``pin.abaInParallel`` with one thread in the same process; medians of RUNS calls. Pinned: the
worker takes the first CPU before JAX starts (XLA sizes its thread pool to it). Loop kernels:
`use_loop_kernels` before JAX starts (XLA compiles each small loop, here the chunk loop of
`loopdyn.chunking`, into one kernel).

    .venv/bin/python experiments/unpinned_batches.py

Writes experiments/unpinned_batches.json and .md atomically.
"""

import functools
import json
import os
import pathlib
import statistics
import subprocess
import sys

HERE = pathlib.Path(__file__).parent
CONFIGS = ("unpinned", "pinned", "unpinned, loop kernels", "pinned, loop kernels")
ROUNDS, RUNS, B, SIZES = 3, 9, 4096, (16, 32)


def worker(config, out):
    """Time every case in this process, configured as ``config`` (before JAX starts)."""
    if "unpinned" not in config:
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    if "loop kernels" in config:
        from loopdyn import compilation

        compilation.use_loop_kernels()
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    import numpy as np
    import pinocchio as pin

    sys.path[:0] = [str(HERE.parent / "tests"), str(HERE)]
    from compact_programs import median_s
    from random_trees import random_tree
    from recursive_ladder import states

    from loopdyn import forward, mechanisms, tree

    median_us = lambda call: median_s(call, RUNS) / B * 1e6  # a warm-up call, then RUNS

    result = {"affinity": sorted(os.sched_getaffinity(0)), "load": os.getloadavg()}
    for n in SIZES:  # the chains and states of benchmarks/tree_dynamics.py's `problem`
        mech, model = random_tree(n, n, serial=True)
        rng = np.random.default_rng(n)
        states_ = [rng.uniform(-2.0, 2.0, size=(B, n)) for _ in range(3)]
        arrays = [jnp.asarray(x) for x in states_]
        columns = [np.asfortranarray(x.T) for x in states_]
        pool, reference = pin.ModelPool(model, 1), np.zeros((n, B), order="F")
        fd = functools.partial(jax.jit(tree.forward_dynamics), mech, *arrays)
        result[f"fd{n}"] = median_us(fd)
        peer = functools.partial(pin.abaInParallel, 1, pool, *columns, reference)
        result[f"fd{n}_pin"] = median_us(peer)
    mech = mechanisms.three_rrr()
    q, qd, tau = states(mech, batch=B)
    sslm = jax.jit(jax.vmap(lambda *x: forward.solve(mech, *x, method="sslm").qdd))
    result["rrr_sslm"] = median_us(lambda: sslm(q, qd, tau))
    pathlib.Path(out).write_text(json.dumps(result))


def main():
    sys.path.insert(0, str(HERE))
    from recursive_ladder import machine, write

    runs = {config: [] for config in CONFIGS}
    load_before = os.getloadavg()
    for round_ in range(ROUNDS):
        for config in CONFIGS:
            out = HERE / "unpinned_batches.worker.json"
            subprocess.run([sys.executable, __file__, "--worker", config, str(out)], check=True)
            runs[config].append(json.loads(out.read_text()))
            out.unlink()
            print(round_, config, runs[config][-1], flush=True)
    results = {"machine": machine(), "load_before": load_before, "load_after": os.getloadavg()}
    results |= {"rounds": ROUNDS, "runs": RUNS, "batch": B, "workers": runs}
    write(HERE / "unpinned_batches.json", json.dumps(results, indent=1))
    write(HERE / "unpinned_batches.md", report(results))


def report(results):
    m, workers = results["machine"], results["workers"]
    span = lambda values: f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"
    lines = [
        "# Batched calls unpinned and pinned, with and without loop kernels",
        "",
        (
            f"Machine: {m['cpu']}, {m['cores']} cores; jax {m['jax']}, Python {m['python']}. Load "
            f"average before {results['load_before']}, after {results['load_after']}. Written by "
            "experiments/unpinned_batches.py: each configuration in a fresh process, the four "
            f"alternating over {results['rounds']} rounds; µs per state over B = "
            f"{results['batch']} states, median of {results['runs']} calls; the table gives the "
            "median over the rounds and, in brackets, their range; *ratio*: Pinocchio's time / "
            "loopdyn's in the same process (> 1: loopdyn faster)."
        ),
        "",
        "| configuration | "
        + " | ".join(f"tree FD n={n} | `abaInParallel` (1 thread) | ratio" for n in SIZES)
        + " | 3-RRR SSLM |",
        "|---|" + "---:|" * (3 * len(SIZES) + 1),
    ]
    for config, rows in workers.items():
        cells = []
        for n in SIZES:
            ratios = [r[f"fd{n}_pin"] / r[f"fd{n}"] for r in rows]
            cells += [span([r[f"fd{n}"] for r in rows]), span([r[f"fd{n}_pin"] for r in rows])]
            cells.append(span(ratios))
        cells.append(span([r["rrr_sslm"] for r in rows]))
        lines.append(f"| {config} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    if "--worker" in sys.argv:
        worker(*sys.argv[sys.argv.index("--worker") + 1 :])
    else:
        main()
