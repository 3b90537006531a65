"""Free motion of the seeds' two examples, 15 s from seed 000 Table 2's initial states,
unactuated and undamped, Tsit5 at rtol = atol = 1e-8, with each stabilisation: energy drift and
loop residual over time (the drift without stabilisation that seed 000 §5 warns about).

Writes experiments/results/free_motion.{json,md,png}. Run: python experiments/free_motion.py
"""

import json
import os
import pathlib
import platform
import tempfile
import time

import jax

jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

import loopdyn
from loopdyn import mechanisms, simulation

RESULTS = pathlib.Path(__file__).parent / "results"
T1, TOL = 15.0, 1e-8


def atomic_write(path, text):
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False) as handle:
        handle.write(text)
    os.chmod(handle.name, 0o644)
    os.replace(handle.name, path)


def machine():
    with open("/proc/cpuinfo") as info:
        names = [line.split(":", 1)[1].strip() for line in info if "model name" in line]
    cpu = names[0] if names else platform.processor()
    return f"{cpu}, {os.cpu_count()} cores, jax {jax.__version__}, load {os.getloadavg()[0]:.1f}"


def main():
    rows, curves = [], {}
    for name in ("carpet_scraper", "three_rrr"):
        mech = getattr(mechanisms, name)()
        for stabilization in simulation.STABILIZATIONS:
            start = time.perf_counter()
            sim = loopdyn.simulate(
                mech, mech.q0, jnp.zeros_like(mech.q0), T1, rtol=TOL, atol=TOL,
                stabilization=stabilization, saveat=jnp.linspace(0.0, T1, 601),
            )  # fmt: skip
            jax.block_until_ready(sim.q)
            seconds = time.perf_counter() - start
            e = np.asarray(sim.energy)
            drift = np.abs(e - e[0]) / abs(e[0])
            residual = np.asarray(sim.loop_residual)
            curves[name, stabilization] = (np.asarray(sim.ts), drift, residual[:, 0])
            rows.append(
                {
                    "mechanism": name,
                    "stabilization": stabilization,
                    "result": sim.message,
                    "steps": int(sim.stats.accepted_steps),
                    "rejected": int(sim.stats.rejected_steps),
                    "max_relative_energy_drift": float(drift.max()),
                    "max_position_residual": float(residual[:, 0].max()),
                    "max_velocity_residual": float(residual[:, 1].max()),
                    "compile_and_run_s": seconds,
                }
            )
            print(rows[-1])
    report = {"machine": machine(), "t1": T1, "rtol": TOL, "atol": TOL, "runs": rows}
    RESULTS.mkdir(exist_ok=True)
    atomic_write(RESULTS / "free_motion.json", json.dumps(report, indent=1))
    lines = [
        "# Free motion, 15 s, seed initial states (experiments/free_motion.py)",
        "",
        (
            f"Tsit5, rtol = atol = {TOL:g}, Baumgarte gains (alpha, beta) = (10, 10) 1/s. "
            f"Machine: {report['machine']} (load average: shared with other jobs)."
        ),
        "",
        (
            "| mechanism | stabilisation | steps (rejected) | max rel. energy drift | "
            "max abs(Phi) | max abs(J qd) |"
        ),
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['mechanism']} | {r['stabilization']} | {r['steps']} ({r['rejected']}) | "
            f"{r['max_relative_energy_drift']:.1e} | {r['max_position_residual']:.1e} | "
            f"{r['max_velocity_residual']:.1e} |"
        )
    atomic_write(RESULTS / "free_motion.md", "\n".join(lines) + "\n")
    fig, axes = plt.subplots(2, 2, figsize=(11, 7), sharex=True)
    for col, name in enumerate(("carpet_scraper", "three_rrr")):
        for stabilization in simulation.STABILIZATIONS:
            ts, drift, residual = curves[name, stabilization]
            axes[0, col].semilogy(ts, np.maximum(drift, 1e-17), label=stabilization)
            axes[1, col].semilogy(ts, np.maximum(residual, 1e-17), label=stabilization)
        axes[0, col].set(title=name, ylabel="|E(t) - E(0)| / |E(0)|")
        axes[1, col].set(xlabel="t [s]", ylabel="loop residual |Phi(q)| [m]")
        axes[0, col].legend(fontsize=8)
    fig.tight_layout()
    with tempfile.NamedTemporaryFile(dir=RESULTS, suffix=".png", delete=False) as handle:
        fig.savefig(handle, dpi=110, format="png")
    os.chmod(handle.name, 0o644)
    os.replace(handle.name, RESULTS / "free_motion.png")


if __name__ == "__main__":
    main()
