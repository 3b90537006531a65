"""How loopdyn compiles its programs: XLA options passed with each program, never set globally.

loopdyn's single-state programs are a few hundred small operations on 3- and 6-vectors that XLA's
CPU runtime runs one after the other. XLA's default schedule orders them so that independent ones
may run concurrently on the runtime's threads; for operations this small the hand-offs cost more
than they save. With the memory-optimised schedule (`OPTIONS`) one jitted 3-RRR forward-dynamics
call took 50.9 instead of 71.1 us and a 5 s 3-RRR `simulate` without loop kernels (below) 37.5
instead of 38.5 ms, while the four-bar's programs changed by at most 1 %
(benchmarks/results/compilation.md, one run, one XLA host device). `OPTIONS` also turn off XLA's
YNNPACK fusions (library calls XLA makes of some batched products): over a batch of 3-RRR states
they took longer than XLA's own code (1.29 -> 1.12 us per state with the schedule, same file; the
results differ in rounding, by 5e-15 relative at most), and a loop holding one cannot be a single
kernel (below; 0.49 us per state in benchmarks/results/closed_loop.md).

Every program loopdyn compiles at the top level gets `OPTIONS` (`jit`); JAX takes compiler
options from the outermost jit only, so a user's own ``jax.jit`` around loopdyn's functions
compiles with the user's options. Pass them there too::

    options = loopdyn.compilation.supported(loopdyn.compilation.OPTIONS)
    step = jax.jit(my_step, compiler_options=options)

Loops as single kernels. XLA's CPU runtime runs a program as a sequence of kernels, one per fused
operation, each costing tens of nanoseconds to launch: for loopdyn's small per-state operations
that launching is most of the time (a 3-RRR forward-dynamics evaluation inside a simulation step
took 10.5 us; perf put the kernels' own code at 4 % of a compiled loop's time). XLA compiles a
while loop into one kernel instead when the loop holds no scatter and no library call (`OPTIONS`
turn off the YNNPACK fusions) and touches few bytes (about a kilobyte by default, too few for any
of loopdyn's loops). loopdyn's programs write their static-index updates without scatters
(`placement`), so with that limit raised (`LOOP_KERNELS`) a 5 s 3-RRR `simulate` took 7.9 instead
of 42 ms when loop kernels came in (two runs of benchmarks/closed_loop.py); it now takes 4.6 ms,
1.06 us per forward-dynamics evaluation (benchmarks/results/closed_loop.md). Batches run as a
loop over chunks of states (`chunking`), which becomes one kernel too: a batch of 3-RRR states
took 0.47 instead of 1.60 us per state, and pinning the process stopped mattering (without loop
kernels XLA's two pool threads hand the chunk loop's small kernels between them: 1.41 us pinned
to one core; experiments/unpinned_batches.md). The costs: LLVM
compiles a one-kernel loop more slowly (that simulation 11.1 instead of 8.2 s). XLA takes the limit
from the ``XLA_FLAGS`` environment variable only, read once when JAX starts its CPU backend, and it
applies to every program of the process: `use_loop_kernels` sets it when called first; the command
line does so. Or set it before Python starts::

    XLA_FLAGS="--xla_backend_extra_options=xla_cpu_small_while_loop_byte_threshold=10000000
    --xla_cpu_experimental_ynn_fusion_type="

The limit, 10 MB, takes in a `simulate`'s whole solve (1 MB is enough for the 3-RRR's) and the
chunk loop of a batch of the smaller mechanisms (over 1 MB for the four-bar's and the 3-RRR's),
and leaves the largest programs kernel by kernel: as one kernel, the batched recursive method on a
32-loop ladder (36,000 operations) did not finish compiling in 5 minutes.

Eager calls (`eager`: ``forward_dynamics`` on concrete inputs) hand the mechanism to their
compiled program as one array, its parameters packed once per mechanism: each argument costs a
call about 0.3 us, and a mechanism has 38 arrays. The four-bar's program took 42 instead of
55 us a call so (one core). The program also reports whether its inputs are finite: checking
them in NumPy first made an eager four-bar ``forward_dynamics`` 82 instead of 69 us (one core,
2026-11-27; NumPy's work between two calls slows the next program run, more than it costs).
That report and the program's own (a singular GICM) are one flag, read once: each output of a
program costs a call about 1.5 us and each read of one to the host more (an eager four-bar
``forward_dynamics`` took 47.8 instead of 52.0 us with one flag instead of two, one core,
2026-12-07; `inverse_dynamics` reads all its checks as one array).

JAX's CPU backend dispatches asynchronously by default: a program runs on a thread of XLA's pool
while Python goes on. For an eager call whose result is read at once that hand-off is a third of the
cost: an eager four-bar ``forward_dynamics`` took 44.0 us, and 27.4 us with
``jax.config.update("jax_cpu_enable_async_dispatch", False)`` set before the first computation
(benchmarks/results/eager.md, 2026-12-07 at 5b3b36a). That setting is global and fixed when the
backend starts, so loopdyn leaves it to the user: scripts making many eager single-state calls gain
by it. XLA's CPU client runs a program on the calling thread anyway where its cost analysis counts
fewer than 1,000 floating-point operations; the four-bar's forward-dynamics program counted 2,978
and the 3-RRR's 11,282 after the compact programs of 2026-11-28 (3,761 and 12,126 before), 1,612 and
7,240 on 2026-12-07 (its sine and versine series, fused into each of their consumers, counted 306 of
the four-bar's then), and the 3-RRR's 9,051 since one matrix's solve is Gauss-Jordan elimination
(`dense.spd_solve`: XLA recomputes its steps inside each consumer's fusion; 4,062 unfused). Each
call also creates and releases a handle to every buffer of the program: 123 for the four-bar's on
2026-11-27, 87 of them for the scalars of its reductions' computations. In a perf profile of
synchronous 3-RRR calls, about 30 % of the samples fell there (2026-11-27, one core). The program
runs its kernels one by one: 59 for the four-bar and 84 for the 3-RRR (118 and 215 before the
compact programs of 2026-11-28, 67 and 119 before the planar frames of 2026-12-07, 58 and 101
before the whole GICM of one or two loops, the 3-RRR's 104 before Gauss-Jordan;
experiments/compact_programs.md, compact_programs_planar.md, compact_programs_whole.md and
compact_programs_gauss_jordan.md, where an eager four-bar call took 59.6, 53.4, 48.4, 50.0 and
then 42.9 us, and a 3-RRR call 51.1 instead of 50.1 us in the last). The same four-bar
evaluation inside a compiled loop costs 0.72 us (1.19, 0.79, 0.74 and 0.73 before).

Single-state programs (`SINGLE_STATE`: `simulate`'s solve, eager `forward_dynamics` calls) are
compiled with XLA's older fusion emitters (LLVM IR instead of MLIR), which compile them faster at
the same run time: on one core, the first call of a 5 s 3-RRR `simulate` took 5.3-5.7 instead
of 6.0-6.2 s (the same trajectory to the last bit, 9.7-10.1 ms a run either way), the XLA
compilation of the recursive method on the 32-loop MJCF chain ladder 1.9 instead of 3.7 s.
Batched programs keep XLA's default: with the older emitters their rounding can depend on the
batch shape, and the four-bar's batch of 4096 states ran 8 % slower (0.353 against 0.328 us per
state).

The options are XLA's CPU ones, and XLA drops options between versions: each is passed only where
the default backend's compiler takes it (`supported`, probed once per process at the first
compilation), so the same programs compile on a GPU and with newer JAX, where
``xla_cpu_use_fusion_emitters`` is gone ("No such compile option", an H200 with JAX 0.11.2).

JAX's global configuration is left as the user set it.
"""

