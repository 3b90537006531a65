"""Monte Carlo studies (`loopdyn.montecarlo`, ``loopdyn montecarlo``) on the four-bar: 16 runs of
0.2 s in chunks of 2, 5 % mass and 1 mm placement tolerances.

One uninterrupted single-process run is the reference. Against it: a run of any sample alone
(`simulate` of the sampled mechanism), the same study sharded over two forced host devices, two
processes under `jax.distributed`, a run killed by SIGKILL midway and resumed, and a study with
injected failures. The command-line runs start at once in the background (the machine has two
cores; each compiles its own program) and are checked when their tests come.
"""

import dataclasses
import os
import signal
import socket
import subprocess
import sys
import threading

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import zarr

from loopdyn import cli, kinematics, mechanisms, montecarlo, parameters, simulation

MECH = mechanisms.four_bar()
N, CHUNK, T1, SAVES = 16, 2, 0.2, 5
SAMPLER = montecarlo.tolerances(MECH, mass=0.05, length=0.001)
OPTIONS = montecarlo.Options(t1=T1, saves=SAVES, method="system")
ARGS = [
    "four_bar",
    *("--n", str(N), "--chunk", str(CHUNK), "--t", str(T1), "--saves", str(SAVES)),
    *("--method", "system", "--mass-tol", "0.05", "--length-tol", "0.001", "--quiet"),
]
#: The four-bar stretched straight: ground = crank + coupler + rocker, all links on one line at
#: crank angle 0, so J over the coordinates not held has rank 1 < 2 (a dead centre).
DEAD = mechanisms.four_bar(0.0, ground=0.038 + 2 * 0.1152)
SHORT, DEAD_INDEX = 5, 10


@dataclasses.dataclass(frozen=True)
class Injected:
    """The study's sampler, except run ``SHORT`` (a coupler of 2 cm: the loop cannot close) and
    run ``DEAD_INDEX`` (the `DEAD` geometry)."""

    base: montecarlo.Tolerances

    def __call__(self, mech, key, index):
        sample = self.base(mech, key, index)
        short = sample.mech.cut_position_a.at[0, 0].set(0.02)
        geometry = eqx.tree_at(lambda m: m.cut_position_a, sample.mech, short)

        def pick(flag, a, b):
            return jax.tree.map(lambda x, y: jnp.where(flag, x, y), a, b)

        geometry = pick(index == SHORT, geometry, sample.mech)
        geometry = pick(index == DEAD_INDEX, DEAD, geometry)
        q0 = jnp.where(index == DEAD_INDEX, DEAD.q0, sample.q0)
        return sample._replace(mech=geometry, q0=q0)


def _cli(out, *extra):
    return [sys.executable, "-m", "loopdyn.cli", "montecarlo", *ARGS, "--out", str(out), *extra]


def _free_port():
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _start(command):
    return subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=os.getcwd()
    )


def _kill_after_first_chunk(process, log):
    """Read the run's lines; SIGKILL it as soon as it reports its first computed chunk."""
    for line in process.stdout:
        log.append(line)
        if line.startswith("chunk "):
            process.send_signal(signal.SIGKILL)
            break
    log.append(process.stdout.read())


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    """The command-line runs, started in the background before the reference is computed."""
    tmp = tmp_path_factory.mktemp("launched")
    port = _free_port()
    runs = {
        "sharded": _start(_cli(tmp / "sharded.zarr", "--host-devices", "2")),
        "killed": _start(_cli(tmp / "killed.zarr", "--verbose")),
        **{
            f"process{k}": _start(
                _cli(
                    tmp / "distributed.zarr",
                    *("--coordinator", f"localhost:{port}", "--num-processes", "2"),
                    *("--process-id", str(k), "--verbose", "--plot", str(tmp / "hist.png")),
                    *("--host-devices", "2"),  # each process's chunks split over its 2 devices
                )
            )
            for k in range(2)
        },
    }
    killer_log = []
    killer = threading.Thread(target=_kill_after_first_chunk, args=(runs["killed"], killer_log))
    killer.start()
    yield tmp, runs, killer, killer_log
    for process in runs.values():
        if process.poll() is None:
            process.kill()
    killer.join()


def _finished(process, timeout=600):
    out, _ = process.communicate(timeout=timeout)
    assert process.returncode == 0, out[-3000:]
    return out


@pytest.fixture(scope="module")
def reference(launched, tmp_path_factory):
    out = tmp_path_factory.mktemp("reference") / "reference.zarr"
    stats = montecarlo.run(MECH, SAMPLER, N, out, options=OPTIONS, chunk=CHUNK, progress=False)
    return out, stats


