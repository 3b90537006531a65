"""The inverse-dynamics notebook runs as a plain script (a short cycle, no display) and writes its
figures."""

import os
import pathlib
import subprocess
import sys

NOTEBOOK = pathlib.Path(__file__).parents[1] / "notebooks" / "inverse_dynamics.py"


def test_inverse_dynamics_notebook_runs(tmp_path):
    env = os.environ | {
        "MPLBACKEND": "Agg",
        "LOOPDYN_NOTEBOOK_OUT": str(tmp_path),
        "LOOPDYN_NOTEBOOK_POSITIONS": "12",
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
    assert "subsystem (2,): 4x4, loops (1, 2)" in done.stdout
    assert "driving torque" in done.stdout
    errors = [line for line in done.stdout.splitlines() if line.startswith("subsystem vs system")]
    assert float(errors[0].split(":")[1]) < 1e-9
    for name in ("inverse_dynamics_reactions.png", "inverse_dynamics_shaking.png"):
        assert (tmp_path / name).stat().st_size > 5_000
