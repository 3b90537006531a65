"""Seed 003's comparison of formulations (its HMMWV table: constraint embedding 1, tree-augmented
4.1, fully augmented 120 times the run time) on loopdyn's double-wishbone quarter car:

- constraint embedding ("CE"): `loopdyn.forward.solve(method="embedding")`, minimal coordinates;
- tree-augmented ("TA"): joint coordinates of the spanning tree plus the cut-joint constraints,
  SSLM (`method="sslm"`) and, for reference, the dense KKT matrix (`method="system"`);
- fully augmented ("FA"): every body free with absolute coordinates, every joint a constraint,
  dense KKT (experiments/fully_augmented.py).

Sizes: coordinates, constraint rows and the size of the linear system each solves. Times: one
call of the accelerations (jitted; median over repeats; single calls include ~40-100 us of
dispatch) and per state in a batch (vmap over 256 states: the arithmetic). The FA call starts
from the absolute state; the others from joint coordinates. The accelerations of all four agree
(checked here at the timed state, and in tests/test_fully_augmented.py).

Writes experiments/results/quarter_car_formulations.{json,md,png} atomically.

Run: .venv/bin/python experiments/quarter_car_formulations.py
"""

import jax

jax.config.update("jax_enable_x64", True)

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from fully_augmented import absolute_state, accelerations, build
from slm_vs_sslm import NOTE, machine, per_call, write_results

from loopdyn import forward, kinematics, mechanisms

BATCH = 256
SEED = {  # seed 003 (HMMWV, 15 DOF): coordinates, constraints, augmented size, time ratio
    "CE": (15, 0, 15, 1.0),
    "TA": (45, 30, 75, 4.1),
    "FA": (216, 201, 417, 120.0),
}
FORMS = ("CE", "TA (SSLM)", "TA (dense KKT)", "FA")


def state(mech):
    """An assembled state off the design pose with consistent random velocities."""
    k1, k2 = jax.random.split(jax.random.PRNGKey(1))
    q = kinematics.assemble(mech, mech.q0.at[0].set(0.1), fixed=(0,))
    qd = kinematics.project_velocity(mech, q, jax.random.normal(k1, q.shape), fixed=(0,))
    del k2
    return q, qd


def main():
    mech = mechanisms.quarter_car()
    model = build(mech)
    q, qd = state(mech)
    tau = jnp.zeros_like(q)
    independent = forward.independent_coordinates(mech, q)
    c, rot, u, _ = absolute_state(model, mech, q, qd)

    def joint_space(method):
        def f(mech, q, qd, tau):
            return forward.solve(mech, q, qd, tau, method=method, independent=independent).qdd

        return f

    def fully(model_arrays, c, rot, u):
        return accelerations(model, c, rot, u)[0]

    calls = {
        "CE": (joint_space("embedding"), (mech, q, qd, tau)),
        "TA (SSLM)": (joint_space("sslm"), (mech, q, qd, tau)),
        "TA (dense KKT)": (joint_space("system"), (mech, q, qd, tau)),
        "FA": (fully, (None, c, rot, u)),
    }
    # Agreement: body accelerations of every joint-space form against FA at this state.
    fa_udot = np.asarray(eqx.filter_jit(fully)(None, c, rot, u))
    agreement = {}
    for name in FORMS[:3]:
        f, args = calls[name]
        qdd = eqx.filter_jit(f)(*args)
        udot = absolute_state(model, mech, q, qd, qdd)[3]
        agreement[name] = float(np.max(np.abs(np.asarray(udot) - fa_udot)))
    times = {}
    for name in FORMS:
        f, args = calls[name]
        batched_args = tuple(
            a if a is None or a is mech else jnp.broadcast_to(a, (BATCH, *jnp.shape(a)))
            for a in args
        )
        axes = tuple(None if a is None or a is mech else 0 for a in args)
        batched = eqx.filter_jit(jax.vmap(f, in_axes=axes))
        times[name] = {
            "single_call_s": per_call(eqx.filter_jit(f), *args, calls=300),
            "per_state_in_batch_s": per_call(batched, *batched_args, calls=30) / BATCH,
        }
        print(f"{name}: {times[name]['per_state_in_batch_s'] * 1e6:.2f} us per state")
    top = mech.topology
    sizes = {
        "CE": (top.dof, 0, top.dof),
        "TA (SSLM)": (mech.num_bodies, top.num_rows, mech.num_bodies + top.num_rows),
        "TA (dense KKT)": (mech.num_bodies, top.num_rows, mech.num_bodies + top.num_rows),
        "FA": (
            model.num_coordinates,
            model.num_rows,
            model.num_coordinates + model.num_rows,
        ),
    }
    record = {
        "machine": machine(),
        "mechanism": "loopdyn.mechanisms.quarter_car()",
        "bodies": [mech.body_names[b] for b in model.bodies],
        "joints": [(j.name, j.kind) for j in model.joints],
        "independent_coordinate": [mech.coordinate_names[k] for k in independent],
        "batch": BATCH,
        "sizes": {
            k: dict(zip(("coordinates", "constraints", "system_size"), v)) for k, v in sizes.items()
        },
        "seed_003": {
            k: dict(zip(("coordinates", "constraints", "system_size", "time_ratio"), v))
            for k, v in SEED.items()
        },
        "times": times,
        "max_abs_body_acceleration_difference_vs_FA": agreement,
    }
    base = {kind: times["CE"][kind] for kind in ("single_call_s", "per_state_in_batch_s")}
    record["ratios"] = {
        name: {kind: times[name][kind] / base[kind] for kind in base} for name in FORMS
    }
    text = report(record)
    write_results("quarter_car_formulations", record, text, figure(record))
    print(text)


