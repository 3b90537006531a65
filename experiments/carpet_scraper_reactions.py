"""Carpet scraper driven at 45 rpm (seed 002 §6.1.1): driving torque and every joint reaction over
one crank revolution (1.34 s, 134 positions at 0.01 s), by the subsystem recursion (4x4, 2x2, 1x1
solves) and by the system approach (7x7), with the checks that make the numbers trustworthy:

- both methods agree;
- the driving power equals the rate of change of the mechanical energy (constraint forces do no
  work);
- the shaking force and moment equal the weight minus the rate of change of the total momentum.

Writes experiments/results/carpet_scraper_reactions.{json,md,png} (atomically). Seed 002's Fig. 8
(driving torque against ADAMS) is lost in the seed text, so there is no printed curve to compare
with; the mechanism's reconstruction is documented in docs/mechanisms.md.

Run: .venv/bin/python experiments/carpet_scraper_reactions.py
"""

import pathlib
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp
import numpy as np

from loopdyn import mechanisms, prescribed, shaking
from loopdyn.cli_inverse import figure, power_balance, results, write_atomic, write_json

OUT = pathlib.Path(__file__).parent / "results"
SPEED = 4.712  # rad/s, 45 rpm (seed 002 §6.1.1)
STEP, POSITIONS = 0.01, 134
# Seed 002's names of our joints (docs/mechanisms.md, "Numbering").
SEED_002 = {
    "theta1": "II-1 (crank, driven)",
    "theta2": "I-1",
    "theta3": "I-2",
    "theta4": "III-10",
    "theta5": "III-11",
    "theta6": "III-20",
    "theta7": "III-30",
    "joint8": "cut #1-#2 (lambda_1)",
    "joint9": "cut #2-#5 (lambda_2)",
    "joint10": "cut #2-#7 (lambda_3)",
}


def momentum_balance(mech, motion, result):
    """Largest difference between the shaking wrench without the weight and ``-d/dt (P, L)``,
    relative to the largest ground force."""
    shake = shaking.shaking(mech, result, motion.q, include_weight=False)

    def rates(q, qd, qdd):
        return jax.jvp(lambda q, qd: shaking.momentum(mech, q, qd), (q, qd), (qd, qdd))[1]

    d_linear, d_angular = jax.vmap(rates)(motion.q, motion.qd, motion.qdd)
    error = jnp.maximum(
        jnp.max(jnp.abs(shake.force + d_linear[:, :2])),
        jnp.max(jnp.abs(shake.moment + d_angular[:, 2])),
    )
    return float(error / jnp.max(jnp.abs(result.ground_force)))


def main():
    mech = mechanisms.carpet_scraper()
    t = jnp.arange(POSITIONS) * STEP
    start = float(mech.q0[mech.actuated[0]])

    def drive(t):
        return jnp.atleast_1d(start + SPEED * t)

    runs = {}
    for method in ("subsystem", "system"):
        begin = time.perf_counter()
        out = prescribed.prescribed_inverse_dynamics(mech, drive, t, method=method)
        jax.block_until_ready(out)
        first = time.perf_counter() - begin
        begin = time.perf_counter()
        jax.block_until_ready(prescribed.prescribed_inverse_dynamics(mech, drive, t, method=method))
        runs[method] = (out, first, time.perf_counter() - begin)
    (motion, sub), _, _ = runs["subsystem"]
    system = runs["system"][0][1]
    differences = {
        field: float(jnp.max(jnp.abs(getattr(sub, field) - getattr(system, field))))
        for field in ("actuator_forces", "multipliers", "reactions", "ground_force")
    }
    record = results(mech, motion, sub, "subsystem")
    record["seed_002_names"] = SEED_002
    record["drive"] = {"speed_rad_s": SPEED, "step_s": STEP, "positions": POSITIONS}
    record["checks"] = {
        "max_abs_difference_subsystem_vs_system": differences,
        "power_balance_relative": power_balance(mech, motion, sub),
        "momentum_balance_relative": momentum_balance(mech, motion, sub),
        "plan_system": [list(s["shape"]) for s in results(mech, motion, system, "system")["plan"]],
    }
    record["timing_s"] = {
        m: {"first_call_with_compile": r[1], "second_call_134_positions": r[2]}
        for m, r in runs.items()
    }
    OUT.mkdir(exist_ok=True)
    write_json(OUT / "carpet_scraper_reactions.json", record)
    figure(mech, motion, sub, OUT / "carpet_scraper_reactions.png", "carpet scraper, 45 rpm:")
    write_atomic(OUT / "carpet_scraper_reactions.md", lambda f: f.write(report(record).encode()))
    print(report(record))


