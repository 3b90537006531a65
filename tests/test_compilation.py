"""loopdyn's compiler options (`loopdyn.compilation`): this jaxlib accepts them, and the functions
compiled with them (top-level calls) give the numbers of the same functions nested in a user's
``jit``, ``vmap`` and ``grad`` (compiled without them: JAX refuses options on inner jits)."""

import gc
import os
import subprocess
import sys

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import loopdyn
from loopdyn import compilation, mechanisms, tree


def test_this_xla_accepts_the_options():
    compiled = jax.jit(jnp.sin, compiler_options=compilation.OPTIONS).lower(1.0).compile()
    assert float(compiled(1.0)) == np.sin(1.0)
    # an option value XLA does not know fails the compile, naming the option
    with pytest.raises(Exception, match="xla_cpu_scheduler_type"):
        bad = {"xla_cpu_scheduler_type": "CPU_SCHEDULER_TYPE_NONE_SUCH"}
        jax.jit(jnp.sin, compiler_options=bad).lower(1.0).compile()


def test_options_this_xla_does_not_take_are_left_out():
    # XLA drops options between versions (JAX 0.11 has no xla_cpu_use_fusion_emitters): an
    # unknown one would fail every compile, so `supported` leaves it out and keeps the others
    unknown = {"xla_cpu_no_such_option_for_loopdyn": True}
    with pytest.raises(Exception, match="No such compile option"):
        jax.jit(jnp.sin, compiler_options=unknown).lower(1.0).compile()
    assert compilation.supported({**compilation.OPTIONS, **unknown}) == compilation.OPTIONS


def test_top_level_and_nested_calls_agree():
    mech = mechanisms.four_bar()
    qd = jnp.linspace(0.3, -0.2, mech.nv)
    tau = jnp.linspace(-1.0, 2.0, mech.nv)

    def accelerations(q):
        return loopdyn.forward_dynamics(mech, q, qd, tau)[0]

    top = accelerations(mech.q0)
    np.testing.assert_allclose(jax.jit(accelerations)(mech.q0), top, rtol=1e-14, atol=1e-14)
    np.testing.assert_allclose(jax.vmap(accelerations)(mech.q0[None])[0], top, rtol=1e-14)
    np.testing.assert_allclose(
        jax.jacfwd(accelerations)(mech.q0), jax.jit(jax.jacfwd(accelerations))(mech.q0), rtol=1e-13
    )
    # a tree function called at the top level, inside a user's jit, and under vmap
    q = mech.q0 + 0.1
    eager = tree.mass_matrix(mech, q)
    np.testing.assert_allclose(jax.jit(tree.mass_matrix)(mech, q), eager, rtol=1e-15)
    np.testing.assert_allclose(
        jax.vmap(tree.mass_matrix, (None, 0))(mech, q[None])[0], eager, rtol=1e-15
    )


def test_eager_calls_give_the_jitted_numbers_for_numpy_and_jax_inputs():
    """The eager entry points (NumPy input handed to the program as NumPy) return the numbers
    of their jitted cores, bitwise, whatever the kind of input."""
    mech = mechanisms.four_bar()
    q = np.asarray(mech.q0)
    qd, tau = np.array([0.3, -0.1, 0.2]), np.array([1.0, 0.0, 0.0])
    core = jax.jit(lambda q, qd, tau: loopdyn.forward.solve(mech, q, qd, tau).qdd)
    expected = np.asarray(core(q, qd, tau))
    for args in ((q, qd, tau), tuple(jnp.asarray(x) for x in (q, qd, tau))):
        np.testing.assert_array_equal(loopdyn.forward_dynamics(mech, *args)[0], expected)
    back = loopdyn.inverse_dynamics(mech, q, qd, expected, check=False)
    np.testing.assert_allclose(back.tau, tau, rtol=0, atol=1e-12)


