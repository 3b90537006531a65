"""`loopdyn.chunking`: a batched `forward.solve` runs in chunks (here of 2 states, so 5 states make
three chunks, the last padded) and gives each state's single-state solution, and derivatives
through the chunked batch are the single states' derivatives."""

import jax
import jax.numpy as jnp
import numpy as np
from support.states import random_draws

from loopdyn import chunking, forward, mechanisms


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
