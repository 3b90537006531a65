"""Pinocchio in compiled code, the peer at its best: builds `benchmarks/cpp/pinocchio_peer.cpp`
with the system g++ against the headers the `pin` wheel ships (Pinocchio, Boost; Eigen from the
`cmeel-eigen` wheel or the system), header-only, ``-O3 -march=native -DNDEBUG -fopenmp``, into
the ignored `benchmarks/build/`, and drives it: ``constraintDynamics`` over a batch of states
per core (one thread) and per machine (one OpenMP thread per core), and a Boost.Odeint
Dormand-Prince 5(4) free motion with Baumgarte gains.

    .venv/bin/python benchmarks/pinocchio_cpp.py [--batch B] [--repeats R]

checks that the C++ accelerations equal the Python binding's and loopdyn's on the four-bar and
the 3-RRR (`check`, asserted), then prints the timings and the 5 s 3-RRR trajectories (loopdyn's
`simulate` beside the C++ Dormand-Prince at a sweep of tolerances, all against a tight C++
reference) as JSON. `closed_loop.py` uses the same functions.
"""

import hashlib
import itertools
import json
import os
import shutil
import site
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "benchmarks" / "build"
SOURCE = ROOT / "benchmarks" / "cpp" / "pinocchio_peer.cpp"
FLAGS = ("-std=c++17", "-O3", "-march=native", "-DNDEBUG", "-fopenmp")
# The tests' build of the same source, not timed: unoptimised, and Pinocchio's algorithms
# (constraintDynamics, the kinematics: double, default joints) from the instantiations in its
# library instead of its headers, 49 instead of 93 s to build on the 2-core machine. Without
# -march=native, as the library was built: AVX-512 changes Eigen's alignment of the structures
# they share (the program crashed).
PRECOMPILED = "-DPINOCCHIO_ENABLE_TEMPLATE_INSTANTIATION"
TEST_FLAGS = ("-std=c++17", "-O0", "-DNDEBUG", "-fopenmp", PRECOMPILED)
# g++'s garbage collector collects less often for the tests' build: 45 -> 40 s, peak memory
# 2.5 -> 3.1 GB (2026-11-27, this 2-core machine). GCC only, so added where g++ builds.
GCC_FEWER_COLLECTIONS = ("--param", "ggc-min-expand=1000", "--param", "ggc-min-heapsize=4194304")
# what the wheel's CMake target `pinocchio::pinocchio_headers` asks of its users
DEFINES = (
    "-DBOOST_MPL_LIMIT_LIST_SIZE=30",
    "-DBOOST_MPL_LIMIT_VECTOR_SIZE=30",
    "-DBOOST_MPL_CFG_NO_PREPROCESSED_HEADERS",
    "-DBOOST_FUSION_INVOKE_MAX_ARITY=12",
)
# Pinocchio's proximal settings, as for the Python calls of closed_loop.py (mu > 0: a planar
# loop's point constraint has a redundant z row)
ACCURACY, MU, MAX_ITER = 1e-12, 1e-10, 100
# loopdyn's default Baumgarte gains (alpha, beta) = (10, 10): Phi'' + 2 alpha Phi' + beta^2 Phi
# = 0 (forward._psi); Pinocchio's corrector asks a_c = -Kp e - Kd e': Kp = beta^2, Kd = 2 alpha
BAUMGARTE = (10.0, 10.0)
KP, KD = BAUMGARTE[1] ** 2, 2.0 * BAUMGARTE[0]

_JOINTS = {f"JointModel{k}": k for k in ("RX", "RY", "RZ", "PX", "PY", "PZ")}
_JOINTS |= {"JointModelRevoluteUnaligned": "RU", "JointModelPrismaticUnaligned": "PU"}
_JOINTS |= {"JointModelFreeFlyer": "FF", "JointModelSpherical": "SPH"}


# ---------------------------------------------------------------------------------- building


