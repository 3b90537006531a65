import gc
import os

import jax
import pytest

# Compiling XLA programs is most of this suite's time. LLVM's optimisation level 0 for XLA's CPU
# code compiles them about 35-40% faster (CPU seconds of one process per file: test_kinematics
# 170 -> 103, test_simulate 167 -> 113, test_forward 323 -> 204 on a loaded machine), and the
# suite's programs run too briefly for the slower code to matter (test_simulate's 15 s free runs
# took no longer). Set in `pytest_configure` below; inherited by the CLI and notebook
# subprocesses. XLA_FLAGS that already name a level are left alone (to test at the default, set
# XLA_FLAGS=--xla_backend_optimization_level=3).
# XLA's CPU fusion emitters (MLIR) compile much slower than its older LLVM IR emitters: with them
# off the suite's programs compile far less (CPU seconds of one process per file on the loaded
# 2-core machine: test_inverse 307 -> 122, test_forward 174 -> 67, test_fit 52 -> 32). The older
# emitters' rounding can depend on the batch shape, though (one Monte Carlo sample's energy drift
# differed by 9e-7 relative between chunkings), so files that compare differently batched runs
# at rounding level (`SAME_ROUNDING_ACROSS_BATCHES`) keep XLA's default. Left alone where
# XLA_FLAGS names the flag. Set in `pytest_configure`, once the files to run are known and before
# any test creates JAX's CPU client.
SAME_ROUNDING_ACROSS_BATCHES = ("test_montecarlo.py",)
# JAX 0.11's XLA has no such flag (0.10.2's has; an unknown flag in XLA_FLAGS aborts the process).
OLDER_EMITTERS = jax.__version_info__ < (0, 11)
# XLA checks the whole program after every HLO pass (HloVerifier as the pipeline's invariant
# checker): 6 % of test_tree's CPU samples (perf), a sixth of its compile time. It checks XLA,
# not our code, and changes nothing in the compiled program; skipped in the tests.


def pytest_configure(config):
    exact = any(str(arg).endswith(SAME_ROUNDING_ACROSS_BATCHES) for arg in config.args)
    flags = [("xla_backend_optimization_level", "0"), ("xla_disable_hlo_passes", "hlo-verifier")]
    flags += [("xla_cpu_use_fusion_emitters", "false")] if OLDER_EMITTERS and not exact else []
    for flag, value in flags:
        if flag not in os.environ.get("XLA_FLAGS", ""):
            os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --{flag}={value}".strip()


jax.config.update("jax_enable_x64", True)
# Tracing dominates the suite's programs at LLVM level 0 (perf: 54 % of a test process in the
# Python interpreter, a fifth of that in its cyclic garbage collector, which rescans JAX's and
# NumPy's long-lived objects). Frozen after the imports, and collected less often: test_tree
# 60.4 -> 57.2 s, test_forward 63.0 -> 58.5 s (run side by side), the same peak memory.
gc.freeze()
gc.set_threshold(50_000, 20, 20)
# No persistent compilation cache: writing some executables to it crashed the interpreter
# (abort in compilation_cache.put_executable_and_time, segfault in compile_and_write_cache) when
# the whole suite ran on a cold cache.
os.environ.setdefault("LOOPDYN_CACHE_DIR", "off")  # nor for the command line, in or out of process


def _count_lines(path):
    try:
        with open(path) as f:
            return sum(1 for _ in f)
    except OSError:  # not Linux
        return 0


def _map_limit():
    try:
        with open("/proc/sys/vm/max_map_count") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 0


MAP_LIMIT = _map_limit()


@pytest.fixture(autouse=True)
def _release_compiled_programs():
    """Every compiled XLA CPU program holds memory mappings; a test file that compiles hundreds
    of programs reaches the kernel's ``vm.max_map_count`` (65530 on this machine) and then
    crashes inside the compiler. Past half the limit, drop JAX's caches (the next use of a shared
    function compiles it again)."""
    yield
    if MAP_LIMIT and _count_lines("/proc/self/maps") > MAP_LIMIT // 2:
        jax.clear_caches()
