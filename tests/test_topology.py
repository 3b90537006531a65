"""Loop topology: subsystems, loops, the block pattern of J (seed 000 eqs. 26 and 37, checked also
against the numbers of J), the SSLM elimination order, the determinate order of seed 002 and
the build-time refusals."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import loopdyn
from loopdyn import kinematics, topology
from loopdyn.mechanism import CutJoint


def scraper_shaped():
    """The carpet scraper's structure in seed 000's numbering (Table 1 lengths, seed 002 §6.1.1
    pivots): subsystem 1 the crank #1, subsystem 2 the serial #2-#3, subsystem 3 the tree #4
    with #5 and #6 on it and #7 on #6; cut joints 8 (#1-#3), 9 (#3-#5), 10 (#7-#5)."""
    b = loopdyn.MechanismBuilder(planar=True)
    lengths = {
        "l1": 0.038,
        "l2": 0.1152,
        "l3": 0.2304,
        "l4": 0.3346,
        "l5": 0.239,
        "l6": 0.8365,
        "l7": 0.239,
    }
    for name, length in lengths.items():
        b.add_body(name, 1.0 + length, (length / 2, 0, 0), 1e-2)
    b.add_joint("j1", "revolute", "ground", "l1", actuated=True)
    b.add_joint("j2", "revolute", "ground", "l2", position=(-0.089, 0, 0))
    b.add_joint(
        "j3", "revolute", "l2", "l3", position=(0.1152, 0, 0), child_position=(0.1152, 0, 0)
    )
    b.add_joint("j4", "revolute", "ground", "l4", position=(0.038, 0.410, 0))
    b.add_joint("j5", "revolute", "l4", "l5", position=(0.3346, 0, 0))
    b.add_joint("j6", "revolute", "l4", "l6", position=(0.096, 0, 0))
    b.add_joint("j7", "revolute", "l6", "l7", position=(0.239, 0, 0))
    b.add_joint("j8", "revolute", "l1", "l3", position=(0.038, 0, 0))
    b.add_joint("j9", "revolute", "l3", "l5", position=(0.2304, 0, 0), child_position=(0.239, 0, 0))
    b.add_joint("j10", "revolute", "l7", "l5", position=(0.239, 0, 0), child_position=(0.1, 0, 0))
    return b.build()


def legs(count, cuts):
    """Planar two-link legs from the ground; ``cuts`` join leg tips ``(i, j)`` by revolutes."""
    b = loopdyn.MechanismBuilder(planar=True)
    for i in range(count):
        b.add_body(f"a{i}", 1.0, (0.1, 0, 0), 1e-3).add_body(f"b{i}", 1.0, (0.1, 0, 0), 1e-3)
        b.add_joint(f"A{i}", "revolute", "ground", f"a{i}", position=(0.3 * i, 0, 0))
        b.add_joint(f"B{i}", "revolute", f"a{i}", f"b{i}", position=(0.2, 0, 0))
    for i, j in cuts:
        b.add_joint(f"C{i}_{j}", "revolute", f"b{i}", f"b{j}", position=(0.2, 0, 0))
    return b.build()


def test_scraper_pattern_is_seed_000_eq_26():
    top = scraper_shaped().topology
    assert top.subsystems == ((0,), (1, 2), (3, 4, 5, 6))
    assert top.coordinate_slices == ((0, 1), (1, 3), (3, 7))
    assert top.subsystem_of == (0, 1, 1, 2, 2, 2, 2)
    assert top.row_slices == ((0, 2), (2, 4), (4, 6))
    assert [loop.name for loop in top.loops] == ["j8", "j9", "j10"]
    assert [loop.coordinates for loop in top.loops] == [(0, 1, 2), (1, 2, 3, 4), (4, 5, 6)]
    assert top.loops[2].bodies == (6, 5, 3, 4) and top.loops[2].ancestor == 3  # 7-6-4-5
    assert top.incidence == ((0, 1), (1, 2), (2,))
    assert [top.block_shape(i, j) for i, j in top.blocks] == [
        (2, 1),
        (2, 2),
        (2, 2),
        (2, 4),
        (2, 4),
    ]
    assert top.num_rows == 6 and top.dof == 1
    assert top.loop_graph == ((1,), (0, 2), (1,))  # GICM of eq. 31: I_{3,1} = O
    assert top.elimination_order == (0, 1, 2) and top.fill_in == ()  # eqs. 34-36
    # seed 002 §6.1.1: subsystem III first (4 unknowns, 4 DOF), then I (lambda_1), then the crank
    assert top.determinate_order == (2, 1, 0)
    assert top.determinate_loops == ((1, 2), (0,), ())
    hash(top)