def compiler():
    """The C++ compiler (``$CXX`` or g++), or None."""
    return shutil.which(os.environ.get("CXX", "g++"))


def cmeel_prefix():
    """The `cmeel.prefix` folder of the installed `pin` wheel (include/ with Pinocchio, Boost)."""
    for folder in [*site.getsitepackages(), site.getusersitepackages(), *sys.path]:
        prefix = Path(folder) / "cmeel.prefix"
        if (prefix / "include" / "pinocchio").is_dir():
            return prefix
    raise FileNotFoundError("no cmeel.prefix with Pinocchio's headers: is the `pin` wheel there?")


def eigen_include(prefix):
    """Eigen's headers: ``$EIGEN_INCLUDE_DIR``, the wheels' prefix (`cmeel-eigen` installed),
    the system's, or else the `cmeel-eigen` wheel fetched by ``pip download`` and unpacked into
    benchmarks/build/ (the `pin` wheel ships Eigen's users but not Eigen)."""
    unpacked = BUILD / "eigen" / "cmeel.prefix" / "include" / "eigen3"
    candidates = [os.environ.get("EIGEN_INCLUDE_DIR"), prefix / "include" / "eigen3"]
    candidates += ["/usr/include/eigen3", "/usr/local/include/eigen3", unpacked]
    for c in candidates:
        if c and (Path(c) / "Eigen" / "Core").is_file():
            return Path(c)
    wheels = BUILD / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(wheels)]
        + ["cmeel-eigen==3.4.1"],
        check=True,
    )
    with zipfile.ZipFile(next(wheels.glob("cmeel_eigen-*.whl"))) as z:
        for name in z.namelist():
            if name.startswith("cmeel.prefix/include/eigen3/"):
                z.extract(name, BUILD / "eigen")
    return unpacked


def build(verbose=False, flags=FLAGS):
    """``(path, compile_s)`` of the peer program, built when its source, flags or compiler
    changed (``compile_s`` None when the build was already there). The benchmarks time the
    ``FLAGS`` build; the tests check `TEST_FLAGS`'s, which g++ builds in a fraction of the time."""
    cxx = compiler()
    if cxx is None:
        raise FileNotFoundError("no C++ compiler (g++ or $CXX)")
    prefix = cmeel_prefix()
    command = [cxx, *flags, *DEFINES, f"-I{prefix / 'include'}", f"-I{eigen_include(prefix)}"]
    version = subprocess.run([cxx, "--version"], check=True, capture_output=True, text=True).stdout
    if flags == TEST_FLAGS and "Free Software Foundation" in version:
        command[1:1] = GCC_FEWER_COLLECTIONS
    key = hashlib.sha256("\n".join([SOURCE.read_text(), version, *command]).encode())
    binary = BUILD / f"pinocchio_peer-{key.hexdigest()[:12]}"
    if binary.exists():
        return binary, None
    BUILD.mkdir(parents=True, exist_ok=True)
    partial = binary.with_suffix(".part")
    command += [str(SOURCE), "-o", str(partial)]
    if PRECOMPILED in flags:
        lib = prefix / "lib"
        command += [f"-L{lib}", "-lpinocchio_default", f"-Wl,-rpath,{lib}"]
    if verbose:
        print(" ".join(command), flush=True)
    start = time.perf_counter()
    done = subprocess.run(command, check=False, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"building the C++ peer failed:\n{done.stderr[-4000:]}")
    compile_s = time.perf_counter() - start
    partial.rename(binary)
    return binary, compile_s


# ------------------------------------------------------------------------------ model files


def _placement(m):
    return [*np.asarray(m.rotation).ravel(), *np.asarray(m.translation).ravel()]


