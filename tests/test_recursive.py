"""Method "recursive" (`loopdyn.recursive`): the same accelerations and multipliers as "sslm" and
"system" on the mechanisms whose body graph is a forest (planar and spatial, massless bodies, the
MJCF chain ladder), with and without Baumgarte's terms, batched and differentiated; a dead centre
is flagged singular, and a body graph with a loop is refused by name."""

import functools
import sys
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from support.dead_centre import folded_four_bar
from support.states import random_draws

import loopdyn
from loopdyn import forward, mechanisms, recursive

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from _peers import ladder_chain_mjcf


def chain_ladder(k):
    """The ladder of ``k`` four-bars drawn as MJCF usually draws it: one deep chain of couplers."""
    return loopdyn.load_mjcf(ladder_chain_mjcf(k))


CASES = {
    "four_bar": mechanisms.four_bar,  # planar, one loop
    "three_rrr": mechanisms.three_rrr,  # planar, two loops through the platform
    "chain_ladder3": functools.partial(chain_ladder, 3),  # every loop through one deep chain
    "rssr": mechanisms.rssr,  # spatial, a spherical cut joint, a massless body
    "quarter_car": mechanisms.quarter_car,  # spatial, massless bodies, springs
}
# Largest relative difference measured on these states: 1.1e-14 (chain ladder, against sslm).
RTOL = 1e-13
METHODS = ("recursive", "sslm", "system")


@functools.cache
def mechanism(name):
    return CASES[name]()


@functools.cache
def states(name):
    """Three assembled states and one that is not (``q0`` perturbed), with random ``qd`` (not on
    the constraints' tangent space, so Baumgarte's terms count) and random joint forces."""
    mech = mechanism(name)
    q, _, _ = random_draws(mech, k=3, seed=1)
    rng = np.random.default_rng(2)
    q = jnp.concatenate([q, q[:1] + 0.01 * rng.normal(size=(1, mech.nq))])
    qd = jnp.asarray(rng.normal(size=(4, mech.num_bodies)))
    tau = jnp.asarray(rng.normal(size=(4, mech.num_bodies)))
    return q, qd, tau


@eqx.filter_jit
def solved(mech, q, qd, tau, baumgarte):
    return {
        m: jax.vmap(lambda *x, m=m: forward.solve(mech, *x, method=m, baumgarte=baumgarte))(
            q, qd, tau
        )
        for m in METHODS
    }


def relative(a, b):
    return float(jnp.max(jnp.abs(a - b)) / jnp.max(jnp.abs(b)))


@pytest.mark.parametrize("name", list(CASES))
def test_agrees_with_sslm_and_system(name):
    mech = mechanism(name)
    assert recursive.supported(mech)
    for baumgarte in (jnp.zeros(2), jnp.array([3.0, 5.0])):  # one program: gains are arrays
        out = solved(mech, *states(name), baumgarte)
        for reference in ("sslm", "system"):
            assert not np.any(out[reference].singular)
            ours, theirs = out["recursive"], out[reference]
            assert relative(ours.qdd, theirs.qdd) < RTOL, reference
            assert relative(ours.lam, theirs.lam) < RTOL, reference
        assert not np.any(out["recursive"].singular)
    with_terms, without = out["system"], solved(mech, *states(name), jnp.zeros(2))["system"]
    assert relative(with_terms.qdd, without.qdd) > 1e-6  # the terms do change the answer


