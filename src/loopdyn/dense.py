"""Small dense linear algebra without LAPACK calls for small matrices (unrolled at trace time).

The closed-loop methods solve many tiny systems (loop Jacobians of a few rows, subsystem inertia
blocks). Under ``vmap`` jaxlib turns ``jnp.linalg`` calls into one LAPACK call per matrix, run by a
batch loop on XLA's CPU thread pool. That loop is slow for matrices this small. It can also
deadlock when two such calls run at once on a pool with as many threads as cores (seen with
jax 0.10: both pool threads wait inside the batched SVD for work queued behind them). The
versions here are elementwise arithmetic over the batch instead. Above ``UNROLL``: a single
Cholesky factor and its solves are XLA loops, one column or row per iteration (`_by_batch`), so
a loop around them (a simulation's steps) still compiles into one kernel
(`loopdyn.compilation`); under ``vmap`` they, and LU factors and SVDs always, go to LAPACK, one
matrix per call (`_looped`), in derivative programs too: JAX would differentiate a
``jnp.linalg`` routine with batched calls, and cannot transpose the loop, so the factorisations
see no derivatives. Their derivative rules are written out (``custom_jvp``), and each solve with
the factors is a ``lax.custom_linear_solve``, which JAX differentiates from the system it solves
and transposes by solving with the transpose.

- `cholesky`, `cho_solve`: ``A = L L^T`` column by column, then two triangular substitutions;
  `spd_solve` both at once, with the factor's pivots (one matrix: Gauss-Jordan elimination with
  the same pivots, fewer operations).
- `solve`: Gaussian elimination with partial pivoting (row swaps as one-hot arithmetic).
- `svd`, `singular_values`, `pinv`, `lstsq`, `complement`: one-sided Jacobi (Hestenes 1958):
  plane rotations of the rows of ``A``, disjoint pairs at once in a loop (not unrolled, so the
  program does not grow with the size), until they are mutually orthogonal; then
  ``A = U diag(s) V^T`` with the row norms as ``s``. Accurate to a few ulps relative to ``|A|``,
  rank-revealing like LAPACK's SVD. `pinv` and `complement` differentiate by formulas for constant
  rank (Golub and Pereyra 1973), not through the rotations.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

UNROLL = 16  # largest dimension unrolled; above it, LAPACK


def _looped(f):
    """``f``, whose LAPACK calls take one matrix, run under ``vmap`` on the CPU as a loop over the
    batch (``lax.map``). jaxlib hands a batched LAPACK call's matrices to XLA's CPU thread pool
    and waits for them there; two such calls in one program can occupy every thread of a small
    pool while their work waits behind them, forever (seen on 2 cores with jax 0.10: three
    independent batched calls of 256 matrices hang, looped they do not). On a GPU the batch
    stays whole (one batched solver call; looped, the 8-loop ladder's batched SLM took an H200
    200 times longer). Not differentiable on the CPU (JAX cannot transpose the loop): for inputs
    that are not differentiated."""

    @jax.custom_batching.custom_vmap
    def call(*args):
        return f(*args)

    @call.def_vmap
    def rule(axis_size, in_batched, *args):
        args = _batched(axis_size, in_batched, args)
        out = jax.vmap(f)(*args) if _whole() else lax.map(lambda xs: call(*xs), args)
        return out, jax.tree.map(lambda _: True, out)

    return call


def _batched(axis_size, in_batched, args):
    """``args`` with the batch axis ``axis_size`` added to those ``vmap`` did not batch."""
    return [
        x if batched else jnp.broadcast_to(x, (axis_size, *x.shape))
        for x, batched in zip(args, in_batched)
    ]


def _whole():
    """Whether batched LAPACK-backed calls keep their batch whole: off the CPU (`_looped`)."""
    return jax.default_backend() != "cpu"


_lu = _looped(lambda a: lax.linalg.lu(a)[::2])  # (packed L\U, row permutation)
_gesdd = _looped(lambda a: tuple(jnp.linalg.svd(a, full_matrices=False)))
_gesdd_values = _looped(lambda a: jnp.linalg.svd(a, compute_uv=False))
_lapack_pinv = _looped(lambda a: jnp.linalg.pinv(a))  # not its defaults as arguments
_lapack_complement = _looped(lambda c: jnp.linalg.svd(c.T)[2][c.shape[1] :].T)


def _trsm(t, b, lower, transpose=False, unit=False):
    """``op(T)^-1 b`` for the lower or upper triangle ``T`` of ``t`` (ones on its diagonal when
    ``unit``; ``op`` transposes when ``transpose``), ``b`` a matrix: one LAPACK call."""
    return lax.linalg.triangular_solve(
        t, b, left_side=True, lower=lower, transpose_a=transpose, unit_diagonal=unit
    )


def _looped_columns(kernel):
    """``kernel(*factors, b)``, whose LAPACK solves treat the columns of a matrix ``b``
    independently, for ``b`` a vector or matrix: looped on the CPU as `_looped`, but under
    ``vmap`` of ``b`` alone the batch becomes more columns of one call."""

    def columns(*args):
        b = args[-1]
        return kernel(*args[:-1], b.reshape(b.shape[0], -1)).reshape(b.shape)

    @jax.custom_batching.custom_vmap
    def solve(*args):
        return columns(*args)

    @solve.def_vmap
    def rule(axis_size, in_batched, *args):
        if not any(in_batched[:-1]):
            return jnp.moveaxis(solve(*args[:-1], jnp.moveaxis(args[-1], 0, -1)), -1, 0), True
        args = _batched(axis_size, in_batched, args)
        if _whole():
            return jax.vmap(columns)(*args), True
        return lax.map(lambda xs: solve(*xs), args), True

    return solve


_lu_solve = _looped_columns(
    lambda lu, perm, b: _trsm(lu, _trsm(lu, b[perm], True, unit=True), False)
)


def _lu_transposed(lu, perm, b):
    """``x`` with ``a^T x = U^T L^T P x = b`` from ``P a = L U``."""
    y = _trsm(lu, _trsm(lu, b, False, transpose=True), True, transpose=True, unit=True)
    return y[jnp.argsort(perm)]


_lu_transpose_solve = _looped_columns(_lu_transposed)


def _cholesky_loop(a):
    """Lower-triangular ``L`` with ``L L^T = a`` from ``a``'s lower triangle, right-looking: the
    column of each pivot scaled by its square root, the trailing matrix then reduced by that
    column's outer product (upper entries of ``L`` zero; NaN from a non-positive pivot on)."""
    n = a.shape[-1]
    rows = jnp.arange(n)

    def column(j, state):
        a, l = state
        c = lax.dynamic_index_in_dim(a, j, 1, keepdims=False)
        c = jnp.where(rows >= j, c, 0.0) / jnp.sqrt(c[j])
        return a - c[:, None] * c[None, :], lax.dynamic_update_index_in_dim(l, c, j, 1)

    return lax.fori_loop(0, n, column, (jnp.tril(a), jnp.zeros_like(a)))[1]