def test_scraper_jacobian_numbers_follow_the_pattern():
    """At a random (not closed) configuration the blocks outside the pattern are exactly zero,
    those inside are not; J_{2,3} has zero columns for joints 6 and 7 (seed 000 App. A.1)."""
    mech = scraper_shaped()
    top = mech.topology
    jac = np.asarray(jax.jit(kinematics.loop_jacobian)(mech, jnp.linspace(-2.0, 2.5, 7)))
    for i in range(3):
        for j in range(3):
            block = jac[top.rows(i), top.coordinates(j)]
            assert (np.abs(block).max() > 1e-3) == ((i, j) in top.blocks), (i, j)
    np.testing.assert_array_equal(jac[top.rows(1), 5:7], 0.0)


def test_library_mechanisms_match_seed_patterns():
    from loopdyn import mechanisms

    scraper = mechanisms.carpet_scraper().topology
    assert [scraper.block_shape(i, j) for i, j in scraper.blocks] == [
        (2, 1),
        (2, 2),
        (2, 2),
        (2, 4),
        (2, 4),
    ]
    assert scraper.blocks == ((0, 0), (0, 1), (1, 1), (1, 2), (2, 2))  # eq. 26
    assert scraper.determinate_order == (2, 1, 0)
    rrr = mechanisms.three_rrr().topology
    assert rrr.blocks == ((0, 0), (0, 1), (1, 0), (1, 2))  # eq. 37
    assert [rrr.block_shape(i, j) for i, j in rrr.blocks] == [(2, 5), (2, 1), (2, 5), (2, 1)]
    assert rrr.loop_graph == ((1,), (0,)) and rrr.elimination_order == (0, 1)  # eqs. 45-46


def test_four_bar_determinacy_depends_on_the_cut():
    """Seed 002 Fig. 3: cutting at the crank leaves a determinate two-link subsystem (2 unknowns,
    2 DOF) and then the crank (the driving torque); cutting between coupler and rocker leaves
    both subsystems indeterminate."""
    b = loopdyn.MechanismBuilder(planar=True)
    for name in ("crank", "rocker", "coupler"):
        b.add_body(name, 1.0, (0.05, 0, 0), 1e-3)
    b.add_joint("A", "revolute", "ground", "crank", actuated=True)
    b.add_joint("D", "revolute", "ground", "rocker", position=(0.3, 0, 0))
    b.add_joint("C", "revolute", "rocker", "coupler", position=(0.25, 0, 0))
    b.add_joint(
        "B", "revolute", "crank", "coupler", position=(0.1, 0, 0), child_position=(0.3, 0, 0)
    )
    top = b.build().topology
    assert top.subsystems == ((0,), (1, 2))
    assert top.determinate_order == (1, 0) and top.determinate_loops == ((0,), ())

    other = topology.analyse(
        (-1, 0, -1), (CutJoint("C", "revolute", 1, 2),), planar=True, actuated=(0,)
    )
    assert other.determinate_order is None and other.determinate_loops is None


