"""Closed-loop dynamics against Pinocchio and MuJoCo, all in one run: per-state forward dynamics
of the four-bar and the 3-RRR (four methods, one jitted call and jit of vmap over B states),
the ladder of k four-bar loops (cost growth of system / SLM / SSLM), and whole 5 s 3-RRR
simulations (single and batched), float64, compile time apart. Pinocchio's `constraintDynamics`
runs from Python and compiled (benchmarks/pinocchio_cpp.py builds benchmarks/cpp/ with g++ at the
start, into the ignored benchmarks/build/; its accelerations are checked against loopdyn's), the
3-RRR simulation beside Pinocchio + Boost.Odeint's Dormand-Prince, and the ladder in two layouts
(`mechanisms.ladder` and the usual MJCF drawing, `_peers.ladder_chain_mjcf`), its batched runs in
subprocesses with a time limit.

    .venv/bin/python benchmarks/closed_loop.py [--quick] [--out PATH] [--k-max K]
        [--ladder-batch B] [--ladder-timeout S] [--ladder-all-methods]

Per core: this process pins itself to one CPU before JAX starts (one XLA device, one Pinocchio
thread, one MuJoCo thread). Per machine: a subprocess shards the batch over one XLA host device
per core, and Pinocchio (which has no parallel constrained dynamics) runs one pinned process per
core. Writes a Markdown report and the raw numbers as JSON beside it, atomically; the raw
numbers so far go to ``closed_loop.partial.json`` after each section, so a run that stops keeps
them, and a ladder row whose process fails is recorded and left out, not the end of the run.
"""

import os
import sys

if "--sharded-worker" not in sys.argv:
    _CPUS = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {_CPUS[0]})  # before XLA starts its thread pools: one core

import jax

jax.config.update("jax_enable_x64", True)

import argparse
import functools
import json
import multiprocessing
import re
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import diffrax
import equinox as eqx
import jax.numpy as jnp
import numpy as np

import loopdyn
from loopdyn import compilation, forward, kinematics, mechanisms, recursive, simulation, tree

compilation.use_loop_kernels()  # before the first computation; subprocesses inherit it
SINGLE = compilation.SINGLE_STATE  # single-state programs compile as `simulate`'s and eager ones

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import _peers
import pinocchio_cpp
from tree_dynamics import first_call, median_time, write_atomic
from tree_dynamics import machine as tree_machine

# the compiled peer's program and its compile time (built at start, compile time reported apart)
PEER = [None, None]
METHODS = forward.GENERAL_METHODS  # system, slm, sslm, embedding
LADDER_METHODS = ("system", "slm", "sslm", "recursive")  # recursive: where the layout allows
LADDER_NAMES = {"system": "system", "slm": "SLM", "sslm": "SSLM", "recursive": "recursive"}
MECHANISMS = ("four_bar", "three_rrr")
PIN_ALGORITHMS = ("constraintDynamics", "lcaba")
# MuJoCo's equality constraints are soft: its defaults, and a nearly hard impedance.
MUJOCO_OPTIONS = {"default": {}, "stiff": {"solimp": "0.9999 0.9999 0.001"}}


# ------------------------------------------------------------------------------------ helpers


def relative(a, b):
    """max |a - b| / max |b| (per row when batched, the worst row)."""
    a, b = np.atleast_2d(a), np.atleast_2d(b)
    return float(np.max(np.max(np.abs(a - b), axis=1) / np.max(np.abs(b), axis=1)))


def hlo_ops(fn, *args):
    """Operations in the lowered (StableHLO, before XLA's optimisations) program of ``fn``."""
    text = jax.jit(fn).lower(*args).as_text()
    return sum(1 for line in text.splitlines() if " = " in line and "stablehlo." in line)


def make_mech(name):
    return (
        mechanisms.ladder(int(name[6:]))
        if name.startswith("ladder")
        else getattr(mechanisms, name)()
    )


random_states = _peers.random_states


def solver_for(mech, method):
    independent = forward.independent_coordinates(mech) if method == "embedding" else None
    return functools.partial(forward.solve, method=method, independent=independent)


# ------------------------------------------------------------ 1. per-state forward dynamics


def bench_mechanism(name, batch, repeats):
    mech = make_mech(name)
    q, qd, tau, closed = random_states(mech, batch, seed=1)
    one = (q[0], qd[0], tau[0])
    result = {
        "mechanism": name,
        "n": mech.num_bodies,
        "m": mech.topology.num_rows,
        "closed": closed,
    }
    reference = None
    for method in ("system", *[m for m in METHODS if m != "system"]):
        solve = solver_for(mech, method)
        single = compilation.jit(
            lambda mech, q, qd, tau: solve(mech, q, qd, tau).qdd, options=SINGLE
        )
        batched = compilation.jit(
            lambda mech, q, qd, tau: jax.vmap(lambda *x: solve(mech, *x).qdd)(q, qd, tau)
        )
        c_single, out = first_call(single, mech, *one)
        c_batched, out_b = first_call(batched, mech, q, qd, tau)
        if reference is None:
            reference = np.asarray(out_b)
        r = result[method] = {
            "compile_single_s": c_single,
            "compile_batched_s": c_batched,
            "single_s": median_time(lambda: single(mech, *one).block_until_ready(), 200, repeats),
            "batched_per_state_s": median_time(
                lambda: batched(mech, q, qd, tau).block_until_ready(), 1, repeats
            )
            / batch,
            "vs_system": relative(out_b, reference),
            "single_vs_batched": relative(out, out_b[0]),
            "hlo_ops": hlo_ops(lambda q, qd, tau: solve(mech, q, qd, tau).qdd, *one),
        }
        print(
            f"{name} {method:9s} single {r['single_s'] * 1e6:8.1f} µs  batched "
            f"{r['batched_per_state_s'] * 1e6:7.2f} µs/state  compile {c_single:.1f}+"
            f"{c_batched:.1f} s  HLO ops {r['hlo_ops']}",
            flush=True,
        )
    states = [np.asarray(x) for x in (q, qd, tau)]
    checked = min(batch, 512)
    problem = _peers.pinocchio_problem(mech, aligned=True)
    for algorithm in PIN_ALGORITHMS:
        solver = _peers.PinocchioSolver(problem, algorithm)
        theirs = np.array([solver(*(x[k] for x in states)) for k in range(checked)])
        calls = min(batch, 1000)
        result[f"pin_{algorithm}"] = {
            "per_call_s": median_time(
                lambda: [solver(states[0][k], states[1][k], states[2][k]) for k in range(calls)],
                1,
                repeats,
            )
            / calls,
            "vs_system": relative(theirs, reference[:checked]),
            "iterations": solver.iterations,
        }
    result["cpp_constraintDynamics"] = cpp_column(problem, mech, states, reference, repeats)[0]
    calls = min(batch, 2000)
    for label, options in MUJOCO_OPTIONS.items():
        solver = _peers.MujocoSolver(mech, **options)
        theirs = np.array([solver(*(x[k] for x in states)) for k in range(checked)])

        def set_states(forward):
            for k in range(calls):
                solver.set_state(states[0][k], states[1][k], states[2][k])
                if forward:
                    solver.forward()

        # mj_forward on the varied states, less the Python cost of setting each state
        set_s = median_time(lambda: set_states(False), 1, repeats) / calls
        result[f"mujoco_{label}"] = {
            "per_call_s": median_time(lambda: set_states(True), 1, repeats) / calls - set_s,
            "set_state_s": set_s,
            "vs_system": relative(theirs, reference[:checked]),
            "options": options,
        }
    cpp = result["cpp_constraintDynamics"]
    print(
        f"{name} C++ constraintDynamics {cpp['per_state_s'] * 1e6:.2f} µs/state (rel. diff "
        f"{cpp['vs_system']:.1e}, vs Python {cpp['vs_python']:.1e}); "
        f"pin constraintDynamics {result['pin_constraintDynamics']['per_call_s'] * 1e6:.2f}"
        f" µs, lcaba {result['pin_lcaba']['per_call_s'] * 1e6:.2f} µs (rel. diff "
        f"{result['pin_constraintDynamics']['vs_system']:.1e}, "
        f"{result['pin_lcaba']['vs_system']:.1e}); mj_forward "
        f"{result['mujoco_default']['per_call_s'] * 1e6:.2f} µs (rel. diff "
        f"{result['mujoco_default']['vs_system']:.1e}, stiff "
        f"{result['mujoco_stiff']['vs_system']:.1e})",
        flush=True,
    )
    result["pieces"] = profile_pieces(mech, q, qd, tau, repeats)
    result["pieces"]["sslm"] = {k: result["sslm"][k] for k in ("batched_per_state_s", "hlo_ops")}
    return result


