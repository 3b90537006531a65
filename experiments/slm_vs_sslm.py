"""SLM vs SSLM (seed 000 Tables 3-4): time of the multiplier computation and of whole simulations,
for the carpet scraper and the 3-RRR, and the growth with the number of loops on the ladder.

- Per call: ``forward.solve`` jitted, returning only ``lam`` (the multiplier computation: XLA drops
  what ``lam`` does not need, e.g. the final ``qdd`` pass) or the whole solution; single calls
  (median over repeats, ``block_until_ready``; dominated by ~40-100 us of dispatch) and a batch of
  states under ``vmap`` (per state: the arithmetic).
- Whole simulation (Table 3 cases): (a) free 15 s, rtol = atol = 1e-3; (b) free 5 s, 1e-8;
  (c) forced 5 s, 1e-8, the driving torques from the inverse dynamics of a prescribed motion
  (scraper: crank at 4.7124 rad/s; 3-RRR: seed 004's drive with period T = 5 s, the same
  path: with T = 3 s it leaves the workspace at 4.88 s) sampled every 0.01 s. Dormand-Prince
  (``diffrax.Dopri5``, MATLAB's ode45), states saved every 0.01 s, Baumgarte stabilisation (the
  loopdyn default; the seed does not say which it used). Compile time is reported separately.
- Ladder of k four-bar loops, k = 1 ... 32: one call of "system", "slm", "sslm".

Writes experiments/results/slm_vs_sslm.{json,md,png} atomically. The helpers `machine`,
`per_call` and `write_results` are shared with the other experiments of this folder.

Run: .venv/bin/python experiments/slm_vs_sslm.py [--quick]
"""

import argparse
import datetime
import functools
import json
import os
import pathlib
import statistics
import sys
import time

import jax

jax.config.update("jax_enable_x64", True)

import diffrax
import equinox as eqx
import jax.numpy as jnp
import numpy as np

import loopdyn
from loopdyn import compilation, forward, kinematics, mechanisms, prescribed
from loopdyn.io.files import write_atomic

OUT = pathlib.Path(__file__).parent / "results"
SEED_TABLE_3 = {  # seconds, SLM / SSLM, MATLAB ode45 on a Core 2 Duo 2.2 GHz
    "carpet_scraper": {"a": (2.80, 2.72), "b": (6.51, 6.41), "c": (9.33, 9.25)},
    "three_rrr": {"a": (3.07, 2.96), "b": (10.25, 10.12), "c": (12.91, 12.81)},
}
SEED_TABLE_4 = {"carpet_scraper": (0.3045, 0.2205), "three_rrr": (0.2055, 0.1575)}
CASES = {  # t1 (s), tolerance, forced
    "a": (15.0, 1e-3, False),
    "b": (5.0, 1e-8, False),
    "c": (5.0, 1e-8, True),
}
SCRAPER_SPEED = 4.7124  # rad/s, seed 000 Table 2
RRR_AMPLITUDE = (1 / 6, -1 / 6, 1 / 12)  # seed 004 §5.1
NOTE = (
    "The machine is shared: every number is a median over repeats, and ratios compare within "
    "one run."
)


def machine():
    """CPU model, core count and software versions."""
    cpu = pathlib.Path("/proc/cpuinfo").read_text().split("model name", 1)[-1]
    cpu = cpu.split("\n", 1)[0].lstrip(" \t:") or "unknown"
    return {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "jax": jax.__version__,
        "backend": jax.default_backend(),
        "load_average": os.getloadavg(),
        "note": NOTE,
    }


def per_call(fn, *args, calls=200, repeats=7):
    """Median over ``repeats`` of the mean time (s) of ``calls`` calls ``fn(*args)``, each
    blocked until its result is ready."""
    jax.block_until_ready(fn(*args))
    samples = []
    for _ in range(repeats):
        begin = time.perf_counter()
        for _ in range(calls):
            jax.block_until_ready(fn(*args))
        samples.append((time.perf_counter() - begin) / calls)
    return statistics.median(samples)


def write_results(name, record, report, figure):
    """``name``.json, .md and .png under results/, each written atomically."""
    OUT.mkdir(exist_ok=True)
    write_atomic(OUT / f"{name}.json", lambda f: f.write(json.dumps(record, indent=1).encode()))
    write_atomic(OUT / f"{name}.md", lambda f: f.write(report.encode()))
    write_atomic(OUT / f"{name}.png", lambda f: figure.savefig(f, format="png", dpi=110))


