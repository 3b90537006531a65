"""`loopdyn fit` (`loopdyn.cli_fit`): in a subprocess, the four-bar's coupler mass from a short
trajectory recorded with another coupler mass (progress, summary, JSON and figure written atomically);
in process, the linear route from driving forces and the refusals of bad options."""

import argparse
import json
import os
import subprocess
import sys
import warnings

import equinox as eqx
import jax.numpy as jnp
import numpy as np
import pytest

import loopdyn
from loopdyn import cli_fit, fit, kinematics, mechanisms, prescribed

FOUR_BAR = mechanisms.four_bar(0.3)
TRUE_MASSES = FOUR_BAR.mass * jnp.array([1.0, 0.8, 1.0])
TRUTH = eqx.tree_at(lambda m: m.mass, FOUR_BAR, TRUE_MASSES)


def test_fit_command_recovers_the_coupler_mass(tmp_path):
    ts = jnp.linspace(0.0, 0.3, 16)
    q0 = FOUR_BAR.q0
    qd0 = kinematics.project_velocity(TRUTH, q0, jnp.array([3.0, 0.0, 0.0]), fixed=(0,))
    tau = np.array([0.5, 0.0, 0.0])
    sim = loopdyn.simulate(TRUTH, q0, qd0, 0.3, tau=tau, saveat=ts, rtol=1e-10, atol=1e-10)
    data = tmp_path / "record.npz"
    np.savez(data, ts=ts, q=sim.q, qd0=qd0, tau=tau)
    out, figure = tmp_path / "out" / "fit.json", tmp_path / "fit.png"
    command = [sys.executable, "-m", "loopdyn.cli", "fit", "four_bar", "--data", str(data)]
    command += ["--free", "masses=coupler", "--out", str(out), "--plot", str(figure)]
    done = subprocess.run(
        command,
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
        env=os.environ | {"MPLBACKEND": "Agg"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    printed = done.stdout
    assert "four_bar: trajectory of 16 samples over 0.3 s" in printed
    assert "iteration   1: cost" in printed  # progress during the optimisation
    assert "converged after" in printed and "NOT converged" not in printed
    assert "coupler.mass = 2" in printed
    record = json.loads(out.read_text())
    assert record["labels"] == ["coupler.mass"]
    np.testing.assert_allclose(record["estimate"], TRUE_MASSES[1:2], rtol=1e-6)
    low, high = record["interval"][0]
    assert 0 < high - low < 1e-6  # noise-free data: only the solver tolerance is left
    assert record["rank"] == 1 and record["unidentifiable"] == []
    assert figure.stat().st_size > 10_000
    assert not list(tmp_path.rglob("*.tmp"))  # written atomically, no leftovers


def parse(argv):
    parser = argparse.ArgumentParser(prog="loopdyn")
    cli_fit.add_parser(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(argv)


def test_fit_command_linear_route_from_driving_forces(tmp_path, capsys):
    t = jnp.linspace(0.0, 1.0, 21)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the four-bar has no determinate order
        motion, result = prescribed.prescribed_inverse_dynamics(
            TRUTH, lambda t: jnp.array([0.3 + 4.0 * t + 0.5 * jnp.sin(3.0 * t)]), t
        )
    data = tmp_path / "forces.npz"
    np.savez(data, q=motion.q, qd=motion.qd, qdd=motion.qdd, actuator_forces=result.actuator_forces)
    out = tmp_path / "ident.json"
    cli_fit.run(parse(["fit", "four_bar", "--data", str(data), "--out", str(out)]))
    printed = capsys.readouterr().out
    assert "21 states with driving forces, linear route" in printed
    assert "not identifiable: crank.m" in printed  # the pivoted crank's mass loads the pivot only
    record = json.loads(out.read_text())
    assert record["route"] == "torque" and record["rank"] == 8
    expected = np.asarray(fit.inertial_parameters(TRUTH))
    ok = np.asarray(record["identifiable"])
    np.testing.assert_allclose(np.asarray(record["estimate"])[ok], expected[ok], atol=1e-12)


def test_fit_command_refuses_bad_options(tmp_path):
    with pytest.raises(ValueError, match="expected KIND=NAMES"):
        cli_fit.selection(FOUR_BAR, ["weights=crank"])
    assert cli_fit.selection(FOUR_BAR, ["masses=all"]) == {"masses": ["crank", "coupler", "rocker"]}
    data = tmp_path / "bad.npz"
    np.savez(data, q=np.zeros((3, 3)))
    with pytest.raises(SystemExit, match=r"lacks \['ts'\]"):
        cli_fit.run(parse(["fit", "four_bar", "--data", str(data)]))
