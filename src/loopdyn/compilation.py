"""How loopdyn compiles its programs: XLA options passed with each program, never set globally.

loopdyn's single-state programs are a few hundred small operations on 3- and 6-vectors that XLA's
CPU runtime runs one after the other. XLA's default schedule orders them so that independent ones
may run concurrently on the runtime's threads; for operations this small the hand-offs cost more
than they save. With the memory-optimised schedule (`OPTIONS`) a 5 s 3-RRR `simulate` took 48
instead of 94 ms and one jitted 3-RRR forward-dynamics call 109 instead of 167 us, while the
four-bar's smaller programs were 4-7 % slower (benchmarks/results/compilation.md, one run).

Every program loopdyn compiles at the top level gets `OPTIONS` (`jit`); JAX takes compiler
options from the outermost jit only, so a user's own ``jax.jit`` around loopdyn's functions
compiles with the user's options. Pass them there too::

    step = jax.jit(my_step, compiler_options=loopdyn.compilation.OPTIONS)

JAX's global configuration is left as the user set it.

An eager call passes each array argument through JAX's dispatch (about 0.3 us per argument on
this machine); `packed` hands a mechanism's arrays over as one vector per dtype instead.
"""

import functools
import weakref

import equinox as eqx
import jax
import numpy as np
from jax.extend.core import find_top_trace

OPTIONS = {"xla_cpu_scheduler_type": "CPU_SCHEDULER_TYPE_MEMORY_OPTIMIZED"}

_EVALUATION = type(find_top_trace(()))  # the trace of eager calls (this module loads eagerly)


def _top_level() -> bool:
    return type(find_top_trace(())) is _EVALUATION


def _either(top, nested):
    """Calls ``top`` eagerly and ``nested`` inside a trace (``jit``, ``vmap``, ``grad``)."""

    @functools.wraps(nested)
    def call(*args, **kwargs):
        return (top if _top_level() else nested)(*args, **kwargs)

    return call


def jit(fun=None, **kwargs):
    """``eqx.filter_jit`` with `OPTIONS` when called at the top level (usable as a decorator)."""
    if fun is None:
        return functools.partial(jit, **kwargs)
    return _either(
        eqx.filter_jit(fun, compiler_options=OPTIONS, **kwargs), eqx.filter_jit(fun, **kwargs)
    )


def array_jit(fun, **kwargs):
    """``jax.jit`` with `OPTIONS` (arrays only: the cheaper dispatch); ``.lower`` as jax.jit's."""
    top = jax.jit(fun, compiler_options=OPTIONS, **kwargs)
    call = _either(top, jax.jit(fun, **kwargs))
    call.lower = top.lower
    return call


# id(tree) -> (weak reference, vectors, layout) of the trees `packed` has seen and that still live
_PACKED = {}


def packed(tree):
    """``(vectors, layout)``: the array leaves of ``tree`` (immutable: a mechanism) concatenated
    into one vector per dtype, and the hashable layout that `unpacked` rebuilds the tree from;
    computed once per live tree object. None when a leaf is traced."""
    key = id(tree)
    cached = _PACKED.get(key)
    if cached is not None and cached[0]() is tree:
        return cached[1], cached[2]
    leaves, structure = jax.tree.flatten(tree)
    if any(isinstance(x, jax.core.Tracer) for x in leaves):
        return None
    dtypes = tuple(sorted({str(x.dtype) for x in leaves}))
    vectors = tuple(
        np.concatenate([np.ravel(x) for x in leaves if str(x.dtype) == d] or [np.zeros(0, d)])
        for d in dtypes
    )
    layout = (structure, dtypes, tuple((str(x.dtype), x.shape) for x in leaves))
    reference = weakref.ref(tree, lambda _: _PACKED.pop(key, None))
    _PACKED[key] = (reference, vectors, layout)
    return vectors, layout


def unpacked(layout, vectors):
    """The tree of `packed`, from its vectors (inside a program: static slices)."""
    structure, dtypes, shapes = layout
    offsets = dict.fromkeys(dtypes, 0)
    leaves = []
    for dtype, shape in shapes:
        start, size = offsets[dtype], int(np.prod(shape, dtype=int))
        leaves.append(vectors[dtypes.index(dtype)][start : start + size].reshape(shape))
        offsets[dtype] = start + size
    return jax.tree.unflatten(structure, leaves)


def packed_jit(fun, static_argnums=()):
    """`array_jit` of ``fun(mech, *args)`` (arrays and static arguments only) that hands a
    concrete ``mech`` to its program as the vectors of `packed`: one argument per dtype instead
    of one per leaf. A traced ``mech`` goes in as it is."""

    def run(vectors, layout, *args):
        return fun(unpacked(layout, vectors), *args)

    shifted = tuple(k + 1 for k in static_argnums)  # fun's argument k is run's k + 1
    by_vectors = array_jit(run, static_argnums=(1, *shifted))
    as_is = array_jit(fun, static_argnums=static_argnums)

    @functools.wraps(fun)
    def call(mech, *args):
        split = packed(mech)
        return as_is(mech, *args) if split is None else by_vectors(split[0], split[1], *args)

    return call
