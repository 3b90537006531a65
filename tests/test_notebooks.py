"""The notebooks (jupytext percent scripts) run from top to bottom as they are stored."""

import pytest
from notebook_runner import run_notebook


@pytest.mark.parametrize("name", ["quickstart", "forward_methods"])
def test_notebook_runs(name, tmp_path):
    run_notebook(name, tmp_path, QUICK="1")
    assert any(path.suffix == ".png" for path in tmp_path.iterdir())
