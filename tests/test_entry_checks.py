"""Bad input at the public entry points is named before anything compiles: wrong shapes, NaN and
inf, and a mechanism in float32 (JAX's default precision), which used to surface as an open loop
("q0 does not close the loop ... residual 1.3e-07") or, for NaN, as a failed SVD seconds later."""

import subprocess
import sys
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import loopdyn
from loopdyn import mechanisms


def _calls(mech):
    zero = jnp.zeros(mech.num_bodies)
    return {
        "forward_dynamics": lambda q, v: loopdyn.forward_dynamics(mech, q, v, zero),
        "inverse_dynamics": lambda q, v: loopdyn.inverse_dynamics(mech, q, v, zero),
        "simulate": lambda q, v: loopdyn.simulate(mech, q, v, 1.0),
    }


@pytest.fixture(scope="module")
def four_bar():
    return mechanisms.four_bar()


@pytest.mark.parametrize("entry", ["forward_dynamics", "inverse_dynamics", "simulate"])
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nan_and_inf_are_named_before_compiling(four_bar, entry, bad):
    q = np.array(four_bar.q0)
    q[1] = bad
    start = time.perf_counter()
    with pytest.raises(ValueError, match=rf"{entry}: q\w* contains NaN or inf \(at \[1\]\)"):
        _calls(four_bar)[entry](q, jnp.zeros(3))
    assert time.perf_counter() - start < 1.0


@pytest.mark.parametrize("entry", ["forward_dynamics", "inverse_dynamics"])
def test_nan_after_the_program_compiled_is_named_by_the_program(four_bar, entry):
    """Eager calls leave the NaN check of later calls to their compiled program."""
    _calls(four_bar)[entry](np.array(four_bar.q0), np.zeros(3))
    qd = np.zeros(3)
    qd[2] = np.nan
    with pytest.raises(ValueError, match=rf"{entry}: qd\w* contains NaN or inf \(at \[2\]\)"):
        _calls(four_bar)[entry](np.array(four_bar.q0), qd)


@pytest.mark.parametrize("entry", ["forward_dynamics", "inverse_dynamics"])
def test_nan_is_named_where_only_a_parameter_other_than_mass_is_traced(four_bar, entry):
    """Concrete states with a mechanism traced in its gravity only take the traced path, where
    the compiled eager program's NaN check does not run: NumPy's must."""
    q = np.array(four_bar.q0)
    q[0] = np.nan

    def loss(g):
        mech = eqx.tree_at(lambda m: m.gravity, four_bar, g)
        return jnp.sum(_calls(mech)[entry](q, np.zeros(3))[0])

    with pytest.raises(ValueError, match=rf"{entry}: q contains NaN or inf \(at \[0\]\)"):
        jax.grad(loss)(four_bar.gravity)


def test_jax_arrays_of_other_dtypes_are_converted(four_bar):
    """The argument checks take JAX arrays of a type met before by their shape and dtype alone:
    float32 and integer torques still pass, in float64, to the float64 call's accelerations."""
    q, qd, tau = four_bar.q0, jnp.linspace(0.1, -0.2, 3), jnp.array([1.0, 0.0, -2.0])
    reference = loopdyn.forward_dynamics(four_bar, q, qd, tau)[0]
    for other in (tau.astype(jnp.float32), jnp.array([1, 0, -2])):
        assert other.dtype != reference.dtype
        qdd = loopdyn.forward_dynamics(four_bar, q, qd, other)[0]
        assert qdd.dtype == reference.dtype
        np.testing.assert_array_equal(qdd, reference)


@pytest.mark.parametrize("entry", ["forward_dynamics", "inverse_dynamics", "simulate"])
def test_wrong_shapes_are_named_before_compiling(four_bar, entry):
    start = time.perf_counter()
    with pytest.raises(ValueError, match=rf"{entry}: qd\w* must have shape \(3,\).*got \(2,\)"):
        _calls(four_bar)[entry](four_bar.q0, jnp.zeros(2))
    assert time.perf_counter() - start < 1.0


@pytest.mark.parametrize("entry", ["forward_dynamics", "inverse_dynamics", "simulate"])
def test_a_float32_mechanism_is_refused_saying_how_to_enable_float64(four_bar, entry):
    single = jax.tree_util.tree_map(lambda x: x.astype(np.float32), four_bar)
    start = time.perf_counter()
    with pytest.raises(ValueError, match=r"float32.*jax_enable_x64"):
        _calls(single)[entry](single.q0, jnp.zeros(3))
    assert time.perf_counter() - start < 1.0


def test_without_float64_enabled_simulate_says_so():
    """The newcomer's run: no ``jax_enable_x64``, so everything is float32."""
    script = (
        "import jax.numpy as jnp, loopdyn\n"
        "m = loopdyn.mechanisms.four_bar()\n"
        "loopdyn.simulate(m, m.q0, jnp.zeros(3), 1.0)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], check=False, capture_output=True, text=True
    )
    assert out.returncode != 0
    assert 'jax.config.update("jax_enable_x64", True)' in out.stderr.splitlines()[-1]
    assert "does not close" not in out.stderr


@pytest.mark.parametrize(
    ("tau", "shown"),
    [
        (np.zeros(2), r"\(2,\)"),
        (np.zeros((4, 2)), r"\(4, 2\)"),
        (lambda t, q, qd: q[:2], r"\(2,\)"),
    ],
)
def test_simulate_names_a_wrong_torque_shape_before_compiling(four_bar, tau, shown):
    start = time.perf_counter()
    with pytest.raises(ValueError, match=rf"simulate: tau.* must .*shape \(3,\).*got {shown}"):
        loopdyn.simulate(four_bar, four_bar.q0, jnp.zeros(3), 1.0, tau=tau)
    assert time.perf_counter() - start < 1.0


def test_simulate_names_a_singular_start():
    """A four-bar with every link on one line: a change point of its loop, where the solver used
    to run out of steps and suggest stiff spring-dampers."""
    b = loopdyn.MechanismBuilder(planar=True)
    for name, length in (("crank", 0.1), ("coupler", 0.3), ("rocker", 0.2)):
        b.add_body(name, 1.0, (length / 2, 0, 0), 1e-3)
    b.add_joint("A", "revolute", "ground", "crank", actuated=True)
    b.add_joint("B", "revolute", "crank", "coupler", position=(0.1, 0, 0))
    b.add_joint("D", "revolute", "ground", "rocker", position=(0.2, 0, 0))
    b.add_joint(
        "C", "revolute", "coupler", "rocker", position=(0.3, 0, 0), child_position=(0.2, 0, 0)
    )
    mech = b.build()
    with pytest.raises(ValueError, match="initial state is singular.*cut joint 'C'"):
        loopdyn.simulate(mech, jnp.zeros(3), jnp.zeros(3), 0.5)
