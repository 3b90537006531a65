"""``loopdyn simulate``: the summary, an atomic results file and the figures it promises."""

import numpy as np
import pytest

from loopdyn import cli, simulation


def test_simulate_writes_results_and_figures(tmp_path, capsys):
    out, figure, gif = tmp_path / "run.npz", tmp_path / "run.png", tmp_path / "run.gif"
    cli.main(
        ["simulate", "four_bar", "--t", "0.3", "--saves", "31", "--out", str(out), "--plot",
         str(figure), "--gif", str(gif)]
    )  # fmt: skip
    printed = capsys.readouterr().out
    for words in ("reached t = 0.3", "compile", "max loop residual", "relative drift"):
        assert words in printed
    with np.load(out) as data:
        assert data["q"].shape == (31, 3) and int(data["stats_result"]) == simulation.SUCCESS
        assert np.max(data["loop_residual"][:, 0]) < 1e-9
    assert figure.stat().st_size > 10_000 and gif.stat().st_size > 10_000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.gif", "run.npz", "run.png"]


def test_unknown_mechanism_is_named():
    with pytest.raises(SystemExit, match="unknown mechanism 'four_bars'"):
        cli.main(["simulate", "four_bars"])
