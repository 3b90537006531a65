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
"""

import functools

import equinox as eqx
import jax
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