def _substitution(t, b, lower, transpose=False):
    """`_trsm` without ``unit`` as an XLA loop: one row of the solution per iteration (forward
    for a lower ``op(T)``, backward for an upper one)."""
    n = t.shape[-1]
    m = jnp.tril(t, -1) if lower else jnp.triu(t, 1)
    m, lower = (m.T, not lower) if transpose else (m, lower)
    pivots = jnp.diagonal(t)

    def row(k, x):
        i = k if lower else n - 1 - k
        coupled = jnp.sum(lax.dynamic_index_in_dim(m, i, 0, keepdims=False)[:, None] * x, 0)
        x_i = (lax.dynamic_index_in_dim(b, i, 0, keepdims=False) - coupled) / pivots[i]
        return lax.dynamic_update_index_in_dim(x, x_i, i, 0)

    return lax.fori_loop(0, n, row, jnp.zeros_like(b))


def _by_batch(kernel, columns=False):
    """``kernel(*args, lapack)`` with XLA loops (``lapack`` False: `_cholesky_loop`,
    `_substitution`) for one matrix, so that a loop around it (a simulation's steps) still
    compiles into one kernel; under ``vmap`` with LAPACK, one matrix per call (`_looped`), whose
    blocked code beats the loops per matrix (32 x 32, one core: Cholesky 3.1 vs 5.3 us, a
    triangular solve of 10 columns 2.9 vs 5.3 us), or, for a solve for the columns of its last
    argument ``b`` (``columns``; a vector or matrix) whose factors are not batched, one call
    with the batch as more columns."""

    @jax.custom_batching.custom_vmap
    def call(*args):
        if not columns:
            return kernel(*args, False)
        b = args[-1]
        return kernel(*args[:-1], b.reshape(b.shape[0], -1), False).reshape(b.shape)

    lapack = (_looped_columns if columns else _looped)(lambda *args: kernel(*args, True))

    @call.def_vmap
    def rule(axis_size, in_batched, *args):
        return jax.vmap(lapack, [0 if batched else None for batched in in_batched])(*args), True

    return call


