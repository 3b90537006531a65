"""Time per state of forward dynamics by "recursive" and "sslm" on ladders of k four-bar loops.

Mechanisms: the MJCF chain ladder (`benchmarks._peers.ladder_chain_mjcf`: one deep chain crank -
coupler 1 - ... - coupler k, every loop through it) for k = 4, 8, 16, 32, 64, and
`loopdyn.mechanisms.ladder(k)` (each loop its own subsystem) for the same k. Per method and k:
the lower + compile time of ``jax.jit(jax.vmap(solve))`` at B = 1024 states, the op count of
its lowered program (StableHLO lines with `` = ``), and the median time per state over RUNS
calls after one warm-up. States: STATES configurations assembled from ``q0`` perturbed (actuated
coordinates held), tiled to B, random velocities and joint forces. SSLM is skipped above
SSLM_MAX_K (its compile and run time there, minutes). Recursive is also timed at SMALL_B states
(a second program), where its arrays stay in cache. The fitted exponent is the slope of log
time against log k over k >= 8. One core: run as ``taskset -c 1 python
experiments/recursive_ladder.py``; writes experiments/recursive_ladder.json and .md (each
written to a temporary file, then renamed).
"""

import json
import os
import pathlib
import platform
import statistics
import sys
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp
import numpy as np

HERE = pathlib.Path(__file__).parent
sys.path.insert(0, str(HERE.parent / "benchmarks"))

from _peers import ladder_chain_mjcf

import loopdyn
from loopdyn import forward, kinematics, mechanisms

KS = (4, 8, 16, 32, 64)
B, STATES, RUNS = 1024, 16, 7
SSLM_MAX_K = 16  # sslm at k = 32: 230 s to compile (the previous run)
SMALL_B = 128  # recursive also at this batch: its arrays stay in cache
FAMILIES = {  # the k measured per family (the small ladders only: the time this run had)
    "chain_mjcf": (lambda k: loopdyn.load_mjcf(ladder_chain_mjcf(k)), KS),
    "ladder": (mechanisms.ladder, (4, 8, 16)),
}


