"""`loopdyn.dense` against LAPACK (numpy): decompositions and solves on random, rank-deficient and
ill-conditioned matrices, the pseudo-inverse's derivative against ``jnp.linalg.pinv``'s and
finite differences, no LAPACK call left in a batched program, and above ``UNROLL`` no batched
LAPACK call in derivative programs either, whose derivatives equal ``jnp.linalg``'s."""

import functools
import re
from fractions import Fraction

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


def _exact_solve(a, b):
    """``a^-1 b`` in rational arithmetic (Gauss-Jordan on the floats' exact values), rounded."""
    rows = [[Fraction(v) for v in (*r, *s)] for r, s in zip(a.tolist(), b.tolist())]
    n = len(rows)
    for j in range(n):
        for i in range(n):
            if i != j:
                ratio = rows[i][j] / rows[j][j]
                rows[i] = [u - ratio * v for u, v in zip(rows[i], rows[j])]
    return np.array([[float(v / rows[i][i]) for v in rows[i][n:]] for i in range(n)])


@pytest.mark.parametrize("n", [3, 5, 8])
def test_spd_solve_of_one_matrix_against_exact_solutions(n):
    """One matrix of 3 to ``UNROLL`` rows (`dense._gauss_jordan`): solutions within
    ``cond * eps`` of the exact ones at conditions 1e2 to 1e10 (measured: 0.11 of it), pivots the
    Cholesky factor's diagonal (LAPACK's, 3e-15 relative at condition 1e2), a vector right-hand
    side as a column, and the batched path (`dense._by_entries`) agreeing."""
    rng = np.random.default_rng(n)
    for cond in (1e2, 1e6, 1e10):
        u = np.linalg.qr(rng.normal(size=(n, n)))[0]
        a = (u * np.logspace(0, -np.log10(cond), n)) @ u.T
        a, b = (a + a.T) / 2, rng.normal(size=(n, 3))
        x, pivots = dense.spd_solve(jnp.asarray(a), jnp.asarray(b))
        assert _relative(x, _exact_solve(a, b)) < cond * np.finfo(float).eps
        vector = dense.spd_solve(jnp.asarray(a), jnp.asarray(b[:, 0]))[0]
        assert _relative(vector, np.asarray(x)[:, 0]) < 1e-15 * cond
        batched = jax.vmap(dense.spd_solve, (None, 1), 1)(jnp.asarray(a), jnp.asarray(b[:, None]))
        assert _relative(batched[0][:, 0], x) < 1e-15 * cond
        if cond == 1e2:
            assert _relative(pivots, np.diagonal(np.linalg.cholesky(a))) < 3e-14


def test_spd_solve_of_one_matrix_keeps_float32():
    """float32 in, float32 out (with float64 enabled), within float32's rounding of the float64
    solution (measured 5e-7 relative)."""
    rng = np.random.default_rng(3)
    a = rng.normal(size=(5, 5))
    spd, b = a @ a.T + 5 * np.eye(5), rng.normal(size=(5, 2))
    x, pivots = dense.spd_solve(jnp.asarray(spd, jnp.float32), jnp.asarray(b, jnp.float32))
    assert x.dtype == pivots.dtype == jnp.float32
    assert _relative(x, np.linalg.solve(spd, b)) < 5e-6


@pytest.mark.parametrize("n", [3, 6])
def test_spd_solve_of_an_indefinite_matrix_is_not_finite(n):
    a = np.eye(n)
    a[0, 1] = a[1, 0] = 2.0
    x, pivots = dense.spd_solve(jnp.asarray(a), jnp.ones(n))
    assert not np.all(np.isfinite(pivots)) and not np.all(np.isfinite(x))


@pytest.mark.parametrize("n", [2, dense.UNROLL + 1])
def test_cholesky_of_an_indefinite_matrix_is_not_finite(n):
    a = np.eye(n)
    a[0, 1] = a[1, 0] = 2.0
    factor = np.asarray(dense.cholesky(jnp.asarray(a)))
    assert not np.all(np.isfinite(np.diagonal(factor)))


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


N = dense.UNROLL + 4  # the looped (Cholesky) and LAPACK (LU, SVD) paths
LAPACK_CALL = re.compile(r"custom_call @(\w*lapack\w*)\(.*:\s*\((.*?)\)\s*->")