def _arrays(path):
    group = zarr.open_group(str(path), mode="r")
    names = ["index", "code", "params", "done"]
    names += [f"summary/{k}" for k in group["summary"].array_keys()]
    return {name: np.asarray(group[name][:]) for name in names}


def _assert_same(path, expected):
    """Equal to rounding: another compiled program (e.g. a batch of one per device) may round
    differently; ``energy_drift`` (a difference of energies near 1 J) shows it most, ~1e-14 J."""
    got = _arrays(path)
    assert sorted(got) == sorted(expected)
    for name, value in expected.items():
        np.testing.assert_allclose(got[name], value, rtol=1e-12, atol=1e-13, err_msg=name)


def test_reference_runs_and_statistics(reference):
    out, stats = reference
    data = _arrays(out)
    assert np.all(data["done"] == 1) and np.all(data["code"] == 0)
    np.testing.assert_array_equal(data["index"], np.arange(N))
    # Sampled parameters: masses within 5 %, placements within 1 mm of the nominal values.
    nominal = np.array(parameters.to_vector(MECH, SAMPLER.selection))
    is_mass = np.array([label.endswith(".mass") for label in SAMPLER.labels])
    nominal[is_mass] = np.exp(nominal[is_mass])
    deviation = data["params"] - nominal
    relative = deviation[:, is_mass] / nominal[is_mass]
    assert np.all(np.abs(relative) <= 0.05) and np.max(np.abs(relative)) > 0.04
    assert np.all(np.abs(deviation[:, ~is_mass]) <= 0.001 + 1e-15)
    assert np.max(np.abs(deviation[:, ~is_mass])) > 0.0009
    assert len(set(map(tuple, data["params"]))) == N  # every run its own sample
    # Statistics: successful runs, from the store's own columns.
    assert stats["codes"]["success"] == N and stats["done"] == N
    q1 = data["summary/q_final"][:, 1]
    column = stats["columns"]["q_final[B]"]
    assert column["mean"] == pytest.approx(np.mean(q1), rel=1e-14)
    assert column["std"] == pytest.approx(np.std(q1, ddof=1), rel=1e-12)
    assert column["q50"] == pytest.approx(np.median(q1), rel=1e-14)
    group = zarr.open_group(str(out), mode="r")
    assert group.attrs["statistics"] == stats
    units = stats["units"]  # every default summary column has its unit
    assert set(units) == set(stats["columns"])
    assert units["q_final[B]"] == "rad" and units["qd_final[B]"] == "rad/s"
    assert (units["energy_drift"], units["max_closure"]) == ("J", "m")
    figure = montecarlo.histograms(out, ["energy_drift", "q_final[B]"])
    assert [ax.get_xlabel() for ax in figure.axes] == ["energy_drift [J]", "q_final[B] [rad]"]


def test_default_chunks_show_progress_in_steps_and_keep_devices_busy():
    assert montecarlo.default_chunk(1000) == 50  # 20 chunks
    assert montecarlo.default_chunk(100) == 16  # at least 16 runs per device
    assert montecarlo.default_chunk(100, devices=4) == 64
    assert montecarlo.default_chunk(10) == 10
    assert montecarlo.default_chunk(10**6) == 1000


def test_a_run_equals_simulate_of_its_sample(reference):
    """Run 7 recomputed alone: sample with its key, close the loops, `simulate` the sampled
    mechanism (one state, no batch) and compare with the store."""
    out, _ = reference
    index = 7
    key = jax.random.fold_in(jax.random.key(0), index)
    sample = SAMPLER(MECH, key, index)
    q0 = kinematics.assemble(sample.mech, sample.q0, fixed=MECH.actuated, tol=1e-10)
    sim = simulation.simulate(
        sample.mech,
        q0,
        jnp.zeros(3),
        T1,
        saveat=jnp.linspace(0, T1, SAVES),
        rtol=1e-6,
        atol=1e-6,
        method="system",
    )
    group = zarr.open_group(str(out), mode="r")
    np.testing.assert_allclose(group["summary/q_final"][index], sim.q[-1], rtol=1e-9)
    np.testing.assert_allclose(group["summary/qd_final"][index], sim.qd[-1], rtol=1e-9)
    assert group["summary/steps"][index] == int(sim.stats.accepted_steps)
    # Any subset, recomputed in one batch, gives the stored rows.
    subset = montecarlo.compute(MECH, SAMPLER, [13, 2], OPTIONS)
    np.testing.assert_array_equal(subset.summary["q_final"], group["summary/q_final"][[13, 2]])
    np.testing.assert_array_equal(subset.params, group["params"][[13, 2]])