import functools
import math
import os
import warnings
import weakref

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import find_top_trace

OPTIONS = {
    "xla_cpu_scheduler_type": "CPU_SCHEDULER_TYPE_MEMORY_OPTIMIZED",
    "xla_cpu_experimental_ynn_fusion_type": "",  # none
}
SINGLE_STATE = {**OPTIONS, "xla_cpu_use_fusion_emitters": False}  # module docstring
_THRESHOLD = "xla_cpu_small_while_loop_byte_threshold"
_EXTRA = "--xla_backend_extra_options="  # one map of options
_NO_YNN = "--xla_cpu_experimental_ynn_fusion_type="  # for programs compiled without `OPTIONS`
_LIMIT = 10_000_000  # bytes a loop may touch to become one kernel (module docstring)
LOOP_KERNELS = f"{_EXTRA}{_THRESHOLD}={_LIMIT} {_NO_YNN}"

_EVALUATION = type(find_top_trace(()))  # the trace of eager calls (this module loads eagerly)


def _top_level() -> bool:
    return type(find_top_trace(())) is _EVALUATION


@functools.cache
def _takes(key, value) -> bool:
    try:
        jax.jit(lambda x: x + 1, compiler_options={key: value}).lower(1.0).compile()
    except jax.errors.JaxRuntimeError:
        return False
    return True


