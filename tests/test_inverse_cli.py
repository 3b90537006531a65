"""`loopdyn inverse` (`loopdyn.cli_inverse`): the subcommand parses, runs a short cycle of the
four-bar, prints its summary and writes a JSON record and a figure whose numbers agree with the
library functions."""

import argparse
import json

import numpy as np
import pytest

from loopdyn import cli_inverse, mechanisms


def parse(argv):
    parser = argparse.ArgumentParser(prog="loopdyn")
    cli_inverse.add_parser(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(argv)


def test_inverse_command_writes_results_and_figure(tmp_path, capsys):
    out, figure = tmp_path / "r" / "four_bar.json", tmp_path / "four_bar.png"
    args = parse(
        ["inverse", "four_bar", "--speed", "6.0", "--cycle", "0.1", "--dt", "0.02"]
        + ["--method", "system", "--out", str(out), "--plot", str(figure)]
    )
    cli_inverse.run(args)
    printed = capsys.readouterr().out
    assert "four_bar: 6 positions over 0.1 s, method system (3x3)" in printed
    assert "joint C: peak reaction force" in printed
    record = json.loads(out.read_text())
    mech = mechanisms.four_bar()
    assert record["mechanism"]["joints"] == list(mech.joint_names)
    np.testing.assert_allclose(record["t"], np.arange(6) * 0.02, atol=1e-15)
    q = np.asarray(record["q"])
    np.testing.assert_allclose(q[:, 0], float(mech.q0[0]) + 6.0 * np.arange(6) * 0.02, atol=1e-12)
    assert np.asarray(record["reactions"]).shape == (6, 4, 3)
    assert record["accuracy"]["max_unbalanced_generalized_force"] < 1e-10
    assert figure.stat().st_size > 10_000
    assert not list(tmp_path.rglob("*.tmp"))  # written atomically, no leftovers


def test_speeds_are_checked():
    with pytest.raises(ValueError, match=r"give 1 or 3 speeds"):
        cli_inverse.constant_speed(mechanisms.three_rrr(), [1.0, 2.0])
    args = parse(["inverse", "quarter_car"])
    with pytest.raises(ValueError, match="no actuated joint"):
        cli_inverse.run(args)  # `loopdyn inverse` prints it in one line and exits with 2
