"""The balancing notebook runs as a plain script (a short cycle, no display), finds the four-bar's
exact force balance (Berkof-Lowen, total centre of mass at rest), keeps the torque bound and
writes its figures."""

from notebook_runner import run_notebook


def value(stdout, prefix):
    line = next(line for line in stdout.splitlines() if line.startswith(prefix))
    return line[len(prefix) :].split()[0].rstrip(",")


def test_balancing_notebook_runs(tmp_path):
    out = run_notebook("balancing", tmp_path, POSITIONS="16")
    assert float(value(out, "RMS shaking force ratio:")) < 1e-6
    assert float(value(out, "Berkof-Lowen difference:")) < 1e-10
    moves = [line for line in out.splitlines() if line.startswith("total centre of mass moves")]
    assert float(moves[0].split()[5]) > 1e-2 and float(moves[1].split()[5]) < 1e-12
    assert abs(float(value(out, "torque bound: torque x")) - 0.5) < 1e-7
    for name in ("balancing_tradeoff.png", "balancing_cycle.png"):
        assert (tmp_path / name).stat().st_size > 5_000
