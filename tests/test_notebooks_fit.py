"""The mass-fitting notebook runs as a plain script (short records, no display), its intervals
cover the truth and it writes its figure."""

from notebook_runner import run_notebook


def test_mass_fitting_notebook_runs(tmp_path):
    out = run_notebook("mass_fitting", tmp_path, SAMPLES="16")
    assert "not identifiable: crank.m" in out
    assert ": False" not in out  # every identifiable parameter's interval covers the truth
    assert "rank 7 of 7" in out and "iteration 1: cost" in out
    fitted = [line for line in out.splitlines() if line.strip().startswith("fit error")]
    words = fitted[0].split()
    fit_error, start_error = float(words[2]), float(words[5])
    assert fit_error < 0.2 * start_error
    assert (tmp_path / "mass_fitting.png").stat().st_size > 10_000
