"""`placement`: updates at static positions equal JAX's ``.at[]`` updates (values and
derivatives) and compile without an XLA scatter."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from loopdyn import placement

RNG = np.random.default_rng(7)


def _no_scatter(fun, *args):
    text = jax.jit(fun).lower(*args).compile().as_text()
    return " scatter(" not in text


@pytest.mark.parametrize(
    "shape, index, axis",
    [
        ((5, 3), np.array([4, 0, 4, 2, 4]), 0),  # repeats add up
        ((2, 6), np.array([2, 3, 4]), -1),
        ((4, 3, 2), np.array([[1], [0]]), 1),  # a 2-D index array
        ((3, 4), (np.arange(3)[:, None], np.array([[0, 3], [1, 1], [2, 0]])), 0),  # a pair
        ((3,), np.array([], dtype=int), 0),
    ],
)
def test_add_at_is_at_add(shape, index, axis):
    x = jnp.asarray(RNG.normal(size=shape))
    lead = (slice(None),) * (axis % len(shape))
    where = lead + (index if isinstance(index, tuple) else (index,))
    values = jnp.asarray(RNG.normal(size=x[where].shape))
    expected = x.at[where].add(values)
    np.testing.assert_array_equal(placement.add_at(x, index, values, axis), expected)
    assert _no_scatter(lambda x, v: placement.add_at(x, index, v, axis), x, values)
    cotangent = jnp.asarray(RNG.normal(size=shape))
    ours = jax.vjp(lambda x, v: placement.add_at(x, index, v, axis), x, values)[1](cotangent)
    theirs = jax.vjp(lambda x, v: x.at[where].add(v), x, values)[1](cotangent)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-15)


@pytest.mark.parametrize(
    "shape, index, axis",
    [
        ((5, 3), np.array([4, 0, 2]), 0),
        ((2, 9), np.array([[0, 1, 2, 3], [5, 6, 4, 8]]), -1),
        ((6,), np.array([1]), 0),
    ],
)
def test_put_is_at_set(shape, index, axis):
    x = jnp.asarray(RNG.normal(size=shape))
    where = (slice(None),) * (axis % len(shape)) + (index,)
    values = jnp.asarray(RNG.normal(size=x[where].shape))
    np.testing.assert_array_equal(placement.put(x, index, values, axis), x.at[where].set(values))
    assert _no_scatter(lambda x, v: placement.put(x, index, v, axis), x, values)
    cotangent = jnp.asarray(RNG.normal(size=shape))
    ours = jax.vjp(lambda x, v: placement.put(x, index, v, axis), x, values)[1](cotangent)
    theirs = jax.vjp(lambda x, v: x.at[where].set(v), x, values)[1](cotangent)
    for a, b in zip(ours, theirs):
        np.testing.assert_array_equal(a, b)


def test_put_refuses_repeated_positions():
    with pytest.raises(ValueError, match="repeated"):
        placement.put(jnp.zeros(4), np.array([1, 1]), jnp.ones(2))