def cpp_column(problem, mech, states, reference, repeats, threads=1, cpus=None):
    """The compiled Pinocchio peer (benchmarks/pinocchio_cpp.py) over all the states, per core
    (this process's core) unless ``threads``/``cpus`` say otherwise: median µs per state, its
    agreement with loopdyn's ``reference`` accelerations (asserted ≤ 1e-10 relative) and with
    the Python binding's at the first states."""
    peer = pinocchio_cpp.Peer(problem, PEER[0])
    try:
        result, qdd = peer.constraint_dynamics(
            *states, repeats, threads, cpus or sorted(os.sched_getaffinity(0))
        )
    finally:
        peer.close()
    checked = min(len(states[0]), 64)
    python = pinocchio_cpp.python_qdd(problem, *(x[:checked] for x in states))
    out = {
        "per_state_s": result["per_state_s"],
        "threads": result["threads"],
        "max_iterations": result["max_iterations"],
        "vs_python": relative(qdd[:checked], python),
    }
    if reference is not None:
        out["vs_system"] = relative(qdd[: len(reference)], reference)
    # Where Pinocchio's proximal iterations reach their cap (the MJCF ladder chain at k = 32:
    # 1.4e-5 between the binding and the C++ loop), its answer is recorded as not converged and
    # reported with its difference, not asserted. Where they converge, the binding and the C++
    # loop (the same iterations, compiled apart) can still stop at different points of a badly
    # conditioned state (the chain at k = 64: 3.9e-9 after 41 iterations on 2026-12-07): their
    # agreement is recorded and checked only for gross errors (a wrong model or wrong states).
    out["converged"] = result["max_iterations"] < pinocchio_cpp.MAX_ITER
    if out["converged"]:
        assert out.get("vs_system", 0.0) < 1e-10 and out["vs_python"] < 1e-6, out
    return out, qdd


def profile_pieces(mech, q, qd, tau, repeats):
    """Time the building blocks of SSLM separately (jit of vmap, per state)."""
    pieces = {
        "loop_terms": lambda q, qd, tau: kinematics.loop_terms(mech, q, qd),
        "mass_matrix": lambda q, qd, tau: tree.mass_matrix(mech, q),
        "tree.forward_dynamics": lambda q, qd, tau: tree.forward_dynamics(mech, q, qd, tau),
    }
    out = {}
    for label, fn in pieces.items():
        batched = jax.jit(jax.vmap(fn), compiler_options=compilation.OPTIONS)
        jax.block_until_ready(batched(q, qd, tau))
        out[label] = {
            "batched_per_state_s": median_time(
                lambda: jax.block_until_ready(batched(q, qd, tau)), 1, repeats
            )
            / q.shape[0],
            "hlo_ops": hlo_ops(fn, q[0], qd[0], tau[0]),
        }
    return out


# ------------------------------------------------------------------- per machine (all cores)


def sharded_worker(batch, repeats):
    """Run in a subprocess with one XLA host device per core (XLA_FLAGS set by the parent):
    `jit(vmap)` on one device (unpinned: XLA may spread its kernels over the cores),
    `loopdyn.batch` (`jax.shard_map`, each device its share) over all, from host (numpy) states
    as Pinocchio gets them, and for contrast the same `jit(vmap)` on states sharded over the
    devices (XLA's automatic partitioner decides the split)."""
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    os.sched_setaffinity(0, set(range(os.cpu_count())))
    devices = jax.devices()
    split = NamedSharding(Mesh(np.array(devices), ("batch",)), PartitionSpec("batch"))
    print(json.dumps({"devices": len(devices)}), flush=True)
    for name in MECHANISMS:
        mech = make_mech(name)
        states = [np.asarray(x) for x in random_states(mech, batch, seed=1)[:3]]
        solve = solver_for(mech, "sslm")

        def qdd(mech, q, qd, tau):
            return solve(mech, q, qd, tau).qdd

        vmapped = compilation.jit(jax.vmap(qdd, in_axes=(None, 0, 0, 0)))
        cases = {
            "one_device": (vmapped, states),
            "sharded": (loopdyn.batch(qdd, in_axes=(None, 0, 0, 0)), states),
            "partitioned": (vmapped, [jax.device_put(x, split) for x in states]),
        }
        for label, (call, args) in cases.items():
            compile_s, _ = first_call(call, mech, *args)
            row = {
                "compile_s": compile_s,
                "per_state_s": median_time(
                    lambda: call(mech, *args).block_until_ready(), 1, repeats
                )
                / batch,
            }
            print(json.dumps({"name": name, "label": label, **row}), flush=True)


def pinned_processes(worker, head, states, repeats):
    """Seconds per state of ``worker`` in one pinned process per core, each on its share of the
    states, started together at a barrier before each repeat; per repeat the machine is done
    when its slowest worker is (median over the repeats)."""
    context, batch = multiprocessing.get_context("spawn"), len(states[0])
    barrier, queue = context.Barrier(len(_CPUS)), context.Queue()
    shares = np.array_split(np.arange(batch), len(_CPUS))
    workers = [
        context.Process(
            target=worker,
            args=((*head, [x[s] for x in states], _CPUS[c], barrier, repeats), queue),
        )
        for c, s in enumerate(shares)
    ]
    for w in workers:
        w.start()
    times = [queue.get() for _ in workers]
    for w in workers:
        w.join()
    slowest = [max(t[r] for t in times) for r in range(repeats)]
    return {"per_state_s": statistics.median(slowest) / batch}


def per_machine(batch, repeats, timeout=420):
    """loopdyn over all cores (subprocess) and Pinocchio in one pinned process per core."""
    env = dict(os.environ)
    cores = len(_CPUS)
    env["XLA_FLAGS"] = (
        env.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={cores}"
    ).strip()
    command = [sys.executable, __file__, "--sharded-worker", "--batch", str(batch)]
    command += ["--repeats", str(repeats)]
    ours = {"devices": cores, "error": None}
    try:
        done = subprocess.run(
            command, check=False, env=env, capture_output=True, text=True, timeout=timeout
        )
        lines = done.stdout
        if done.returncode:
            ours["error"] = f"exit status {done.returncode}: {done.stderr.strip()[-300:]}"
    except subprocess.TimeoutExpired as stopped:
        lines = stopped.stdout.decode() if isinstance(stopped.stdout, bytes) else stopped.stdout
        ours["error"] = (
            f"no result within {timeout} s (the subprocess was stopped; in a trial at "
            "B = 4096 its threads all waited on a futex with no CPU use: a deadlock)"
        )
    for line in (lines or "").splitlines():
        if line.startswith("{"):
            row = json.loads(line)
            if "name" in row:
                ours.setdefault(row.pop("name"), {})[row.pop("label")] = row
            else:
                ours.update(row)
    result = {"cores": cores, "loopdyn": ours}
    for name in MECHANISMS:
        mech = make_mech(name)
        states = [np.asarray(x) for x in random_states(mech, batch, seed=1)[:3]]
        for algorithm in PIN_ALGORITHMS:
            result.setdefault(name, {})[f"pin_{algorithm}"] = pinned_processes(
                _peers.pinocchio_worker, (name, algorithm), states, repeats
            )
        result[name]["loopdyn_processes"] = pinned_processes(
            _peers.loopdyn_worker, (name,), states, repeats
        )
        # the compiled peer: one process, one OpenMP thread pinned to each core
        result[name]["cpp_constraintDynamics"] = cpp_column(
            _peers.pinocchio_problem(mech, aligned=True), mech, states, None, repeats, cores, _CPUS
        )[0]
    return result


# ---------------------------------------------------------------------------------- 2. ladder


LAYOUTS = {
    "ladder": "`mechanisms.ladder(k)` (each loop's subsystems small)",
    "chain": "the ladder drawn the usual MJCF way (`_peers.ladder_chain_mjcf`: one deep chain "
    "crank - coupler1 - ... - coupler k, each rocker its own tree, k `connect`s; loaded by "
    "`loopdyn.load_mjcf` and by Pinocchio's MJCF parser)",
}


def ladder_problem(layout, k):
    """``(mechanism, Pinocchio problem)`` of the ladder of ``k`` loops in ``layout``."""
    if layout == "chain":
        return _peers.ladder_chain(k)
    mech = mechanisms.ladder(k)
    return mech, _peers.pinocchio_problem(mech, aligned=True)


def ladder_worker(layout, k, method, path, repeats):
    """In a subprocess (a hang or an abort must not take the benchmark with it): ``jit(vmap)``
    of ``method`` over the states in ``path`` (.npz); prints one JSON line, saves q̈ beside."""
    mech, _ = ladder_problem(layout, k)
    states = np.load(path)
    q, qd, tau = (jnp.asarray(states[x]) for x in ("q", "qd", "tau"))
    solve = solver_for(mech, method)
    batched = compilation.jit(
        lambda mech, q, qd, tau: jax.vmap(lambda *x: solve(mech, *x).qdd)(q, qd, tau)
    )
    compile_s, out = first_call(batched, mech, q, qd, tau)
    np.save(path.with_suffix(f".{method}.npy"), np.asarray(out))
    per_state = median_time(lambda: batched(mech, q, qd, tau).block_until_ready(), 1, repeats)
    print(json.dumps({"compile_s": compile_s, "per_state_s": per_state / q.shape[0]}))