def test_eager_calls_pack_each_mechanism_apart():
    """An eager call hands the mechanism to its program packed once per mechanism object: a
    copy with every mass and inertia doubled gets its own numbers (with twice the forces the
    original's accelerations and twice its multipliers; no new program), and the packing goes
    with the object."""
    mech = mechanisms.four_bar()
    heavy = eqx.tree_at(lambda m: (m.mass, m.inertia), mech, (2 * mech.mass, 2 * mech.inertia))
    q, qd, tau = mech.q0, jnp.array([0.3, -0.1, 0.2]), jnp.array([1.0, 0.0, 0.0])
    qdd, lam = loopdyn.forward_dynamics(mech, q, qd, tau)
    twice_qdd, twice_lam = loopdyn.forward_dynamics(heavy, q, qd, 2 * tau)
    np.testing.assert_allclose(twice_qdd, qdd, rtol=0, atol=5e-14)  # measured 7.1e-15 of 28
    np.testing.assert_allclose(twice_lam, 2 * lam, rtol=0, atol=5e-14)  # 5.3e-15
    assert np.abs(loopdyn.forward_dynamics(heavy, q, qd, tau)[0] - qdd).max() > 0.1
    key = id(heavy)
    assert compilation._packed(heavy) is compilation._packed.cache[key][1]  # once per object
    del heavy
    gc.collect()
    assert key not in compilation._packed.cache


def test_a_mechanism_first_met_inside_a_trace_still_runs_eagerly_after():
    """A mechanism closed over by a user's ``jit`` (its states traced, or all constants) is
    met inside the trace first; what is kept for it must not be a traced value, or the next
    eager call fails on a leaked tracer."""
    mech, other = mechanisms.four_bar(), mechanisms.four_bar(crank_angle=0.5)
    q, qd, tau = np.asarray(mech.q0), np.array([0.3, -0.1, 0.2]), np.array([1.0, 0.0, 0.0])
    traced = jax.jit(lambda q: loopdyn.forward_dynamics(mech, q, qd, tau)[0])(q)
    constants = jax.jit(lambda: loopdyn.forward_dynamics(other, other.q0, qd, tau)[0])()
    np.testing.assert_array_equal(loopdyn.forward_dynamics(mech, q, qd, tau)[0], traced)
    eager = loopdyn.forward_dynamics(other, other.q0, qd, tau)[0]
    np.testing.assert_allclose(eager, constants, rtol=0, atol=1e-12)


LOOP_KERNEL_RUN = """
import sys
import jax
import numpy as np
from loopdyn import compilation, mechanisms
import loopdyn

assert compilation.use_loop_kernels()
jax.config.update("jax_enable_x64", True)
mech = mechanisms.four_bar()
sim = loopdyn.simulate(mech, mech.q0, np.zeros(mech.nv), 1.0, rtol=1e-10, atol=1e-10)
np.save(sys.argv[1], np.asarray(sim.q))
"""


def _entry(text):
    return text[text.index("\nENTRY") :]


def test_loop_kernels_compile_simulate_into_single_kernels_with_the_same_motion(tmp_path):
    """With `compilation.use_loop_kernels` (a fresh process: XLA reads its flags once) every loop
    of `simulate`'s compiled solve is one kernel, i.e. its entry computation runs no while loop of
    its own (a scatter or a library call in the vector field would keep one there), and the
    motion is the one simulated without it, up to the integration tolerance."""
    env = {**os.environ, "XLA_FLAGS": f"--xla_dump_to={tmp_path / 'dump'}"}
    command = [sys.executable, "-c", LOOP_KERNEL_RUN, str(tmp_path / "q.npy")]
    out = subprocess.run(command, check=False, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    (solve,) = (tmp_path / "dump").glob("*jit__integrate.cpu_after_optimizations.txt")
    text = solve.read_text()
    assert "xla_cpu_small_call" in text
    assert " while(" not in _entry(text).split("\n}")[0]
    mech = mechanisms.four_bar()
    sim = loopdyn.simulate(mech, mech.q0, np.zeros(mech.nv), 1.0, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(np.load(tmp_path / "q.npy"), sim.q, rtol=0, atol=1e-8)


def test_loop_kernels_come_too_late_once_the_backend_runs(monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_enable_fast_math=false")
    jnp.zeros(1).block_until_ready()  # the backend has started
    with pytest.warns(UserWarning, match="already started"):
        assert not compilation.use_loop_kernels()
    assert os.environ["XLA_FLAGS"] == "--xla_cpu_enable_fast_math=false"
    monkeypatch.setenv("XLA_FLAGS", compilation.LOOP_KERNELS)  # the user's own setting stands
    assert not compilation.use_loop_kernels()