def _state(mech, seed=0):
    """An assembled state with random consistent velocities (actuated rates held)."""
    qd = jax.random.normal(jax.random.PRNGKey(seed), mech.q0.shape)
    return mech.q0, kinematics.project_velocity(mech, mech.q0, qd, fixed=mech.actuated)


def _solver(method, part):
    def single(mech, q, qd, tau):
        solution = forward.solve(mech, q, qd, tau, method=method)
        return solution.lam if part == "lam" else solution

    return single


def interleaved(timed, repeats=7):
    """``timed``: name -> (fn, args, calls). Median and minimum over ``repeats`` rounds of the
    mean time (s) of ``calls`` blocked calls of each; within a round the functions take turns,
    so that a change of the machine's load hits all of them alike. On a loaded machine the
    minimum is the better estimate of the cost itself (a round that loses the processor to
    another job for a time slice inflates its mean by milliseconds)."""
    for fn, args, _ in timed.values():
        jax.block_until_ready(fn(*args))
    samples = {name: [] for name in timed}
    for _ in range(repeats):
        for name, (fn, args, calls) in timed.items():
            begin = time.perf_counter()
            for _ in range(calls):
                jax.block_until_ready(fn(*args))
            samples[name].append((time.perf_counter() - begin) / calls)
    return {name: (statistics.median(x), min(x)) for name, x in samples.items()}


def call_times(mech, methods, batch=256, calls=200):
    """Per-call and per-state (vmap over ``batch``) seconds of ``lam`` alone and of the whole
    solution, for each method."""
    q, qd = _state(mech)
    tau = jnp.zeros_like(q)
    qs, qds = (jnp.broadcast_to(x, (batch, x.size)) for x in (q, qd))
    taus = jnp.zeros_like(qs)
    timed = {}
    for method in methods:
        for part in ("lam", "solution"):
            single = eqx.filter_jit(_solver(method, part))
            batched = eqx.filter_jit(jax.vmap(_solver(method, part), in_axes=(None, 0, 0, 0)))
            timed[method, part, "single_call_s"] = (single, (mech, q, qd, tau), calls)
            timed[method, part, "per_state_in_batch_s"] = (batched, (mech, qs, qds, taus), 20)
    out = {method: {part: {} for part in ("lam", "solution")} for method in methods}
    for (method, part, kind), (median, least) in interleaved(timed).items():
        scale = batch if kind.startswith("per_state") else 1
        out[method][part][kind] = median / scale
        out[method][part][kind[:-2] + "_min_s"] = least / scale
    return out


def _forced_torques(name, mech, t1):
    """Inverse-dynamics torques (K, n) every 0.01 s over [0, t1] and the initial state."""
    t = jnp.linspace(0.0, t1, round(t1 / 0.01) + 1)
    if name == "carpet_scraper":
        start = mech.q0[mech.actuated[0]]

        def drive(t):
            return jnp.atleast_1d(start + SCRAPER_SPEED * t)
    else:
        start = mech.q0[jnp.asarray(mech.actuated)]

        def drive(t):  # seed 004's path, slowed to period t1: with T = 3 s it leaves the
            s = 2 * jnp.pi * t / t1  # workspace at t = 4.88 s
            return start + jnp.asarray(RRR_AMPLITUDE) * (s - jnp.sin(s))

    motion, result = prescribed.prescribed_inverse_dynamics(mech, drive, t)
    return result.tau, motion.q[0], motion.qd[0]


def _free_start(name, mech):
    if name == "carpet_scraper":
        qd = jnp.zeros_like(mech.q0).at[mech.actuated[0]].set(SCRAPER_SPEED)
        return mech.q0, kinematics.project_velocity(mech, mech.q0, qd, fixed=mech.actuated)
    return mech.q0, jnp.zeros_like(mech.q0)


