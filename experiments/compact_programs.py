"""The four-bar's and the 3-RRR's programs before and after the compact-program changes of
2026-11-28 (SSLM's ``phi_hat`` from the factor of ``I_j``, `dense.spd_solve`, loop kinematics
for the row kinds present, one product per subsystem, saved-state measurements without
twist-rates): lowered operations, compiled kernels and times, one core.

Per mechanism: the lowered single-state SSLM program's operations (StableHLO lines with `` = ``,
the mechanism closed over, as benchmarks/closed_loop.py counts them) and the kernels of the same
program compiled with the mechanism as an argument (entry instructions other than parameters,
constants, tuples and bitcasts: what an eager call runs one by one); batched SSLM over B = 4096
states (``jit(vmap)``, median of 7 calls, µs per state); one state inside a compiled loop of 100
evaluations (median of 7, µs per evaluation); an eager ``loopdyn.forward_dynamics`` (rounds of
200 calls: the fastest round and the median, µs). The 5 s 3-RRR ``simulate`` (rtol 1e-6): its
lowered operations, first call (compilation included) and median run of 7. Loop kernels on
(`loopdyn.compilation.use_loop_kernels`), as the command line and the benchmarks run.

    taskset -c 0 python experiments/compact_programs.py LABEL

writes experiments/results/compact_programs_LABEL.json; ``report`` writes
experiments/compact_programs.md from the rounds found (``before_1``, ``after_1``, ... run
alternately, ``before`` with PYTHONPATH at commit 1df3b38's ``src``: the medians of the rounds
are reported). Each later step of the work is reported the same way by ``report BEFORE AFTER
COMMIT DATE`` into experiments/compact_programs_AFTER.md (rounds ``BEFORE_1``, ``AFTER_1``, ...;
``BEFORE`` at ``COMMIT``): ``report base planar de0547c 2026-12-07`` for the planar frames on
summed angles (`loopdyn.tree._planar_motion`); ``report previous whole c7c07e4 2026-12-07`` for
the GICM whole for one or two loops and the simulation's state as one array; ``report previous
gauss_jordan 7cfd6c3 2026-12-07`` for one matrix's solve by Gauss-Jordan elimination and the
saved-state measurements without J.
"""

import json
import pathlib
import re
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
B, REPEATS, EAGER_ROUNDS, EAGER_CALLS = 4096, 7, 15, 200
NAMES = ("four_bar", "three_rrr")
SKIPPED = ("parameter", "constant", "tuple", "get-tuple-element", "bitcast")
CHANGES = {  # what each reported step changed, by its ``AFTER`` label
    "after": "SSLM's phi_hat_j from the factor of I_j, `dense.spd_solve`, loop kinematics for the "
    "row kinds present, one product per subsystem, saved-state measurements without twist-rates",
    "planar": "planar frames on summed angles, every product computed once for all bodies "
    "between four light passes (`loopdyn.tree._planar_motion`)",
    "whole": "the GICM whole for one loop or two coupled ones (`loopdyn.forward._mode`), the "
    "simulation's state as one array (`loopdyn.simulation._joined`)",
    "gauss_jordan": "one matrix's `dense.spd_solve` by Gauss-Jordan elimination, the kinetic "
    "energy from the centres of mass' velocities, the saved states' J qd without forming J "
    "(`loopdyn.kinematics.residuals_at`)",
}


def lowered_ops(fn, *args):
    import jax

    text = jax.jit(fn).lower(*args).as_text()
    return sum(1 for line in text.splitlines() if " = " in line and "stablehlo." in line)


def median_s(f, repeats=REPEATS):
    import jax
    import numpy as np

    jax.block_until_ready(f())
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(f())
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def mechanism_row(name):
    import jax
    import jax.numpy as jnp
    import numpy as np

    import loopdyn
    from loopdyn import compilation, forward, mechanisms

    mech = getattr(mechanisms, name)()
    n = mech.nv
    rng = np.random.default_rng(0)
    q, qd, tau = mech.q0, jnp.linspace(0.1, -0.2, n), jnp.linspace(1.0, -1.0, n)
    solve = lambda mech, q, qd, tau: forward.solve(mech, q, qd, tau, method="sslm").qdd
    row = {"lowered_ops": lowered_ops(lambda *x: solve(mech, *x), q, qd, tau)}
    options = compilation.supported(compilation.SINGLE_STATE)
    compiled = jax.jit(solve, compiler_options=options).lower(mech, q, qd, tau).compile()
    entry = compiled.as_text().split("ENTRY", 1)[1]
    kinds = re.findall(r"=\s+\S+\s+([\w-]+)\(", entry)
    row["kernels"] = sum(1 for k in kinds if k not in SKIPPED)
    states = (
        jnp.asarray(mech.q0 + 0.01 * rng.standard_normal((B, mech.nq))),
        jnp.asarray(rng.standard_normal((B, n))),
        jnp.asarray(rng.standard_normal((B, n))),
    )
    batched = compilation.jit(jax.vmap(lambda *x: solve(mech, *x)))
    row["batched_us"] = median_s(lambda: batched(*states)) / B * 1e6
    leaves, structure = jax.tree.flatten(mech)

    def loop(leaves, q, qd, tau):
        def body(_, acc):
            return acc + solve(jax.tree.unflatten(structure, leaves), q + 1e-9 * acc, qd, tau)

        return jax.lax.fori_loop(0, 100, body, jnp.zeros_like(qd))

    looped = jax.jit(loop, compiler_options=options)
    row["loop_us"] = median_s(lambda: looped(leaves, q, qd, tau)) / 100 * 1e6
    call = lambda: loopdyn.forward_dynamics(mech, q, qd, tau)[0].block_until_ready()
    call()
    rounds = []
    for _ in range(EAGER_ROUNDS):
        start = time.perf_counter()
        for _ in range(EAGER_CALLS):
            call()
        rounds.append((time.perf_counter() - start) / EAGER_CALLS * 1e6)
    row["eager_us_fastest"], row["eager_us_median"] = min(rounds), float(np.median(rounds))
    return row