def write_problem(path, model, constraints):
    """The Pinocchio model (joints, placements, inertias) and its point constraints as the text
    `pinocchio_peer.cpp` reads; it rebuilds the same model with Pinocchio's own calls."""
    lines = [f"gravity {' '.join(repr(float(v)) for v in model.gravity.linear)}"]
    for j in range(1, model.njoints):
        joint = model.joints[j]
        kind = _JOINTS.get(joint.shortname())
        if kind is None:
            raise ValueError(f"joint {j}: {joint.shortname()} is not supported by the C++ peer")
        axis = list(joint.extract().axis) if kind in ("RU", "PU") else []
        inertia = model.inertias[j]
        values = [*axis, *_placement(model.jointPlacements[j]), inertia.mass]
        values += [*np.asarray(inertia.lever), *np.asarray(inertia.inertia).ravel()]
        lines.append(f"joint {model.parents[j]} {kind} " + " ".join(repr(float(v)) for v in values))
    if np.any(np.asarray(model.armature) != 0):
        lines.append("armature " + " ".join(repr(float(v)) for v in model.armature))
    for c in constraints:
        kind = {"CONTACT_3D": "3D", "CONTACT_6D": "6D"}[str(c.type).split(".")[-1]]
        if str(c.reference_frame).split(".")[-1] != "LOCAL":
            raise ValueError(f"constraint {c.name!r}: only LOCAL constraints are written")
        first = " ".join(repr(float(v)) for v in _placement(c.joint1_placement))
        second = " ".join(repr(float(v)) for v in _placement(c.joint2_placement))
        lines.append(f"constraint {kind} {c.joint1_id} {first} {c.joint2_id} {second}")
    Path(path).write_text("\n".join(lines) + "\n")


def _write_states(path, *arrays):
    arrays = [np.ascontiguousarray(a, dtype=np.float64) for a in arrays]
    with open(path, "wb") as f:
        f.write(np.array(arrays[0].shape, dtype=np.int64).tobytes())
        f.writelines(a.tobytes() for a in arrays)


class Peer:
    """The C++ program on one Pinocchio problem ``(pin, model, constraints)``."""

    def __init__(self, problem, binary=None):
        self.binary = binary or build()[0]
        self.model = problem[1]
        self.folder = Path(tempfile.mkdtemp(prefix="peer-", dir=BUILD))
        self.model_file = self.folder / "model.txt"
        write_problem(self.model_file, problem[1], problem[2])

    def _run(self, arguments, cpus=None):
        env = dict(os.environ, PEER_CPUS=",".join(map(str, cpus or ())))
        done = subprocess.run(
            [str(self.binary), *map(str, arguments)],
            check=False,
            capture_output=True,
            text=True,
            env=env,
        )
        if done.returncode:
            raise RuntimeError(f"pinocchio_peer {arguments[0]}: {done.stderr.strip()}")
        return json.loads(done.stdout.strip().splitlines()[-1])

    def constraint_dynamics(self, q, qd, tau, repeats=7, threads=1, cpus=None, settings=None):
        """``(result, qdd)``: ``constraintDynamics`` over the B states, ``repeats`` passes over
        the batch on ``threads`` threads (pinned to ``cpus`` when given); ``per_state_s`` is
        the median pass time / B. ``settings``: ``(accuracy, mu, max_iter)``, default the
        module's."""
        states, out = self.folder / "states.bin", self.folder / "qdd.bin"
        q = np.asarray(q)
        _write_states(states, q, qd, tau)
        settings = settings or (ACCURACY, MU, MAX_ITER)
        arguments = ["bench", self.model_file, states, out, repeats, threads, *settings]
        result = self._run(arguments, cpus)
        return result, np.fromfile(out).reshape(q.shape[0], self.model.nv)

    def simulate(self, q0, qd0, t1, rtol, atol, saves=201, repeats=3, dt0=1e-3, cpus=None):
        """``(result, trajectory)``: free motion from ``(q0, qd0)`` with Dormand-Prince and
        loopdyn's Baumgarte gains; ``trajectory`` is ``saves`` x 2n (q then qd)."""
        x0, out = self.folder / "x0.bin", self.folder / "trajectory.bin"
        x = np.concatenate([np.asarray(q0), np.asarray(qd0)])
        with open(x0, "wb") as f:
            f.write(np.array([x.size], dtype=np.int64).tobytes() + x.astype(np.float64).tobytes())
        arguments = ["simulate", self.model_file, x0, t1, rtol, atol, KP, KD, dt0, saves]
        result = self._run([*arguments, repeats, ACCURACY, MU, MAX_ITER, out], cpus)
        return result, np.fromfile(out).reshape(saves, x.size)

    def close(self):
        shutil.rmtree(self.folder, ignore_errors=True)