def supported(options) -> dict:
    """The entries of ``options`` that the default backend's XLA takes (module docstring): each
    probed once by compiling a one-operation program with it."""
    return {key: value for key, value in options.items() if _takes(key, value)}


def _either(jitted, fun, options, **kwargs):
    """Calls ``jitted(fun, compiler_options=supported(options), **kwargs)`` eagerly (made at
    the first eager call: the probe starts JAX's backend, which importing loopdyn must not)
    and ``jitted(fun, **kwargs)`` inside a trace (``jit``, ``vmap``, ``grad``)."""
    top = functools.cache(lambda: jitted(fun, compiler_options=supported(options), **kwargs))
    nested = jitted(fun, **kwargs)

    @functools.wraps(nested)
    def call(*args, **kw):
        return (top() if _top_level() else nested)(*args, **kw)

    call.top = top
    return call


def jit(fun=None, *, options=OPTIONS, **kwargs):
    """``eqx.filter_jit`` with ``options`` (`OPTIONS`, or `SINGLE_STATE`) when called at the top
    level (usable as a decorator)."""
    if fun is None:
        return functools.partial(jit, options=options, **kwargs)
    return _either(eqx.filter_jit, fun, options, **kwargs)


def array_jit(fun, *, options=OPTIONS, **kwargs):
    """``jax.jit`` with ``options`` (arrays only: the cheaper dispatch); ``.lower`` as
    jax.jit's."""
    call = _either(jax.jit, fun, options, **kwargs)
    call.lower = lambda *args, **kw: call.top().lower(*args, **kw)
    return call


def by_identity(fun):
    """``fun(obj)`` computed once per live object, keyed by identity and dropped with the object:
    for mechanisms, which are immutable and whose hashing costs more than a call."""
    cache = {}

    @functools.wraps(fun)
    def call(obj):
        key = id(obj)
        entry = cache.get(key)
        if entry is None or entry[0]() is not obj:
            entry = cache[key] = (weakref.ref(obj, lambda _: cache.pop(key, None)), fun(obj))
        return entry[1]

    call.cache = cache  # id -> (weak reference, value)
    return call


@by_identity
def _packed(mech):
    """The leaves of ``mech`` (concrete) packed into one float64 array on the device, their tree
    and shapes, and a dict for the programs that take them (flattening a mechanism costs more
    than its call)."""
    leaves, structure = jax.tree.flatten(mech)
    values = np.concatenate([np.ravel(np.asarray(x, np.float64)) for x in leaves])
    return (structure, tuple(np.shape(x) for x in leaves), jnp.asarray(values)), {}


@by_identity
def _concrete(mech) -> bool:
    return not any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(mech))


