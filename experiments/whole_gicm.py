"""SSLM on the usual MJCF drawing of a ladder (every loop through one deep chain), where the GICM
is dense: block elimination (before) against the GICM factorised whole (after, `forward._plan`'s
``"dense"``).

For k = 16, 32, 64 loops (`_peers.ladder_chain_mjcf`), each in a subprocess of its own (an abort
fails that row only): the lowered one-state program's operations (StableHLO lines with `` = ``);
the first call (compile) and the median call of ``loopdyn.compilation.jit`` of one state's
``forward.solve(method="sslm")`` (options `compilation.SINGLE_STATE`, the mechanism an
argument, as in benchmarks/closed_loop.py); the first call and the median time per state of the
same over B = 1024 states under ``vmap`` (`_peers.random_states`). One core.

    taskset -c 0 python experiments/whole_gicm.py LABEL [K ...]

writes experiments/results/whole_gicm_LABEL.json; with ``before`` and ``after`` there, also
experiments/whole_gicm.md (LABEL ``report``: only that). ``before`` ran with PYTHONPATH at the
parent commit's ``src``.
"""

import json
import os
import pathlib
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
B, REPEATS, TIMEOUT = 1024, 5, 900


def row(k):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import jax
    import numpy as np

    jax.config.update("jax_enable_x64", True)
    import _peers

    import loopdyn
    from loopdyn import compilation, forward

    mech = loopdyn.load_mjcf(_peers.ladder_chain_mjcf(k))
    q, qd, tau, _ = _peers.random_states(mech, B, seed=3)
    one = (q[0], qd[0], tau[0])

    def solve(mech, q, qd, tau):
        return forward.solve(mech, q, qd, tau, method="sslm").qdd

    text = jax.jit(lambda *x: solve(mech, *x)).lower(*one).as_text()
    single = compilation.jit(solve, options=compilation.SINGLE_STATE)
    batched = compilation.jit(lambda mech, *x: jax.vmap(lambda *y: solve(mech, *y))(*x))

    def first(f, *args):
        start = time.perf_counter()
        jax.block_until_ready(f(*args))
        return time.perf_counter() - start

    def median(f, *args):
        return float(np.median([first(f, *args) for _ in range(REPEATS)]))

    return {
        "k": k,
        "mode": forward._plan(mech.topology).mode,
        "lowered_ops": sum(" = " in line and "stablehlo." in line for line in text.splitlines()),
        "single_compile_s": first(single, mech, *one),
        "single_s": median(single, mech, *one),
        "batched_compile_s": first(batched, mech, q, qd, tau),
        "batched_per_state_s": median(batched, mech, q, qd, tau) / B,
    }


def table(runs):
    lines = [
        "# SSLM on the MJCF chain ladder: block elimination against the whole GICM",
        "",
        (
            "`experiments/whole_gicm.py`, one core of the 2-core shared machine, JAX "
            f"{runs['after']['jax']}, float64, B = {B} states. Before: block elimination "
            f"({runs['before']['commit']}); after: the GICM factorised whole "
            f"({runs['after']['commit']}). Load averages: {runs['before']['load']} (before), "
            f"{runs['after']['load']} (after)."
        ),
        "",
        (
            "| k | | lowered ops | one state: compile (s) | one state: call (µs) "
            "| batched: compile (s) | batched: per state (µs) |"
        ),
        "|---:|---|---:|---:|---:|---:|---:|",
    ]
    for label in ("before", "after"):
        for r in runs[label]["rows"]:
            if "error" in r:
                lines.append(f"| {r['k']} | {label} | {r['error']} | | | | |")
                continue
            lines.append(
                f"| {r['k']} | {label} ({r['mode']}) | {r['lowered_ops']} | "
                f"{r['single_compile_s']:.1f} | {r['single_s'] * 1e6:.0f} | "
                f"{r['batched_compile_s']:.1f} | {r['batched_per_state_s'] * 1e6:.1f} |"
            )
    committed = json.loads((ROOT / "benchmarks/results/closed_loop.json").read_text())
    for r in committed["ladder_chain"]:
        if "sslm" in r and r["k"] >= 16:
            c = r["sslm"]
            lines.append(
                f"| {r['k']} | before, benchmarks/results/closed_loop.md (B = "
                f"{committed['ladder_batch']}) | {c['hlo_ops']} | {c['compile_s']:.1f} | "
                f"{c['single_s'] * 1e6:.0f} | {c['batched']['compile_s']:.1f} | "
                f"{c['batched']['per_state_s'] * 1e6:.1f} |"
            )
    lines += [
        "",
        (
            "A row's error: its process ended so (exit -11: a segmentation fault; the same program "
            "in an earlier process printed LLVM's 'Cannot allocate memory' for its kernels, the "
            "process's memory mappings used up). The last rows: the same code in the committed "
            "closed-loop benchmark, for comparison where the run above failed."
        ),
    ]
    return "\n".join(lines) + "\n"


def main():
    if sys.argv[1] == "--row":
        print(json.dumps(row(int(sys.argv[2]))))
        return
    label, ks = sys.argv[1], [int(k) for k in sys.argv[2:]] or [16, 32, 64]
    if label != "report":
        measure(label, ks)
    runs = {}
    for name in ("before", "after"):
        path = HERE / "results" / f"whole_gicm_{name}.json"
        if path.exists():
            runs[name] = json.loads(path.read_text())
    if len(runs) == 2:
        (HERE / "whole_gicm.md").write_text(table(runs))


def measure(label, ks):
    import jax

    import loopdyn

    source = pathlib.Path(loopdyn.__file__).parent  # PYTHONPATH may name another checkout
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        check=False,
        capture_output=True,
        text=True,
        cwd=source,
    ).stdout.strip()
    load = [round(x, 2) for x in os.getloadavg()]
    out = {"jax": jax.__version__, "commit": commit, "load": load, "rows": []}
    for k in ks:
        try:
            done = subprocess.run(
                [sys.executable, __file__, "--row", str(k)],
                check=False,
                capture_output=True,
                text=True,
                timeout=TIMEOUT,
            )
            last = done.stdout.strip().splitlines()[-1:] or [""]
            if done.returncode:
                llvm = "LLVM compilation error" in done.stderr  # out of memory mappings
                why = f"exit {done.returncode}" + (", LLVM out of memory" if llvm else "")
                out["rows"].append({"k": k, "error": why})
            else:
                out["rows"].append(json.loads(last[0]))
        except subprocess.TimeoutExpired:
            out["rows"].append({"k": k, "error": f"not done in {TIMEOUT} s"})
        print(out["rows"][-1], flush=True)
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / f"whole_gicm_{label}.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
