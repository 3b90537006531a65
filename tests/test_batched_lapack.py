"""Batched programs with matrices above `dense.UNROLL` (LAPACK calls) finish.

jaxlib runs a batched LAPACK call's matrices on XLA's CPU thread pool and waits there; with two
or more such calls in one program, every thread of a small pool could wait on work queued behind
it, and the program hung with every thread idle (issue 23: the 32-loop MJCF ladder with SLM at
B = 256). `dense` runs them one matrix per call under ``vmap``, gradients included. Each case
runs in a subprocess with a time limit; a hang or an abort fails the test. The factorisations
run beside a busy process that keeps one core occupied (the hang needs the pool's threads
descheduled at the wrong moment: on the 2-core machine it hung 3 runs in 3 with plain
``jnp.linalg`` under ``vmap``, and never with `dense`); the ladder runs as the suite runs it,
beside another test file. Run pinned to one core (``taskset``), the subprocesses are pinned too:
there batched LAPACK gradients (before `dense` looped them) finished, so the check needs both.
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

# Three independent batched factorisations of 40 x 40 matrices in one program, 100 times. B = 64
# suffices: with plain jnp.linalg under vmap, B = 64 hung 3 runs in 3 beside the busy core with
# the suite's XLA flags (B = 256 took 4x as long with `dense`).
DENSE = """
B, n = 64, 40
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

# The same with derivatives: vmap of the gradient of three independent factorisations, 20 times;
# the last matrices' gradients against JAX's own, for one matrix (no batched LAPACK call).
DENSE_GRADIENTS = """
B, n = 256, 24
a = jax.random.normal(jax.random.PRNGKey(0), (B, n, n))
a = a @ jnp.swapaxes(a, 1, 2) + n * jnp.eye(n)
b = jax.random.normal(jax.random.PRNGKey(1), (B, n, n))
def loss(linalg, singular_values):
    return lambda a, b: (
        jnp.sum(linalg.cholesky(a) ** 2) + jnp.sum(singular_values(b) ** 3)
        + jnp.sum(linalg.solve(b, a) ** 2)
    )
program = jax.jit(jax.vmap(jax.grad(loss(dense, dense.singular_values), (0, 1))))
for _ in range(20):
    grads = jax.block_until_ready(program(a, b))
expected = jax.grad(loss(jnp.linalg, jnp.linalg.svdvals), (0, 1))(a[-1], b[-1])
for ours, theirs in zip(grads, expected):
    np.testing.assert_allclose(ours[-1], theirs, rtol=1e-12, atol=1e-12 * jnp.max(jnp.abs(theirs)))
print("done")
"""

# The case: jit(vmap(forward_dynamics)) on the MJCF ladder at the assembled q0.
LADDER = """
import _peers
mech = loopdyn.load_mjcf(_peers.ladder_chain_mjcf(32))
q = jnp.broadcast_to(mech.q0, (256, mech.nq))
v = jnp.zeros((256, mech.nv))
one = loopdyn.forward_dynamics(mech, mech.q0, v[0], v[0], method="system")[0]
for method in ("system", "slm"):
    fd = jax.jit(jax.vmap(lambda q, v, t: loopdyn.forward_dynamics(mech, q, v, t, method=method)))
    qdd = jax.block_until_ready(fd(q, v, v))[0]
    # every state is the same: each row equals the single-state solve
    np.testing.assert_allclose(qdd, jnp.broadcast_to(one, qdd.shape), rtol=1e-9, atol=1e-9)
print("done")
"""

# Gradients through it: jit(vmap(grad)) of |qdd|^2 in tau on the 8-loop ladder (17 coordinates,
# so the KKT system of "system", 33 x 33, goes to LAPACK), against one state's gradient.
LADDER_GRADIENT = """
import _peers
mech = loopdyn.load_mjcf(_peers.ladder_chain_mjcf(8))
tau = 0.1 * jax.random.normal(jax.random.PRNGKey(0), (64, mech.nv))
q, v = jnp.broadcast_to(mech.q0, (64, mech.nq)), jnp.zeros(mech.nv)
loss = lambda tau, q: jnp.sum(loopdyn.forward_dynamics(mech, q, v, tau, method="system")[0] ** 2)
grads = jax.block_until_ready(jax.jit(jax.vmap(jax.grad(loss)))(tau, q))
np.testing.assert_allclose(grads[-1], jax.jit(jax.grad(loss))(tau[-1], q[-1]), rtol=1e-12)
print("done")
"""


@pytest.fixture
def busy_core():
    """A process spinning on the CPU for the duration of the test."""
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    yield
    hog.kill()
    hog.wait()


def _finishes(case, script):
    try:
        run = subprocess.run(
            [sys.executable, "-c", HEADER + textwrap.dedent(script)],
            check=False,
            capture_output=True,
            text=True,
            timeout=LIMIT_S,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{case}: no result within {LIMIT_S} s (hung)")
    assert run.returncode == 0, f"{case}: exit {run.returncode}\n{run.stderr[-3000:]}"
    assert run.stdout.strip().endswith("done")


def test_independent_batched_factorisations_finish(busy_core):
    _finishes("three factorisations", DENSE)


def test_batched_gradients_of_independent_factorisations_finish(busy_core):
    _finishes("gradients of three factorisations", DENSE_GRADIENTS)


def test_batched_forward_dynamics_on_the_32_loop_ladder_finishes():
    _finishes("the MJCF ladder, k = 32, B = 256", LADDER)


def test_batched_gradient_of_forward_dynamics_on_the_8_loop_ladder_finishes():
    _finishes("the gradient on the MJCF ladder, k = 8, B = 64", LADDER_GRADIENT)


def test_off_the_cpu_the_batch_stays_whole(monkeypatch):
    """The loop over the batch is the CPU's remedy; on a GPU a batched solver call is one
    operation, looped it took an H200 200 times longer (the 8-loop ladder's batched SLM). The
    lowered program of that batch: its LAPACK-backed factorisations and solves loop on the CPU,
    and hold no loop when JAX's default backend is not the CPU (traced here, not run: that
    program is the one with batched LAPACK calls, which the CPU's pool may hang on)."""
    import jax

    import loopdyn

    jax.config.update("jax_enable_x64", True)
    mech = loopdyn.mechanisms.ladder(8)
    n = mech.nv
    states = (jax.numpy.tile(mech.q0, (4, 1)), jax.numpy.zeros((4, n)), jax.numpy.zeros((4, n)))
    solve = jax.vmap(lambda q, v, t: loopdyn.forward.solve(mech, q, v, t, method="slm").qdd)

    def loops():
        jax.clear_caches()  # inner programs are traced again, by the backend's rule
        return jax.jit(solve).lower(*states).as_text().count("stablehlo.while")

    on_cpu = loops()
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    assert on_cpu >= 3 and loops() == 0