def report(record):
    m = record["machine"]
    lines = [
        "# Quarter car: constraint embedding vs tree-augmented vs fully augmented (seed 003)",
        "",
        (
            f"Written by `experiments/quarter_car_formulations.py` on {m['date']}: {m['cpu']}, "
            f"{m['cores']} cores, JAX {m['jax']}, float64. {NOTE}"
        ),
        "",
        (
            "Seed 003's numbers are for its HMMWV (15 DOF, whole-vehicle simulation time ratios in "
            "its own engine, ROAMS); ours for loopdyn's quarter car ("
            f"{len(record['bodies'])} bodies {', '.join(record['bodies'])}; joints "
            f"{', '.join(f'{n} ({k})' for n, k in record['joints'])}; 1 DOF, independent coordinate "
            f"{record['independent_coordinate'][0]}), per call of the accelerations."
        ),
        "",
        (
            "| formulation | coordinates | constraints | system size | seed 003 (HMMWV) | "
            "one call (us) | per state, batched (us) | ratio single / batched | seed ratio |"
        ),
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, size in record["sizes"].items():
        seed = SEED[name.split()[0]]
        t, r = record["times"][name], record["ratios"][name]
        lines.append(
            f"| {name} | {size['coordinates']} | {size['constraints']} | {size['system_size']} | "
            f"{seed[0]} / {seed[1]} / {seed[2]} | {t['single_call_s'] * 1e6:.1f} | "
            f"{t['per_state_in_batch_s'] * 1e6:.2f} | {r['single_call_s']:.2f} / "
            f"{r['per_state_in_batch_s']:.2f} | {seed[3]:g} |"
        )
    agreement = record["max_abs_body_acceleration_difference_vs_FA"]
    r = record["ratios"]
    lines += [
        "",
        "Agreement of the body accelerations (m/s^2, rad/s^2) with FA at the timed state: "
        + ", ".join(f"{k} {v:.1e}" for k, v in agreement.items())
        + ".",
        "",
        "## Reading",
        "",
        (
            f"- Sizes follow the seed's pattern: FA has {record['sizes']['FA']['coordinates']} "
            f"coordinates and {record['sizes']['FA']['constraints']} rows (difference 1 = the DOF), "
            f"TA {record['sizes']['TA (SSLM)']['coordinates']} and "
            f"{record['sizes']['TA (SSLM)']['constraints']}, CE 1 and 0. The quarter car is small, "
            "so the spread of sizes (1 : 13 : 47) is far smaller than the HMMWV's (15 : 75 : 417)."
        ),
        (
            f"- Batched, per state: CE : TA (SSLM) : FA = 1 : {r['TA (SSLM)']['per_state_in_batch_s']:.1f}"
            f" : {r['FA']['per_state_in_batch_s']:.1f} (seed 1 : 4.1 : 120). Single calls are "
            "dominated by dispatch and say little about the formulations."
        ),
        (
            "- Why ours differ: loopdyn's embedding is not a recursive constraint-embedding "
            "algorithm like seed 003's: it forms the tree mass matrix (7x7), J, an LU of J_d (6x6) "
            "and the 1x1 reduced system T^T I T, with no multipliers. SSLM adds two articulated-body "
            "passes and the multiplier blocks; the dense TA solves a 13x13 KKT system. FA forms "
            "G (23x24) and its rate by differentiating the joint constraints and solves a 47x47 "
            "KKT system. At these sizes the dense work is small next to the fixed cost of the "
            "kinematics, so the spread is far smaller than the seed's: the cube of the KKT size "
            "gives (417/47)^3 ~ 700 more dense work for the HMMWV's FA, and the seed's ratios are "
            "whole simulations in its own engine, ours one evaluation of the accelerations."
        ),
        "",
    ]
    return "\n".join(lines)


def figure(record):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
    names = list(record["sizes"])
    x = np.arange(len(names))
    for i, (what, label) in enumerate(
        (
            ("coordinates", "coordinates"),
            ("constraints", "constraint rows"),
            ("system_size", "system size"),
        )
    ):
        values = [max(record["sizes"][n][what], 0.5) for n in names]
        seed = [max(SEED[n.split()[0]][i], 0.5) for n in names]
        axes[0].bar(x + (i - 1) * 0.27, values, 0.13, color=f"C{i}", label=f"{label} (ours)")
        axes[0].bar(
            x + (i - 1) * 0.27 + 0.13, seed, 0.13, color=f"C{i}", alpha=0.4, label=f"{label} (seed)"
        )
    axes[0].set_yscale("log")
    axes[0].set_xticks(x, names)
    axes[0].set(
        ylabel="count [-] (log)",
        title="sizes: quarter car (ours) vs HMMWV (seed 003); 0 drawn as 0.5",
    )
    axes[0].legend(fontsize=7, ncol=2)
    for i, (kind, label) in enumerate(
        (("per_state_in_batch_s", "ours, batched"), ("single_call_s", "ours, single call"))
    ):
        axes[1].bar(
            x + (i - 1) * 0.27, [record["ratios"][n][kind] for n in names], 0.27, label=label
        )
    axes[1].bar(
        x + 0.27, [SEED[n.split()[0]][3] for n in names], 0.27, color="0.6", label="seed 003"
    )
    axes[1].set_yscale("log")
    axes[1].set_xticks(x, names)
    axes[1].set(ylabel="time / time of CE [-] (log)", title="time ratios")
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    return fig


if __name__ == "__main__":
    main()
