"""A batch of states over every device in one call: ``batch(fn)`` is ``jit(vmap(fn))`` with the
batch axis split across devices by `jax.sharding` (GPUs, or several host CPU devices).

JAX shows one CPU device per process unless told otherwise. For one host device per core, say
so right after ``import jax``, before any JAX operation (JAX raises an error if it is too late)::

    import os
    import jax
    jax.config.update("jax_num_cpu_devices", len(os.sched_getaffinity(0)))

(or ``XLA_FLAGS=--xla_force_host_platform_device_count=2`` in the environment before JAX starts).
Results do not depend on the number of devices: each state's computation is the same program.
`batch` runs each device on its own share (``jax.shard_map``). A plain ``jit`` of ``vmap`` over
an input sharded on the batch axis leaves the split to XLA's automatic partitioner, which for the
closed-loop methods ran 1.7-2.0x slower than one device (it does not keep the work local).

With as many forced host devices as cores, jaxlib's batched LAPACK kernels could deadlock
(jax 0.10, CPU: every thread of XLA's pool waited inside the kernel for work queued on that same
pool). The closed-loop methods therefore solve their small systems with `loopdyn.dense`, which
calls no LAPACK for matrices up to ``dense.UNROLL`` rows; larger ones (subsystems of more than
that many coordinates) still do.
"""

from collections.abc import Callable, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from . import compilation

_ARRAY = object()  # stands for an array leaf in a call's static structure


def _batch_size(shapes):
    """The common batch size of ``(argument index, leading size)`` pairs, or a named error."""
    if not shapes:
        raise ValueError("batch: no argument is batched (every in_axes entry is None)")
    if len({size for _, size in shapes}) > 1:
        shown = ", ".join(f"argument {i}: {size}" for i, size in sorted(set(shapes)))
        raise ValueError(f"batch: batched arguments disagree on the batch size ({shown})")
    return shapes[0][1]


def _flatten(arg):
    """``(treedef, static leaves with _ARRAY for arrays, array leaves)`` of one argument."""
    leaves, treedef = jax.tree.flatten(arg)
    static = tuple(_ARRAY if eqx.is_array(x) else x for x in leaves)
    return treedef, static, [x for x in leaves if eqx.is_array(x)]


def batch(
    fn: Callable,
    in_axes: int | None | Sequence[int | None] = 0,
    *,
    devices: Sequence[jax.Device] | None = None,
    vectorized: bool = False,
) -> Callable:
    """``fn`` mapped over the leading axis of its batched arguments, sharded over ``devices``.

    ``in_axes`` is 0 (batched) or None (shared, e.g. the mechanism) per positional argument, or
    one value for all. ``devices`` defaults to ``jax.local_devices()`` (this process's). Each
    device runs ``fn`` on its share of the batch (``jax.shard_map``): ``jax.vmap(fn)``, or ``fn``
    itself when ``vectorized`` (it already takes a leading batch axis, like the `tree`
    functions). A batch whose size is not a multiple of the device count is padded inside the
    program by repeating its last state, and the padding is dropped from the result, so any batch
    size works. Outputs have the batch as leading axis, split over the devices.

    One program is compiled per call structure (argument shapes and non-array leaves). Batched
    arrays go straight to their device shares; a shared argument whose arrays are all JAX arrays
    (the mechanism, say) is copied to every device once and reused while the same object comes
    back.

    >>> fd = batch(loopdyn.forward_dynamics, in_axes=(None, 0, 0, 0))
    >>> qdd, lam = fd(mech, q, qd, tau)  # q, qd, tau of shape (B, n)
    """
    devices = tuple(jax.local_devices() if devices is None else devices)
    if not devices:
        raise ValueError("batch: devices is empty")
    mesh = Mesh(np.array(devices), ("batch",))
    split = NamedSharding(mesh, PartitionSpec("batch"))
    whole = NamedSharding(mesh, PartitionSpec())
    programs = {}  # call structure -> jitted program
    shared = {}  # position -> (argument, its flattened form with arrays on every device)

    def program(structure, axes, size):
        statics = [static for _, static in structure]
        padded = size + -size % len(devices)
        batched = [
            axis is not None for static, axis in zip(statics, axes) for x in static if x is _ARRAY
        ]

        def local(*arrays):
            arrays, args = iter(arrays), []
            for treedef, static in structure:
                leaves = [next(arrays) if x is _ARRAY else x for x in static]
                args.append(jax.tree.unflatten(treedef, leaves))
            return fn(*args) if vectorized else jax.vmap(fn, in_axes=axes)(*args)

        def run(*arrays):
            if padded > size:  # repeat the last state, then split
                arrays = [
                    jax.lax.with_sharding_constraint(
                        jnp.concatenate([x, jnp.repeat(x[-1:], padded - size, axis=0)]), split
                    )
                    if b
                    else x
                    for x, b in zip(arrays, batched)
                ]
            specs = tuple(split.spec if b else PartitionSpec() for b in batched)
            out = jax.shard_map(
                local, mesh=mesh, in_specs=specs, out_specs=split.spec, check_vma=False
            )(*arrays)
            return jax.tree.map(lambda x: x[:size], out)

        placement = tuple(split if b and padded == size else None if b else whole for b in batched)
        return compilation.array_jit(run, in_shardings=placement), placement

    def flattened(position, arg, axis):
        """``(treedef, static leaves, arrays, placed)`` of an argument; shared JAX arrays are
        copied to every device once per object (jit would otherwise copy each leaf of the
        mechanism on every call)."""
        if axis is None and position in shared and shared[position][0] is arg:
            return shared[position][1]
        treedef, static, arrays = _flatten(arg)
        if axis is None and arrays and all(isinstance(x, jax.Array) for x in arrays):
            shared[position] = (arg, (treedef, static, jax.device_put(arrays, whole), True))
            return shared[position][1]
        return treedef, static, arrays, False

    def placed(x, where):  # arrays committed elsewhere are copied to their place first
        if not isinstance(x, jax.Array):  # under jax.distributed jit takes no split numpy input
            return x if where is None or jax.process_count() == 1 else jax.device_put(x, where)
        if not x.committed:
            return x
        if where is None:
            return x if x.sharding.device_set == set(devices) else jax.device_put(x, whole)
        return x if x.sharding.is_equivalent_to(where, x.ndim) else jax.device_put(x, where)

    def call(*args):
        axes = (in_axes,) * len(args) if not isinstance(in_axes, Sequence) else tuple(in_axes)
        if len(axes) != len(args):
            raise ValueError(f"batch: in_axes has {len(axes)} entries for {len(args)} arguments")
        if any(axis not in (0, None) for axis in axes):
            raise ValueError(f"batch: in_axes entries must be 0 or None, got {axes}")
        flat = [flattened(i, arg, axis) for i, (arg, axis) in enumerate(zip(args, axes))]
        size = _batch_size(
            [
                (i, x.shape[0])
                for i, (f, axis) in enumerate(zip(flat, axes))
                if axis == 0
                for x in f[2]
            ]
        )
        structure = tuple((treedef, static) for treedef, static, *_ in flat)
        key = (structure, axes, size)
        if key not in programs:
            programs[key] = program(structure, axes, size)
        run, placement = programs[key]
        arrays, wheres = [], iter(placement)
        for *_, leaves, ready in flat:
            own = [next(wheres) for _ in leaves]
            arrays += leaves if ready else [placed(x, where) for x, where in zip(leaves, own)]
        return run(*arrays)

    return call
