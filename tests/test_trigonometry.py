"""`trigonometry.sin_versine` against 50-digit references (mpmath)."""

import jax
import jax.numpy as jnp
import mpmath
import numpy as np
import pytest

from loopdyn.trigonometry import REDUCTION_LIMIT, sin_versine

mpmath.mp.dps = 50
EPS = np.finfo(np.float64).eps
evaluate = jax.jit(sin_versine)


def reference(q):
    sin = [float(mpmath.sin(mpmath.mpf(float(x)))) for x in q]
    versine = [float(1 - mpmath.cos(mpmath.mpf(float(x)))) for x in q]
    return np.array(sin), np.array(versine)


@pytest.mark.parametrize("scale", [1e-6, 1.0, 30.0, REDUCTION_LIMIT])
def test_within_an_ulp_of_the_exact_values(scale):
    rng = np.random.default_rng(int(np.log10(scale)) + 10)
    quarter_turns = np.arange(-9, 10) * np.pi / 4  # every quadrant boundary and midpoint
    q = np.concatenate([rng.uniform(-scale, scale, 2000), quarter_turns])
    sin, versine = map(np.asarray, evaluate(q))
    exact_sin, exact_versine = reference(q)
    assert np.max(np.abs(sin - exact_sin)) <= EPS / 2
    assert np.max(np.abs(versine - exact_versine)) <= EPS
    if scale < 1e-3:  # where 1 - cos q cancels, the versine keeps its relative accuracy
        small = slice(0, 2000)
        relative = lambda v: np.max(np.abs(v[small] / exact_versine[small] - 1))
        assert relative(versine) <= 2 * EPS
        assert relative(1 - np.cos(q)) > 1e-3  # the naive one does not


def test_beyond_the_reduction_limit_and_non_finite_angles_use_the_library():
    q = np.array([0.3, 2.0 * REDUCTION_LIMIT, -3e9, 1.0])
    sin, versine = evaluate(q)
    np.testing.assert_array_equal(sin, np.sin(q))
    np.testing.assert_array_equal(versine, 1 - np.cos(q))
    for bad in (np.nan, np.inf):
        sin, versine = evaluate(np.array([0.3, bad]))
        assert np.isfinite(sin[0]) and np.isnan(sin[1]) and np.isnan(versine[1])
    single = np.array([0.3, 2.0], dtype=np.float32)  # other dtypes: the library's functions
    sin, versine = evaluate(single)
    assert sin.dtype == np.float32
    np.testing.assert_array_equal(sin, jnp.sin(single))
    np.testing.assert_array_equal(versine, 1 - jnp.cos(single))
    # under vmap the choice is per mapped row
    rows = jax.vmap(sin_versine)(jnp.array([[0.3, 1.0], [2.0 * REDUCTION_LIMIT, 1.0]]))
    np.testing.assert_allclose(rows[0][1], np.sin([2.0 * REDUCTION_LIMIT, 1.0]), atol=EPS)


def test_derivatives_are_cosine_and_sine():
    q = jnp.linspace(-7.0, 7.0, 29)
    d_sin, d_versine = jax.jvp(sin_versine, (q,), (jnp.ones_like(q),))[1]
    np.testing.assert_allclose(d_sin, np.cos(q), rtol=0, atol=EPS)
    np.testing.assert_allclose(d_versine, np.sin(q), rtol=0, atol=EPS)
    second = jax.vmap(jax.hessian(lambda x: sum(sin_versine(x))))(q)
    np.testing.assert_allclose(second, np.cos(q) - np.sin(q), rtol=0, atol=4 * EPS)
