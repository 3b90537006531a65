"""The command line keeps compiled programs in JAX's persistent cache: a second process running the
same simulation loads the program instead of compiling it."""

import os
import re
import subprocess
import sys


def compile_seconds(cache, t1):
    """Run ``loopdyn simulate three_rrr --t t1`` in a new process; the compile time it prints."""
    env = {**os.environ, "LOOPDYN_CACHE_DIR": str(cache)}
    command = [sys.executable, "-m", "loopdyn.cli", "simulate", "three_rrr", "--t", str(t1)]
    out = subprocess.run(command, check=False, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    return float(re.search(r"compile (\d+\.\d+) s", out.stdout).group(1))


def test_second_process_loads_the_simulation_from_the_cache(tmp_path):
    # t1 is an argument of the compiled program, so the 5 s run's program is the 1 s run's.
    first = compile_seconds(tmp_path, 1.0)
    assert any(tmp_path.iterdir())  # the first run wrote its programs
    second = compile_seconds(tmp_path, 5.0)
    assert second <= 2.0, (first, second)