def test_single_call_matches_the_batch():
    mech, (q, qd, tau) = mechanism("three_rrr"), states("three_rrr")
    batch = solved(mech, q, qd, tau, jnp.zeros(2))["recursive"]
    one = forward.solve(mech, q[1], qd[1], tau[1], method="recursive")
    np.testing.assert_allclose(one.qdd, batch.qdd[1], rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(one.lam, batch.lam[1], rtol=1e-13, atol=1e-11)
    qdd, lam = loopdyn.forward_dynamics(mech, q[1], qd[1], tau[1], method="recursive")
    np.testing.assert_allclose(qdd, one.qdd, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(lam, one.lam, rtol=1e-13, atol=1e-11)


def test_gradients_match_sslm():
    """d/dq and d/dmass of a scalar of ``qdd``: the same through both methods."""
    mech, (q, qd, tau) = mechanism("four_bar"), states("four_bar")
    weights = jnp.arange(1.0, mech.num_bodies + 1)

    @eqx.filter_jit
    def gradients(mech, method):
        def loss(q, mass):
            m = eqx.tree_at(lambda m: m.mass, mech, mass)
            return forward.solve(m, q, qd[0], tau[0], method=method).qdd @ weights

        return jax.grad(loss, argnums=(0, 1))(q[0], mech.mass)

    ours, theirs = gradients(mech, "recursive"), gradients(mech, "sslm")
    for a, b in zip(ours, theirs):
        assert float(jnp.max(jnp.abs(b))) > 1e-3
        assert relative(a, b) < 1e-14  # measured 1.2e-15


def test_dead_centre_is_flagged():
    """The four-bar folded flat (crank + coupler = ground + rocker): singular, not NaN-silent."""
    mech = folded_four_bar()
    result = forward.solve(mech, mech.q0, jnp.zeros(3), jnp.ones(3), method="recursive")
    assert bool(result.singular)
    with pytest.raises(ValueError, match="singular"):
        loopdyn.forward_dynamics(mech, mech.q0, jnp.zeros(3), jnp.ones(3), method="recursive")


def test_a_loop_through_bodies_only_is_refused():
    mech = mechanisms.carpet_scraper()
    assert not recursive.supported(mech)
    assert "not a forest" in recursive.unsupported(mech)
    n = mech.num_bodies
    with pytest.raises(ValueError, match="method 'recursive' does not apply.*not a forest"):
        loopdyn.forward_dynamics(mech, mech.q0, jnp.zeros(n), jnp.zeros(n), method="recursive")


def test_program_does_not_grow_with_the_ladder():
    """The chain ladder's lowered program (one state): about the same size at k = 6 and k = 12
    (the passes scan the repeating depths; the unrolled passes grew by ~560 ops a loop)."""

    def ops(k):
        mech, n = chain_ladder(k), 2 * k + 1
        fn = jax.jit(lambda q, qd, tau: forward.solve(mech, q, qd, tau, method="recursive"))
        text = fn.lower(mech.q0, jnp.zeros(n), jnp.zeros(n)).as_text()
        return sum(" = " in line for line in text.splitlines())

    small, large = ops(6), ops(12)
    # measured 4031, 4103: a constant, a slice and a reshape of the geometry a loop, which XLA
    # folds (3883, 3901 before `forward.solve` ran through `chunking.chunked`)
    assert abs(large - small) <= 100, (small, large)


def test_auto_runs_recursive_where_loops_share_a_large_subsystem():
    """``method="auto"`` (the default): "recursive" on the chain ladder once its chain has more
    than `forward.AUTO_SUBSYSTEM` coordinates (k = 8: 9), "sslm" below that and on small
    subsystems, "slm" where "recursive" does not apply and the mechanism is one subsystem
    (Cassie: 32 coordinates under the free base, loops through bodies only);
    ``forward_dynamics`` by default then gives the chosen method's numbers, to the last bit."""
    cassie = loopdyn.load_mjcf(Path(__file__).parent / "data/published/closed_chain.xml")
    small = [chain_ladder(4), mechanisms.ladder(8), mechanisms.stewart(), mechanisms.three_rrr()]
    assert [forward.choose_method(m) for m in small] == ["sslm"] * 4
    assert forward.choose_method(cassie) == "slm"
    mech, n = chain_ladder(8), 17
    assert forward.choose_method(mech) == "recursive"

    state = (mech.q0, jnp.linspace(-1.0, 1.0, n), jnp.linspace(1.0, 2.0, n))
    auto = loopdyn.forward_dynamics(mech, *state)
    chosen = loopdyn.forward_dynamics(mech, *state, method="recursive")
    for a, b in zip(auto, chosen):
        np.testing.assert_array_equal(a, b)
