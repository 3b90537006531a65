"""The balancing notebook runs as a plain script (a short cycle, no display), finds the four-bar's
exact force balance (Berkof-Lowen, total centre of mass at rest), keeps the torque bound and
writes its figures."""

import os
import pathlib
import subprocess
import sys

NOTEBOOK = pathlib.Path(__file__).parents[1] / "notebooks" / "balancing.py"


def value(stdout, prefix):
    line = next(line for line in stdout.splitlines() if line.startswith(prefix))
    return line[len(prefix) :].split()[0].rstrip(",")


def test_balancing_notebook_runs(tmp_path):
    env = os.environ | {
        "MPLBACKEND": "Agg",
        "LOOPDYN_NOTEBOOK_OUT": str(tmp_path),
        "LOOPDYN_NOTEBOOK_POSITIONS": "16",
    }
    done = subprocess.run(
        [sys.executable, str(NOTEBOOK)],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert float(value(out, "RMS shaking force ratio:")) < 1e-6
    assert float(value(out, "Berkof-Lowen difference:")) < 1e-10
    moves = [line for line in out.splitlines() if line.startswith("total centre of mass moves")]
    assert float(moves[0].split()[5]) > 1e-2 and float(moves[1].split()[5]) < 1e-12
    assert abs(float(value(out, "torque bound: torque x")) - 0.5) < 1e-7
    for name in ("balancing_tradeoff.png", "balancing_cycle.png"):
        assert (tmp_path / name).stat().st_size > 5_000