@pytest.mark.parametrize("k", [2, 5, 20])
def test_ladder_eliminates_leaves_first_without_fill(k):
    """A chain of k loops (leg i and leg i+1 closed at their tips): every elimination step meets
    at most one remaining neighbour, so SSLM's work grows linearly with k."""
    top = legs(k + 1, [(i, i + 1) for i in range(k)]).topology
    assert top.elimination_order == tuple(range(k)) and top.fill_in == ()
    graph, remaining = top.loop_graph, set(range(k))
    for i in top.elimination_order:
        remaining.discard(i)
        assert len(set(graph[i]) & remaining) <= 1
    assert top.determinate_order == tuple(range(k + 1))  # leg 0 first, then along the chain
    assert top.dof == 2 * (k + 1) - 2 * k


def test_ring_of_loops_reports_fill_in():
    top = legs(4, [(0, 1), (1, 2), (2, 3), (3, 0)]).topology
    assert top.loop_graph == ((1, 3), (0, 2), (1, 3), (0, 2))
    assert top.elimination_order == (0, 1, 2, 3) and top.fill_in == ((1, 3),)


def test_elimination_order_is_minimum_degree():
    """Loop 0 sits between loops 1 and 2 in the loop graph; eliminating it first would couple them
    (fill-in), minimum degree takes the leaf loop 1 first and fills nothing."""
    top = legs(4, [(1, 2), (0, 1), (2, 3)]).topology
    assert top.loop_graph == ((1, 2), (0,), (0,))
    assert top.elimination_order == (1, 0, 2) and top.fill_in == ()
    clique = legs(3, [(0, 1), (0, 2), (1, 2)]).topology  # every pair shares a leg
    assert clique.loop_graph == ((1, 2), (0, 2), (0, 1)) and clique.fill_in == ()


def test_loop_through_a_single_rigid_body_is_refused():
    """A cut joint from a body to a massless body of its own spherical joint."""

    def build(a, c):
        b = loopdyn.MechanismBuilder()
        b.add_body("A", 1.0, (0, 0, 0), (1, 1, 1)).add_body("B", 1.0, (0, 0, 0), (1, 1, 1))
        b.add_joint("R", "revolute", "ground", "A")
        b.add_joint("S", "spherical", a, "B", position=(0.1, 0, 0))
        b.add_joint("bad", "spherical", c, "S[1]", cut=True)
        return b.build()

    with pytest.raises(
        ValueError,
        match=r"cut joint 'bad' closes a loop through a single rigid "
        r"body \(A - S\[1\]; .*at least two rigid bodies",
    ):
        build("A", "A")
    with pytest.raises(
        ValueError, match=r"'bad' closes a loop through a single rigid body \(ground"
    ):
        build("ground", "ground")
    with pytest.raises(ValueError, match="cut joint 'x' connects body 'b' to itself"):
        topology.analyse((-1,), [CutJoint("x", "weld", 0, 0)], planar=False, body_names=("b",))


def test_bad_cut_kinds_and_counts_are_refused():
    with pytest.raises(ValueError, match="cut joint 'u': a universal joint does not fit a planar"):
        topology.analyse((-1, 0), [CutJoint("u", "universal", 1, -1)], planar=True)
    with pytest.raises(
        ValueError,
        match="cut joint 'w': its loop has 2 joint coordinates but a "
        "weld cut joint imposes 3 constraint rows",
    ):
        topology.analyse((-1, 0), [CutJoint("w", "weld", 1, -1)], planar=True)
    assert (
        topology.analyse((-1, 0), [CutJoint("s", "spherical", 1, -1)], planar=True).loops[0].rows
        == 2
    )


def test_disconnected_body_is_refused():
    b = loopdyn.MechanismBuilder(planar=True)
    b.add_body("a", 1.0, (0, 0, 0), 1e-3).add_body("lost", 1.0, (0, 0, 0), 1e-3)
    b.add_joint("A", "revolute", "ground", "a")
    with pytest.raises(ValueError, match="body 'lost' is disconnected"):
        b.build()
