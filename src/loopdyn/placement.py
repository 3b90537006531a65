"""Updates at static positions written as gathers, never as XLA scatters.

``x.at[index].add(values)`` lowers to an XLA scatter even when ``index`` is a constant. XLA's CPU
backend runs a scatter as a kernel of its own, and a loop whose body holds one cannot be compiled
into a single kernel (XLA's small-while-loop hoisting skips it). Where the positions are known
when the program is traced (the topology fixes them), the same update is a gather from the
values with a zero appended, summed over the few values that land on one position: fusible, and
scatter-free. `add_at` and `put` do that.

Reads at such positions go through `take`: JAX's own indexing first normalises every index
(negative ones, clamping), seven to twenty-three operations around each gather that the topology
makes needless.
"""

import jax
import jax.numpy as jnp
import numpy as np

_DIRECT = jax.lax.GatherScatterMode.PROMISE_IN_BOUNDS


def take(x, index, axis=0):
    """``jnp.take(x, index, axis)`` for indices known to lie in ``[0, x.shape[axis])``: a constant
    array (a slice where it is an increasing, evenly spaced range) or a traced one built from the
    topology; one gather, without JAX's normalisation of the indices (module docstring)."""
    axis = axis % x.ndim
    static = not isinstance(index, jax.Array)
    if static:
        index = np.asarray(index)
        flat = index.reshape(-1)
        step = int(flat[1] - flat[0]) if flat.size > 1 else 1
        if flat.size and step > 0 and np.array_equal(flat, flat[0] + step * np.arange(flat.size)):
            start = int(flat[0])
            part = jax.lax.slice_in_dim(x, start, start + step * (flat.size - 1) + 1, step, axis)
            return part.reshape(x.shape[:axis] + index.shape + x.shape[axis + 1 :])
    # a constant when static (its own strides: a zero stride lowers as a broadcast)
    index = index.reshape(index.shape + (1,)) if static else index[..., None]
    numbers = jax.lax.GatherDimensionNumbers(
        offset_dims=tuple(range(axis))
        + tuple(range(axis + index.ndim - 1, x.ndim + index.ndim - 2)),
        collapsed_slice_dims=(axis,),
        start_index_map=(axis,),
    )
    sizes = x.shape[:axis] + (1,) + x.shape[axis + 1 :]
    return jax.lax.gather(x, index, numbers, sizes, mode=_DIRECT)


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
    zero = jnp.zeros_like(jax.lax.slice_in_dim(values, 0, 1, axis=axis))
    padded = jnp.concatenate([values, zero], axis=axis)
    for column in table.T:
        flat = flat + take(padded, column, axis=axis)
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
    return take(both, source, axis=axis).reshape(x.shape)