def report(record):
    torque = np.asarray(record["actuator_forces"])[:, 0]
    force = np.asarray(record["reaction_force_magnitude"])
    checks, s = record["checks"], record["shaking_summary_dynamic"]
    plan = ", ".join("{}x{}".format(*p["shape"]) for p in record["plan"])
    lines = [
        "# Carpet scraper at 45 rpm: driving torque and joint reactions",
        "",
        (
            "Written by `experiments/carpet_scraper_reactions.py` (seed 002 §6.1.1: crank II-1 at "
            f"{SPEED} rad/s, {POSITIONS} positions at {STEP} s over one revolution). Figure: "
            "`carpet_scraper_reactions.png`; every number: `carpet_scraper_reactions.json`."
        ),
        "",
        (
            f"Subsystem recursion solves {plan} (seed 002: 4x4, 2x2, 1x1); the system approach "
            f"{' '.join('{}x{}'.format(*p) for p in checks['plan_system'])} (seed 002: 7x7)."
        ),
        "",
        (
            f"Driving torque at joint theta1: min {torque.min():.3f}, max {torque.max():.3f}, "
            f"RMS {np.sqrt(np.mean(torque**2)):.3f} N m; at t = 0: {torque[0]:.4f} N m."
        ),
        "",
        "| joint | seed 002 | peak reaction force (N) | RMS (N) |",
        "|---|---|---|---|",
    ]
    for j, name in enumerate(record["mechanism"]["joints"]):
        lines.append(
            f"| {name} | {record['seed_002_names'][name]} | {force[:, j].max():.2f} | "
            f"{np.sqrt(np.mean(force[:, j] ** 2)):.2f} |"
        )
    d = checks["max_abs_difference_subsystem_vs_system"]
    lines += [
        "",
        (
            f"Shaking force (dynamic part, -dP/dt): RMS {s['force_rms']:.2f} N, peak "
            f"{s['force_peak']:.2f} N; shaking moment about joint II-1: RMS {s['moment_rms']:.2f} "
            f"N m, peak {s['moment_peak']:.2f} N m."
        ),
        "",
        "Checks:",
        (
            f"- subsystem vs system, largest difference: actuator {d['actuator_forces']:.1e} N m, "
            f"multipliers {d['multipliers']:.1e} N, reactions {d['reactions']:.1e};"
        ),
        f"- power balance (tau qd = dE/dt), relative: {checks['power_balance_relative']:.1e};",
        (
            "- shaking wrench = -(dP/dt, dL/dt) from the momentum, relative: "
            f"{checks['momentum_balance_relative']:.1e};"
        ),
        (
            f"- loop closure {record['accuracy']['max_loop_closure']:.1e}, unbalanced generalized "
            f"force {record['accuracy']['max_unbalanced_generalized_force']:.1e}."
        ),
        "",
        "Timing (shared 2-core machine, noisy; one compiled program for the whole revolution, "
        "assembly included): "
        + "; ".join(
            f"{m}: {1e3 * r['second_call_134_positions']:.1f} ms for 134 positions "
            f"(first call with compilation {r['first_call_with_compile']:.1f} s)"
            for m, r in record["timing_s"].items()
        )
        + ". Pure inverse-dynamics timings: benchmarks/results/inverse.md.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