def _triangular(lapack):
    return _trsm if lapack else _substitution


def _sandwich(l, s, lapack, transpose):
    """``op(L)^-1 s op(L)^-T`` for the lower triangle ``L`` of ``l`` (``op`` transposes when
    ``transpose``)."""
    solve = functools.partial(_triangular(lapack), l, lower=True, transpose=transpose)
    return solve(solve(s).T).T


_potrf = _by_batch(
    lambda a, lapack: (
        lax.linalg.cholesky(a, symmetrize_input=False) if lapack else _cholesky_loop(a)
    )
)


def _cho(l, b, lapack):
    """``(L L^T)^-1 b`` for the lower triangle ``L`` of ``l``, ``b`` a matrix."""
    solve = functools.partial(_triangular(lapack), l, lower=True)
    return solve(solve(b), transpose=True)


_cho_solve = _by_batch(_cho, columns=True)
_sandwiches = tuple(
    _by_batch(functools.partial(_sandwich, transpose=transpose)) for transpose in (False, True)
)


@jax.custom_jvp
def _large_cholesky(a):
    """`_potrf` of ``(a + a^T) / 2`` (as ``jnp.linalg.cholesky``)."""
    return _potrf((a + a.T) / 2)


@_large_cholesky.defjvp
def _large_cholesky_jvp(primals, tangents):
    """``dL = L Phi(L^-1 dA L^-T)``, ``Phi`` the lower triangle with the diagonal halved; the
    inverse of ``X -> L X L^T`` as a linear solve, which JAX transposes by solving with
    ``Y -> L^T Y L``."""
    (a,), (da,) = primals, tangents
    l = _large_cholesky(a)
    t = jnp.tril(l)
    x = lax.custom_linear_solve(
        lambda x: t @ x @ t.T,
        (da + da.T) / 2,
        lambda _, s: _sandwiches[0](l, s),
        lambda _, s: _sandwiches[1](l, s),
    )
    return l, l @ (jnp.tril(x) - jnp.diag(jnp.diagonal(x)) / 2)


def _large_cho_solve(l, b):
    """``(L L^T)^-1 b`` for the lower triangle ``L`` of ``l``, a linear solve: derivatives in
    ``l`` implicitly, from ``L L^T x = b``."""
    t = jnp.tril(l)
    return lax.custom_linear_solve(
        lambda x: t @ (t.T @ x), b, lambda _, r: _cho_solve(l, r), symmetric=True
    )