def ladder_batched(layout, k, method, path, repeats, timeout):
    """`ladder_worker` in a subprocess (this process's core) with a time limit."""
    command = [sys.executable, __file__, "--ladder-worker", layout, str(k), method, str(path)]
    command += ["--repeats", str(repeats)]
    try:
        done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"no result within {timeout} s (stopped)"}
    if done.returncode:
        return {"error": f"exit status {done.returncode}: {done.stderr.strip()[-300:]}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def bench_ladder(layout, k, methods, repeats, batch, timeout, given_up):
    """One ladder row: loopdyn's single jitted call and ``jit(vmap)`` over ``batch`` states
    (subprocess, ``timeout``) per method, Pinocchio per call from Python and the compiled peer
    over the same states. ``given_up``: methods whose batched run failed at a smaller k (not
    tried again at larger k)."""
    mech, problem = ladder_problem(layout, k)
    q, qd, tau, kept = random_states(mech, batch, seed=k)
    states = [np.asarray(x) for x in (q, qd, tau)]
    one = tuple(x[0] for x in states)
    row = {"layout": layout, "k": k, "n": mech.num_bodies, "m": mech.topology.num_rows}
    row["batch"], row["kept"] = batch, kept
    # the compiled peer first: its accelerations are what every other column is checked against
    row["cpp_constraintDynamics"], theirs = cpp_column(problem, mech, states, None, repeats)
    with tempfile.TemporaryDirectory(dir=ROOT / "benchmarks" / "build") as folder:
        path = Path(folder) / "states.npz"
        np.savez(path, q=states[0], qd=states[1], tau=states[2])
        for method in methods:
            solve = solver_for(mech, method)
            single = compilation.jit(
                lambda mech, q, qd, tau: solve(mech, q, qd, tau).qdd, options=SINGLE
            )
            compile_s, out = first_call(single, mech, *one)
            row[method] = {
                "compile_s": compile_s,
                "single_s": median_time(
                    lambda: single(mech, *one).block_until_ready(), 20, repeats
                ),
                "hlo_ops": hlo_ops(lambda q, qd, tau: solve(mech, q, qd, tau).qdd, *one),
                "vs_cpp": relative(out, theirs[0]),
            }
            if method in given_up:
                row[method]["batched"] = {"error": f"not tried: {given_up[method]}"}
                continue
            batched = ladder_batched(layout, k, method, path, repeats, timeout)
            if "error" in batched:
                given_up[method] = f"failed at k = {k}"
            else:
                qdd = np.load(path.with_suffix(f".{method}.npy"))
                batched["vs_cpp"] = relative(qdd, theirs)
            row[method]["batched"] = batched
    for algorithm in PIN_ALGORITHMS:
        solver = _peers.PinocchioSolver(problem, algorithm)
        row[f"pin_{algorithm}"] = {
            "per_call_s": median_time(lambda: solver(*one), 500, repeats),
            "vs_cpp": relative(solver(*one), theirs[0]),
        }

    def batched_text(m):
        b = row[m]["batched"]
        return f"{b['per_state_s'] * 1e6:.2f} µs/state" if "per_state_s" in b else "failed"

    text = "  ".join(
        f"{m} {row[m]['single_s'] * 1e6:.1f} µs, {batched_text(m)} (compile "
        f"{row[m]['compile_s']:.1f} s)"
        for m in methods
    )
    print(
        f"{layout} k={k:2d}: {text}  C++ cD "
        f"{row['cpp_constraintDynamics']['per_state_s'] * 1e6:.2f} µs/state, pin "
        f"{row['pin_constraintDynamics']['per_call_s'] * 1e6:.2f} / lcaba "
        f"{row['pin_lcaba']['per_call_s'] * 1e6:.2f} µs",
        flush=True,
    )
    return row


def ladder_row(layout, k, methods, repeats, batch, timeout, given_up):
    """`bench_ladder` in a subprocess of its own: the single-call programs of every k compiled in
    one process exhausted its memory mappings at k = 32 (LLVM "Cannot allocate memory").
    Updates ``given_up`` from the row. Where the process fails, each method runs again in a
    process of its own (the chain's SSLM at k = 64 aborted so: its one single-state program
    exhausts the mappings, and took the other methods' results with it); the methods that pass
    make the row, each failure is listed in the row's ``"errors"``. A row where no method passes
    is ``{"layout", "k", "error"}``, recorded and left out of the tables, not the end of the
    run."""
    row, error = _ladder_process(layout, k, methods, repeats, batch, timeout, given_up)
    if error is not None and len(methods) > 1:
        row, errors = None, []
        for m in methods:
            part, failed = _ladder_process(layout, k, [m], repeats, batch, timeout, given_up)
            if failed is not None:
                errors.append(failed)
            else:
                row = part if row is None else {**row, m: part[m]}
        if row is not None:
            row["errors"] = errors
        error = "; ".join(errors)
    if row is None:
        return {"layout": layout, "k": k, "error": error}
    for m in methods:
        if m in row and "error" in row[m].get("batched", {}) and m not in given_up:
            given_up[m] = f"failed at k = {k}"
    return row


def _ladder_process(layout, k, methods, repeats, batch, timeout, given_up):
    """``(row, None)`` from `bench_ladder` in a subprocess, or ``(None, error)``."""
    command = [sys.executable, __file__, "--ladder-row", layout, str(k), ",".join(methods)]
    command += ["--repeats", str(repeats), "--ladder-batch", str(batch)]
    command += ["--ladder-timeout", str(timeout), "--given-up", json.dumps(given_up)]
    done = subprocess.run(command, check=False, capture_output=True, text=True)
    if done.returncode:
        lines = [line.strip() for line in done.stderr.splitlines() if line.strip()] or [""]
        reason = next((line for line in reversed(lines) if "rror" in line), lines[-1])
        error = f"{layout} k = {k} ({', '.join(methods)}): exit {done.returncode}, {reason}"
        print(f"ladder row failed: {error}", flush=True)
        return None, error
    print(done.stdout.strip().splitlines()[-2], flush=True)  # bench_ladder's summary line
    return json.loads(done.stdout.strip().splitlines()[-1]), None


def ladder_exponents(rows, k_min):
    """Growth exponents of one layout's rows: each method's single call and batched per state,
    the compiled peer per state and Pinocchio per call from Python."""
    out = {}
    for m in LADDER_METHODS:
        out[m] = growth_exponent(rows, m, k_min)
        out[f"{m}_batched"] = growth_exponent(rows, m, k_min, ("batched", "per_state_s"))
    out["cpp_constraintDynamics"] = growth_exponent(
        rows, "cpp_constraintDynamics", k_min, "per_state_s"
    )
    for a in PIN_ALGORITHMS:
        out[f"pin_{a}"] = growth_exponent(rows, f"pin_{a}", k_min, "per_call_s")
    return out


def growth_exponent(rows, key, k_min, field="single_s"):
    """Least-squares slope of log(``field``) against log(k) over the rows with k >= ``k_min``
    (``field``: a key of ``row[key]`` or a path of keys into it)."""
    points = []
    for r in rows:
        x = r.get(key)
        for f in (field,) if isinstance(field, str) else field:  # a path into nested results
            x = x.get(f) if isinstance(x, dict) else None
        if x is not None and r["k"] >= k_min:
            points.append((r["k"], x))
    if len(points) < 2:
        return None
    k, t = np.log(np.array(points)).T
    return float(np.polyfit(k, t, 1)[0])


# ------------------------------------------------------------------------------ 3. simulation


def bench_simulation(batch, repeats, t1=5.0, tol=1e-6):
    mech = mechanisms.three_rrr()
    zeros = jnp.zeros_like(mech.q0)
    run = functools.partial(loopdyn.simulate, mech, t1=t1, rtol=tol, atol=tol)
    result = {"t1": t1, "rtol": tol, "atol": tol, "batch": batch}
    compile_s, sim = first_call(lambda: run(mech.q0, zeros))
    result["single"] = {
        "first_call_s": compile_s,
        "steps": int(sim.stats.steps),
        "accepted": int(sim.stats.accepted_steps),
        "rejected": int(sim.stats.rejected_steps),
        "succeeded": sim.succeeded,
        "max_loop_residual": float(jnp.max(sim.loop_residual[:, 0])),
        "simulate_s": median_time(lambda: jax.block_until_ready(run(mech.q0, zeros)), 3, repeats),
    }
    # The compiled solve alone, without simulate's eager checks: the same jitted function
    # with the options simulate passes by default (already compiled by the call above).
    adjoint = diffrax.RecursiveCheckpointAdjoint()
    options = simulation._Options(
        "sslm", "baumgarte", (10.0, 10.0), (), diffrax.Tsit5(), 16_384, adjoint, False, 201, False
    )
    tolerances = tuple(jnp.asarray(x, zeros.dtype) for x in (tol, tol, 1e-5 * t1))
    inputs = (jnp.zeros((1, mech.num_bodies)), None)  # (tau samples, ctrl)
    core = lambda: simulation._integrate(
        mech, mech.q0, zeros, jnp.asarray(t1, zeros.dtype), None, inputs, tolerances, options
    )[0]
    result["single"]["jit_first_call_s"], _ = first_call(core)  # > 1 s: it recompiled
    result["single"]["jit_s"] = median_time(lambda: jax.block_until_ready(core()), 3, repeats)
    result["single"]["hlo_ops"] = hlo_ops(lambda q0, qd0: run(q0, qd0), mech.q0, zeros)
    q, _, _, _ = random_states(mech, batch, seed=5)
    qd = jnp.zeros_like(q)
    batched = compilation.jit(jax.vmap(lambda q0, qd0: run(q0, qd0)))
    compile_b, sims = first_call(batched, q, qd)
    steps = np.asarray(sims.stats.steps)
    result["batched"] = {
        "compile_s": compile_b,
        "total_s": median_time(lambda: jax.block_until_ready(batched(q, qd)), 1, 2),
        "steps_min": int(steps.min()),
        "steps_median": float(np.median(steps)),
        "steps_max": int(steps.max()),
        "succeeded": int(np.sum(np.asarray(sims.stats.result) == 0)),
    }
    result["batched"]["per_run_s"] = result["batched"]["total_s"] / batch
    # Pinocchio's constraintDynamics in C++ with Boost.Odeint's Dormand-Prince, same gains, at a
    # sweep of tolerances, all against a tight C++ reference (pinocchio_cpp.trajectories)
    peer = pinocchio_cpp.Peer(_peers.pinocchio_problem(mech, aligned=True), PEER[0])
    try:
        result["cpp"] = pinocchio_cpp.trajectories(peer, mech, t1, tol, repeats=repeats, ours=sim)
    finally:
        peer.close()
    result["single"]["max_velocity_residual"] = float(jnp.max(sim.loop_residual[:, 1]))
    s, b = result["single"], result["batched"]
    print(
        f"simulation: first call {s['first_call_s']:.1f} s, simulate {s['simulate_s'] * 1e3:.1f} "
        f"ms, jit {s['jit_s'] * 1e3:.1f} ms, {s['steps']} steps; batched {batch}: compile "
        f"{b['compile_s']:.1f} s, {b['per_run_s'] * 1e3:.2f} ms/run, steps {b['steps_min']}-"
        f"{b['steps_max']}",
        flush=True,
    )
    return result


# --------------------------------------------------------------------------------- reporting


def machine():
    """The machine and software versions (`tree_dynamics.machine`) plus equinox and MuJoCo."""
    import mujoco

    info = tree_machine()
    info["load_average_start"] = info.pop("load_average")
    return info | {"equinox": eqx.__version__, "mujoco": mujoco.__version__}


def us(seconds):
    return f"{seconds * 1e6:.2f}" if seconds is not None else "-"


@functools.cache
def default_method(layout, k):
    """What ``method="auto"`` (`forward.choose_method`) runs on the ladder of ``k`` loops."""
    mech = loopdyn.load_mjcf(_peers.ladder_chain_mjcf(k)) if layout == "chain" else None
    return forward.choose_method(mech or mechanisms.ladder(k))


def ladder_key(layout):
    """The key of ``layout``'s ladder rows in the raw results."""
    return "ladder" if layout == "ladder" else f"ladder_{layout}"


def ladder_results(raw, layout, pick):
    """The batched ladder results of ``layout`` for the method ``pick(k)`` at each k: ``(k,
    method, C++ time / its time, row)`` where it has one, and the k without one (and the failed
    rows)."""
    rows, found, missing = raw.get(ladder_key(layout), []), [], []
    for r in rows:
        method = pick(r["k"])
        b = r.get(method, {}).get("batched", {})
        if "per_state_s" in b:
            cpp = r["cpp_constraintDynamics"]["per_state_s"]
            found.append((r["k"], method, cpp / b["per_state_s"], r))
        else:
            missing.append(r["k"])
    ks = {r["k"] for r in rows}
    failed = [  # rows without any method (a method's own failure leaves it missing above)
        e.split(":")[0]
        for e in raw.get("ladder_failures", [])
        if e.startswith(layout) and int(re.search(r"k = (\d+)", e).group(1)) not in ks
    ]
    return found, missing + failed


def default_method_target(raw, layout):
    """Issue 23's ladder target for the default method ``"auto"`` in ``layout``: at every k the
    row of the method it picks there (the same program, `default_method`)."""
    found, missing = ladder_results(raw, layout, functools.partial(default_method, layout))
    ratios = [(k, m, x) for k, m, x, _ in found]
    compiles = [r[m]["compile_s"] for _, m, _, r in found]
    points = [{"k": k, "auto": r[m]["batched"]} for k, m, _, r in found]
    exponent = growth_exponent(points, "auto", raw["ladder_k_min"], "per_state_s")
    met = (
        bool(ratios)
        and not missing
        and exponent is not None
        and exponent <= 1.1
        and min(x for _, _, x in ratios) >= 1.0
        and max(compiles) <= 5.0
    )
    return {
        "target": f'ladder ({layout}): the default method "auto" batched ≥ 1× the C++ loop per '
        "state at every k, time exponent ≤ 1.1 (k ≥ 8), compile ≤ 5 s at every k",
        "value": exponent,
        "goal": 1.1,
        "met": met,
        "margin": (
            f"exponent {exponent:.2f}; C++ time / auto time: "
            + ", ".join(f"k = {k} ({m}) {x:.2f}" for k, m, x in ratios)
            + f"; compile (single) up to {max(compiles):.1f} s"
            + (f"; no result: {'; '.join(map(str, missing))}" if missing else "")
            if exponent is not None
            else "not measured"
        ),
    }


def targets(raw):
    """Each target of issue 6: value, goal, met, and the margin."""
    rows = {r["k"]: r for r in raw["ladder"]}
    out = []
    exponent = raw["ladder_exponents"].get("sslm")
    ops = growth_exponent(raw["ladder"], "sslm", raw["ladder_k_min"], "hlo_ops")
    out.append(
        {
            "target": "SSLM cost grows linearly with k on the ladder (fitted exponent ≤ 1.1)",
            "value": exponent,
            "goal": 1.1,
            "met": exponent is not None and exponent <= 1.1,
            "margin": (
                f"time exponent {exponent:.2f} over k = {raw['ladder_k_min']}…{max(rows)} "
                f"(goal ≤ 1.1); the unrolled program's HLO op count grows with exponent "
                f"{ops:.2f}. The time mixes a fixed per-call cost with per-op overhead, so an "
                "exponent below 1 says the fixed part still dominates"
                if exponent is not None
                else "not measured"
            ),
        }
    )
    for layout in LAYOUTS:
        out.append(default_method_target(raw, layout))
    k32 = rows.get(32)
    batched = k32 and all(
        "per_state_s" in k32.get(m, {}).get("batched", {}) for m in ("slm", "sslm")
    )
    if batched and "slm" in k32:
        per_state = {m: k32[m]["batched"]["per_state_s"] for m in ("slm", "sslm")}
        ratio = per_state["slm"] / per_state["sslm"]
        single = k32["slm"]["single_s"] / k32["sslm"]["single_s"]
        out.append(
            {
                "target": "SSLM ≥ 3× faster than SLM at k = 32, batched per state (goal 5×)",
                "value": ratio,
                "goal": 3.0,
                "met": ratio >= 3.0,
                "margin": f"SLM / SSLM = {ratio:.2f} (goal 5×: {ratio / 5.0:.2f} of it); single "
                f"jitted calls {single:.2f} (per-call overhead dominates them)",
            }
        )
    rrr = next(r for r in raw["forward"] if r["mechanism"] == "three_rrr")
    ours = rrr["sslm"]["batched_per_state_s"]
    best_name = min(PIN_ALGORITHMS, key=lambda a: rrr[f"pin_{a}"]["per_call_s"])
    cd = rrr["pin_constraintDynamics"]["per_call_s"]
    best = rrr[f"pin_{best_name}"]["per_call_s"]
    out.append(
        {
            "target": "batched per-state SSLM on one core ≥ 2× faster than Pinocchio per call "
            "on the 3-RRR",
            "value": cd / ours,
            "goal": 2.0,
            "met": cd / ours >= 2.0,
            "margin": f"constraintDynamics / SSLM = {cd / ours:.2f}; against Pinocchio's fastest "
            f"({best_name}) {best / ours:.2f}",
        }
    )
    sim = raw["simulation"]["single"]
    for label, value in (("simulate", sim["simulate_s"]), ("compiled solve alone", sim["jit_s"])):
        out.append(
            {
                "target": f"one 5 s 3-RRR simulation under 20 ms after compilation ({label})",
                "value": value,
                "goal": 0.020,
                "met": value < 0.020,
                "margin": f"{value * 1e3:.1f} ms = {value / 0.020:.1f}× the goal",
            }
        )
    # a batched first call also runs 1024 simulations (seconds): its compilation is the rest
    batched = raw["simulation"]["batched"]
    for label, value, detail in (
        ("single, first call incl. one run", sim["first_call_s"], ""),
        (
            "batched, first call less one run",
            batched["compile_s"] - batched["total_s"],
            f" (first call {batched['compile_s']:.1f} s, of which one run of the batch "
            f"{batched['total_s']:.1f} s)",
        ),
    ):
        out.append(
            {
                "target": f"simulation compile under 10 s ({label})",
                "value": value,
                "goal": 10.0,
                "met": value < 10.0,
                "margin": f"{value:.1f} s = {value / 10.0:.2f}× the goal{detail}",
            }
        )
    return out


def peer_targets(raw):
    """Issue 23's targets against the compiled peer (Pinocchio's C++ `constraintDynamics`)."""
    out = []
    for r in raw["forward"]:
        cpp, ours = r["cpp_constraintDynamics"]["per_state_s"], r["sslm"]["batched_per_state_s"]
        out.append(
            {
                "target": f"{r['mechanism']}: batched per-state SSLM (one core) ≥ 3× Pinocchio's "
                "C++ loop",
                "value": cpp / ours,
                "goal": 3.0,
                "met": cpp / ours >= 3.0,
                "margin": f"C++ / SSLM = {cpp / ours:.2f}",
            }
        )
    pm = raw.get("per_machine")
    for name in MECHANISMS if pm else ():
        _, sharded, _, _, _, processes = per_machine_times(pm, name)
        cpp = pm[name]["cpp_constraintDynamics"]["per_state_s"]
        ways = {"`batch`": sharded, "one process per core": processes}
        ways = {k: cpp / v for k, v in ways.items() if v}
        best = max(ways.values(), default=None)
        out.append(
            {
                "target": f"{name}: per machine ({pm['cores']} cores) loopdyn ≥ 2× the C++ loop "
                "on all cores",
                "value": best,
                "goal": 2.0,
                "met": best is not None and best >= 2.0,
                "margin": "; ".join(f"C++ / {k} = {v:.2f}" for k, v in ways.items()) or "no result",
            }
        )
    sim, rrr = (
        raw["simulation"]["single"],
        next(r for r in raw["forward"] if r["mechanism"] == "three_rrr"),
    )
    per_eval = sim["jit_s"] / sim["steps"] / 6
    cpp = rrr["cpp_constraintDynamics"]["per_state_s"]
    out.append(
        {
            "target": "3-RRR `simulate`: per forward-dynamics evaluation inside the step ≤ "
            "Pinocchio's C++ `constraintDynamics` per state",
            "value": per_eval / cpp,
            "goal": 1.0,
            "met": per_eval <= cpp,
            "margin": f"{per_eval * 1e6:.2f} µs against {cpp * 1e6:.2f} µs ({per_eval / cpp:.1f}×)",
        }
    )
    for target, value, goal, unit in (
        (
            "3-RRR `simulate`: first call (trace, compile, one run) ≤ 5 s",
            sim["first_call_s"],
            5.0,
            "s",
        ),
        ("3-RRR `simulate`: one run ≤ 10 ms (goal beyond: 5 ms)", sim["simulate_s"], 0.010, "ms"),
        (
            "HLO ops of the single-state 3-RRR SSLM program ≤ 1,500",
            rrr["sslm"]["hlo_ops"],
            1500,
            "",
        ),
        ("HLO ops of the whole 3-RRR `simulate` program ≤ 3,000", sim["hlo_ops"], 3000, ""),
    ):
        shown = {"s": f"{value:.1f} s", "ms": f"{value * 1e3:.2f} ms", "": f"{value:,}"}[unit]
        out.append(
            {
                "target": target,
                "value": value,
                "goal": goal,
                "met": value <= goal,
                "margin": f"{shown} = {value / goal:.2f}× the goal",
            }
        )
    for layout in LAYOUTS:
        found, missing = ladder_results(raw, layout, lambda k: "sslm")
        ratios, failed = [x for _, _, x, _ in found], len(missing)
        exponents = raw.get("ladder_exponents" if layout == "ladder" else "ladder_chain_exponents")
        e = (exponents or {}).get("sslm_batched")
        out.append(
            {
                "target": f"ladder ({layout}): batched SSLM ≥ 1× the C++ loop per state at "
                "every k, time exponent ≤ 1.1",
                "value": min(ratios) if ratios else None,
                "goal": 1.0,
                "met": bool(ratios)
                and not failed
                and min(ratios) >= 1.0
                and e is not None
                and e <= 1.1,
                "margin": (
                    f"C++ / SSLM from {min(ratios):.2f} to {max(ratios):.2f}"
                    if ratios
                    else "no batched result"
                )
                + (f", {failed} k without a result" if failed else "")
                + (f"; exponent {e:.2f}" if e is not None else ""),
            }
        )
    return out


def per_machine_times(pm, name):
    """``(one device, batch, partitioned, constraintDynamics, lcaba, processes)`` seconds per
    state of one mechanism in the per-machine run (None where loopdyn gave no result, or a run
    before the processes column)."""
    ld, pn = pm["loopdyn"].get(name, {}), pm[name]
    ours = (
        ld.get(label, {}).get("per_state_s") for label in ("one_device", "sharded", "partitioned")
    )
    pin = (pn[f"pin_{a}"]["per_state_s"] for a in PIN_ALGORITHMS)
    return (*ours, *pin, pn.get("loopdyn_processes", {}).get("per_state_s"))


def markdown(raw):
    info = raw["machine"]
    load = lambda x: ", ".join(f"{v:.2f}" for v in x)
    lines = [
        "# Closed-loop dynamics: loopdyn vs Pinocchio and MuJoCo",
        "",
        "Generated by `benchmarks/closed_loop.py` in one run, float64.",
        "",
        f"- Date: {info['date']}",
        f"- CPU: {info['cpu']}, {info['cores']} cores, {info['ram_gib']} GiB RAM; {info['os']}",
        f"- Python {info['python']}, jax {info['jax']} ({info['jax_backend']}), equinox "
        f"{info['equinox']}, pinocchio {info['pinocchio']}, mujoco {info['mujoco']}",
        f"- XLA_FLAGS: `{info.get('xla_flags') or '(none)'}`"
        + (
            " (`loopdyn.compilation.use_loop_kernels`: XLA compiles each loop without scatters "
            "or library calls into one kernel)"
            if "small_while_loop" in info.get("xla_flags", "")
            else ""
        ),
        f"- Load average at start: {load(info['load_average_start'])}; at end: "
        f"{load(info['load_average_end'])}. "
        + (
            "The machine is shared with other jobs during the run: **timings are noisy** (the "
            "load average exceeds the core count), compare ratios within this run, not across "
            "runs."
            if max(*info["load_average_start"], *info["load_average_end"]) > info["cores"]
            else "The load average was under the core count at start and end (the benchmark "
            "itself keeps about one core busy); compare ratios within this run, not across runs."
        )
        + (f" {info['remark']}" if info.get("remark") else ""),  # what else ran, added by hand
        f"- Total run {raw['total_s'] / 60:.1f} min{' (--quick)' if raw['quick'] else ''}. "
        f"Medians over {raw['repeats']} repeats.",
        "- *Per core*: the benchmark process pins itself to one CPU before JAX starts, so XLA "
        "(one host device), Pinocchio (one thread) and MuJoCo share one core. *single*: one "
        "`loopdyn.compilation.jit` call through Python incl. dispatch (XLA options of "
        "`loopdyn.compilation.SINGLE_STATE`, as `simulate` and eager calls compile); "
        "*batched*: `loopdyn.compilation.jit(vmap(f))` over "
        f"B = {raw['batch']} random assembled states (independent coordinates held, velocities "
        "by `project_velocity`, random torques; guesses that did not close, or that loopdyn's "
        "default method flags singular, replaced by repeats of the others), time per state. "
        "Pinocchio: per call through Python over 1000 different states (proximal settings accuracy 1e-12, mu 1e-10; planar "
        "hinges as `RZ` joints); *C++*: the same `constraintDynamics` compiled "
        f"(`benchmarks/cpp/pinocchio_peer.cpp`, header-only, `{raw['cpp']['flags']}`, built in "
        + (
            f"{raw['cpp']['compile_s']:.0f} s"
            if raw["cpp"]["compile_s"]
            else "an earlier run (cached)"
        )
        + ") looping over the same B states on one thread, median over the repeats; its "
        "accelerations are checked against loopdyn's and the Python binding's (≤ 1e-10 "
        "relative, asserted). "
        "`lcaba` is Pinocchio 4's loop-constrained articulated-body algorithm. MuJoCo: "
        "`mj_forward` per call, state set beforehand (its fastest path), contacts disabled, "
        "`connect` equalities between sites.",
        "- *rel. diff*: max over states of max |a - a_system| / max |a_system| against "
        "loopdyn's dense KKT (`system`), same states, same run. MuJoCo's constraints are soft: "
        "*default* is its default impedance (solimp 0.9 0.95), *stiff* solimp 0.9999; their "
        "difference is MuJoCo's model, not an error of either.",
        "- *compile*: wall time of the first call (trace + XLA compile + one run).",
        "",
        "## Targets (issues 6 and 23)",
        "",
        "| target | met | by how much |",
        "|---|:---:|---|",
    ]
    for t in raw["targets"]:
        lines.append(f"| {t['target']} | {'met' if t['met'] else '**missed**'} | {t['margin']} |")
    lines += ["", "## 1. Per-state forward dynamics (per core)", ""]
    for r in raw["forward"]:
        lines += [
            f"### {r['mechanism']} (n = {r['n']}, m = {r['m']} constraint rows)",
            "",
            "| method | single µs | batched µs/state | compile single s | compile batched s "
            "| HLO ops | rel. diff |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for m in METHODS:
            x = r[m]
            lines.append(
                f"| loopdyn {m} | {us(x['single_s'])} | {us(x['batched_per_state_s'])} "
                f"| {x['compile_single_s']:.1f} | {x['compile_batched_s']:.1f} | {x['hlo_ops']} "
                f"| {x['vs_system']:.1e} |"
            )
        for a in PIN_ALGORITHMS:
            x = r[f"pin_{a}"]
            lines.append(
                f"| Pinocchio `{a}` | {us(x['per_call_s'])} | - | - | - | - "
                f"| {x['vs_system']:.1e} |"
            )
        x = r["cpp_constraintDynamics"]
        lines.append(
            f"| Pinocchio `constraintDynamics` C++ | - | {us(x['per_state_s'])} | - | - | - "
            f"| {x['vs_system']:.1e} |"
        )
        for label in MUJOCO_OPTIONS:
            x = r[f"mujoco_{label}"]
            lines.append(
                f"| MuJoCo `mj_forward` ({label}) | {us(x['per_call_s'])} | - | - | - | - "
                f"| {x['vs_system']:.1e} |"
            )
        pin_cd = r["pin_constraintDynamics"]["per_call_s"]
        cpp_cd = r["cpp_constraintDynamics"]["per_state_s"]
        lines += [
            "",
            "Ratios (Pinocchio `constraintDynamics` in C++ per state / loopdyn batched per state; "
            "> 1: loopdyn faster): "
            + ", ".join(f"{m} {cpp_cd / r[m]['batched_per_state_s']:.2f}" for m in METHODS)
            + ". MuJoCo: `mj_forward` over the same varied states, less the Python cost of "
            "setting each state ("
            + ", ".join(
                f"{label} {us(r[f'mujoco_{label}']['set_state_s'])} µs" for label in MUJOCO_OPTIONS
            )
            + ").",
            "",
            "Ratios (Pinocchio `constraintDynamics` per call / loopdyn batched per state; > 1: "
            "loopdyn faster): "
            + ", ".join(f"{m} {pin_cd / r[m]['batched_per_state_s']:.2f}" for m in METHODS)
            + ".",
            "",
            "Pieces (jit of vmap, µs/state; HLO ops before optimisation): "
            + ", ".join(
                f"`{k}` {us(v['batched_per_state_s'])} ({v['hlo_ops']} ops)"
                for k, v in r["pieces"].items()
            )
            + ".",
            "",
        ]
    pm = raw.get("per_machine")
    if pm:
        lines += [
            f"## Per machine ({pm['cores']} cores)",
            "",
            f"loopdyn SSLM: `jit(vmap)` over B = {raw['batch']} on one XLA device (unpinned) and "
            f"`loopdyn.batch` over {pm['loopdyn']['devices']} host devices "
            "(`jax.shard_map`: each device runs its share), both from host (numpy) states; "
            "*partitioned*: the same `jit(vmap)` on states sharded over the devices, the split "
            "left to XLA's automatic partitioner. "
            "Pinocchio has no parallel constrained dynamics (`abaInParallel` and `rneaInParallel` "
            "only): one process per core, each pinned, each doing its share of the batch through "
            "Python, timed from a common barrier to the slowest worker. *C++*: the compiled "
            "`constraintDynamics` in one process, one OpenMP thread pinned to each core, each "
            "with its own data and share of the batch, timed from a common barrier to the last "
            "thread done. *processes*: loopdyn the way Pinocchio runs here, one pinned process "
            "per core, each `jit(vmap)` over its share.",
            "",
            "| mechanism | loopdyn 1 device µs/state | loopdyn `batch` µs/state "
            "| compile `batch` s | loopdyn partitioned µs/state "
            "| pin constraintDynamics µs/state | pin lcaba µs/state | C++ cD µs/state "
            "| cD / `batch` | C++ cD / `batch` | loopdyn processes µs/state | C++ cD / processes |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for name in MECHANISMS:
            one, sharded, partitioned, cd, lcaba, processes = per_machine_times(pm, name)
            cpp = pm[name]["cpp_constraintDynamics"]["per_state_s"]
            compile_s = pm["loopdyn"].get(name, {}).get("sharded", {}).get("compile_s")
            lines.append(
                f"| {name} | {us(one)} | {us(sharded)} "
                f"| {f'{compile_s:.1f}' if compile_s else '-'} | {us(partitioned)} "
                f"| {us(cd)} | {us(lcaba)} | {us(cpp)} "
                f"| {f'{cd / sharded:.2f}' if sharded else '-'} "
                f"| {f'{cpp / sharded:.2f}' if sharded else '-'} | {us(processes)} "
                f"| {f'{cpp / processes:.2f}' if processes else '-'} |"
            )
        if pm["loopdyn"].get("error"):
            lines += ["", f"loopdyn over all cores: {pm['loopdyn']['error']}."]
        lines.append("")
    lines += [
        "## 2. Ladder of k four-bar loops (per core)",
        "",
        "n = 2k + 1 coordinates, m = 2k rows. Two layouts of the same mechanism: "
        + "; ".join(f"*{layout}*: {text}" for layout, text in LAYOUTS.items())
        + ". *single*: one jitted call (in this process); *batched*: `loopdyn.compilation.jit(vmap)` "
        "over B = "
        f"{raw['ladder_batch']} varied states, per state, in a subprocess stopped after "
        f"{raw['ladder_timeout_s']:.0f} s (a hang or an abort fails that row only; a method that "
        "failed is not tried at larger k); *C++ cD*: Pinocchio's `constraintDynamics` compiled, "
        "over the same states, per state; *pin*: per call from Python. Every loopdyn column is "
        "checked against the C++ accelerations (worst relative difference, *rel. diff vs C++*; "
        "Pinocchio's Python `lcaba` is left out of it: its proximal loop stops at ~1e-5 "
        "relative here, as in section 1). *kept*: how many of the B random guesses closed and "
        "are regular (the default method flags none singular: at a dead centre the "
        "accelerations need not be unique); the others are replaced by repeats of these. "
        + raw["ladder_note"],
    ]
    names = " / ".join(LADDER_NAMES[m] for m in LADDER_METHODS)
    for layout in LAYOUTS:
        rows = raw[ladder_key(layout)]
        exponents = raw["ladder_exponents" if layout == "ladder" else f"ladder_{layout}_exponents"]
        lines += [
            "",
            f"### Layout *{layout}*",
            "",
            f"Fitted growth exponents (log-log least squares over k ≥ {raw['ladder_k_min']}): "
            + ", ".join(f"{m} {e:.2f}" for m, e in exponents.items() if e is not None)
            + "; of the HLO op counts: "
            + ", ".join(
                f"{m} {e:.2f}"
                for m in LADDER_METHODS
                if (e := growth_exponent(rows, m, raw["ladder_k_min"], "hlo_ops")) is not None
            )
            + ".",
            "",
            f"| k | n | {' | '.join(f'{LADDER_NAMES[m]} µs' for m in LADDER_METHODS)} "
            f"| SLM / SSLM | batched {names} µs/state | C++ cD µs/state | C++ cD / best batched "
            f"| pin cD µs | pin lcaba µs | compile {names} s (single; batched) "
            f"| HLO ops {names} | rel. diff vs C++ | kept |",
            "|---:|---:|"
            + "---:|" * len(LADDER_METHODS)
            + "---:|---|---:|---:|---:|---:|---|---|---:|---:|",
        ]
        for r in rows:
            get = lambda m, f: r[m][f] if m in r else None
            batched = lambda m: r[m].get("batched", {}) if m in r else {}
            t = {m: get(m, "single_s") for m in LADDER_METHODS}
            b = {m: batched(m).get("per_state_s") for m in LADDER_METHODS}
            ratio = f"{t['slm'] / t['sslm']:.2f}" if t["slm"] and t["sslm"] else "-"
            cell = lambda m: us(b[m]) if b[m] else "failed" if "error" in batched(m) else "-"
            ops = " / ".join(str(get(m, "hlo_ops") or "-") for m in LADDER_METHODS)
            comp = " / ".join(
                (f"{get(m, 'compile_s'):.1f}" if m in r else "-")
                + (f" ({batched(m)['compile_s']:.1f})" if "compile_s" in batched(m) else "")
                for m in LADDER_METHODS
            )
            cpp = r["cpp_constraintDynamics"]["per_state_s"]
            best = min((v for v in b.values() if v), default=None)
            diffs = [get(m, "vs_cpp") for m in LADDER_METHODS if m in r]
            diffs += [batched(m)["vs_cpp"] for m in LADDER_METHODS if "vs_cpp" in batched(m)]
            diffs.append(r["pin_constraintDynamics"]["vs_cpp"])
            lines.append(
                f"| {r['k']} | {r['n']} | {' | '.join(us(t[m]) for m in LADDER_METHODS)} "
                f"| {ratio} | {' / '.join(cell(m) for m in LADDER_METHODS)} "
                f"| {us(cpp)} | {f'{cpp / best:.2f}' if best else '-'} "
                f"| {us(r['pin_constraintDynamics']['per_call_s'])} "
                f"| {us(r['pin_lcaba']['per_call_s'])} | {comp} | {ops} | {max(diffs):.1e} "
                f"| {r.get('kept', '-')} |"
            )
        failures = [
            f"k = {r['k']} {m}: {r[m]['batched']['error']}"
            for r in rows
            for m in LADDER_METHODS
            if m in r and "error" in r[m].get("batched", {})
        ]
        if failures:
            lines += ["", "Batched runs that gave no result: " + "; ".join(failures) + "."]
    s = raw["simulation"]
    si, ba = s["single"], s["batched"]
    lines += [
        "",
        f"## 3. Whole {s['t1']:g} s 3-RRR simulation (per core)",
        "",
        f"`loopdyn.simulate(mech, mech.q0, zeros, {s['t1']:g}, rtol={s['rtol']:g}, "
        f"atol={s['atol']:g})`: Tsit5, Baumgarte, SSLM, 201 saved states.",
        "",
        f"- Single: first call (trace + compile + run) {si['first_call_s']:.1f} s; after "
        f"compilation `simulate` {si['simulate_s'] * 1e3:.1f} ms per run (incl. its eager "
        f"argument and closure checks), the compiled solve alone "
        f"(`simulation._integrate`, the jitted function `simulate` calls) "
        f"{si['jit_s'] * 1e3:.1f} ms; {si['steps']} steps ({si['rejected']} "
        f"rejected), succeeded {si['succeeded']}, max |Phi| {si['max_loop_residual']:.1e}; "
        f"{si['jit_s'] / si['steps'] * 1e6:.1f} µs per step (6 new Tsit5 stages each: "
        f"{si['jit_s'] / si['steps'] / 6 * 1e6:.1f} µs per forward-dynamics evaluation)"
        + (f"; the lowered program has {si['hlo_ops']} HLO ops." if "hlo_ops" in si else "."),
        f"- Batched: `jax.jit(jax.vmap(simulate))` over {s['batch']} assembled initial states "
        f"near q0 (zero velocity): first call {ba['compile_s']:.1f} s (compilation "
        f"{ba['compile_s'] - ba['total_s']:.1f} s and one run), {ba['total_s']:.2f} s per "
        f"call = {ba['per_run_s'] * 1e3:.2f} ms per run; steps {ba['steps_min']} / "
        f"{ba['steps_median']:.0f} / {ba['steps_max']} (min / median / max; the batch steps "
        f"in lock-step until its slowest run ends), {ba['succeeded']} of {s['batch']} "
        "succeeded.",
        *cpp_simulation_lines(s),
        "",
        "## Analysis",
        "",
        *raw.get("analysis", []),
        "",
    ]
    return "\n".join(lines)


def cpp_simulation_lines(s):
    """The simulation section's comparison with Pinocchio + Boost.Odeint Dormand-Prince."""
    c, si = s.get("cpp"), s["single"]
    if not c:
        return []
    ours = c["loopdyn"]
    lines = [
        f"- Pinocchio `constraintDynamics` in C++ integrated by Boost.Odeint's Dormand-Prince "
        f"5(4) (`runge_kutta_dopri5`, controlled, dense output at the same 201 times), same "
        f"free motion, Baumgarte Kp = β² = {c['kp']:g}, Kd = 2α = {c['kd']:g} (loopdyn's "
        f"(α, β)), rtol = atol as listed, initial step 1e-3 s. Reference: the same at rtol = "
        f"atol = 1e-12 ({c['reference']['steps']} steps; its own error, against 1e-11: "
        f"{c['reference']['vs_1e-11']['error']:.1e} up to t = {c['horizon']:g} s, "
        f"{c['reference']['vs_1e-11']['final_error']:.1e} at t = {c['t1']:g} s). The free "
        "3-RRR is chaotic: a perturbation grows by orders of magnitude over 5 s, so the final "
        "state at rtol 1e-6 is decided by neither tool; errors are matched over the first "
        f"{c['horizon']:g} s (*error*: max state error at the saved times up to then) and the "
        "final-state error is listed beside.",
        "",
        "| run | rtol | steps | RHS evaluations | time ms | max ‖Φ‖ | max ‖J q̇‖ "
        f"| error (t ≤ {c['horizon']:g} s) | final-state error |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        f"| loopdyn `simulate` (Tsit5, SSLM) | {s['rtol']:g} | {si['steps']} | "
        f"≈ {6 * si['steps'] + 1} | {si['jit_s'] * 1e3:.2f} | {si['max_loop_residual']:.1e} "
        f"| {si.get('max_velocity_residual', float('nan')):.1e} | {ours['error']:.1e} "
        f"| {ours['final_error']:.1e} |",
    ]
    for r in c["sweep"]:
        lines.append(
            f"| C++ Pinocchio + dopri5 | {r['rtol']:g} | {r['steps']} | {r['evaluations']} "
            f"| {r['run_s'] * 1e3:.2f} | {r['max_loop_residual']:.1e} "
            f"| {r['max_velocity_residual']:.1e} | {r['error']:.1e} | {r['final_error']:.1e} |"
        )
    same = next((r for r in c["sweep"] if r["rtol"] == s["rtol"]), None)
    matched = ours["cpp_s_at_matched_error"]
    lines += [
        "",
        f"At equal tolerance (rtol {s['rtol']:g}): loopdyn's compiled solve "
        f"{si['jit_s'] * 1e3:.2f} ms, C++ "
        + (f"{same['run_s'] * 1e3:.2f} ms ({si['jit_s'] / same['run_s']:.1f}×)" if same else "-")
        + f". At matched error ({ours['error']:.1e} up to t = {c['horizon']:g} s): C++ "
        + (
            f"{matched * 1e3:.2f} ms (log-log interpolation in the sweep), loopdyn "
            f"{si['jit_s'] / matched:.1f}× that"
            if matched
            else "outside the sweep"
        )
        + ". loopdyn's time per step counts Tsit5's 6 stage evaluations and the controller.",
    ]
    return lines


def analysis(raw):
    """Where the time goes: the numbers of this run and what the code does (src/loopdyn)."""
    out = []
    for r in raw["forward"]:
        p = r["pieces"]
        total = p["sslm"]["batched_per_state_s"]
        parts = ", ".join(
            f"`{k}` {us(v['batched_per_state_s'])} µs ({v['batched_per_state_s'] / total:.0%})"
            for k, v in p.items()
            if k != "sslm"
        )
        pin = r["pin_constraintDynamics"]["per_call_s"]
        share = sum(v["batched_per_state_s"] for k, v in p.items() if k != "sslm") / total
        out.append(
            f"- {r['mechanism']}, per core: batched SSLM {us(total)} µs/state against Pinocchio "
            f"`constraintDynamics` {us(pin)} µs per call ({pin / total:.2f}×). Its pieces, "
            f"timed alone (jit of vmap), each with a tree pass of its own: {parts}; together "
            f"{share:.0%} of SSLM, which takes its tree terms (phi, the subsystem blocks I_j "
            "and the bodies' motion) from one pass each way, `tree.subsystem_stack_terms`, its "
            "loop terms from that motion, phi_hat_j from the factor of I_j it needs anyway, and "
            f"q̈ by seed 000 eq. 21. Single calls ({us(r['sslm']['single_s'])} "
            "µs) are JAX's dispatch of a jitted function of the mechanism's arrays and XLA's "
            "fixed cost of one program run, not the arithmetic (benchmarks/results/eager.md)."
        )
    pm = raw.get("per_machine")
    if pm:
        for name in MECHANISMS:
            one, sharded, partitioned, cd, _, _ = per_machine_times(pm, name)
            if one and sharded:
                out.append(
                    f"- {name}, per machine: `loopdyn.batch` over {pm['loopdyn']['devices']} "
                    f"devices {us(sharded)} µs/state, {one / sharded:.2f}× one unpinned device "
                    f"({us(one)}), {cd / sharded:.2f}× Pinocchio's `constraintDynamics` in "
                    f"{pm['cores']} pinned processes ({us(cd)}); the partitioned `jit(vmap)` "
                    f"{us(partitioned)} µs/state."
                )
    rows = [r for r in raw["ladder"] if "sslm" in r]
    if rows:
        last = rows[-1]
        both = [r for r in rows if "slm" in r]
        ratio = both[-1]["slm"]["single_s"] / both[-1]["sslm"]["single_s"] if both else None
        out.append(
            f"- Ladder: the SSLM program grows from {rows[0]['sslm']['hlo_ops']} to "
            f"{last['sslm']['hlo_ops']} HLO ops (k = {rows[0]['k']} to {last['k']}): equal "
            "subsystem and GICM blocks are stacked and factorised together, and the chain of "
            "loops is a scan, so the program hardly grows with k (SSLM compile "
            f"{last['sslm']['compile_s']:.1f} s at k = {last['k']}). SLM factorises the dense "
            f"n × n mass matrix (n = {both[-1]['n']} at k = {both[-1]['k']}) where SSLM "
            "factorises small blocks: see the SLM / SSLM target above for the batched ratio; "
            "single jitted calls, "
            + (f"{ratio:.2f}" if ratio else "-")
            + ", are mostly per-call overhead."
        )
    s = raw["simulation"]["single"]
    out.append(
        f"- Simulation: {s['steps']} steps, each 6 new Tsit5 stage evaluations plus the "
        "controller, inside one compiled while loop on one state: "
        f"{s['jit_s'] / s['steps'] * 1e6:.1f} µs per step. With loop kernels on, XLA "
        "compiles the whole solve into one kernel, so the step costs its arithmetic and memory "
        "traffic, not kernel launches. Compile time is XLA compiling that one kernel: the "
        "vector field inside diffrax's step (one copy) and the saved-state measurements."
    )
    return out


def checkpoint(out, raw):
    """The raw numbers so far, beside the results (``.partial.json``): a run that stops loses
    nothing measured (the final JSON replaces it)."""
    write_atomic(out.with_suffix(".partial.json"), json.dumps(raw, indent=1, default=str))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes and few repeats")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/closed_loop.md")
    parser.add_argument("--batch", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--k-max", type=int, default=64, help="largest ladder k (default 64)")
    parser.add_argument(
        "--ladder-batch", type=int, default=None, help="ladder jit(vmap) batch (default 4096)"
    )
    parser.add_argument(
        "--ladder-timeout",
        type=float,
        default=300.0,
        help="time limit of each ladder jit(vmap) subprocess, s (a hang or abort fails the row)",
    )
    parser.add_argument("--ladder-worker", nargs=4, help=argparse.SUPPRESS)
    parser.add_argument(
        "--ladder-all-methods",
        action="store_true",
        help="also system and SLM at k = 64 (each compiles for minutes)",
    )
    parser.add_argument("--sharded-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--ladder-row", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--given-up", default="{}", help=argparse.SUPPRESS)
    parser.add_argument(
        "--from-json",
        type=Path,
        help="only derive the targets and analysis again from a run's raw JSON, and write both "
        "files",
    )
    args = parser.parse_args()
    if args.from_json:
        raw = json.loads(args.from_json.read_text())
        raw["targets"], raw["analysis"] = targets(raw) + peer_targets(raw), analysis(raw)
        write_atomic(args.out.with_suffix(".json"), json.dumps(raw, indent=1, default=str))
        write_atomic(args.out, markdown(raw))
        return
    batch = args.batch or (256 if args.quick else 4096)
    repeats = args.repeats or (3 if args.quick else 7)
    if args.sharded_worker:
        sharded_worker(batch, repeats)
        return
    if args.ladder_row:
        layout, k, methods = args.ladder_row
        PEER[:] = pinocchio_cpp.build()
        given_up = json.loads(args.given_up)
        row = bench_ladder(
            layout,
            int(k),
            methods.split(","),
            repeats,
            args.ladder_batch,
            args.ladder_timeout,
            given_up,
        )
        print(json.dumps(row, default=str))
        return
    if args.ladder_worker:
        layout, k, method, path = args.ladder_worker
        ladder_worker(layout, int(k), method, Path(path), repeats)
        return
    start = time.perf_counter()
    PEER[:] = pinocchio_cpp.build()
    info = machine()
    raw = {"machine": info, "batch": batch, "repeats": repeats, "quick": args.quick}
    raw["cpp"] = {
        "compile_s": PEER[1],
        "flags": " ".join(pinocchio_cpp.FLAGS),
        "proximal": [pinocchio_cpp.ACCURACY, pinocchio_cpp.MU, pinocchio_cpp.MAX_ITER],
    }
    raw["forward"] = [bench_mechanism(name, batch, repeats) for name in MECHANISMS]
    checkpoint(args.out, raw)
    raw["per_machine"] = per_machine(batch, repeats)
    print("per machine:", json.dumps(raw["per_machine"]), flush=True)
    k_max = 8 if args.quick else args.k_max
    ks = [k for k in (1, 2, 4, 8, 16, 32, 64) if k <= k_max]
    k_cap = 64 if args.ladder_all_methods else 32
    raw["ladder_batch"] = args.ladder_batch or (64 if args.quick else 4096)
    raw["ladder_timeout_s"] = args.ladder_timeout
    for layout in LAYOUTS:
        given_up = {}
        linear = recursive.supported(ladder_problem(layout, 2)[0])
        rows = []
        for k in ks:
            methods = [
                m
                for m in LADDER_METHODS
                if (k <= k_cap or m in ("sslm", "recursive")) and (linear or m != "recursive")
            ]
            rows.append(
                ladder_row(
                    layout, k, methods, repeats, raw["ladder_batch"], args.ladder_timeout, given_up
                )
            )
        raw[ladder_key(layout)] = [r for r in rows if "error" not in r]
        raw.setdefault("ladder_failures", []).extend(
            e for r in rows for e in ([r["error"]] if "error" in r else r.get("errors", []))
        )
        checkpoint(args.out, raw)
    raw["ladder_note"] = (
        "System and SLM stop at k = 32 (`--ladder-all-methods` runs them at k = 64: each "
        "compiles for minutes today)."
        if k_max > 32 and not args.ladder_all_methods
        else ""
    ) + "".join(f" Failed, left out: {e}." for e in raw["ladder_failures"])
    raw["ladder_k_min"] = 2 if args.quick else 8
    raw["ladder_exponents"] = ladder_exponents(raw["ladder"], raw["ladder_k_min"])
    raw["ladder_chain_exponents"] = ladder_exponents(raw["ladder_chain"], raw["ladder_k_min"])
    raw["simulation"] = bench_simulation(64 if args.quick else 1024, repeats)
    info["load_average_end"] = os.getloadavg()
    raw["total_s"] = time.perf_counter() - start
    write_atomic(args.out.with_suffix(".json"), json.dumps(raw, indent=1, default=str))
    raw["targets"] = targets(raw) + peer_targets(raw)
    raw["analysis"] = analysis(raw)
    write_atomic(args.out.with_suffix(".json"), json.dumps(raw, indent=1, default=str))
    write_atomic(args.out, markdown(raw))
    args.out.with_suffix(".partial.json").unlink(missing_ok=True)
    print(f"wrote {args.out} ({raw['total_s'] / 60:.1f} min)")


if __name__ == "__main__":
    main()
