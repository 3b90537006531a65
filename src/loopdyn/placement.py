"""Updates at static positions written as gathers, never as XLA scatters.

``x.at[index].add(values)`` lowers to an XLA scatter even when ``index`` is a constant. XLA's CPU
backend runs a scatter as a kernel of its own, and a loop whose body holds one cannot be compiled
into a single kernel (XLA's small-while-loop hoisting skips it). Where the positions are known
when the program is traced (the topology fixes them), the same update is a gather from the
values with a zero appended, summed over the few values that land on one position: fusible, and
scatter-free. `add_at` and `put` do that; `to_slots` is the traced-index counterpart for the
tree's level passes.
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


def _flat(x, index, axis):
    """``x`` with the axes that ``index`` addresses (a tuple of arrays) merged into one at
    ``axis``, and the merged positions; ``index`` arrays broadcast against each other."""
    index = index if isinstance(index, tuple) else (index,)
    axis = axis % x.ndim
    dims = x.shape[axis : axis + len(index)]
    merged = np.ravel_multi_index(np.broadcast_arrays(*map(np.asarray, index)), dims)
    shape = x.shape[:axis] + (int(np.prod(dims)),) + x.shape[axis + len(index) :]
    return x.reshape(shape), merged, len(index)


def add_at(x, index, values, axis=0):
    """``x.at[(slice(None),) * axis + index].add(values)`` for constant ``index`` (an integer
    array, or a tuple of them over consecutive axes; repeats add up), without a scatter."""
    flat, merged, count = _flat(x, index, axis)
    if merged.size == 0:
        return x
    axis = axis % x.ndim
    values = jnp.asarray(values, x.dtype)
    values = jnp.broadcast_to(values, x.shape[:axis] + merged.shape + x.shape[axis + count :])
    values = values.reshape(x.shape[:axis] + (merged.size,) + x.shape[axis + count :])
    table = _sources(merged, flat.shape[axis])
    zero = jnp.zeros_like(jnp.take(values, np.array([0]), axis=axis))
    padded = jnp.concatenate([values, zero], axis=axis)
    for column in table.T:
        flat = flat + jnp.take(padded, column, axis=axis)
    return flat.reshape(x.shape)


def put(x, index, values, axis=0):
    """``x.at[(slice(None),) * axis + index].set(values)`` for constant ``index`` without
    repeats, without a scatter."""
    flat, merged, count = _flat(x, index, axis)
    axis = axis % x.ndim
    values = jnp.asarray(values, x.dtype)
    values = jnp.broadcast_to(values, x.shape[:axis] + merged.shape + x.shape[axis + count :])
    values = values.reshape(x.shape[:axis] + (merged.size,) + x.shape[axis + count :])
    merged = merged.reshape(-1)
    if len(set(merged.tolist())) != merged.size:
        raise ValueError("put: repeated positions")
    source = np.arange(flat.shape[axis]) + merged.size  # keep x where nothing is put
    source[merged] = np.arange(merged.size)
    both = jnp.concatenate([values, flat], axis=axis)
    return jnp.take(both, source, axis=axis).reshape(x.shape)


def to_slots(values, slots, width):
    """Sum of ``values`` ``(k, ...)`` into ``width`` slots by a traced ``slots`` ``(k,)`` (entries
    outside ``[0, width)`` dropped), as a one-hot product: no scatter."""
    hit = slots[:, None] == jnp.arange(width)
    hit = hit.reshape(hit.shape + (1,) * (values.ndim - 1)).astype(values.dtype)
    return jnp.sum(hit * values[:, None], axis=0)
