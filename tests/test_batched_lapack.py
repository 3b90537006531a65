"""Batched programs with matrices above `dense.UNROLL` (LAPACK calls) finish.

jaxlib runs a batched LAPACK call's matrices on XLA's CPU thread pool and waits there; with two
or more such calls in one program, every thread of a small pool could wait on work queued behind
it, and the program hung with every thread idle (issue 23: the 32-loop MJCF ladder with SLM at
B = 256, `mechanisms.ladder(32)` at B = 1024). `dense` runs them one matrix per call under
``vmap``. Each case runs in a subprocess with a time limit, beside a busy process that keeps one
core occupied (the hang needed the pool's threads to be descheduled at the wrong moment: on the
2-core machine it hung 3 runs in 3 with plain ``jnp.linalg`` under ``vmap``, and never with
`dense`). A hang or an abort fails the test.
"""

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
LIMIT_S = 240

HEADER = f"""
import sys
sys.path.insert(0, {str(BENCHMARKS)!r})
import jax, jax.numpy as jnp, numpy as np
jax.config.update("jax_enable_x64", True)
import loopdyn
from loopdyn import dense
"""

# Three independent batched factorisations of 40 x 40 matrices in one program, 100 times.
DENSE = """
B, n = 256, 40
a = jax.random.normal(jax.random.PRNGKey(0), (B, n, n))
a = a @ jnp.swapaxes(a, 1, 2) + n * jnp.eye(n)
b = jax.random.normal(jax.random.PRNGKey(1), (B, n, n))
program = jax.jit(lambda a, b: (
    jax.vmap(dense.cholesky)(a), jax.vmap(dense.singular_values)(b), jax.vmap(dense.solve)(b, a)
))
for _ in range(100):
    l, s, x = jax.block_until_ready(program(a, b))
np.testing.assert_allclose(l @ jnp.swapaxes(l, 1, 2), a, rtol=1e-12, atol=1e-10)
np.testing.assert_allclose(jnp.einsum("bij,bjk->bik", b, x), a, rtol=1e-9, atol=1e-9)
np.testing.assert_allclose(s, jnp.linalg.svd(b, compute_uv=False), rtol=1e-12)
print("done")
"""

# The cases: jit(vmap(forward_dynamics)) at the assembled q0, zero velocity.
LADDERS = """
import _peers
for mech, size, methods in (
    (loopdyn.load_mjcf(_peers.ladder_chain_mjcf(32)), 256, ("system", "slm")),
    (loopdyn.mechanisms.ladder(32), 1024, ("slm",)),
):
    q = jnp.broadcast_to(mech.q0, (size, mech.nq))
    v = jnp.zeros((size, mech.nv))
    results = {}
    for method in methods:
        fd = jax.jit(jax.vmap(lambda q, v, t: loopdyn.forward_dynamics(mech, q, v, t, method=method)))
        results[method] = jax.block_until_ready(fd(q, v, v))[0]
        assert np.all(np.isfinite(results[method])), method
    # every state is the same: each row equals the single-state solve
    one = loopdyn.forward_dynamics(mech, mech.q0, v[0], v[0], method="system")[0]
    for method, qdd in results.items():
        np.testing.assert_allclose(qdd, jnp.broadcast_to(one, qdd.shape), rtol=1e-9, atol=1e-9)
print("done")
"""


@pytest.fixture
def busy_core():
    """A process spinning on the CPU for the duration of the test."""
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    yield
    hog.kill()
    hog.wait()


@pytest.mark.parametrize("case", ["DENSE", "LADDERS"])
def test_batched_lapack_programs_finish(case, busy_core):
    script = HEADER + textwrap.dedent(globals()[case])
    try:
        run = subprocess.run(
            [sys.executable, "-c", script],
            check=False,
            capture_output=True,
            text=True,
            timeout=LIMIT_S,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{case}: no result within {LIMIT_S} s (hung)")
    assert run.returncode == 0, f"{case}: exit {run.returncode}\n{run.stderr[-3000:]}"
    assert run.stdout.strip().endswith("done")