def _lapack_solve(a, b):
    """``a^-1 b`` from LAPACK's ``P a = L U``, factorised without derivatives: a linear solve,
    whose derivatives follow from ``a x = b``."""
    lu, perm = _lu(lax.stop_gradient(a))
    return lax.custom_linear_solve(
        lambda x: a @ x,
        b,
        lambda _, r: _lu_solve(lu, perm, r),
        lambda _, r: _lu_transpose_solve(lu, perm, r),
    )


@jax.custom_jvp
def _lapack_svd(a):
    return _gesdd(a)


@_lapack_svd.defjvp
def _lapack_svd_jvp(primals, tangents):
    """Distinct nonzero singular values: with ``dP = U^T dA V`` and ``F_ij = 1 / (s_j^2 - s_i^2)``
    (0 for ``i = j``), ``ds = diag(dP)``, ``dU = U (F o (dP S + S dP^T)) + (I - U U^T) dA V S^-1``,
    ``dV = V (F o (S dP + dP^T S)) + (I - V V^T) dA^T U S^-1``."""
    (a,), (da,) = primals, tangents
    u, s, vt = _lapack_svd(a)
    v, dp = vt.T, u.T @ da @ vt.T
    same = jnp.eye(s.shape[0], dtype=bool)
    f = jnp.where(same, 0.0, 1.0 / jnp.where(same, 1.0, s**2 - s[:, None] ** 2))
    du = u @ (f * (dp * s + s[:, None] * dp.T))
    dv = v @ (f * (s[:, None] * dp + dp.T * s))
    if u.shape[0] > s.shape[0]:
        du = du + (da @ v - u @ dp) / s
    if v.shape[0] > s.shape[0]:
        dv = dv + (da.T @ u - v @ dp.T) / s
    return (u, s, vt), (du, jnp.diagonal(dp), dv.T)


@jax.custom_jvp
def _lapack_singular_values(a):
    return _gesdd_values(a)


@_lapack_singular_values.defjvp
def _lapack_singular_values_jvp(primals, tangents):
    """``ds_k = u_k^T dA v_k``."""
    (a,), (da,) = primals, tangents
    u, s, vt = _lapack_svd(a)
    return s, jnp.sum(u * (da @ vt.T), 0)


def _entries(a):
    """The entries of the last two axes of ``a`` as nested lists (batch axes kept)."""
    return [[a[..., i, j] for j in range(a.shape[-1])] for i in range(a.shape[-2])]


def _matrix(rows):
    """Nested lists of entries back to one array: a single stack, so XLA sees one operation."""
    return jnp.stack([jnp.stack(row, -1) for row in rows], -2)


# A squared pivot this much smaller than its matrix's scale means a rank-deficient matrix (in the
# closed-loop methods: singular or redundant constraints).
PIVOT_RTOL = 1e-13


def small_pivots(pivots, scale):
    """Whether a factorisation's pivot vanishes: ``pivot^2 <= PIVOT_RTOL * scale`` for one of
    ``pivots``, or one is not finite."""
    squares = pivots**2
    return ~jnp.all(jnp.isfinite(squares)) | jnp.any(squares <= PIVOT_RTOL * scale)


@jax.jit
def cholesky(a):
    """Lower-triangular ``L`` with ``L L^T = a`` (symmetric positive definite ``a``, lower
    triangle read; above ``UNROLL``, ``(a + a^T) / 2`` as ``jnp.linalg.cholesky``); NaN where ``a``
    is not positive definite, like LAPACK's. Unrolled as scalar expressions of the entries,
    stacked once: the entries of one column scale by one reciprocal of its pivot, so XLA fuses
    the whole factorisation into a few operations."""
    if a.shape[-1] > UNROLL:
        return _large_cholesky(a)
    return _matrix(_factor(_entries(a)))


