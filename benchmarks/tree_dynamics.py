"""Tree dynamics against Pinocchio's batched path: forward (ABA) and inverse (RNEA) dynamics of
random serial chains (spatial, and one planar chain), float64, B states at once.

Per core: loopdyn's natively batched call on one XLA device against `pin.abaInParallel` /
`pin.rneaInParallel` over a `pin.ModelPool` with 1 thread, timed in a child process pinned to one
core from its start. Per machine: `loopdyn.batch` over one
host device per core against the same with all threads. Per-call `aba`/`rnea` (through Python) is
a third column. Times are medians of wall time; compile time is reported apart.

    .venv/bin/python benchmarks/tree_dynamics.py [--quick] [--sizes 4 16] [--out PATH]

Writes a Markdown table (and the raw numbers as JSON beside it) describing the machine.
"""

import os
import sys

CORES = os.cpu_count()
if "--core-worker" in sys.argv:  # `pinned_core_timings`' child: one core before JAX starts
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=1"
if __name__ == "__main__":  # run as the benchmark: a host device per core (per machine)
    # only then: the benchmarks that import this module for its helpers keep JAX's one host
    # device, as a user's process has (two slowed an eager four-bar call from 57 to 83 us)
    os.environ.setdefault("XLA_FLAGS", f"--xla_force_host_platform_device_count={CORES}")

import jax

jax.config.update("jax_enable_x64", True)

import argparse
import datetime
import json
import platform
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pinocchio as pin

import loopdyn
from loopdyn import tree

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from _peers import pinocchio_problem
from random_trees import random_planar_tree, random_tree

SIZES = (1, 2, 4, 8, 16, 32, 64)
QUICK_SIZES = (4, 16, 64)
PLANAR_SIZE = 16