def states(mech, seed=0, batch=None):
    """``batch`` (default `B`) states: `STATES` assembled near ``q0``, tiled; random ``qd``,
    ``tau``."""
    batch = B if batch is None else batch
    rng = np.random.default_rng(seed)
    close = jax.jit(lambda g: kinematics.assemble(mech, g, fixed=tuple(mech.actuated)))
    qs = np.stack([close(mech.q0 + 0.02 * rng.normal(size=mech.nq)) for _ in range(STATES)])
    n = mech.num_bodies
    q = jnp.asarray(np.tile(qs, (batch // STATES, 1)))
    return q, jnp.asarray(rng.normal(size=(batch, n))), jnp.asarray(rng.normal(size=(batch, n)))


def measure(mech, method, q, qd, tau):
    def batch(q, qd, tau):
        return jax.vmap(lambda *x: forward.solve(mech, *x, method=method))(q, qd, tau)

    start = time.perf_counter()
    lowered = jax.jit(batch).lower(q, qd, tau)
    compiled = lowered.compile()
    compile_s = time.perf_counter() - start
    ops = sum(" = " in line for line in lowered.as_text().splitlines())
    out = compiled(q, qd, tau)
    jax.block_until_ready(out)
    times = []
    for _ in range(RUNS):
        start = time.perf_counter()
        jax.block_until_ready(compiled(q, qd, tau))
        times.append(time.perf_counter() - start)
    result = {
        "per_state_us": statistics.median(times) / B * 1e6,
        "compile_s": compile_s,
        "hlo_ops": ops,
        "singular_states": int(np.sum(out.singular)),
    }
    if method == "recursive":  # the same at a batch whose arrays stay in cache
        small = jax.jit(batch).lower(q[:SMALL_B], qd[:SMALL_B], tau[:SMALL_B]).compile()
        jax.block_until_ready(small(q[:SMALL_B], qd[:SMALL_B], tau[:SMALL_B]))
        times = []
        for _ in range(RUNS):
            start = time.perf_counter()
            jax.block_until_ready(small(q[:SMALL_B], qd[:SMALL_B], tau[:SMALL_B]))
            times.append(time.perf_counter() - start)
        result["per_state_us_small_b"] = statistics.median(times) / SMALL_B * 1e6
    return result, out


def exponent(ks, values):
    pairs = [(k, v) for k, v in zip(ks, values) if k >= 8 and v is not None]
    if len(pairs) < 2:
        return None
    return float(np.polyfit(np.log([k for k, _ in pairs]), np.log([v for _, v in pairs]), 1)[0])


def machine():
    with open("/proc/cpuinfo") as info:
        names = [line.split(":", 1)[1].strip() for line in info if "model name" in line]
    cpu = names[0] if names else platform.processor()
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "affinity": sorted(os.sched_getaffinity(0)),
        "jax": jax.__version__,
        "python": platform.python_version(),
    }


def write(path, text):
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def report(results):
    lines = [
        "# recursive vs sslm on ladders of k four-bar loops",
        "",
        (
            f"Machine: {results['machine']['cpu']}, {results['machine']['cores']} cores, pinned to "
            f"{results['machine']['affinity']}; jax {results['machine']['jax']}. Load average "
            f"before {results['load_before']}, after {results['load_after']}."
        ),
        (
            f"Batched forward dynamics, jit of vmap over B = {B} states, median of {RUNS} runs; "
            "compile = lower + compile of that program; ops = lowered StableHLO ops. "
            f"SSLM skipped above k = {SSLM_MAX_K}. Written by experiments/recursive_ladder.py."
        ),
        "",
    ]
    for family, rows in results["families"].items():
        lines += [
            f"## {family}",
            "",
            (
                f"| k | bodies | recursive us/state | recursive us/state at B = {SMALL_B} | "
                "sslm us/state | recursive compile s | sslm compile s | recursive ops | sslm ops "
                "| max rel. diff qdd |"
            ),
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for row in rows:
            r, s = row["recursive"], row.get("sslm")

            def cell(x, key, fmt):
                return format(x[key], fmt) if x else "-"

            lines.append(
                f"| {row['k']} | {row['bodies']} | {cell(r, 'per_state_us', '.1f')} | "
                f"{cell(r, 'per_state_us_small_b', '.1f')} | {cell(s, 'per_state_us', '.1f')} | {cell(r, 'compile_s', '.1f')} | "
                f"{cell(s, 'compile_s', '.1f')} | {r['hlo_ops']} | {cell(s, 'hlo_ops', 'd')} | "
                f"{row['difference'] if row['difference'] is not None else '-'} |"
            )
        fit = results["exponents"][family]
        lines += [
            "",
            (
                f"Fitted exponent of time per state in k (k >= 8): recursive {fit['recursive']} "
                f"(at B = {SMALL_B}: {fit['recursive_small_b']}), sslm {fit['sslm']}."
            ),
            "",
        ]
    return "\n".join(lines) + "\n"


def checkpoint(results):
    """Write what is measured so far (a row at a time)."""
    results["load_after"] = os.getloadavg()
    for family, rows in results["families"].items():
        ks = [r["k"] for r in rows]
        results["exponents"][family] = {
            m: exponent(ks, [r[m]["per_state_us"] if m in r else None for r in rows])
            for m in ("recursive", "sslm")
        }
        results["exponents"][family]["recursive_small_b"] = exponent(
            ks, [r["recursive"]["per_state_us_small_b"] for r in rows]
        )
    write(HERE / "recursive_ladder.json", json.dumps(results, indent=1))
    write(HERE / "recursive_ladder.md", report(results))


def main():
    results = {
        "machine": machine(),
        "load_before": os.getloadavg(),
        "B": B,
        "runs": RUNS,
        "families": {},
        "exponents": {},
    }
    print("load average before:", results["load_before"], flush=True)
    for family, (build, ks) in FAMILIES.items():
        rows = []
        results["families"][family] = rows
        for k in ks:
            mech = build(k)
            if not loopdyn.recursive.supported(mech):
                print(family, k, "not supported:", loopdyn.recursive.unsupported(mech))
                break
            q, qd, tau = states(mech)
            row = {"k": k, "bodies": mech.num_bodies}
            row["recursive"], ours = measure(mech, "recursive", q, qd, tau)
            row["difference"] = None
            if k <= SSLM_MAX_K:
                row["sslm"], theirs = measure(mech, "sslm", q, qd, tau)
                scale = float(jnp.max(jnp.abs(theirs.qdd)))
                row["difference"] = float(jnp.max(jnp.abs(ours.qdd - theirs.qdd))) / scale
            print(family, json.dumps(row), flush=True)
            rows.append(row)
            checkpoint(results)
    checkpoint(results)
    print("load average after:", results["load_after"], flush=True)


if __name__ == "__main__":
    main()