def test_injected_failures_are_counted_and_harm_no_other_run(reference, tmp_path):
    out, _ = reference
    expected = _arrays(out)
    stats = montecarlo.run(
        MECH,
        Injected(SAMPLER),
        N,
        tmp_path / "failing.zarr",
        options=OPTIONS,
        chunk=CHUNK,
        progress=False,
    )
    data = _arrays(tmp_path / "failing.zarr")
    codes = np.zeros(N, np.int8)
    codes[SHORT], codes[DEAD_INDEX] = montecarlo.UNASSEMBLED, montecarlo.SINGULAR
    np.testing.assert_array_equal(data["code"], codes)
    assert stats["codes"] == {
        "success": N - 2,
        "max_steps": 0,
        "solver_failed": 0,
        "unassemblable": 1,
        "singular_start": 1,
    }
    others = codes == 0
    for name in ("summary/q_final", "summary/qd_final", "summary/energy_drift"):
        assert np.all(np.isnan(data[name][~others])), name
        np.testing.assert_allclose(
            data[name][others], expected[name][others], rtol=1e-12, atol=1e-13
        )
    assert np.all(np.isfinite(data["summary/steps"]))  # solver statistics are kept
    q1 = expected["summary/q_final"][others, 1]
    assert stats["columns"]["q_final[B]"]["mean"] == pytest.approx(np.mean(q1), rel=1e-14)
    assert stats["columns"]["q_final[B]"]["q95"] == pytest.approx(np.quantile(q1, 0.95))


def test_sharded_over_two_host_devices_equals_one_device(launched, reference):
    tmp, runs, _, _ = launched
    text = _finished(runs["sharded"])
    assert "on 2 cpu device(s)" in text
    _assert_same(tmp / "sharded.zarr", _arrays(reference[0]))


def test_two_processes_merge_to_the_single_process_run(launched, reference):
    tmp, runs, _, _ = launched
    texts = [_finished(runs[f"process{k}"]) for k in range(2)]
    for k, text in enumerate(texts):
        assert f"process {k} of 2" in text
        computed = sorted(
            int(line.split()[1][:-1]) for line in text.splitlines() if line.startswith("chunk ")
        )
        assert computed == list(range(k, N // CHUNK, 2))  # its own share, written by itself
    assert f"{N} of {N} runs done: success {N}" in texts[0]  # process 0 merges
    assert (tmp / "hist.png").stat().st_size > 5000
    _assert_same(tmp / "distributed.zarr", _arrays(reference[0]))


def test_killed_run_resumes_to_the_same_results(launched, reference, capsys):
    tmp, runs, killer, log = launched
    killer.join(timeout=600)
    runs["killed"].wait(timeout=60)
    assert runs["killed"].returncode == -signal.SIGKILL, "".join(log)[-3000:]
    store = tmp / "killed.zarr"
    done = np.asarray(zarr.open_group(str(store), mode="r")["done"][:]).astype(bool)
    assert 0 < done.sum() < N // CHUNK, done  # killed midway
    with pytest.raises(SystemExit, match="--resume"):
        cli.main(_cli(store)[3:])
    capsys.readouterr()
    montecarlo.run(
        MECH,
        SAMPLER,
        N,
        store,
        options=OPTIONS,
        chunk=CHUNK,
        resume=True,
        progress=True,
        verbose=True,
    )
    printed = capsys.readouterr()
    assert "compiling the program of a chunk of 2 runs" in printed.err  # before the bar
    assert "first chunk, compile included" in printed.err
    lines = printed.out.splitlines()
    computed = [int(line.split()[1][:-1]) for line in lines if line.startswith("chunk ")]
    assert sorted(computed) == list(np.flatnonzero(~done))  # exactly the unfinished chunks
    _assert_same(store, _arrays(reference[0]))


def test_bad_input_gets_a_clear_error(tmp_path):
    def wrong_shape(mech, key, index):
        return SAMPLER(mech, key, index)._replace(q0=jnp.zeros(2))

    with pytest.raises(ValueError, match=r"Sample.q0 must have shape \(3,\)"):
        montecarlo.run(MECH, wrong_shape, N, tmp_path / "a.zarr", options=OPTIONS)
    with pytest.raises(TypeError, match="must return a montecarlo.Sample"):
        montecarlo.compute(MECH, lambda m, k, i: m, [0], OPTIONS)
    with pytest.raises(ValueError, match="method must be one of"):
        montecarlo.compute(MECH, SAMPLER, [0], dataclasses.replace(OPTIONS, method="rk4"))
    with pytest.raises(ValueError, match="needs a drive"):
        montecarlo.compute(MECH, SAMPLER, [0], montecarlo.Options(kind="inverse"))
    with pytest.raises(ValueError, match="mass must be finite and >= 0"):
        montecarlo.tolerances(MECH, mass=-0.1)
    assert not (tmp_path / "a.zarr").exists()
