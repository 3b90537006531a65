"""Batched SLM, SSLM and assembly on `mechanisms.ladder` on a GPU: the check that `dense`'s
LAPACK-backed calls keep their batch whole off the CPU (results: gpu_dense_batch.md).

    python3 experiments/gpu_dense_batch.py      # on a GPU machine
"""

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

from loopdyn import forward, kinematics, mechanisms


def timed(f, *args, repeats=5):
    """Seconds of the first call and the median of ``repeats`` more."""
    start = time.perf_counter()
    jax.block_until_ready(f(*args))
    first, times = time.perf_counter() - start, []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(f(*args))
        times.append(time.perf_counter() - start)
    return first, float(np.median(times))


def ladder(k, batch):
    mech = mechanisms.ladder(k)
    rng = np.random.default_rng(0)
    q = jnp.asarray(np.tile(np.asarray(mech.q0), (batch, 1)))
    v = jnp.asarray(0.1 * rng.standard_normal((batch, mech.nv)))
    tau = jnp.asarray(rng.standard_normal((batch, mech.nv)))
    for method in ("slm", "sslm"):
        solve = jax.vmap(lambda q, v, t, method=method: forward.solve(mech, q, v, t, method=method))
        first, run = timed(jax.jit(lambda *x, solve=solve: solve(*x).qdd), q, v, tau)
        print(
            f"ladder{k} {method} B={batch}: compile {first:.1f} s, {run / batch * 1e6:.3f} us/state"
        )
    guess = q + jnp.asarray(0.05 * rng.standard_normal((batch, mech.nq)))
    assemble = jax.jit(jax.vmap(lambda g: kinematics.try_assemble(mech, g)[0]))
    first, run = timed(assemble, guess, repeats=2)
    print(f"ladder{k} try_assemble B={batch}: compile {first:.1f} s, run {run:.3f} s")


if __name__ == "__main__":
    print(jax.devices(), jax.__version__)
    ladder(8, 65536)
    ladder(32, 4096)