def simulation_times(name, mech, repeats):
    """Compile and run times of whole simulations, cases (a)-(c), SLM and SSLM. The timed runs
    of the two methods alternate, so that a change of the machine's load hits both alike."""
    out = {}
    for case, (t1, tol, forced) in CASES.items():
        if forced:
            tau, q0, qd0 = _forced_torques(name, mech, t1)
        else:
            tau, (q0, qd0) = None, _free_start(name, mech)
        saveat = jnp.linspace(0.0, t1, round(t1 / 0.01) + 1)
        out[case] = {"t1_s": t1, "rtol_atol": tol, "forced": forced}
        runs, first, sims = {}, {}, {}
        for method in ("slm", "sslm"):
            runs[method] = functools.partial(
                loopdyn.simulate,
                mech,
                q0,
                qd0,
                t1,
                tau=tau,
                method=method,
                solver=diffrax.Dopri5(),
                rtol=tol,
                atol=tol,
                saveat=saveat,
                closure_tol=1e-8,
            )
            begin = time.perf_counter()
            sims[method] = jax.block_until_ready(runs[method]())
            first[method] = time.perf_counter() - begin
        samples = {"slm": [], "sslm": []}
        for _ in range(repeats):
            for method, run in runs.items():
                begin = time.perf_counter()
                jax.block_until_ready(run())
                samples[method].append(time.perf_counter() - begin)
        for method, sim in sims.items():
            run_s = statistics.median(samples[method])
            out[case][method] = {
                "run_s": run_s,
                "compile_s": first[method] - run_s,
                "accepted_steps": int(sim.stats.accepted_steps),
                "rejected_steps": int(sim.stats.rejected_steps),
                "succeeded": sim.succeeded,
                "max_loop_residual": float(jnp.max(sim.loop_residual[:, 0])),
            }
            print(
                f"  {name} ({case}) {method}: {run_s:.4f} s run, {out[case][method]['compile_s']:.1f} s compile"
            )
    return out


def ladder_times(ks, calls):
    """One call of each method on ``ladder(k)``, the methods taking turns (`interleaved`)."""
    out = {}
    for k in ks:
        mech = mechanisms.ladder(k)
        q, qd = _state(mech)
        tau = jnp.zeros_like(q)
        timed, compile_s = {}, {}
        for method in ("system", "slm", "sslm"):
            single = eqx.filter_jit(_solver(method, "solution"))
            begin = time.perf_counter()
            jax.block_until_ready(single(mech, q, qd, tau))
            compile_s[method] = time.perf_counter() - begin
            timed[method] = (single, (mech, q, qd, tau), calls)
        times = interleaved(timed)
        out[k] = {
            m: {"single_call_s": t[0], "single_call_min_s": t[1], "compile_s": compile_s[m]}
            for m, t in times.items()
        }
        print(f"  ladder({k}): " + ", ".join(f"{m} {t[1] * 1e6:.0f} us" for m, t in times.items()))
    return out


def us(seconds):
    return f"{seconds * 1e6:.1f}"


def _loads(loads):
    return "not recorded" if loads is None else ", ".join(f"{x:.2f}" for x in loads)