def _factor(a):
    """`cholesky` on entries (nested lists), zeros above the diagonal."""
    n, zero = len(a), jnp.zeros_like(a[0][0])
    l = [[zero] * n for _ in range(n)]
    for j in range(n):
        pivot = jnp.sqrt(a[j][j] - sum((l[j][k] ** 2 for k in range(j)), zero))
        scale = 1.0 / pivot
        l[j][j] = pivot
        for i in range(j + 1, n):
            l[i][j] = (a[i][j] - sum((l[i][k] * l[j][k] for k in range(j)), zero)) * scale
    return l


def _substitute(l, b, rows, transpose):
    """``x`` with ``l x = b`` (``l^T x = b`` when ``transpose``) for triangular ``l`` given as
    entries, ``b`` as a list of rows, solving the ``rows`` in the order given."""
    x = {}
    for k in rows:
        coupled = sum(((l[j][k] if transpose else l[k][j]) * x[j] for j in x), 0.0)
        x[k] = (b[k] - coupled) / l[k][k]
    return [x[k] for k in range(len(b))]


@jax.jit
def cho_solve(l, b):
    """``a^-1 b`` from ``l = cholesky(a)``; ``b`` a vector or a matrix of columns."""
    n = l.shape[-1]
    if n > UNROLL:
        return _large_cho_solve(l, b)
    return _solve_factored(_entries(l), b)


def _solve_factored(l, b):
    """`cho_solve` with the factor as entries."""
    y = _substitute(l, [b[k] for k in range(len(l))], range(len(l)), False)
    return jnp.stack(_substitute(l, y, reversed(range(len(l))), True))


def spd_solve(a, b):
    """``(a^-1 b, pivots)`` for symmetric positive definite ``a`` and ``b`` a vector or a matrix
    of columns, ``pivots`` the diagonal of the Cholesky factor (both NaN where ``a`` is not
    positive definite). One matrix of 3 to `UNROLL` rows takes `_gauss_jordan`, n operations on
    the whole matrix (both triangles read); under ``vmap``, and for 1 or 2 rows, `cholesky` and
    `cho_solve` on entries (lower triangle read) without forming the factor, whose operations
    are vectors over the batch (by columns, a batch of 4096 5x5 solves took 523 instead of 244
    ns per matrix). Derivatives as those of `cholesky` and `cho_solve`."""
    n = a.shape[-1]
    if n > UNROLL:
        factor = _large_cholesky(a)
        return _large_cho_solve(factor, b), jnp.diagonal(factor)
    return (_by_entries if n < 3 else _one_or_many)(a, b)


def _by_entries(a, b):
    """`spd_solve` by `cholesky` and `cho_solve` on entries, without forming the factor."""
    l = _factor(_entries(a))
    return _solve_factored(l, b), jnp.stack([l[j][j] for j in range(len(l))])


def _gauss_jordan(a, b):
    """`spd_solve` of one matrix: Gauss-Jordan elimination without pivoting, as column
    operations on ``[a; b^T]`` (the transposed row operations on ``[a | b]``, ``a`` symmetric,
    both triangles read): step j divides column j by its pivot ``d_j`` and subtracts the
    column's multiples from all others, ending at ``[I; (a^-1 b)^T]``. The pivots are those of
    the Cholesky factorisation (``d_j = L_jj^2``, the diagonal of the j-th Schur complement;
    positive, so no growth, for positive definite ``a``), and each step is one operation on the
    whole matrix: a 5x5 solve of 5 columns with its pivots lowered to 68 operations, against
    156 for the column-oriented Cholesky factorisation and substitutions it replaced, and took
    295 instead of 327 ns inside a compiled loop (one core, medians of 9 runs; an eager call
    16.1 instead of 15.0 us), with errors of the same size (against exact rational solutions of
    random 5x5 matrices of condition 1e1 to 1e12: 5e-16 to 6e-6 relative, Cholesky 4e-16 to
    8e-6; 2026-12-07)."""
    n = a.shape[-1]
    y = b[:, None] if b.ndim == 1 else b
    m, squares = jnp.concatenate([a, y.T]), []
    unit = np.eye(n, dtype=m.dtype)
    for j in range(n):  # slices keeping both axes: no reshapes
        squares.append(m[j : j + 1, j : j + 1])
        m = m - m[:, j : j + 1] / squares[j] * (m[j : j + 1] - unit[j : j + 1])
    pivots = jnp.sqrt(jnp.concatenate(squares)[:, 0])
    x = m[n:].T + 0.0 * jnp.sum(pivots)  # NaN, as by Cholesky, where ``a`` is not definite
    return (x[:, 0] if b.ndim == 1 else x), pivots