def median_time(call, number, repeats):
    """Median over ``repeats`` of the mean wall time of ``number`` back-to-back calls."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(number):
            call()
        times.append((time.perf_counter() - start) / number)
    return statistics.median(times)


def first_call(fn, *args):
    """Wall time of the first call (trace + compile + one run) and its result."""
    start = time.perf_counter()
    out = jax.block_until_ready(fn(*args))
    return time.perf_counter() - start, out


def chain(n, planar):
    """``(mechanism, Pinocchio model)`` of a random serial chain; the planar chain's Pinocchio
    model is the spatial model of the same mechanism."""
    if not planar:
        return random_tree(n, n, serial=True)
    mech = random_planar_tree(n, n, planar=True, serial=True)
    return mech, pinocchio_problem(random_planar_tree(n, n, planar=False, serial=True))[1]


CASES = {
    "fd": (tree.forward_dynamics, pin.abaInParallel, pin.aba),
    "id": (tree.inverse_dynamics, pin.rneaInParallel, pin.rnea),
}


def problem(n, planar, batch):
    """The chain, its Pinocchio model and ``batch`` random ``(q, qd, tau or qdd)`` (the same in
    every process)."""
    mech, model = chain(n, planar)
    rng = np.random.default_rng(n)
    states = [rng.uniform(-2.0, 2.0, size=(batch, n)) for _ in range(3)]
    columns = [np.asfortranarray(x.T) for x in states]  # Pinocchio's (nq, B) layout
    return mech, model, states, columns


def core_timings(n, planar, batch, repeats):
    """Per-core timings (seconds per state): loopdyn's native batch on one device, Pinocchio's
    batched path with 1 thread, and its per-call function. Run in a process pinned to one core."""
    mech, model, states, columns = problem(n, planar, batch)
    arrays = [jnp.asarray(x) for x in states]
    pool, data, result = pin.ModelPool(model, 1), model.createData(), {}
    reference = np.zeros((n, batch), order="F")
    for name, (ours, parallel, per_call) in CASES.items():
        fn = jax.jit(ours)
        fn(mech, *arrays).block_until_ready()
        result[f"{name}_core"] = (
            median_time(lambda: fn(mech, *arrays).block_until_ready(), 1, repeats) / batch
        )
        result[f"{name}_pin_1"] = (
            median_time(lambda: parallel(1, pool, *columns, reference), 1, repeats) / batch
        )
        result[f"{name}_pin_call"] = median_time(
            lambda: per_call(model, data, states[0][0], states[1][0], states[2][0]), 2000, repeats
        )
    return result


def pinned_core_timings(cases, batch, repeats):
    """`core_timings` of every case, in a child process pinned to one core from its start (so
    XLA sizes its thread pool to that core: a process pinned later keeps a second pool thread
    that competes for the core, and unpinned, that thread spins on the other core)."""
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "core.json"
        command = [sys.executable, __file__, "--core-worker", str(out), "--batch", str(batch)]
        command += ["--repeats", str(repeats), "--cases", json.dumps(cases)]
        subprocess.run(command, check=True)
        return json.loads(out.read_text())


def machine_timings(n, planar, batch, repeats):
    """Compile times, errors against Pinocchio, and per-machine timings (all cores) of one
    chain; seconds (per state for the timings)."""
    mech, model, states, columns = problem(n, planar, batch)
    one_device = [jax.device_put(x, jax.devices()[0]) for x in states]
    pools = {threads: pin.ModelPool(model, threads) for threads in (1, CORES)}
    result = {"n": n, "planar": planar, "devices": len(jax.devices())}
    for name, (ours, parallel, _) in CASES.items():
        per_core = jax.jit(ours)
        per_machine = loopdyn.batch(ours, in_axes=(None, 0, 0, 0), vectorized=True)
        result[f"{name}_compile"], out = first_call(per_core, mech, *one_device)
        result[f"{name}_compile_machine"], out_all = first_call(per_machine, mech, *states)
        reference = np.zeros((n, batch), order="F")
        parallel(1, pools[1], *columns, reference)
        scale = np.max(np.abs(reference))
        result[f"{name}_error"] = float(np.max(np.abs(np.asarray(out) - reference.T)) / scale)
        result[f"{name}_error_machine"] = float(
            np.max(np.abs(np.asarray(out_all) - reference.T)) / scale
        )
        result[f"{name}_machine"] = (
            median_time(lambda: per_machine(mech, *states).block_until_ready(), 1, repeats) / batch
        )
        result[f"{name}_pin_{CORES}"] = (
            median_time(lambda: parallel(CORES, pools[CORES], *columns, reference), 1, repeats)
            / batch
        )
    return result


def machine():
    """A short description of the machine and the software versions."""
    cpu = "unknown"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as f:
        mem_kb = int(f.readline().split()[1])
    os_name = platform.platform()
    if Path("/etc/os-release").exists():
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                os_name = f"{line.split('=', 1)[1].strip(chr(34))} ({platform.release()})"
    return {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "ram_gib": round(mem_kb / 2**20, 1),
        "os": os_name,
        "python": platform.python_version(),
        "jax": jax.__version__,
        "jax_backend": jax.default_backend(),
        "pinocchio": pin.__version__,
        "devices": len(jax.devices()),
        "load_average": os.getloadavg(),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
    }


def us(seconds):
    return f"{seconds * 1e6:.2f}"


def markdown(info, results, batch, repeats):
    load = ", ".join(f"{x:.2f}" for x in info["load_average"])
    lines = [
        "# Tree dynamics: loopdyn against Pinocchio's batched path",
        "",
        "Random serial chains (revolute and prismatic joints with random axes, placements and",
        "inertias; `tests/random_trees.py`), spatial, and one planar chain (loopdyn's planar",
        "model against Pinocchio's spatial model of the same chain), float64.",
        "Generated by `benchmarks/tree_dynamics.py`.",
        "",
        f"- Date: {info['date']}",
        f"- CPU: {info['cpu']}, {info['cores']} cores, {info['ram_gib']} GiB RAM",
        f"- OS: {info['os']}; load average at start: {load}",
        f"- Python {info['python']}, jax {info['jax']} ({info['jax_backend']}, "
        f"{info['devices']} host devices), pinocchio {info['pinocchio']}",
        f"- B = {batch} states; medians of wall time over {repeats} repeats, µs per state.",
        "- *per core*: `jax.jit(tree.forward_dynamics)` on one XLA device (its native batch) vs "
        "`pin.abaInParallel(1, ModelPool, ...)` (1 thread), both (and the per-call column) timed "
        "in a child process pinned to one core from its start; ratio = pin / loopdyn, > 1 means "
        "loopdyn is faster.",
        f"- *per machine*: `loopdyn.batch(..., vectorized=True)` over {info['devices']} host "
        f"devices vs `pin.abaInParallel({info['cores']}, ...)`.",
        "- *per call*: `pin.aba` / `pin.rnea` once per state through Python.",
        "- *compile*: wall time of the first call (trace + XLA compile + one run).",
        "- *error*: max |loopdyn - Pinocchio| over the batch / max |Pinocchio|.",
        "",
    ]
    for name, title in (
        ("fd", "Forward dynamics (`tree.forward_dynamics` vs `abaInParallel`)"),
        ("id", "Inverse dynamics (`tree.inverse_dynamics` vs `rneaInParallel`)"),
    ):
        lines += [
            f"## {title}",
            "",
            "| chain | n | loopdyn 1 core | pin 1 thread | ratio per core | loopdyn all cores "
            "| pin all threads | ratio per machine | pin per call | compile s | compile all s "
            "| error |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in results:
            core, machine = r[f"{name}_core"], r[f"{name}_machine"]
            one, every = r[f"{name}_pin_1"], r[f"{name}_pin_{info['cores']}"]
            error = max(r[f"{name}_error"], r[f"{name}_error_machine"])
            lines.append(
                f"| {'planar' if r['planar'] else 'spatial'} | {r['n']} | {us(core)} | {us(one)} "
                f"| {one / core:.2f} | {us(machine)} | {us(every)} | {every / machine:.2f} "
                f"| {us(r[f'{name}_pin_call'])} | {r[f'{name}_compile']:.1f} "
                f"| {r[f'{name}_compile_machine']:.1f} | {error:.1e} |"
            )
        lines.append("")
    return "\n".join(lines)


def write_atomic(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer sizes and repeats")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/tree_dynamics.md")
    parser.add_argument("--batch", type=int, default=4096)
    parser.add_argument("--sizes", type=int, nargs="*", help="chain lengths (default: all)")
    parser.add_argument("--core-worker", help=argparse.SUPPRESS)  # internal: the pinned child
    parser.add_argument("--repeats", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--cases", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.core_worker:  # the pinned child of `pinned_core_timings`
        cases = json.loads(args.cases)
        timings = [core_timings(n, planar, args.batch, args.repeats) for n, planar in cases]
        write_atomic(Path(args.core_worker), json.dumps(timings))
        return
    sizes = args.sizes or (QUICK_SIZES if args.quick else SIZES)
    repeats = 5 if args.quick else 15
    info = machine()
    cases = [(n, False) for n in sizes] + [(PLANAR_SIZE, True)]
    per_core = pinned_core_timings(cases, args.batch, repeats)
    results = []
    for (n, planar), core in zip(cases, per_core):
        r = machine_timings(n, planar, args.batch, repeats) | core
        results.append(r)
        print(
            f"n={n:3d} {'planar ' if planar else 'spatial'} "
            + " | ".join(
                f"{k}: core {us(r[f'{k}_core'])} pin1 {us(r[f'{k}_pin_1'])} "
                f"machine {us(r[f'{k}_machine'])} pin{CORES} {us(r[f'{k}_pin_{CORES}'])} "
                f"compile {r[f'{k}_compile']:.1f}s err {r[f'{k}_error']:.0e}"
                for k in ("fd", "id")
            ),
            flush=True,
        )
    write_atomic(args.out, markdown(info, results, args.batch, repeats))
    raw = {"machine": info, "batch": args.batch, "repeats": repeats, "results": results}
    write_atomic(args.out.with_suffix(".json"), json.dumps(raw, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