def report(record):
    m = record["machine"]
    lines = [
        "# SLM vs SSLM: multipliers and whole simulations (seed 000 Tables 3-4)",
        "",
        (
            f"Written by `experiments/slm_vs_sslm.py` on {m['date']}: {m['cpu']}, {m['cores']} "
            f"cores, JAX {m['jax']} ({m['backend']}), float64, XLA_FLAGS "
            f"`{record['xla_flags'] or '(none)'}` (`loopdyn.compilation.use_loop_kernels`). "
            f"{NOTE} Load average at the start: {_loads(record['load_average_start'])}; at the "
            f"end: {_loads(record['load_average_end'])}."
        ),
        "",
        (
            "The seed's numbers are MATLAB on a 2.2 GHz Core 2 Duo (2011): only the ratios SLM/SSLM "
            "compare. Its Table 4 is the total time spent on lambda over the case (a) run; ours is "
            "the time of one call, so again only the ratio compares."
        ),
        "",
        "## Multipliers (Table 4) and one forward-dynamics call",
        "",
        (
            "Single call: one jitted call through Python (dispatch included). Batched: per state in a "
            f"vmap over {record['batch']} states (the arithmetic alone). Each entry: the minimum "
            "over 7 rounds (the cost itself) and the median (what a loaded machine gives); the "
            "ratio is of the minima."
        ),
        "",
        (
            "| mechanism | what | SLM min / median (us) | SSLM min / median (us) | SLM/SSLM | "
            "seed SLM/SSLM |"
        ),
        "|---|---|---|---|---|---|",
    ]
    for name, times in record["per_call"].items():
        seed = SEED_TABLE_4[name]
        for part, label in (("lam", "lambda"), ("solution", "qdd and lambda")):
            for kind, where in (("single_call_s", "single"), ("per_state_in_batch_s", "batched")):
                least = kind[:-2] + "_min_s"
                slm, sslm = times["slm"][part], times["sslm"][part]
                seed_ratio = f"{seed[0] / seed[1]:.2f}" if part == "lam" else ""
                lines.append(
                    f"| {name} | {label}, {where} | {us(slm[least])} / {us(slm[kind])} | "
                    f"{us(sslm[least])} / {us(sslm[kind])} | {slm[least] / sslm[least]:.2f} | "
                    f"{seed_ratio} |"
                )
    lines += [
        "",
        "## Whole simulations (Table 3)",
        "",
        (
            "Dormand-Prince (diffrax Dopri5), saves every 0.01 s, Baumgarte stabilisation (10, 10). "
            "(a) free 15 s, tolerances 1e-3; (b) free 5 s, 1e-8; (c) forced 5 s, 1e-8 (inverse-"
            "dynamics torques every 0.01 s, linearly interpolated). Run time is the median of "
            "repeated runs of the compiled program (SLM and SSLM runs alternating); compile "
            "time is the first call minus that (no persistent compilation cache)."
        ),
        "",
        (
            "| mechanism | case | SLM run (s) | SSLM run (s) | SLM/SSLM | seed SLM / SSLM (s) | "
            "seed ratio | steps (acc./rej.) | compile SLM / SSLM (s) |"
        ),
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, cases in record["simulation"].items():
        for case, row in cases.items():
            slm, sslm = row["slm"], row["sslm"]
            seed = SEED_TABLE_3[name][case]
            lines.append(
                f"| {name} | ({case}) | {slm['run_s']:.4f} | {sslm['run_s']:.4f} | "
                f"{slm['run_s'] / sslm['run_s']:.2f} | {seed[0]} / {seed[1]} | "
                f"{seed[0] / seed[1]:.3f} | {sslm['accepted_steps']}/{sslm['rejected_steps']} | "
                f"{slm['compile_s']:.1f} / {sslm['compile_s']:.1f} |"
            )
    lines += [
        "",
        "## Ladder of k loops (one call, us: minimum over 7 rounds)",
        "",
        "| k | system | SLM | SSLM | SLM/SSLM | compile system / SLM / SSLM (s) |",
        "|---|---|---|---|---|---|",
    ]
    for k, row in record["ladder"].items():
        times = [row[m]["single_call_min_s"] for m in ("system", "slm", "sslm")]
        compiles = " / ".join(f"{row[m]['compile_s']:.1f}" for m in ("system", "slm", "sslm"))
        lines.append(
            f"| {k} | {us(times[0])} | {us(times[1])} | {us(times[2])} | "
            f"{times[1] / times[2]:.2f} | {compiles} |"
        )
    lines += ["", "## Reading", "", *record["reading"], ""]
    return "\n".join(lines)


def figure(record):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.3))
    names = list(record["per_call"])
    width = 0.2
    for i, (method, colour) in enumerate((("slm", "C0"), ("sslm", "C1"))):
        for j, (part, hatch) in enumerate((("lam", ""), ("solution", "//"))):
            x = np.arange(len(names)) + (2 * i + j - 1.5) * width
            values = [
                record["per_call"][n][method][part]["per_state_in_batch_min_s"] * 1e6 for n in names
            ]
            label = f"{method.upper()} {'lambda' if part == 'lam' else 'qdd + lambda'}"
            axes[0].bar(x, values, width, color=colour, hatch=hatch, label=label)
    axes[0].set_xticks(np.arange(len(names)), names)
    axes[0].set(ylabel="time per state [us] (min of 7 rounds)", title="one state, batched (vmap)")
    axes[0].legend(fontsize=8)
    cases = list(CASES)
    for i, name in enumerate(names):
        ours = [
            record["simulation"][name][c]["slm"]["run_s"]
            / record["simulation"][name][c]["sslm"]["run_s"]
            for c in cases
        ]
        seed = [SEED_TABLE_3[name][c][0] / SEED_TABLE_3[name][c][1] for c in cases]
        x = np.arange(len(cases)) + (i - 0.5) * 0.35
        axes[1].bar(x, ours, 0.17, color=f"C{i}", label=f"{name} (ours)")
        axes[1].bar(x + 0.17, seed, 0.17, color=f"C{i}", alpha=0.4, label=f"{name} (seed 000)")
    axes[1].axhline(1.0, color="k", lw=0.8)
    axes[1].set_xticks(np.arange(len(cases)), [f"case ({c})" for c in cases])
    axes[1].set(ylabel="SLM time / SSLM time [-]", title="whole simulation (Table 3)")
    axes[1].legend(fontsize=7)
    ks = [int(k) for k in record["ladder"]]
    for method in ("system", "slm", "sslm"):
        axes[2].loglog(
            ks,
            [record["ladder"][str(k)][method]["single_call_min_s"] * 1e6 for k in ks],
            "o-",
            label=method,
        )
    axes[2].set(xlabel="loops k [-]", ylabel="time per call [us]", title="ladder of k loops")
    axes[2].legend(fontsize=8)
    fig.tight_layout()
    return fig


