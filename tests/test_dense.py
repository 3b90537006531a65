"""`loopdyn.dense` against LAPACK (numpy): decompositions and solves on random, rank-deficient and
ill-conditioned matrices, the pseudo-inverse's derivative against ``jnp.linalg.pinv``'s and
finite differences, and no LAPACK call left in a batched program."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from loopdyn import dense

SHAPES = [(1, 1), (2, 3), (6, 9), (9, 6), (16, 16)]


def _relative(a, b):
    return np.max(np.abs(np.asarray(a) - b)) / max(np.max(np.abs(b)), 1e-300)


@pytest.mark.parametrize("shape", SHAPES)
def test_svd_matches_lapack(shape):
    a = np.random.default_rng(sum(shape)).normal(size=shape)
    u, s, vt = dense.svd(jnp.asarray(a))
    k = min(shape)
    assert u.shape == (shape[0], k) and s.shape == (k,) and vt.shape == (k, shape[1])
    assert _relative(s, np.linalg.svd(a, compute_uv=False)) < 1e-14
    assert np.max(np.abs(u * s @ vt - a)) < 1e-14 * np.max(np.abs(a)) * k
    assert np.max(np.abs(u.T @ u - np.eye(k))) < 1e-14
    assert np.max(np.abs(vt @ vt.T - np.eye(k))) < 1e-14
    assert _relative(dense.pinv(jnp.asarray(a)), np.linalg.pinv(a)) < 1e-13


def test_rank_deficient_and_ill_conditioned():
    rng = np.random.default_rng(0)
    low_rank = rng.normal(size=(6, 3)) @ rng.normal(size=(3, 9))
    s = np.asarray(dense.singular_values(jnp.asarray(low_rank)))
    assert np.max(np.abs(s[:3] / np.linalg.svd(low_rank, compute_uv=False)[:3] - 1)) < 1e-14
    assert np.max(s[3:]) < 1e-14 * s[0]
    assert _relative(dense.pinv(jnp.asarray(low_rank)), np.linalg.pinv(low_rank)) < 1e-13
    b = rng.normal(size=6)
    assert _relative(dense.lstsq(jnp.asarray(low_rank), b), np.linalg.lstsq(low_rank, b)[0]) < 1e-13
    u, _, vt = np.linalg.svd(rng.normal(size=(6, 6)))
    graded = np.logspace(0, -12, 6)
    s = np.asarray(dense.singular_values(jnp.asarray(u * graded @ vt)))
    assert np.max(np.abs(s - graded)) < 1e-15  # absolute accuracy eps |A|, as LAPACK's
    # Graded 16 x 16 needs the most Jacobi sweeps (`dense._jacobi`): the worst of 64 decides.
    u, v = (np.linalg.qr(rng.normal(size=(64, 16, 16)))[0] for _ in range(2))
    graded = np.logspace(0, -12, 16)
    s = np.asarray(jax.vmap(dense.singular_values)(jnp.asarray(u * graded @ v)))
    assert np.max(np.abs(s - graded)) < 1e-14


@pytest.mark.parametrize("n", [1, 7, 17])
def test_cholesky_and_solves_match_lapack(n):
    rng = np.random.default_rng(n)
    a = rng.normal(size=(n, n))
    spd, b = a @ a.T + n * np.eye(n), rng.normal(size=(n, 2))
    factor = dense.cholesky(jnp.asarray(spd))
    assert _relative(factor, np.linalg.cholesky(spd)) < 1e-14
    for rhs in (b, b[:, 0]):
        assert (
            _relative(dense.cho_solve(factor, jnp.asarray(rhs)), np.linalg.solve(spd, rhs)) < 1e-13
        )
        assert (
            _relative(dense.solve(jnp.asarray(a), jnp.asarray(rhs)), np.linalg.solve(a, rhs))
            < 1e-11
        )


def test_cholesky_of_an_indefinite_matrix_is_not_finite():
    assert not np.all(np.isfinite(dense.cholesky(jnp.asarray([[1.0, 2.0], [2.0, 1.0]]))))


def test_pinv_derivative():
    rng = np.random.default_rng(3)
    a, da = jnp.asarray(rng.normal(size=(5, 8))), jnp.asarray(rng.normal(size=(5, 8)))
    tangent = jax.jvp(dense.pinv, (a,), (da,))[1]
    assert _relative(tangent, np.asarray(jax.jvp(jnp.linalg.pinv, (a,), (da,))[1])) < 1e-12
    h = 1e-6
    central = (np.linalg.pinv(a + h * da) - np.linalg.pinv(a - h * da)) / (2 * h)
    assert _relative(tangent, central) < 1e-8
    loss = lambda a: jnp.sum(dense.pinv(a) ** 3)
    grad = jax.grad(loss)(a)
    assert abs(jnp.vdot(grad, da) - jax.jvp(loss, (a,), (da,))[1]) < 1e-12 * jnp.linalg.norm(grad)


def test_batched_programs_call_no_lapack():
    """The point of the module: under vmap no jaxlib LAPACK kernel (whose batch loop on XLA's
    CPU pool was seen to deadlock) is left in the program."""

    def every(a, spd, b):
        return (
            dense.pinv(a),
            dense.singular_values(a),
            dense.cho_solve(dense.cholesky(spd), b),
            dense.solve(spd, b),
        )

    text = (
        jax.jit(jax.vmap(every))
        .lower(jnp.zeros((4, 6, 9)), jnp.zeros((4, 7, 7)), jnp.zeros((4, 7)))
        .as_text()
    )
    assert not re.search("lapack", text)
    rng = np.random.default_rng(5)
    a, m = rng.normal(size=(4, 6, 9)), rng.normal(size=(4, 7, 7))
    spd = np.einsum("bij,bkj->bik", m, m) + np.eye(7)
    b = rng.normal(size=(4, 7))
    batched = jax.jit(jax.vmap(every))(a, spd, b)
    for k in range(4):
        assert _relative(batched[0][k], np.linalg.pinv(a[k])) < 1e-13
        assert _relative(batched[2][k], np.linalg.solve(spd[k], b[k])) < 1e-13
        assert _relative(batched[3][k], np.linalg.solve(spd[k], b[k])) < 1e-13


def test_batched_large_matrices_go_to_lapack_one_matrix_per_call():
    """Above `dense.UNROLL` the routines call LAPACK, under vmap one matrix per call inside a
    loop (a batched call's wait on XLA's pool could deadlock, tests/test_batched_lapack.py):
    results and derivatives equal jnp.linalg's, nested vmap included."""
    n = dense.UNROLL + 4
    rng = np.random.default_rng(7)
    m = rng.normal(size=(3, n, n))
    spd, b = jnp.asarray(np.einsum("bij,bkj->bik", m, m) + n * np.eye(n)), jnp.asarray(m[..., :2])

    def every(spd, b):
        return (
            dense.cho_solve(dense.cholesky(spd), b),
            dense.solve(spd, b),
            dense.singular_values(spd),
            dense.pinv(spd),
        )

    def reference(spd, b):
        return (
            jax.scipy.linalg.cho_solve((jnp.linalg.cholesky(spd), True), b),
            jnp.linalg.solve(spd, b),
            jnp.linalg.svd(spd, compute_uv=False),
            jnp.linalg.pinv(spd),
        )

    text = jax.jit(jax.vmap(every)).lower(spd, b).as_text()
    assert re.search("lapack", text) and "while" in text
    for ours, theirs in zip(jax.vmap(jax.vmap(every))(spd[None], b[None]), reference(spd, b)):
        assert _relative(ours[0], theirs) < 1e-12
    loss = lambda f: lambda spd, b: sum(jnp.sum(x**2) for x in jax.vmap(f)(spd, b))
    for ours, theirs in zip(
        jax.grad(loss(every), (0, 1))(spd, b), jax.grad(loss(reference), (0, 1))(spd, b)
    ):
        assert _relative(ours, theirs) < 1e-12
