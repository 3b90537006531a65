"""loopdyn's compiler options (`loopdyn.compilation`): this jaxlib accepts them, and the functions
compiled with them (top-level calls) give the numbers of the same functions nested in a user's
``jit``, ``vmap`` and ``grad`` (compiled without them: JAX refuses options on inner jits)."""

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