def _lapack_operand_ranks(program, *args):
    """``(target, ranks of its operands)`` of every LAPACK call in ``program``'s lowered text."""
    text = jax.jit(program).lower(*args).as_text()
    return [
        (call[1], [kind.count("x") for kind in re.findall(r"tensor<([^>]*)>", call[2])])
        for call in map(LAPACK_CALL.search, text.splitlines())
        if call
    ]


def _spd(a):
    return a @ a.T + a.shape[0] * jnp.eye(a.shape[0])


# Scalar functions of one matrix through each LAPACK-backed path (the argument's shape).
LAPACK_PATHS = {
    "cholesky, cho_solve": (
        lambda a: jnp.sum(dense.cho_solve(dense.cholesky(_spd(a)), a) ** 2),
        (N, N),
    ),
    "solve": (lambda a: jnp.sum(dense.solve(a + N * jnp.eye(N), a[:, :2]) ** 2), (N, N)),
    "svd": (lambda a: sum(jnp.sum(jnp.sin(x)) for x in dense.svd(a)), (N + 4, N)),
    "singular_values": (lambda a: jnp.sum(dense.singular_values(a) ** 3), (N, N + 4)),
    "pinv, lstsq": (lambda a: jnp.sum(dense.lstsq(a, a[:, 0]) ** 2), (N, N + 4)),
    "complement": (lambda a: jnp.sum(dense.complement(a[:, :5]).T @ a), (N, N)),
}


def _derivative_programs(f, shape):
    """Reverse and forward mode under vmap, vmap under reverse mode, nested vmaps: with args."""
    batch = jnp.ones((3, *shape)) + jnp.eye(*shape)
    return [
        (jax.vmap(jax.grad(f)), batch),
        (jax.vmap(jax.jacfwd(f)), batch),
        (jax.jacrev(jax.vmap(f)), batch),
        (jax.vmap(jax.vmap(jax.grad(f))), batch[None]),
    ]


def test_the_lapack_check_sees_batched_calls():
    """`_lapack_operand_ranks` finds the batched calls of JAX's own derivatives under vmap."""
    f = lambda a: jnp.sum(jnp.linalg.cholesky(_spd(a)) ** 2)
    for program, args in _derivative_programs(f, (N, N)):
        assert max(max(ranks) for _, ranks in _lapack_operand_ranks(program, args)) > 2


@pytest.mark.parametrize("path", LAPACK_PATHS)
def test_derivative_programs_make_no_batched_lapack_call(path):
    """Above `dense.UNROLL`, derivatives under vmap (either mode, either order, nested) call LAPACK
    on one matrix at a time, like the primal paths."""
    for program, args in _derivative_programs(*LAPACK_PATHS[path]):
        calls = _lapack_operand_ranks(program, args)
        assert calls and all(max(ranks) <= 2 for _, ranks in calls), calls


def test_one_large_cholesky_makes_no_lapack_call():
    """Above `dense.UNROLL`, one matrix's Cholesky factor and solves are XLA loops, in its
    derivative programs of one tangent too: no LAPACK call (so a loop around them compiles into
    one kernel); under vmap, ``jacfwd``'s included, they are LAPACK's (above)."""
    f = lambda a: jnp.sum(dense.cho_solve(dense.cholesky(_spd(a)), a) ** 2)
    a = jnp.ones((N, N)) + jnp.eye(N)
    for program in (f, jax.grad(f), lambda a: jax.jvp(f, (a,), (a,))):
        assert _lapack_operand_ranks(program, a) == []
    assert _lapack_operand_ranks(jax.vmap(f), a[None])
    assert _lapack_operand_ranks(jax.jacfwd(f), a)


@functools.partial(jax.jit, static_argnums=(0, 1))
def _tangents(ours, theirs, x, dx):
    """The tangents of ``ours`` and ``theirs`` at ``x`` along ``dx`` (as lists), and those of a
    scalar function of ``ours`` from forward and reverse mode."""
    loss = lambda *x: sum(jnp.sum(jnp.sin(y)) for y in jax.tree.leaves(ours(*x)))
    grad = jax.grad(loss, tuple(range(len(x))))(*x)
    return (
        jax.tree.leaves(jax.jvp(ours, x, dx)[1]),
        jax.tree.leaves(jax.jvp(theirs, x, dx)[1]),
        sum(jnp.vdot(g, d) for g, d in zip(grad, dx)),
        jax.jvp(loss, x, dx)[1],
    )


