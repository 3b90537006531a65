"""Batched forward dynamics with and without `loopdyn.chunking`: ``jax.jit(jax.vmap(solve))`` over
B states, where `loopdyn.forward.solve` runs the batch as a ``lax.map`` over chunks of
`chunking.CHUNK` states, against the same per-state function (`forward._solve`) ``vmap``-ped over
the whole batch at once (what `solve` did before). The default method ("auto") on the
library's mechanisms and the MJCF chain ladder (`benchmarks._peers.ladder_chain_mjcf`, where
"auto" runs "recursive"); the states of `recursive_ladder.states` (B = 1024 there; here B =
4096, STATES assembled states tiled), medians of RUNS calls after one warm-up, compile apart.
One core: run as ``taskset -c 1 python experiments/chunked_batches.py``; writes
experiments/chunked_batches.json and .md atomically.
"""

import json
import os
import pathlib
import statistics
import sys
import time

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np

HERE = pathlib.Path(__file__).parent
sys.path.insert(0, str(HERE.parent / "benchmarks"))
sys.path.insert(0, str(HERE))

import recursive_ladder
from _peers import ladder_chain_mjcf
from recursive_ladder import machine, states, write

import loopdyn
from loopdyn import chunking, forward, mechanisms

B, RUNS = 4096, 7
recursive_ladder.B = B  # `states` tiles its assembled states to this batch
CASES = {
    "four_bar": mechanisms.four_bar,
    "three_rrr": mechanisms.three_rrr,
    "quarter_car": mechanisms.quarter_car,
    "stewart": mechanisms.stewart,
    "ladder8": lambda: mechanisms.ladder(8),
    "chain_ladder8": lambda: loopdyn.load_mjcf(ladder_chain_mjcf(8)),
    "chain_ladder32": lambda: loopdyn.load_mjcf(ladder_chain_mjcf(32)),
}


def measure(fn, *args):
    start = time.perf_counter()
    out = jax.block_until_ready(fn(*args))
    compile_s = time.perf_counter() - start
    times = []
    for _ in range(RUNS):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return {"per_state_us": statistics.median(times) / B * 1e6, "compile_s": compile_s}, out


def main():
    results = {"machine": machine(), "load_before": os.getloadavg(), "chunk": chunking.CHUNK}
    results["cases"] = {}
    for name, make in CASES.items():
        mech = make()
        q, qd, tau = states(mech)
        method = forward.choose_method(mech)
        whole = jax.jit(
            jax.vmap(
                lambda *x, m=mech, k=method: forward._solve(m, *x, None, None, None, k, ()).qdd
            )
        )
        chunked = jax.jit(jax.vmap(lambda *x, m=mech, k=method: forward.solve(m, *x, method=k).qdd))
        row = {"method": method}
        row["whole"], a = measure(whole, q, qd, tau)
        row["chunked"], b = measure(chunked, q, qd, tau)
        row["max_rel_diff"] = float(np.max(np.abs(a - b)) / np.max(np.abs(a)))
        print(name, row, flush=True)
        results["cases"][name] = row
    results["load_after"] = os.getloadavg()
    write(HERE / "chunked_batches.json", json.dumps(results, indent=1))
    m = results["machine"]
    lines = [
        "# Batches in chunks (`loopdyn.chunking`)",
        "",
        (
            f"Machine: {m['cpu']}, {m['cores']} cores, pinned to {m['affinity']}; jax {m['jax']}. "
            f"Load average before {results['load_before']}, after {results['load_after']}. Written "
            "by experiments/chunked_batches.py."
        ),
        "",
        (
            f"µs per state of `jit(vmap)` over B = {B} states, median of {RUNS} calls; *whole*: the "
            "per-state solve `vmap`-ped over the whole batch; *chunked*: `forward.solve`, chunks of "
            f'{chunking.CHUNK} states; the default method ("auto"); compile s in brackets.'
        ),
        "",
        "| mechanism | method | whole | chunked | whole / chunked | max rel. diff qdd |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for name, r in results["cases"].items():
        w, c = r["whole"], r["chunked"]
        lines.append(
            f"| {name} | {r['method']} | {w['per_state_us']:.3f} ({w['compile_s']:.1f}) | "
            f"{c['per_state_us']:.3f} ({c['compile_s']:.1f}) | "
            f"{w['per_state_us'] / c['per_state_us']:.2f} | {r['max_rel_diff']:.1e} |"
        )
    write(HERE / "chunked_batches.md", "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
