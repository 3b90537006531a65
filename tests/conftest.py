import jax
import pytest

jax.config.update("jax_enable_x64", True)
# No persistent compilation cache: writing some executables to it crashed the interpreter
# (abort in compilation_cache.put_executable_and_time, segfault in compile_and_write_cache) when
# the whole suite ran on a cold cache.


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
