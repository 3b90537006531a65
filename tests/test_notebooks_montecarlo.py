"""The Monte Carlo notebook runs as a plain script (8 runs per study, no display): statistics,
histograms, a resume that computes nothing, recomputed runs equal to the stored ones, and an
inverse-dynamics study whose stored RMS torque equals a direct `prescribed_inverse_dynamics`."""

from notebook_runner import run_notebook


def test_monte_carlo_notebook_runs(tmp_path):
    out = run_notebook("monte_carlo", tmp_path, RUNS="8")
    lines = out.splitlines()
    outcomes = [line for line in lines if line.startswith("outcomes:")]
    assert len(outcomes) == 2 and all("'success': 8" in line for line in outcomes), outcomes
    assert not any(line.startswith("chunk ") for line in lines)  # the resume computed nothing
    recomputed = next(line for line in lines if line.startswith("recomputed vs stored:"))
    assert float(recomputed.split(":")[1]) == 0.0
    direct = next(line for line in lines if line.startswith("direct vs stored:"))
    assert float(direct.split(":")[1]) < 1e-12
    for name in ("monte_carlo_swing.png", "monte_carlo_torque.png"):
        assert (tmp_path / name).stat().st_size > 5_000