def simulation_row():
    import jax
    import jax.numpy as jnp

    import loopdyn
    from loopdyn import mechanisms

    mech = mechanisms.three_rrr()
    zeros = jnp.zeros_like(mech.q0)
    run = lambda q0, qd0: loopdyn.simulate(mech, q0, qd0, t1=5.0, rtol=1e-6, atol=1e-6)
    row = {"lowered_ops": lowered_ops(run, mech.q0, zeros)}
    start = time.perf_counter()
    sim = jax.block_until_ready(run(mech.q0, zeros))
    row["first_call_s"] = time.perf_counter() - start
    row["run_ms"] = median_s(lambda: run(mech.q0, zeros)) * 1e3
    row["steps"] = int(sim.stats.steps)
    return row


def measure(label):
    import loopdyn

    loopdyn.compilation.use_loop_kernels()
    import jax

    jax.config.update("jax_enable_x64", True)
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from tree_dynamics import machine, write_atomic

    result = {"label": label, "loopdyn": str(pathlib.Path(loopdyn.__file__).parent)}
    result["machine_start"] = machine()
    result["mechanisms"] = {name: mechanism_row(name) for name in NAMES}
    result["simulation"] = simulation_row()
    result["machine_end"] = machine()
    path = HERE / "results" / f"compact_programs_{label}.json"
    write_atomic(path, json.dumps(result, indent=1))
    print(json.dumps(result["mechanisms"]), json.dumps(result["simulation"]))


def report(before="before", after="after", commit="1df3b38", date="2026-11-28"):
    import numpy as np

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from tree_dynamics import write_atomic

    runs = {before: [], after: []}
    for path in sorted((HERE / "results").glob("compact_programs_*_*.json")):
        data = json.loads(path.read_text())
        side = data["label"].rsplit("_", 1)[0]  # LABEL_ROUND
        if side in runs:
            runs[side].append(data)
    median = lambda side, get: float(np.median([get(r) for r in runs[side]]))
    loads = [
        r[k]["load_average"][0]
        for side in runs
        for r in runs[side]
        for k in ("machine_start", "machine_end")
    ]
    first = runs[after][0]["machine_start"]
    lines = [
        f"# Compact programs: before and after ({date})",
        "",
        (
            f"Written by `experiments/compact_programs.py`: {first['cpu']}, one core (taskset), "
            f"JAX {first['jax']}, float64, loop kernels on; {len(runs[before])} runs at commit "
            f"{commit} (before) and {len(runs[after])} at the change (after), alternately, each "
            "figure the median of the runs; load average "
            f"{min(loads):.2f}-{max(loads):.2f} at the runs' starts and ends (a shared machine)."
        ),
        "",
        f"The change: {CHANGES[after]}.",
        "",
        "| | four-bar before | four-bar after | 3-RRR before | 3-RRR after |",
        "|---|---:|---:|---:|---:|",
    ]
    fields = (
        ("lowered operations, single-state SSLM", "lowered_ops", "{:.0f}"),
        ("kernels of the compiled single-state program", "kernels", "{:.0f}"),
        ("batched SSLM, B = 4096, µs per state", "batched_us", "{:.3f}"),
        ("one state in a compiled loop, µs per evaluation", "loop_us", "{:.2f}"),
        ("eager `forward_dynamics`, µs per call (fastest round)", "eager_us_fastest", "{:.1f}"),
        ("eager `forward_dynamics`, µs per call (median round)", "eager_us_median", "{:.1f}"),
    )
    for title, key, form in fields:
        cells = [
            form.format(median(side, lambda r, n=name, k=key: r["mechanisms"][n][k]))
            for name in NAMES
            for side in (before, after)
        ]
        lines.append(f"| {title} | " + " | ".join(cells) + " |")
    lines += ["", "| 5 s 3-RRR `simulate` (rtol 1e-6) | before | after |", "|---|---:|---:|"]
    for title, key, form in (
        ("lowered operations", "lowered_ops", "{:.0f}"),
        ("first call, compilation included (s)", "first_call_s", "{:.2f}"),
        ("run (ms)", "run_ms", "{:.2f}"),
        ("steps", "steps", "{:.0f}"),
    ):
        cells = [form.format(median(s, lambda r, k=key: r["simulation"][k])) for s in runs]
        lines.append(f"| {title} | " + " | ".join(cells) + " |")
    name = "compact_programs.md" if after == "after" else f"compact_programs_{after}.md"
    write_atomic(HERE / name, "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    report(*sys.argv[2:]) if sys.argv[1] == "report" else measure(sys.argv[1])