@jax.custom_jvp
def _one_or_many(a, b):
    return _gauss_jordan_or_entries(a, b)


_one_or_many.defjvp(lambda primals, tangents: jax.jvp(_by_entries, primals, tangents))


@jax.custom_batching.custom_vmap
def _gauss_jordan_or_entries(a, b):
    return _gauss_jordan(a, b)


@_gauss_jordan_or_entries.def_vmap
def _batched_by_entries(axis_size, in_batched, a, b):
    axes = tuple(0 if batched else None for batched in in_batched)
    return jax.vmap(_by_entries, in_axes=axes)(a, b), (True, True)


@jax.jit
def solve(a, b):
    """``a^-1 b`` for square ``a``, Gaussian elimination with partial pivoting."""
    n = a.shape[-1]
    if n > UNROLL:
        return _lapack_solve(a, b)
    rows, trailing = jnp.arange(n), (1,) * (b.ndim - 1)
    for k in range(n):  # forward elimination
        pivot = k + jnp.argmax(jnp.abs(a[k:, k]))
        swap = (rows == k).astype(a.dtype) - (rows == pivot).astype(a.dtype)
        a = a - swap[:, None] * (a[k] - a[pivot])[None, :]
        b = b - swap.reshape(n, *trailing) * (b[k] - b[pivot])[None]
        factor = a[k + 1 :, k] / a[k, k]
        a = a.at[k + 1 :].add(-factor[:, None] * a[k][None, :])
        b = b.at[k + 1 :].add(-factor.reshape(n - k - 1, *trailing) * b[k][None])
    return jnp.stack(_substitute(_entries(a), [b[k] for k in range(n)], reversed(range(n)), False))


def _rotation(top, bottom):
    """Cosines and sines ``(c, s)`` of the Jacobi rotations making rows ``top[k]`` and
    ``bottom[k]`` orthogonal, as columns."""
    alpha, beta = jnp.sum(top * top, 1), jnp.sum(bottom * bottom, 1)
    gamma = jnp.sum(top * bottom, 1)
    done = gamma == 0.0
    zeta = (beta - alpha) / (2.0 * jnp.where(done, 1.0, gamma))
    t = jnp.where(done, 0.0, jnp.sign(zeta) / (jnp.abs(zeta) + jnp.hypot(1.0, zeta)))
    t = jnp.where(done | (zeta != 0.0), t, 1.0)
    c = 1.0 / jnp.sqrt(1.0 + t * t)
    return c[:, None], (c * t)[:, None]


