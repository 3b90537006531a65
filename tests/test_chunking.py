"""`loopdyn.chunking`: a batched `forward.solve` runs in chunks (here of 2 states, so 5 states make
three chunks, the last padded) and gives each state's single-state solution, and derivatives
through the chunked batch are the single states' derivatives."""

import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from support.states import random_draws

from loopdyn import chunking, forward, kinematics, mechanisms


def test_chunks_with_padding_equal_single_states(monkeypatch):
    monkeypatch.setattr(chunking, "CHUNK", 2)
    assert chunking.chunks(5) == (2, 3)
    mech = mechanisms.three_rrr()
    q, _, _ = random_draws(mech, k=5, seed=4)
    rng = np.random.default_rng(5)
    qd, tau = (jnp.asarray(rng.normal(size=(5, mech.nv))) for _ in range(2))

    def qdd(q, qd, tau):
        return forward.solve(mech, q, qd, tau, method="sslm").qdd

    assert "length=3" in str(jax.make_jaxpr(jax.vmap(qdd))(q, qd, tau))  # lax.map: 3 chunks
    batched = jax.jit(jax.vmap(qdd))(q, qd, tau)
    single = jax.jit(qdd)
    for k in range(5):
        np.testing.assert_allclose(batched[k], single(q[k], qd[k], tau[k]), rtol=0, atol=1e-12)
    # reverse mode through the chunked batch: the gradient of a sum is the single states'
    loss = lambda tau: jnp.sum(jax.vmap(qdd)(q, qd, tau) ** 2)
    grad = jax.jit(jax.grad(loss))(tau)
    one = jax.jit(jax.grad(lambda q, qd, tau: jnp.sum(qdd(q, qd, tau) ** 2), argnums=2))
    for k in range(5):
        np.testing.assert_allclose(grad[k], one(q[k], qd[k], tau[k]), rtol=0, atol=1e-10)


def test_bigger_states_take_smaller_chunks():
    """`chunking.CHUNK_BYTES` of per-state inputs per chunk, between `MIN_CHUNK` and `CHUNK`
    states: the 16-loop ladder's 33 coordinates (q, qd, tau: 792 bytes a state) take chunks of
    31, so 256 states make 9 chunks; the four-bar's take the full 128."""
    assert chunking.chunks(4096) == (128, 32)
    assert chunking.chunks(4096, 72) == (128, 32)
    assert chunking.chunks(4096, 792) == (31, 133)
    assert chunking.chunks(4096, 10**6) == (chunking.MIN_CHUNK, 256)
    assert chunking.chunks(20, 10**6) == (16, 2)
    mech = mechanisms.ladder(16)
    states = jnp.zeros((256, mech.nv))
    solve = jax.vmap(lambda q, qd, tau: forward.solve(mech, q, qd, tau, method="sslm").qdd)
    assert "length=9" in str(jax.make_jaxpr(solve)(states + mech.q0, states, states))


def test_batched_assembly_and_projection_run_in_chunks():
    """`kinematics.try_assemble` and `project_velocity` under ``vmap`` run in chunks: on the
    16-loop MJCF chain ladder over 4096 states their programs' temporaries are 12 and 17 MB
    (measured; 444 MB and 1.2 GB as one ``vmap``, and 71 GB at 64 loops, which stopped the
    closed-loop benchmark)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import _peers

    mech = _peers.ladder_chain(16)[0]
    guesses = np.tile(mech.q0, (4096, 1))
    fixed = forward.independent_coordinates(mech)
    assemble = jax.vmap(lambda q: kinematics.try_assemble(mech, q, fixed=fixed))
    project = jax.vmap(lambda q, v: kinematics.project_velocity(mech, q, v))
    for batched, args in ((assemble, (guesses,)), (project, (guesses, guesses))):
        compiled = jax.jit(batched).lower(*args).compile()
        assert compiled.memory_analysis().temp_size_in_bytes < 50e6
