"""`sharding.batch`: a batch split over two forced host devices equals the single-device batch
and plain ``vmap`` (run in a subprocess: the device count is fixed when JAX starts)."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

SCRIPT = r"""
import json
import equinox as eqx
import jax
jax.config.update("jax_enable_x64", True)
import numpy as np
import loopdyn
from loopdyn import mechanisms, sharding, tree

mech = mechanisms.four_bar(0.3)
rng = np.random.default_rng(0)
size = 5  # odd: the two-device batch is padded
q = mech.q0 + 1e-3 * rng.normal(size=(size, mech.num_bodies))
q = np.stack([np.asarray(loopdyn.kinematics.assemble(mech, x)) for x in q])
qd = rng.normal(size=q.shape)
tau = rng.normal(size=q.shape)
axes = (None, 0, 0, 0)
# one program per function and layout, reused below (each compile costs seconds)
cases = {
    name: (fn, sharding.batch(fn, axes), jax.jit(jax.vmap(fn, in_axes=axes)))
    for name, fn in {"forward": loopdyn.forward_dynamics, "tree": tree.forward_dynamics}.items()
}
_, fd, plain_fd = cases["forward"]
out = {"devices": len(jax.devices())}
for name, (fn, batched, vmapped) in cases.items():
    two = batched(mech, q, qd, tau)
    one = sharding.batch(fn, axes, devices=jax.devices()[:1])(mech, q, qd, tau)
    plain = vmapped(mech, q, qd, tau)
    two, one, plain = (np.concatenate([np.ravel(x) for x in jax.tree.leaves(r)]) for r in (two, one, plain))
    if name == "tree":  # natively batched: each device runs the function on its share
        vec = sharding.batch(fn, axes, vectorized=True)(mech, q, qd, tau)
        out["vectorized"] = float(np.max(np.abs(np.ravel(vec) - plain)))
    out[name] = [float(np.max(np.abs(two - one))), float(np.max(np.abs(two - plain))),
                 float(np.max(np.abs(plain)))]
elsewhere = jax.device_put(q, jax.devices()[1])  # committed to one device: copied first
moved = fd(mech, elsewhere, qd, tau)
direct = fd(mech, q, qd, tau)
out["committed"] = max(float(np.max(np.abs(a - b))) for a, b in zip(moved, direct))
# The shared mechanism is copied to the devices once per object (fd has seen mech): another
# object is not mistaken for the cached one.
heavier = eqx.tree_at(lambda m: m.mass, mech, 2.0 * mech.mass + 0.1)
again = fd(heavier, q, qd, tau)
plain = plain_fd(heavier, q, qd, tau)
first = plain_fd(mech, q, qd, tau)
out["reused"] = max(float(np.max(np.abs(a - b))) for a, b in zip(again, plain))
out["changed"] = float(np.max(np.abs(plain[0] - first[0])))
placed = sharding.batch(lambda q: 2.0 * q, 0)(q[:4])
out["shape"] = list(placed.shape)
out["placed_on"] = len(placed.sharding.device_set)
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def two_devices():
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2")
    run = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_two_host_devices_equal_one(two_devices):
    assert two_devices["devices"] == 2
    assert two_devices["shape"] == [4, 3]
    assert two_devices["placed_on"] == 2  # the batch was split, not copied
    for name in ("forward", "tree"):
        to_one, to_plain, scale = two_devices[name]
        assert scale > 1.0  # accelerations of order one or more: the comparison is not vacuous
        assert to_one <= 1e-12 * scale, name
        assert to_plain <= 1e-12 * scale, name
    assert two_devices["vectorized"] <= 1e-12 * two_devices["tree"][2]
    assert two_devices["committed"] == 0.0
    assert two_devices["changed"] > 1e-3  # the heavier mechanism moves differently...
    assert two_devices["reused"] <= 1e-12 * two_devices["forward"][2]  # ...and batch saw it


def test_mismatched_batch_named():
    import jax.numpy as jnp

    from loopdyn import sharding

    add = sharding.batch(lambda a, b: a + b)
    with pytest.raises(ValueError, match=r"argument 0: 3, argument 1: 4"):
        add(jnp.zeros(3), jnp.zeros(4))
    np.testing.assert_array_equal(add(jnp.ones(3), jnp.ones(3)), 2.0 * np.ones(3))
    with pytest.raises(ValueError, match="no argument is batched"):
        sharding.batch(lambda a: a, None)(jnp.zeros(3))
