"""Equalities switched on and off at run time (`loopdyn.equalities`): the mechanism equals the
one loaded with that set on, its accelerations match MuJoCo with its own run-time switch
(``eq_active``) set alike, the rows dropped as redundant follow the loops that are on, and what
cannot be switched is refused by name."""

import pathlib

import jax
import numpy as np
import pytest
from support.mujoco_kkt import compare

from loopdyn import MechanismBuilder, load_mjcf, switch_equalities
from loopdyn.equalities import states

ENGINE = pathlib.Path(__file__).resolve().parent / "data/published/mujoco/test/engine/testdata"
SLEEP = ENGINE / "sleep" / "equality.xml"  # three equalities off in the file, a coupling on
ISLAND = ENGINE / "island" / "island_efc.xml"  # two connects on one free body: 6 rows, rank 5


def _same(a, b):
    """Equal mechanisms: the same structure (topology, rows dropped, equalities off) and the
    same array parameters to the last bit."""
    leaves = zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    return jax.tree.structure(a) == jax.tree.structure(b) and all(
        np.array_equal(x, y) for x, y in leaves
    )


def test_switching_equals_loading_with_that_set_on():
    mech = load_mjcf(SLEEP)
    assert states(mech) == {"stat/dyn": False, "dyn/dyn": False, "self": False, "joint": True}
    assert [loop.name for loop in mech.topology.loops] == ["joint"]
    for on in ({"self": True}, {"stat/dyn": True, "dyn/dyn": True}, {"joint": False, "self": True}):
        switched = switch_equalities(mech, on)
        assert _same(switched, load_mjcf(SLEEP, active=on))
        assert {name for name, live in states(switched).items() if live} == {
            loop.name for loop in switched.topology.loops
        }
        assert _same(switch_equalities(switched, {name: states(mech)[name] for name in on}), mech)
    assert switch_equalities(mech, {"joint": True}) is mech  # nothing changes


@pytest.mark.parametrize("name", ["self", "dyn/dyn"])
def test_switched_on_matches_mujocos_run_time_switch(name):
    """A connect closing a three-link chain, a site weld between two free bodies: switched on
    after loading, against the KKT solve of MuJoCo's terms with that equality's ``eq_active``
    set, at an assembled random state."""
    mech = switch_equalities(load_mjcf(SLEEP), {name: True})
    ((difference, residual, _, _),) = compare(SLEEP, mech, warned=False, states=1)
    assert residual < 1e-8  # MuJoCo's own equality residual at loopdyn's closed state
    assert difference < 6e-13  # measured 5.1e-14 (self), 6.0e-14 (dyn/dyn)


def test_redundant_rows_follow_the_loops_that_are_on():
    """island_efc.xml: the later connect's point rows are dependent on the earlier one's and
    two of them remain (`loopdyn.redundancy`). With the earlier connect off, all three of its
    rows are needed again: rederived as loading without it does, and matching MuJoCo with that
    equality switched off."""
    with pytest.warns(UserWarning, match="without 2 unsupported"):  # the joints' frictionloss
        mech = load_mjcf(ISLAND, unsupported="warn")
    assert mech.reduced_across == (1,) and mech.topology.num_rows == 6
    alone = switch_equalities(mech, {"equality1": False})
    with pytest.warns(UserWarning, match="without 2 unsupported"):
        assert _same(alone, load_mjcf(ISLAND, unsupported="warn", active={"equality1": False}))
    assert alone.reduced_points == () and [loop.rows for loop in alone.topology.loops] == [3, 1]
    ((difference, residual, _, _),) = compare(ISLAND, alone, warned=True, states=1)
    assert residual < 1e-8 and difference < 3e-13  # measured 2.7e-14
    assert _same(switch_equalities(alone, {"equality1": True}), mech)


def _pendulum_with_pin(**pin):
    builder = MechanismBuilder(planar=True)
    builder.add_body("arm", mass=1.0, com=(0.5, 0.0, 0.0), inertia=0.1)
    builder.add_joint("hinge", "revolute", "ground", "arm")
    return builder.add_joint("pin", cut=True, parent="arm", child="ground", **pin)


def test_refusals_name_the_problem():
    mech = load_mjcf(SLEEP)
    with pytest.raises(ValueError, match=r"unknown equalities \['latch'\]; the mechanism has"):
        switch_equalities(mech, {"latch": True})
    with pytest.raises(ValueError, match="call it outside jit, vmap and grad"):
        jax.jit(lambda m: switch_equalities(m, {"self": True}).mass)(mech)
    builder = MechanismBuilder(planar=True)
    builder.add_body("arm", mass=1.0, com=(0.5, 0.0, 0.0), inertia=0.1)
    with pytest.raises(ValueError, match="'hinge': only a cut joint can be switched off"):
        builder.add_joint("hinge", "revolute", "ground", "arm", active=False)
    # A pin on a one-joint pendulum: two rows on one coordinate, refused when switched on.
    off = _pendulum_with_pin(kind="revolute", position=(1.0, 0.0, 0.0), active=False).build()
    assert off.topology.loops == () and states(off) == {"pin": False}
    with pytest.raises(ValueError, match="cut joint 'pin': its loop has 1 joint coordinates"):
        switch_equalities(off, {"pin": True})
    # A weld drawn out of the plane loads switched off and is refused when switched on.
    tilted = _pendulum_with_pin(
        kind="weld", rotation=((1, 0, 0), (0, 0, -1), (0, 1, 0)), active=False
    )
    with pytest.raises(ValueError, match="joint 'pin': rotation turns out of the plane"):
        switch_equalities(tilted.build(), {"pin": True})