@jax.jit
def _jacobi(a):
    """Rows ``w = g a`` mutually orthogonal, ``g`` orthogonal (``m - rank(a)`` rows of ``w``
    vanish: the null space of ``a^T`` in ``g``).

    Round-robin ordering (Brent and Luk 1985): each sweep is ``m - 1`` rounds (``m`` made even by
    a leading zero row, which no rotation moves) of ``m / 2`` disjoint row pairs rotated at once;
    after each round every row but the first moves one place around the cycle of pairs.
    ``6 + m // 2`` sweeps: singular values graded from 1 to 1e-12, the slowest to converge seen,
    reach rounding level in 4 sweeps at ``m = 4``, 8 at ``m = 8`` and 13 at ``m = 16``."""
    m, n = a.shape
    odd, half = m % 2, (m + 1) // 2

    def split(x):
        return x[:half], x[half:]

    def advance(top, bottom):
        cycle = jnp.roll(jnp.concatenate([top[1:], bottom[::-1]]), 1, axis=0)
        return jnp.concatenate([top[:1], cycle[: half - 1]]), cycle[half - 1 :][::-1]

    def round_(_, state):
        c, s = _rotation(*state[0])  # from the rows of w, applied to those of g too
        return tuple(advance(c * top - s * bottom, s * top + c * bottom) for top, bottom in state)

    w = jnp.concatenate([jnp.zeros((odd, n), a.dtype), a])
    state = split(w), split(jnp.eye(m + odd, dtype=a.dtype))
    w, g = (
        jnp.concatenate(x)
        for x in jax.lax.fori_loop(0, (6 + m // 2) * (2 * half - 1), round_, state)
    )
    return w[odd:], g[odd:, odd:]


@jax.jit
def svd(a):
    """``(u, s, vt)`` with ``a = u @ diag(s) @ vt``, ``s`` descending, thin (``k = min(m, n)``)."""
    m, n = a.shape
    if min(m, n) > UNROLL:
        return _lapack_svd(a)
    if m > n:
        u, s, vt = svd(a.T)
        return vt.T, s, u.T
    w, g = _jacobi(a)
    s = jnp.linalg.norm(w, axis=1)
    vt = w / jnp.where(s > 0.0, s, 1.0)[:, None]
    order = jnp.argsort(-s)
    return g.T[:, order], s[order], vt[order]


@jax.jit
def singular_values(a):
    """Singular values of ``a``, descending."""
    if min(a.shape) > UNROLL:
        return _lapack_singular_values(a)
    return svd(a)[1]


def _rtol(a):
    return 10.0 * max(a.shape) * jnp.finfo(a.dtype).eps


@jax.jit
def pinv(a):
    """Moore-Penrose pseudo-inverse, singular values below ``10 max(m, n) eps`` times the largest
    dropped (as ``jnp.linalg.pinv``)."""
    return _pinv(a)


@jax.custom_jvp
def _pinv(a):
    if min(a.shape) > UNROLL:
        return _lapack_pinv(a)
    u, s, vt = svd(a)
    keep = s > _rtol(a) * jnp.max(s, initial=0.0)
    return (vt.T * jnp.where(keep, 1.0 / jnp.where(keep, s, 1.0), 0.0)) @ u.T


@_pinv.defjvp
def _pinv_jvp(primals, tangents):
    (a,), (da,) = primals, tangents
    p = _pinv(a)
    dp = (
        -p @ da @ p
        + p @ p.T @ da.T @ (jnp.eye(a.shape[0], dtype=a.dtype) - a @ p)
        + (jnp.eye(a.shape[1], dtype=a.dtype) - p @ a) @ da.T @ p.T @ p
    )
    return p, dp


@jax.jit
def lstsq(a, b):
    """Minimum-norm least-squares solution of ``a x = b`` (``pinv(a) @ b``)."""
    return pinv(a) @ b


@jax.custom_jvp
def complement(c):
    """Orthonormal basis ``(d, d - k)`` of the vectors orthogonal to the columns of ``c``
    ``(d, k)``, of rank ``k``: the rows of the rotation `_jacobi` builds whose rows of ``w`` vanish
    (LAPACK's full SVD for ``d > UNROLL``). Its derivative moves the basis along the columns only,
    ``dN = -pinv(c)^T dc^T N``, which keeps ``c^T N = 0`` and ``N^T N = I``."""
    d, k = c.shape
    if d > UNROLL:
        return _lapack_complement(c)
    w, g = _jacobi(c)
    return g[jnp.argsort(-jnp.linalg.norm(w, axis=1))[k:]].T


@complement.defjvp
def _complement_jvp(primals, tangents):
    (c,), (dc,) = primals, tangents
    n = complement(c)
    return n, -pinv(c).T @ (dc.T @ n)
