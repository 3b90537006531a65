"""Small dense linear algebra unrolled at trace time: no LAPACK calls.

The closed-loop methods solve many tiny systems (loop Jacobians of a few rows, subsystem inertia
blocks). Under ``vmap`` jaxlib turns ``jnp.linalg`` calls into one LAPACK call per matrix, run by a
batch loop on XLA's CPU thread pool. That loop is slow for matrices this small. It can also
deadlock when two such calls run at once on a pool with as many threads as cores (seen with
jax 0.10: both pool threads wait inside the batched SVD for work queued behind them). The
versions here are elementwise arithmetic over the batch instead. Matrices larger than
``UNROLL`` go to ``jnp.linalg`` (their LAPACK time dominates the batch loop anyway), one matrix
per LAPACK call under ``vmap`` (`_one_matrix_per_call`), which keeps clear of that deadlock.

- `cholesky`, `cho_solve`: ``A = L L^T`` column by column, then two triangular substitutions.
- `solve`: Gaussian elimination with partial pivoting (row swaps as one-hot arithmetic).
- `svd`, `singular_values`, `pinv`, `lstsq`: one-sided Jacobi (Hestenes 1958): plane rotations
  of the rows of ``A``, disjoint pairs at once in a loop (not unrolled, so the program does not
  grow with the size), until they are mutually orthogonal; then ``A = U diag(s) V^T`` with the row
  norms as ``s``. Accurate to a few ulps relative to ``|A|``, rank-revealing like LAPACK's SVD.
  `pinv` differentiates by the pseudo-inverse's formula for constant rank (Golub and Pereyra
  1973), not through the rotations.
"""

import jax
import jax.numpy as jnp

UNROLL = 16  # largest dimension unrolled; above it, jnp.linalg (LAPACK)


def _one_matrix_per_call(f):
    """``f``, a LAPACK-backed ``jnp.linalg`` routine, run under ``vmap`` as a loop over the batch
    (``lax.map``) with one matrix per call. jaxlib hands a batched LAPACK call's matrices to XLA's
    CPU thread pool and waits for them there; two such calls in one program can occupy every
    thread of a small pool while their work waits behind them, forever (seen on 2 cores with
    jax 0.10: three independent batched calls of 256 matrices hang, looped they do not).
    Derivatives differentiate ``f`` as it is."""

    @jax.custom_jvp
    def fn(*args):
        return looped(*args)

    @fn.defjvp
    def jvp(primals, tangents):
        return jax.jvp(f, primals, tangents)

    @jax.custom_batching.custom_vmap
    def looped(*args):
        return f(*args)

    @looped.def_vmap
    def rule(axis_size, in_batched, *args):
        args = [
            x if b else jnp.broadcast_to(x, (axis_size,) + x.shape)
            for x, b in zip(args, in_batched)
        ]
        out = jax.lax.map(lambda xs: looped(*xs), args)
        return out, jax.tree.map(lambda _: True, out)

    return fn


_cholesky = _one_matrix_per_call(jnp.linalg.cholesky)
_cho_solve = _one_matrix_per_call(lambda l, b: jax.scipy.linalg.cho_solve((l, True), b))
_solve = _one_matrix_per_call(jnp.linalg.solve)
_svd = _one_matrix_per_call(lambda a: tuple(jnp.linalg.svd(a, full_matrices=False)))
_singular_values = _one_matrix_per_call(lambda a: jnp.linalg.svd(a, compute_uv=False))
_lapack_pinv = _one_matrix_per_call(jnp.linalg.pinv)


def _entries(a):
    """The entries of the last two axes of ``a`` as nested lists (batch axes kept)."""
    return [[a[..., i, j] for j in range(a.shape[-1])] for i in range(a.shape[-2])]


def _matrix(rows):
    """Nested lists of entries back to one array: a single stack, so XLA sees one operation."""
    return jnp.stack([jnp.stack(row, -1) for row in rows], -2)


@jax.jit
def cholesky(a):
    """Lower-triangular ``L`` with ``L L^T = a`` (symmetric positive definite ``a``, lower
    triangle read); NaN where ``a`` is not positive definite, like LAPACK's. Unrolled as scalar
    expressions of the entries, stacked once: the entries of one column scale by one reciprocal
    of its pivot, so XLA fuses the whole factorisation into a few operations."""
    n = a.shape[-1]
    if n > UNROLL:
        return _cholesky(a)
    a, zero = _entries(a), jnp.zeros_like(a[..., 0, 0])
    l = [[zero] * n for _ in range(n)]
    for j in range(n):
        pivot = jnp.sqrt(a[j][j] - sum((l[j][k] ** 2 for k in range(j)), zero))
        scale = 1.0 / pivot
        l[j][j] = pivot
        for i in range(j + 1, n):
            l[i][j] = (a[i][j] - sum((l[i][k] * l[j][k] for k in range(j)), zero)) * scale
    return _matrix(l)


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
        return _cho_solve(l, b)
    entries, rows = _entries(l), [b[k] for k in range(n)]
    y = _substitute(entries, rows, range(n), False)
    return jnp.stack(_substitute(entries, y, reversed(range(n)), True))


@jax.jit
def solve(a, b):
    """``a^-1 b`` for square ``a``, Gaussian elimination with partial pivoting."""
    n = a.shape[-1]
    if n > UNROLL:
        return _solve(a, b)
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
    """Rows ``w = g a`` mutually orthogonal, ``g`` orthogonal, for ``a`` with ``m <= n`` rows.

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
        return _svd(a)
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
        return _singular_values(a)
    return svd(a)[1]


def _rtol(a):
    return 10.0 * max(a.shape) * jnp.finfo(a.dtype).eps


@jax.jit
def pinv(a):
    """Moore-Penrose pseudo-inverse, singular values below ``10 max(m, n) eps`` times the largest
    dropped (as ``jnp.linalg.pinv``)."""
    return _lapack_pinv(a) if min(a.shape) > UNROLL else _jacobi_pinv(a)


@jax.custom_jvp
def _jacobi_pinv(a):
    u, s, vt = svd(a)
    keep = s > _rtol(a) * jnp.max(s, initial=0.0)
    return (vt.T * jnp.where(keep, 1.0 / jnp.where(keep, s, 1.0), 0.0)) @ u.T


@_jacobi_pinv.defjvp
def _jacobi_pinv_jvp(primals, tangents):
    (a,), (da,) = primals, tangents
    p = pinv(a)
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