def reading(record):
    """Plain statements computed from the numbers."""
    out = []
    for name, times in record["per_call"].items():
        lam = (
            times["slm"]["lam"]["per_state_in_batch_min_s"]
            / times["sslm"]["lam"]["per_state_in_batch_min_s"]
        )
        seed = SEED_TABLE_4[name][0] / SEED_TABLE_4[name][1]
        out.append(
            f"- {name}: lambda batched SLM/SSLM = {lam:.2f} (seed: {seed:.2f}); single calls are "
            "dominated by dispatch, so their ratio is close to 1 whatever the arithmetic."
        )
    ratios = [
        row["slm"]["run_s"] / row["sslm"]["run_s"]
        for cases in record["simulation"].values()
        for row in cases.values()
    ]
    faster = sum(r > 1 for r in ratios)
    out.append(
        f"- Whole simulations: SLM/SSLM between {min(ratios):.2f} and {max(ratios):.2f} (seed: "
        f"1.01-1.04); SSLM is the faster in {faster} of {len(ratios)} runs. The accelerations "
        "agree, so the step counts are close (at 1e-3 rounding differences can part the step "
        "sequences); the rest is the cost of one right-hand side."
    )
    ks = sorted(int(k) for k in record["ladder"])
    first, last = record["ladder"][str(ks[0])], record["ladder"][str(ks[-1])]
    growth = {
        m: last[m]["single_call_min_s"] / first[m]["single_call_min_s"]
        for m in ("system", "slm", "sslm")
    }
    out.append(
        f"- Ladder k = {ks[0]} -> {ks[-1]}: time grows x{growth['system']:.1f} (system), "
        f"x{growth['slm']:.1f} (SLM), x{growth['sslm']:.1f} (SSLM)."
    )
    return out


PARTS = ("per_call", "simulation_carpet_scraper", "simulation_three_rrr", "ladder")


def _partial(part):
    return OUT / f"slm_vs_sslm.part-{part}.json"


def run_part(part, quick):
    """Measure one part and write it to its own file (parts can run in parallel processes)."""
    ks = (1, 2, 4, 8) if quick else (1, 2, 4, 8, 16, 32)
    calls, repeats = (50, 2) if quick else (200, 5)
    names = ("carpet_scraper", "three_rrr")
    if part == "per_call":
        result = {}
        for name in names:
            print(f"per call: {name}", file=sys.stderr)
            result[name] = call_times(getattr(mechanisms, name)(), ("slm", "sslm"), calls=calls)
    elif part == "ladder":
        result = {}
        for k in ks:  # written after each k: the large ones take minutes to compile
            result.update({str(k): v for k, v in ladder_times((k,), calls).items()})
            write_atomic(_partial(part), lambda f: f.write(json.dumps(result).encode()))
    else:
        name = part.removeprefix("simulation_")
        result = simulation_times(name, getattr(mechanisms, name)(), repeats)
    write_atomic(_partial(part), lambda f: f.write(json.dumps(result).encode()))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="ladder up to k = 8, fewer repeats")
    parser.add_argument(
        "--part",
        choices=(*PARTS, "report"),
        help="measure one part only (to run parts in parallel), or merge the parts into the "
        "results (report)",
    )
    args = parser.parse_args()
    compilation.use_loop_kernels()  # before the first computation (each part's process)
    started = os.getloadavg() if args.part is None else None
    if args.part != "report":
        for part in PARTS if args.part is None else (args.part,):
            run_part(part, args.quick)
        if args.part is not None:
            return
    parts = {part: json.loads(_partial(part).read_text()) for part in PARTS}
    record = {"machine": machine(), "batch": 256, "per_call": parts["per_call"]}
    record["xla_flags"] = os.environ.get("XLA_FLAGS", "")
    record["load_average_start"] = started  # None: the parts ran in processes of their own
    record["simulation"] = {
        name: parts[f"simulation_{name}"] for name in ("carpet_scraper", "three_rrr")
    }
    record["ladder"] = parts["ladder"]
    record["reading"] = reading(record)
    record["load_average_end"] = os.getloadavg()
    text = report(record)
    write_results("slm_vs_sslm", record, text, figure(record))
    for part in PARTS:
        _partial(part).unlink()
    print(text)


if __name__ == "__main__":
    main()