# ------------------------------------------------------------------------------ correctness


def relative(a, b):
    """max over rows of max |a - b| / max |b|."""
    a, b = np.atleast_2d(a), np.atleast_2d(b)
    return float(np.max(np.max(np.abs(a - b), axis=1) / np.max(np.abs(b), axis=1)))


def loopdyn_qdd(mech, q, qd, tau, method="sslm"):
    """loopdyn's `forward_dynamics` accelerations at the states (jit of vmap)."""
    import jax

    import loopdyn

    call = jax.jit(jax.vmap(lambda *x: loopdyn.forward_dynamics(mech, *x, method=method)[0]))
    return np.asarray(call(q, qd, tau))


def python_qdd(problem, q, qd, tau, iterations=MAX_ITER):
    """The Python binding's ``constraintDynamics`` at the states (same settings; ``iterations``
    of the proximal solver)."""
    pin, model, constraints = problem
    data = model.createData()
    datas = pin.StdVec_RigidConstraintData([c.createData() for c in constraints])
    pin.initConstraintDynamics(model, data, constraints, datas)
    settings = pin.ProximalSettings(ACCURACY, MU, iterations)
    return np.array(
        [
            pin.constraintDynamics(model, data, *x, constraints, datas, settings).copy()
            for x in zip(*(np.asarray(a) for a in (q, qd, tau)), strict=True)
        ]
    )


def check(peer, problem, mech, q, qd, tau, tolerance=1e-11, ours=None):
    """Relative differences of the C++ accelerations against the Python binding's and loopdyn's
    (``ours``, computed when not given), asserted below ``tolerance``."""
    _, cpp = peer.constraint_dynamics(q, qd, tau, repeats=1)
    python = python_qdd(problem, q, qd, tau)
    ours = loopdyn_qdd(mech, q, qd, tau) if ours is None else ours
    out = {
        "cpp_vs_python": relative(cpp, python),
        "cpp_vs_loopdyn": relative(cpp, ours),
        "python_vs_loopdyn": relative(python, ours),
        "states": int(np.asarray(q).shape[0]),
    }
    bad = {k: v for k, v in out.items() if k != "states" and not v <= tolerance}
    assert not bad, f"C++ peer disagrees (tolerance {tolerance:g}): {bad}"
    return out


# ---------------------------------------------------------------------------- trajectories


def state_error(a, b):
    """max |a - b| over the components (and rows) of states ``[q, qd]``."""
    return float(np.max(np.abs(np.asarray(a) - np.asarray(b))))


def matched_time(points, error):
    """The C++ wall time at ``error`` by log-log interpolation between the sweep's points
    ``(error, seconds)`` that bracket it (None outside the sweep)."""
    points = sorted(points)
    for (e0, t0), (e1, t1) in itertools.pairwise(points):
        if 0 < e0 <= error <= e1:
            w = (np.log(error) - np.log(e0)) / (np.log(e1) - np.log(e0))
            return float(np.exp(np.log(t0) + w * (np.log(t1) - np.log(t0))))
    return None


