"""The notebooks (jupytext percent scripts) run from top to bottom as they are stored."""

import os
import pathlib
import subprocess
import sys

import pytest

NOTEBOOKS = pathlib.Path(__file__).parent.parent / "notebooks"


@pytest.mark.parametrize("name", ["quickstart", "forward_methods"])
def test_notebook_runs(name, tmp_path):
    env = os.environ | {
        "MPLBACKEND": "Agg",
        "LOOPDYN_NOTEBOOK_OUT": str(tmp_path),
        "LOOPDYN_NOTEBOOK_QUICK": "1",
    }
    done = subprocess.run(
        [sys.executable, str(NOTEBOOKS / f"{name}.py")],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert any(path.suffix == ".png" for path in tmp_path.iterdir())
