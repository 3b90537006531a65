"""The command line keeps compiled programs in JAX's persistent cache: a second process running the
same simulation loads the program instead of compiling it."""

import os
import subprocess
import sys


def simulate_log(cache, t1):
    """Run ``loopdyn simulate three_rrr --t t1`` in a new process; JAX's compile and cache log."""
    env = {
        **os.environ,
        "LOOPDYN_CACHE_DIR": str(cache),
        "JAX_LOG_COMPILES": "1",
        "JAX_EXPLAIN_CACHE_MISSES": "1",
    }
    command = [sys.executable, "-m", "loopdyn.cli", "simulate", "three_rrr", "--t", str(t1)]
    out = subprocess.run(command, check=False, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    return out.stderr


def test_second_process_loads_the_simulation_from_the_cache(tmp_path):
    # t1 is an argument of the compiled program, so the 5 s run's program is the 1 s run's.
    first = simulate_log(tmp_path, 1.0)
    assert "PERSISTENT COMPILATION CACHE MISS for 'jit__integrate'" in first, first
    assert any(tmp_path.iterdir())  # the first run wrote its programs
    second = simulate_log(tmp_path, 5.0)
    assert "Persistent compilation cache hit for 'jit__integrate'" in second, second
    assert "CACHE MISS for 'jit__integrate'" not in second, second
