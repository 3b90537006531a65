"""`loopdyn balance` (`loopdyn.cli_balance`) in a subprocess on a short four-bar cycle: progress,
summary, a JSON record and a figure written atomically. The counterweights it finds are checked
against the exact full force balance of the default four-bar (links along their joint lines,
centres of mass at mid-length: by eq. (2) of `loopdyn.design`, counterweight mass moments
``-(m_1 + m_2) a / 2`` on the crank and ``-(m_2 + m_3) c / 2`` on the rocker)."""

import argparse
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from loopdyn import cli_balance


def test_balance_command_in_a_subprocess(tmp_path):
    out, figure = tmp_path / "r" / "four_bar.json", tmp_path / "four_bar.png"
    command = [sys.executable, "-m", "loopdyn.cli", "balance", "four_bar"]
    command += ["--links", "crank,rocker", "--mass-bounds", "0.1,5", "--rpm", "60"]
    command += ["--positions", "12", "--method", "system", "--trade-off", "2"]
    command += ["--out", str(out), "--plot", str(figure)]
    done = subprocess.run(
        command,
        env=os.environ | {"MPLBACKEND": "Agg"},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    printed = done.stdout
    assert "iteration 1: objective" in printed
    assert "four_bar: 12 positions over one revolution at 60 rpm" in printed
    assert "counterweight on rocker:" in printed and "trade-off: " in printed
    record = json.loads(out.read_text())
    assert record["converged"] and record["ratio"]["force"] < 1e-6
    (a, c), (m1, m2, m3) = (0.038, 0.1152), (1.5, 2.5, 3.0)  # the factory's defaults
    moments = [cw["mass_moment"][:2] for cw in record["counterweights"]]
    exact = [[-(m1 + m2) * a / 2, 0.0], [-(m2 + m3) * c / 2, 0.0]]
    np.testing.assert_allclose(moments, exact, rtol=0, atol=1e-9)
    assert len(record["trade_off"]["rms"]) == 6 and len(record["t"]) == 12
    assert figure.stat().st_size > 10_000
    assert not list(tmp_path.rglob("*.tmp"))  # written atomically, no leftovers


def parse(argv):
    parser = argparse.ArgumentParser(prog="loopdyn")
    cli_balance.add_parser(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(argv)


def test_bad_options_are_refused():
    with pytest.raises(SystemExit, match="--mass-bounds must be two numbers"):
        cli_balance.run(parse(["balance", "four_bar", "--links", "crank", "--mass-bounds", "5"]))
    with pytest.raises(SystemExit, match="--weights must be 3 numbers"):
        cli_balance.run(parse(["balance", "four_bar", "--links", "crank", "--weights", "1,0"]))
    with pytest.raises(SystemExit, match="unknown body 'wheel'"):
        cli_balance.run(parse(["balance", "four_bar", "--links", "wheel", "--positions", "4"]))
