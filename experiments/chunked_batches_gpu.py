"""Chunked batches on a GPU: ``jit(vmap(forward.solve))`` (SSLM) against the per-state solve
``forward._solve`` ``vmap``-ped over the whole batch, on the four-bar, the 3-RRR and
``mechanisms.ladder(8)`` at B = 4096 and 65536 (states near ``q0``, random velocities and forces),
medians of 5 calls, compile apart. Run on the device machine with loopdyn's sources on the path:
``PYTHONPATH=src python3 experiments/chunked_batches_gpu.py``; writes ``$OUT/chunk_gpu.json``
(experiments/chunked_batches_gpu.md was written from two such runs).
"""

import json
import os
import statistics
import time

import jax

jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp
import numpy as np

from loopdyn import forward, mechanisms

print(jax.__version__, jax.default_backend(), jax.devices(), flush=True)
out = {}
for name, make in (
    ("four_bar", mechanisms.four_bar),
    ("three_rrr", mechanisms.three_rrr),
    ("ladder8", lambda: mechanisms.ladder(8)),
):
    mech = make()
    n = mech.nv
    for B in (4096, 65536):
        rng = np.random.default_rng(0)
        q = jnp.asarray(np.asarray(mech.q0) + 1e-3 * rng.normal(size=(B, n)))
        qd, tau = (jnp.asarray(rng.normal(size=(B, n))) for _ in range(2))
        whole = jax.jit(
            jax.vmap(lambda *x, m=mech: forward._solve(m, *x, None, None, None, "sslm", ()).qdd)
        )
        chunked = jax.jit(jax.vmap(lambda *x, m=mech: forward.solve(m, *x, method="sslm").qdd))
        row = {}
        for label, f in (("whole", whole), ("chunked", chunked)):
            t0 = time.perf_counter()
            r = f(q, qd, tau).block_until_ready()
            c = time.perf_counter() - t0
            ts = []
            for _ in range(5):
                t0 = time.perf_counter()
                f(q, qd, tau).block_until_ready()
                ts.append(time.perf_counter() - t0)
            row[label] = (statistics.median(ts) / B * 1e6, c)
        print(
            name,
            B,
            {k: f"{v[0]:.3f} us/state (compile {v[1]:.1f} s)" for k, v in row.items()},
            flush=True,
        )
        out[f"{name}_{B}"] = row
with open(os.path.join(os.environ.get("OUT", "/tmp"), "chunk_gpu.json"), "w") as fh:
    json.dump(out, fh)
