"""Updates at static positions written as gathers, never as XLA scatters.

``x.at[index].add(values)`` lowers to an XLA scatter even when ``index`` is a constant. XLA's CPU
backend runs a scatter as a kernel of its own, and a loop whose body holds one cannot be compiled
into a single kernel (XLA's small-while-loop hoisting skips it). Where the positions are known
when the program is traced (the topology fixes them), the same update is a gather from the
values with a zero appended, summed over the few values that land on one position: fusible, and
scatter-free. `add_at` and `put` do that.
"""

import jax.numpy as jnp
import numpy as np


def _sources(index, size):
    """``(size, k)`` positions in the values of the entries that land on each of ``size``
    positions (``len(index)``, the appended zero, where fewer than k do)."""
    index = np.asarray(index).reshape(-1)
    count = np.bincount(index, minlength=size)[:size] if index.size else np.zeros(size, int)
    table = np.full((size, max(int(count.max(initial=0)), 1)), index.size)
    filled = np.zeros(size, int)
    for source, target in enumerate(index):
        table[target, filled[target]] = source
        filled[target] += 1
    return table


def _flat(x, index, values, axis):
    """``x`` and ``values`` with the axes that ``index`` addresses (a tuple of arrays over
    consecutive axes, broadcast against each other) merged into one, that axis's position, and
    the merged positions."""
    index = index if isinstance(index, tuple) else (index,)
    axis = axis % x.ndim
    dims, rest = x.shape[axis : axis + len(index)], x.shape[axis + len(index) :]
    merged = np.ravel_multi_index(np.broadcast_arrays(*map(np.asarray, index)), dims)
    values = jnp.broadcast_to(jnp.asarray(values, x.dtype), x.shape[:axis] + merged.shape + rest)
    values = values.reshape(x.shape[:axis] + (merged.size,) + rest)
    flat = x.reshape(x.shape[:axis] + (int(np.prod(dims)),) + rest)
    return flat, values, axis, merged.reshape(-1)


def add_at(x, index, values, axis=0):
    """``x.at[(slice(None),) * axis + index].add(values)`` for constant ``index`` (an integer
    array, or a tuple of them over consecutive axes; repeats add up), without a scatter."""
    flat, values, axis, merged = _flat(x, index, values, axis)
    if merged.size == 0:
        return x
    table = _sources(merged, flat.shape[axis])
    zero = jnp.zeros_like(jnp.take(values, np.array([0]), axis=axis))
    padded = jnp.concatenate([values, zero], axis=axis)
    for column in table.T:
        flat = flat + jnp.take(padded, column, axis=axis)
    return flat.reshape(x.shape)


def put(x, index, values, axis=0):
    """``x.at[(slice(None),) * axis + index].set(values)`` for constant ``index`` without
    repeats, without a scatter."""
    flat, values, axis, merged = _flat(x, index, values, axis)
    if len(set(merged.tolist())) != merged.size:
        raise ValueError("put: repeated positions")
    source = np.arange(flat.shape[axis]) + merged.size  # keep x where nothing is put
    source[merged] = np.arange(merged.size)
    both = jnp.concatenate([values, flat], axis=axis)
    return jnp.take(both, source, axis=axis).reshape(x.shape)
