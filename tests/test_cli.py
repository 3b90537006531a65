"""``loopdyn simulate``: the summary, an atomic results file and the figures it promises."""

import json
import pathlib

import numpy as np
import pytest

from loopdyn import cli, simulation

DATA = pathlib.Path(__file__).parent / "data"


def test_simulate_writes_results_and_figures(tmp_path, capsys):
    out, figure, gif = tmp_path / "run.npz", tmp_path / "run.png", tmp_path / "run.gif"
    cli.main(
        ["simulate", "four_bar", "--t", "0.3", "--saves", "31", "--out", str(out), "--plot",
         str(figure), "--gif", str(gif), "--multipliers"]
    )  # fmt: skip
    printed = capsys.readouterr().out
    assert printed.splitlines()[1] == "  compiling ..."  # before the compile, not after it
    for words in ("reached t = 0.3", "compile", "max loop residual", "relative drift"):
        assert words in printed
    with np.load(out) as data:
        assert data["q"].shape == (31, 3) and int(data["stats_result"]) == simulation.SUCCESS
        assert data["lam"].shape == (31, 2) and np.all(np.isfinite(data["lam"]))
        assert np.max(data["loop_residual"][:, 0]) < 1e-9
        assert list(data["coordinate_names"]) == ["A", "B", "D"]
        assert json.loads(str(data["units"]))["q"] == ["rad"] * 3
    assert figure.stat().st_size > 10_000 and gif.stat().st_size > 10_000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.gif", "run.npz", "run.png"]


def test_simulate_takes_the_rosenbrock_solver(tmp_path, capsys):
    out = tmp_path / "run.npz"
    cli.main(["simulate", "four_bar", "--t", "0.3", "--solver", "ros34pw2", "--out", str(out)])
    printed = capsys.readouterr().out
    assert printed.splitlines()[0] == "four_bar: 0.3 s, auto, baumgarte, ros34pw2"
    assert "reached t = 0.3" in printed
    with np.load(out) as data:  # 1,258 steps at rtol 1e-8 (Tsit5: 88): third order
        assert int(data["stats_steps"]) > 1000 and np.max(data["loop_residual"][:, 0]) < 1e-8


def _refused(argv, capsys):
    """Exit code and stderr of a command line that must fail."""
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    return exit_.value.code, capsys.readouterr().err


def test_unknown_mechanism_is_named(capsys):
    code, err = _refused(["simulate", "four_bars"], capsys)
    assert code == 2 and err.startswith("loopdyn simulate: unknown mechanism 'four_bars'")
    assert err.count("\n") == 1


@pytest.mark.parametrize(
    "argv",
    [
        ["simulate", "missing.xml"],
        ["inverse", "missing.xml"],
        ["balance", "missing.xml", "--links", "crank"],
        ["montecarlo", "missing.xml", "--out", "study.zarr"],
        ["fit", "missing.xml", "--data", "missing.npz"],
    ],
)
def test_every_verb_names_a_missing_file_in_one_line(argv, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, err = _refused(argv, capsys)
    assert code != 0 and err.count("\n") == 1
    assert err.startswith(f"loopdyn {argv[0]}: ") and "missing" in err


def test_bad_options_are_refused_before_loading(capsys):
    for argv, message in (
        (["simulate", "three_rrr", "--t", "0"], "--t: must be positive, got 0"),
        (["simulate", "three_rrr", "--saves", "1"], "--saves must be at least 2"),
        (["simulate", "three_rrr", "--rtol", "-1"], "--rtol: must be positive"),
    ):
        code, err = _refused(argv, capsys)
        assert code == 2 and message in err


def test_help_shows_defaults_and_units(capsys):
    with pytest.raises(SystemExit):
        cli.main(["simulate", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "final time [s] (default: 5.0)" in help_text
    assert "[rad/s or m/s]" in help_text


def test_inverse_with_more_freedoms_than_actuators_says_what_to_prescribe(capsys):
    """The RSSR with a ball joint has 2 degrees of freedom (the coupler's spin is idle) and one
    actuator: the CLI names the option that prescribes more coordinates, and refuses to hold a
    component of the ball's angular velocity, which has no angle (a motion the actuators cannot
    produce is refused in tests/test_inverse.py)."""
    rssr = str(DATA / "rssr.xml")
    code, err = _refused(["inverse", rssr], capsys)
    assert code == 2 and "prescribe exactly 2 coordinates" in err and "--hold" in err
    code, err = _refused(["inverse", rssr, "--hold", "ball[2]"], capsys)  # a quaternion's rate
    assert code == 2 and "['ball[2]'] are angular velocities of ball or free joints" in err
    code, err = _refused(["inverse", rssr, "--hold", "spin"], capsys)
    assert code == 2 and "--hold: unknown coordinates ['spin']" in err
