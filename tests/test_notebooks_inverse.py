"""The inverse-dynamics notebook runs as a plain script (a short cycle, no display) and writes its
figures."""

from notebook_runner import run_notebook


def test_inverse_dynamics_notebook_runs(tmp_path):
    out = run_notebook("inverse_dynamics", tmp_path, POSITIONS="12")
    assert "subsystem (2,): 4x4, loops (1, 2)" in out
    assert "driving torque" in out
    errors = [line for line in out.splitlines() if line.startswith("subsystem vs system")]
    assert float(errors[0].split(":")[1]) < 1e-9
    for name in ("inverse_dynamics_reactions.png", "inverse_dynamics_shaking.png"):
        assert (tmp_path / name).stat().st_size > 5_000
