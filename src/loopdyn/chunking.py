"""Batches in cache-sized chunks: a function written for one state that, under ``jax.vmap``, runs
as a ``lax.map`` over chunks of at most `CHUNK` states (fewer for big states: `chunks`), each
chunk ``vmap``-ped.

``vmap`` of a whole closed-loop solve over B states makes every intermediate array B states long;
at B = 4096 they no longer fit in cache, and each of the program's many small operations streams
them through memory. Chunk by chunk they stay in cache: at B = 4096 on one core the default
method per state went from 0.94 to 0.73 µs (four-bar), 3.3 to 1.9 µs (3-RRR), 30 to 17 µs
(Stewart platform) and 129 to 49 µs (the MJCF chain ladder of 32 loops, "recursive")
(experiments/chunked_batches.md). On a GPU the whole batch at once is faster (an H200 took 1.7-3.9x
longer per state in chunks: experiments/chunked_batches_gpu.md), so there ``vmap`` stays whole.
"""

import equinox as eqx
import jax
import jax.numpy as jnp

CHUNK = 128  # most states per chunk of a batch (measured best of 32-256 on a 2-core EPYC)
MIN_CHUNK = 16
# Bytes of one chunk's per-state inputs: bigger mechanisms take smaller chunks, so that their
# intermediates (hundreds of times the inputs) stay in cache too (experiments/chunked_batches.md:
# the 8-, 16- and 32-loop ladders in chunks of 60, 31 and 16 states rather than 128).
CHUNK_BYTES = 24_576


def state_bytes(arrays, axis_size: int) -> int:
    """Bytes of one state's share of ``arrays``, each holding ``axis_size`` states."""
    return sum(x.size // axis_size * x.dtype.itemsize for x in arrays)


def chunks(axis_size: int, state_bytes: int = 0) -> tuple[int, int]:
    """``(chunk, count)``: the chunk size for a batch of ``axis_size`` states whose per-state
    inputs take ``state_bytes`` (`CHUNK` states, fewer for large states, at least `MIN_CHUNK`),
    and how many chunks."""
    fit = CHUNK_BYTES // state_bytes if state_bytes else CHUNK
    chunk = min(axis_size, CHUNK, max(MIN_CHUNK, fit))
    return chunk, -(-axis_size // chunk)


def over_states(fn, mech, *states):
    """``chunked`` ``fn(mech, *states)`` for one state: the mechanism's traced arrays go through
    the chunking (they may be batched), its concrete ones stay constants."""
    arrays, static = eqx.partition(mech, lambda x: isinstance(x, jax.core.Tracer))

    def one(args):
        arrays, *states = args
        return fn(eqx.combine(arrays, static), *states)

    return chunked(one)((arrays, *states))


def chunked(fn):
    """``fn(args)`` (``args`` a pytree of arrays, one state) whose ``vmap`` runs in chunks of
    `CHUNK` states, the last padded with copies of the last state, by a ``custom_vmap`` rule, when
    JAX's default backend is the CPU; derivatives (a ``custom_jvp``) differentiate ``fn`` as
    written."""

    @jax.custom_jvp
    def run(args):
        return mapped(args)

    @run.defjvp
    def jvp(primals, tangents):
        return jax.jvp(fn, primals, tangents)

    @jax.custom_batching.custom_vmap
    def mapped(args):
        return fn(args)

    @mapped.def_vmap
    def rule(axis_size, in_batched, args):
        (batched,) = in_batched
        if jax.default_backend() != "cpu":  # a GPU takes the whole batch at once
            axes = jax.tree.map(lambda b: 0 if b else None, batched)
            out = jax.vmap(fn, in_axes=(axes,))(args)
            return out, jax.tree.map(lambda _: True, out)
        leaves, tree = jax.tree.flatten(args)
        flags = jax.tree.leaves(batched)
        per_state = [x for x, b in zip(leaves, flags) if b]
        chunk, count = chunks(axis_size, state_bytes(per_state, axis_size))

        def split(x, b):  # (B, ...) -> (count, chunk, ...); shared arrays stay whole
            if not b:
                return x
            x = jnp.concatenate([x, jnp.repeat(x[-1:], count * chunk - axis_size, axis=0)])
            return x.reshape((count, chunk) + x.shape[1:])

        mapped_leaves = [split(x, b) for x, b in zip(leaves, flags) if b]

        def one_chunk(own):
            own = iter(own)
            full = tree.unflatten([next(own) if b else x for x, b in zip(leaves, flags)])
            axes = tree.unflatten([0 if b else None for b in flags])
            return jax.vmap(fn, in_axes=(axes,))(full)

        out = jax.lax.map(one_chunk, mapped_leaves)
        out = jax.tree.map(lambda o: o.reshape((count * chunk,) + o.shape[2:])[:axis_size], out)
        return out, jax.tree.map(lambda _: True, out)

    return run