def test_derivatives_above_unroll_match_jnp_linalg():
    """Above `dense.UNROLL`: tangents equal jnp.linalg's (and central differences for the
    factorisations), gradients are their transposes, and right-hand sides batched alone (more
    columns of one LAPACK call) solve as one by one."""
    rng = np.random.default_rng(11)
    a, da, wide, dwide = (rng.normal(size=shape) for shape in 2 * [(N, N)] + 2 * [(N, N + 4)])
    spd, dspd, b, db = _spd(a), da + da.T, rng.normal(size=(N, 2)), rng.normal(size=(N, 2))
    cho_solve = lambda s, b: dense.cho_solve(dense.cholesky(s), b)
    svd = lambda a: jnp.linalg.svd(a, full_matrices=False)
    cases = {  # ours, jnp.linalg's, arguments, tangents
        "cholesky": (dense.cholesky, jnp.linalg.cholesky, (spd,), (dspd,)),
        "cho_solve": (
            cho_solve,
            lambda s, b: jax.scipy.linalg.cho_solve((jnp.linalg.cholesky(s), True), b),
            (spd, b),
            (dspd, db),
        ),
        "solve": (dense.solve, jnp.linalg.solve, (a, b), (da, db)),
        "svd wide": (dense.svd, svd, (wide,), (dwide,)),
        "svd tall": (dense.svd, svd, (wide.T,), (dwide.T,)),
        "singular_values": (dense.singular_values, lambda a: svd(a)[1], (wide,), (dwide,)),
        "pinv": (dense.pinv, jnp.linalg.pinv, (wide.T,), (dwide.T,)),
    }
    h, errors = 1e-6, {}
    for name, (ours, theirs, x, dx) in cases.items():
        tangent, expected, slope, linear = _tangents(ours, theirs, x, dx)
        errors[name, "jnp"] = max(map(_relative, tangent, expected))
        errors[name, "transpose"] = abs(slope - linear) / abs(linear)
        if name in ("cholesky", "cho_solve", "solve"):
            ahead, behind = (ours(*(y + s * h * dy for y, dy in zip(x, dx))) for s in (1, -1))
            errors[name, "differences"] = _relative(tangent[0], (ahead - behind) / (2 * h))
    factor = dense.cholesky(spd)
    for ours, matrix in ((dense.solve, a), (dense.cho_solve, factor)):
        by_columns = jax.vmap(ours, (None, 1), 1)(matrix, b)
        errors[ours.__name__, "columns"] = _relative(by_columns, ours(matrix, b))
    errors["solve", "jacfwd"] = _relative(jax.jacfwd(dense.solve, 1)(a, b[:, 0]), np.linalg.inv(a))
    # measured (float64): jnp 6.6e-16, transpose 2.8e-15, differences 1.1e-9, columns and jacfwd 0
    limits = {
        "jnp": 5e-15,
        "transpose": 3e-14,
        "differences": 1e-8,
        "columns": 1e-15,
        "jacfwd": 1e-15,
    }
    assert all(error < limits[kind] for (_, kind), error in errors.items()), errors


@jax.jit
def _complement_and_projectors(c, dc):
    """`dense.complement`, and the projectors on the complement with their tangents: through it
    and through ``I - c pinv(c)``."""
    projector = lambda c: dense.complement(c) @ dense.complement(c).T
    expected = lambda c: jnp.eye(c.shape[0]) - c @ jnp.linalg.pinv(c)
    return dense.complement(c), jax.jvp(projector, (c,), (dc,)), jax.jvp(expected, (c,), (dc,))


@pytest.mark.parametrize("shape", [(3, 2), (6, 1), (6, 5), (16, 9), (N, 5)])
def test_complement(shape):
    """An orthonormal basis orthogonal to the columns (Jacobi, LAPACK above `dense.UNROLL`): its
    projector and that projector's derivative are those of ``I - c pinv(c)``."""
    rng = np.random.default_rng(shape[0] + shape[1])
    c, dc = (jnp.asarray(rng.normal(size=shape)) for _ in range(2))
    basis, (projector, tangent), (expected, expected_tangent) = _complement_and_projectors(c, dc)
    assert basis.shape == (shape[0], shape[0] - shape[1])
    assert np.max(np.abs(basis.T @ basis - np.eye(basis.shape[1]))) < 1e-14
    assert np.max(np.abs(c.T @ basis)) < 5e-15 * np.max(np.abs(c))
    assert _relative(projector, expected) < 1e-14
    assert _relative(tangent, expected_tangent) < 5e-14
