"""A batch of states over every device in one call: ``batch(fn)`` is ``jit(vmap(fn))`` with the
batch axis split across devices by `jax.sharding` (GPUs, or several host CPU devices).

JAX shows one CPU device per process unless told otherwise. For several host devices (one per
core, say), set the flag before JAX starts::

    XLA_FLAGS=--xla_force_host_platform_device_count=2 python script.py

or, first thing in a script, ``os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"``
before ``import jax``. Results do not depend on the number of devices: each state's computation is
the same program.

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


def _batch_size(args, in_axes):
    sizes = {
        (i, x.shape[0])
        for i, (arg, axis) in enumerate(zip(args, in_axes))
        if axis is not None
        for x in jax.tree.leaves(arg)
    }
    if not sizes:
        raise ValueError("batch: no argument is batched (every in_axes entry is None)")
    if len({size for _, size in sizes}) > 1:
        shown = ", ".join(f"argument {i}: {size}" for i, size in sorted(sizes))
        raise ValueError(f"batch: batched arguments disagree on the batch size ({shown})")
    return sizes.pop()[1]


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
    functions). The batch is padded to a multiple of the device count by repeating its last state, and the padding is
    dropped from the result, so any batch size works. Outputs have the batch as leading axis.

    >>> fd = batch(loopdyn.forward_dynamics, in_axes=(None, 0, 0, 0))
    >>> qdd, lam = fd(mech, q, qd, tau)  # q, qd, tau of shape (B, n)
    """
    devices = tuple(jax.local_devices() if devices is None else devices)
    if not devices:
        raise ValueError("batch: devices is empty")
    mesh = Mesh(np.array(devices), ("batch",))
    split = NamedSharding(mesh, PartitionSpec("batch"))
    whole = NamedSharding(mesh, PartitionSpec())

    @eqx.filter_jit
    def mapped(axes, *args):
        size = _batch_size(args, axes)
        padded = -size % len(devices) + size

        def place(x, axis):  # padding and placement inside the program: no per-call transfers
            if axis is None:
                return jax.lax.with_sharding_constraint(x, whole)
            if padded > size:
                x = jnp.concatenate([x, jnp.repeat(x[-1:], padded - size, axis=0)])
            return jax.lax.with_sharding_constraint(x, split)

        dynamic, static = eqx.partition(args, eqx.is_array)
        dynamic = tuple(
            jax.tree.map(lambda x, axis=axis: place(x, axis), d) for d, axis in zip(dynamic, axes)
        )

        def local(*dynamic):
            args = eqx.combine(dynamic, static)
            return fn(*args) if vectorized else jax.vmap(fn, in_axes=axes)(*args)

        specs = tuple(
            jax.tree.map(lambda _, axis=axis: PartitionSpec() if axis is None else split.spec, d)
            for d, axis in zip(dynamic, axes)
        )
        run = jax.shard_map(local, mesh=mesh, in_specs=specs, out_specs=split.spec, check_vma=False)
        return jax.tree.map(lambda x: x[:size], run(*dynamic))

    def movable(x):  # arrays committed to other devices are copied; the rest moves in the program
        elsewhere = (
            isinstance(x, jax.Array) and x.committed and x.sharding.device_set != set(devices)
        )
        return jax.device_put(x, whole) if elsewhere else x

    shared = {}  # position -> (argument, its copy on every device)

    def replicated(position, arg):
        """A shared argument (the mechanism, say) copied to every device once and reused while
        the same object comes back: jit would otherwise copy each of its leaves on every call.
        Only arguments whose arrays are all (immutable) JAX arrays are kept."""
        if position in shared and shared[position][0] is arg:
            return shared[position][1]
        leaves = [x for x in jax.tree.leaves(arg) if eqx.is_array(x)]
        if not leaves or not all(isinstance(x, jax.Array) for x in leaves):
            return jax.tree.map(movable, arg)
        copy = jax.tree.map(lambda x: jax.device_put(x, whole) if eqx.is_array(x) else x, arg)
        shared[position] = (arg, copy)
        return copy

    def call(*args):
        axes = (in_axes,) * len(args) if not isinstance(in_axes, Sequence) else tuple(in_axes)
        if len(axes) != len(args):
            raise ValueError(f"batch: in_axes has {len(axes)} entries for {len(args)} arguments")
        if any(axis not in (0, None) for axis in axes):
            raise ValueError(f"batch: in_axes entries must be 0 or None, got {axes}")
        _batch_size(args, axes)
        args = [
            replicated(i, arg) if axis is None else jax.tree.map(movable, arg)
            for i, (arg, axis) in enumerate(zip(args, axes))
        ]
        return mapped(axes, *args)

    return call