def runs_eagerly(mech, *arrays) -> bool:
    """Whether a call on ``mech`` and ``arrays`` runs an `eager` program: no trace running (a
    user's ``jit`` of constants included) and nothing traced."""
    if not _top_level():
        return False
    for x in arrays:  # a loop, not any(): this runs before every eager call
        if isinstance(x, jax.core.Tracer):
            return False
    return _concrete(mech)


def eager(fun, check_finite, options=None):
    """``fun(mech, *arrays, **static)``, which returns ``(result, trouble)`` with ``trouble`` a
    boolean scalar or None; for concrete inputs one program whose arguments are the mechanism's
    leaves packed into one array (module docstring) and the ``arrays``, compiled once per tree
    and ``static`` (hashable) values with ``options`` (default `SINGLE_STATE`); called as it is
    inside a trace. The program returns ``trouble`` or'ed with whether an input is not finite,
    one flag read once (each output and each read costs a call time, module docstring);
    ``check_finite(*arrays)`` raises naming a NaN or inf entry: it runs before the program
    compiles, and after where the flag is set. Eagerly the call returns ``(result, trouble)``
    with ``trouble`` a Python bool (inputs finite); ``call.concrete`` skips the test of
    `runs_eagerly` where the caller has made it."""
    options = SINGLE_STATE if options is None else options

    @functools.cache
    def program(structure, shapes, static):
        def run(packed, *arrays):
            parts, at = [], 0
            for shape in shapes:
                parts.append(packed[at : at + math.prod(shape)].reshape(shape))
                at += math.prod(shape)
            result, trouble = fun(jax.tree.unflatten(structure, parts), *arrays, **dict(static))
            for x in arrays:
                if x is not None:
                    finite = jnp.all(jnp.isfinite(x))
                    trouble = ~finite if trouble is None else trouble | ~finite
            return result, jnp.asarray(False) if trouble is None else trouble

        return jax.jit(run, compiler_options=supported(options))

    def concrete(mech, *arrays, **static):
        (structure, shapes, packed), programs = _packed(mech)
        static = tuple(sorted(static.items()))
        run = programs.get((fun, static))
        if run is None:
            check_finite(*arrays)
            run = programs[fun, static] = program(structure, shapes, static)
        result, trouble = run(packed, *arrays)
        trouble = bool(np.asarray(trouble))
        if trouble:
            check_finite(*arrays)
        return result, trouble

    def call(mech, *arrays, **static):
        if not runs_eagerly(mech, *arrays):
            return fun(mech, *arrays, **static)  # inside a trace
        return concrete(mech, *arrays, **static)

    call.concrete = concrete
    return call


def use_loop_kernels() -> bool:
    """Let XLA compile each eligible loop of this process into one kernel (module docstring):
    adds `LOOP_KERNELS` (the limit, and no YNNPACK fusions in programs compiled without
    `OPTIONS` either) to ``XLA_FLAGS``. Returns whether it did; it does not where
    ``XLA_FLAGS`` already sets the limit (the user's choice stands) and, with a warning, once
    JAX's backend has started (the flags are read then)."""
    flags = os.environ.get("XLA_FLAGS", "")
    if _THRESHOLD in flags:
        return False
    from jax._src import xla_bridge  # no public test of whether the backend has started

    if xla_bridge.backends_are_initialized():
        warnings.warn(
            "loopdyn.compilation.use_loop_kernels: JAX's backend has already started, so XLA "
            "will not see the flag; call it before the first computation, or set XLA_FLAGS "
            f"='{LOOP_KERNELS}' before starting Python",
            stacklevel=2,
        )
        return False
    if _EXTRA in flags:  # merge with the user's map
        flags = f"{flags.replace(_EXTRA, f'{_EXTRA}{_THRESHOLD}={_LIMIT},')} {_NO_YNN}"
    os.environ["XLA_FLAGS"] = flags if _THRESHOLD in flags else f"{flags} {LOOP_KERNELS}".strip()
    return True