def trajectories(
    peer,
    mech,
    t1=5.0,
    tol=1e-6,
    sweep=(1e-4, 1e-5, 1e-6, 1e-7, 1e-8, 1e-9, 1e-10),
    horizon=1.0,
    saves=201,
    repeats=5,
    ours=None,
):
    """The C++ Dormand-Prince free motion of ``mech`` from ``q0`` (at rest) at rtol = atol =
    each of ``sweep``, and at 1e-12 (the reference; its own error estimated against 1e-11), with
    each run's error against the reference: ``error``, the largest state error at the saved
    times up to ``horizon`` seconds, and ``final_error`` at ``t1``. The 3-RRR's free motion is
    chaotic (a perturbation grows ~1e8-fold over 5 s), so the final state at rtol 1e-6 is not
    determined by either tool and errors are matched over the first ``horizon`` seconds.
    ``ours``: loopdyn's `Simulation` of the same motion at ``tol`` (same ``saves``); its errors
    against the same reference, and the C++ time interpolated at its error."""
    q0, qd0 = np.asarray(mech.q0), np.zeros(mech.num_bodies)
    early = np.linspace(0.0, t1, saves) <= horizon + 1e-12
    reference, ref = peer.simulate(q0, qd0, t1, 1e-12, 1e-12, saves, repeats=1)
    _, looser = peer.simulate(q0, qd0, t1, 1e-11, 1e-11, saves, repeats=1)

    def errors(trajectory):
        return {
            "error": state_error(trajectory[early], ref[early]),
            "final_error": state_error(trajectory[-1], ref[-1]),
        }

    out = {
        "t1": t1,
        "horizon": horizon,
        "kp": KP,
        "kd": KD,
        "reference": reference | {"rtol": 1e-12, "vs_1e-11": errors(looser)},
        "sweep": [],
    }
    for rtol in sorted(set(sweep) | {tol}, reverse=True):
        run, trajectory = peer.simulate(q0, qd0, t1, rtol, rtol, saves, repeats=repeats)
        out["sweep"].append(run | {"rtol": rtol} | errors(trajectory))
    if ours is not None:
        trajectory = np.concatenate([np.asarray(ours.q), np.asarray(ours.qd)], axis=1)
        out["loopdyn"] = {"rtol": tol} | errors(trajectory)
        out["loopdyn"]["cpp_s_at_matched_error"] = matched_time(
            [(r["error"], r["run_s"]) for r in out["sweep"]], out["loopdyn"]["error"]
        )
    return out


def main():
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    import jax

    jax.config.update("jax_enable_x64", True)
    import loopdyn
    from loopdyn import mechanisms

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import _peers

    binary, compile_s = build(verbose=True)
    report = {"load_average_start": os.getloadavg(), "compile_s": compile_s, "forward": {}}
    cpus = sorted(os.sched_getaffinity(0))
    for name in ("four_bar", "three_rrr"):
        mech = getattr(mechanisms, name)()
        problem = _peers.pinocchio_problem(mech, aligned=True)
        peer = Peer(problem, binary)
        q, qd, tau, _ = (np.asarray(x) for x in _peers.random_states(mech, args.batch, seed=1))
        row = {"check": check(peer, problem, mech, q[:512], qd[:512], tau[:512])}
        row["per_core"] = peer.constraint_dynamics(q, qd, tau, args.repeats, 1, cpus[:1])[0]
        row["per_machine"] = peer.constraint_dynamics(q, qd, tau, args.repeats, len(cpus), cpus)[0]
        report["forward"][name] = row
        print(name, json.dumps(row), flush=True)
        if name == "three_rrr":
            zeros = np.zeros(mech.num_bodies)
            sim = loopdyn.simulate(mech, mech.q0, zeros, 5.0, rtol=1e-6, atol=1e-6)
            report["trajectories"] = trajectories(peer, mech, ours=sim)
            print(json.dumps(report["trajectories"], indent=1), flush=True)
        peer.close()
    report["load_average_end"] = os.getloadavg()
    print(
        json.dumps({k: report[k] for k in ("compile_s", "load_average_start", "load_average_end")})
    )


if __name__ == "__main__":
    main()
