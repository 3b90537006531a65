"""Runs a notebook (a jupytext percent script) as a plain script for the notebook tests."""

import os
import pathlib
import subprocess
import sys

NOTEBOOKS = pathlib.Path(__file__).parents[1] / "notebooks"


def run_notebook(name, out, **settings):
    """Run ``notebooks/<name>.py`` without a display, writing its figures to ``out``, with the
    ``LOOPDYN_NOTEBOOK_*`` ``settings`` (e.g. ``SAMPLES="16"``); return its standard output."""
    env = os.environ | {"MPLBACKEND": "Agg", "LOOPDYN_NOTEBOOK_OUT": str(out)}
    env |= {f"LOOPDYN_NOTEBOOK_{key}": value for key, value in settings.items()}
    done = subprocess.run(
        [sys.executable, str(NOTEBOOKS / f"{name}.py")],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout
