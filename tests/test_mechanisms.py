"""The example mechanisms: every factory builds an assembled mechanism with the expected mobility,
and the seed examples reproduce the seeds' data (tables, initial states, Appendix A Jacobians).
Each mechanism is built once per session; the kinematics are jitted once per topology."""

import functools
import math
import re

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpy import cos, pi, sin

from loopdyn import energy, forces, kinematics, mechanisms, tree
from loopdyn.mechanisms.parallel import ACTUATED, PASSIVE, PLATFORM


@eqx.filter_jit
def kinematics_at(mech, q):
    """``Phi``, ``J`` and the body poses at ``q``: one compilation per topology."""
    return (
        kinematics.loop_residual(mech, q),
        kinematics.loop_jacobian(mech, q),
        tree.forward_kinematics(mech, q),
    )


def residual(mech, q):
    return kinematics_at(mech, q)[0]


def jacobian(mech, q):
    return kinematics_at(mech, q)[1]


def poses(mech, q):
    return kinematics_at(mech, q)[2]


# name -> (factory, DOF)
FACTORIES = {
    "four_bar": (mechanisms.four_bar, 1),
    "slider_crank": (mechanisms.slider_crank, 1),
    "carpet_scraper": (mechanisms.carpet_scraper, 1),
    "three_rrr": (mechanisms.three_rrr, 3),
    "rssr": (mechanisms.rssr, 1),
    "excavator": (mechanisms.excavator, 3),
    "quarter_car": (mechanisms.quarter_car, 1),
    "stewart": (mechanisms.stewart, 6),
    "ladder": (functools.partial(mechanisms.ladder, 4), 1),
}


@functools.cache
def built(name):
    return FACTORIES[name][0]()


def world_point(mech, q, body, local):
    """World position of a point given in body coordinates (body -1: the ground)."""
    if body < 0:
        return np.asarray(local)
    position, rotation = poses(mech, q)
    return np.asarray(position[body] + rotation[body] @ local)


def joint_point(mech, q, name):
    """World position of a revolute joint's centre (tree joint: child frame origin side)."""
    k = mech.coordinate_names.index(name)
    return world_point(mech, q, k, mech.child_position[k])


def angle(mech, q, body):
    _, rotation = poses(mech, q)
    r = np.asarray(rotation[mech.body_index(body)])
    return math.atan2(r[1, 0], r[0, 0])


def wrapped(a):
    return (a + pi) % (2 * pi) - pi


@pytest.mark.parametrize("name", FACTORIES)
def test_q0_closes_every_loop_and_mobility_is_as_expected(name):
    mech, dof = built(name), FACTORIES[name][1]
    phi, jac = (np.asarray(x) for x in kinematics_at(mech, mech.q0)[:2])
    assert np.max(np.abs(phi)) <= 1e-12

    def rank(matrix):
        s = np.linalg.svd(matrix, compute_uv=False)
        return int(np.sum(s > 1e-9 * s[0]))

    assert rank(jac) == mech.topology.num_rows  # no redundant or singular rows at q0
    assert mech.num_bodies - rank(jac) == dof
    # The actuators (none for the passive suspension) determine every other coordinate at q0.
    assert len(mech.actuated) == (0 if name == "quarter_car" else dof)
    passive = [k for k in range(mech.num_bodies) if k not in mech.actuated]
    if mech.actuated:
        assert rank(jac[:, passive]) == mech.topology.num_rows


# --- carpet scraper (seed 000 §4.1, Table 1, App. A.1; seed 002 §6.1.1, Table 1) -------------

SCRAPER_LENGTHS = (0.038, 0.1152, 0.2304, 0.3346, 0.239, 0.8365, 0.239)
SCRAPER_MASSES = (1.5, 3.0, 5.0, 4.2, 3.0, 10.5, 3.0)
SCRAPER_INERTIAS = (0.73e-3, 13.30e-3, 22.12e-3, 157.00e-3, 57.00e-3, 2449.00e-3, 57.00e-3)


def test_carpet_scraper_tables_and_geometry():
    mech = built("carpet_scraper")
    q = mech.q0
    assert float(q[0]) == 0.0  # seed 000 Table 2: theta1(0) = 0
    np.testing.assert_array_equal(mech.mass, SCRAPER_MASSES)
    origin_inertia = mech.inertia[:, 2, 2] + mech.mass * jnp.sum(mech.com[:, :2] ** 2, axis=1)
    np.testing.assert_allclose(origin_inertia, SCRAPER_INERTIAS, rtol=1e-12)
    j = {k: joint_point(mech, q, f"theta{k}") for k in range(1, 8)}
    np.testing.assert_allclose(j[1][:2], [0.0, 0.0], atol=1e-15)
    np.testing.assert_allclose(j[2][:2], [-0.089, 0.0], atol=1e-15)
    np.testing.assert_allclose(j[4][:2], [0.038, 0.410], atol=1e-15)
    cuts = {
        c.name: (
            world_point(mech, q, c.body_a, mech.cut_position_a[i]),
            world_point(mech, q, c.body_b, mech.cut_position_b[i]),
        )
        for i, c in enumerate(mech.cut_joints)
    }
    assert [c.name for c in mech.cut_joints] == ["joint8", "joint9", "joint10"]
    b, c = cuts["joint8"][0], cuts["joint9"][0]
    np.testing.assert_allclose(cuts["joint10"][0], c, atol=1e-15)  # one pin: joints 9 and 10

    def dist(u, v):
        return np.linalg.norm(u - v)

    arm6 = 2 * np.linalg.norm(mech.com[mech.body_index("arm6")])  # uniform: COM at mid-length
    np.testing.assert_allclose(
        [
            dist(j[1], b),
            dist(j[2], j[3]),
            dist(b, c),
            dist(j[4], j[6]),
            dist(j[5], c),
            arm6,
            dist(j[7], c),
        ],
        SCRAPER_LENGTHS,
        rtol=1e-12,
    )
    np.testing.assert_allclose(dist(j[6], j[7]), 0.239, rtol=1e-12)
    np.testing.assert_allclose(dist(j[3], b), dist(j[3], c), rtol=1e-12)  # joint 3 mid-coupler
    np.testing.assert_allclose(dist(j[4], j[5]), 0.096, rtol=1e-12)
    np.testing.assert_allclose(dist(j[4], j[5]) + dist(j[5], j[6]), dist(j[4], j[6]), rtol=1e-12)


def scraper_appendix_jacobian(t):
    """Seed 000 Appendix A.1 at theta = ``t`` (theta1..theta7), as printed except the sign of
    a2 c2 in row 2 of J22 (the printed one contradicts the row's a39 terms)."""
    a1, a2, a3, a39, a46, a59, a67, a97 = 0.038, 0.1152, 0.1152, 0.1152, 0.3346, 0.239, 0.239, 0.239
    a56 = a46 - 0.096
    al = [
        None,
        t[0],
        t[1],
        pi + t[1] + t[2],
        t[3],
        t[4] + t[3] - 2 * pi,
        t[5] + t[3] - 2 * pi,
        t[6] + t[5] + t[3] - 4 * pi,
    ]
    s, c = [None] + [sin(x) for x in al[1:]], [None] + [cos(x) for x in al[1:]]
    jac = np.zeros((6, 7))
    jac[0:2, 0] = [a1 * s[1], a1 * c[1]]
    jac[0:2, 1:3] = [[-a2 * s[2] - a3 * s[3], -a3 * s[3]], [-a2 * c[2] - a3 * c[3], -a3 * c[3]]]
    jac[2:4, 1:3] = [[-a2 * s[2] + a39 * s[3], a39 * s[3]], [a2 * c[2] - a39 * c[3], -a39 * c[3]]]
    jac[2:4, 3:5] = [
        [a59 * s[5] + (a46 - a56) * s[4], a59 * s[5]],
        [-a59 * c[5] - (a46 - a56) * c[4], -a59 * c[5]],
    ]
    jac[4, 3:7] = [
        -a46 * s[4] - a67 * s[6] - a97 * s[7] + a59 * s[5] + (a46 - a56) * s[4],
        a59 * s[5],
        -a67 * s[6] - a97 * s[7],
        -a97 * s[7],
    ]
    jac[5, 3:7] = [
        a46 * c[4] + a67 * c[6] + a97 * c[7] - a59 * c[5] - (a46 - a56) * c[4],
        -a59 * c[5],
        a67 * c[6] + a97 * c[7],
        a97 * c[7],
    ]
    return jac


@pytest.mark.parametrize("crank_angle", [0.0, 0.7, 2.5, 4.4])
def test_carpet_scraper_jacobian_is_seed_000_appendix_a1(crank_angle):
    """Our J equals the seed's up to each row's sign convention (x rows of loops 1, 2 and the y
    rows of loop 3 as printed): the angle relations alpha(theta), the joint positions and the
    block pattern of eq. 26 (2x1, 2x2 | 2x2, 2x4 | 2x4) all agree."""
    mech = mechanisms.carpet_scraper(crank_angle)
    jac = np.asarray(jacobian(mech, mech.q0))
    signs = np.array([1, -1, -1, -1, 1, 1])[:, None]
    np.testing.assert_allclose(
        jac, signs * scraper_appendix_jacobian(np.asarray(mech.q0)), atol=1e-14
    )
    top = mech.topology
    assert {b: top.block_shape(*b) for b in top.blocks} == {
        (0, 0): (2, 1),
        (0, 1): (2, 2),
        (1, 1): (2, 2),
        (1, 2): (2, 4),
        (2, 2): (2, 4),
    }


def test_carpet_scraper_turns_a_full_revolution():
    for crank_angle in np.linspace(0.0, 2 * pi, 13)[1:]:
        mech = mechanisms.carpet_scraper(crank_angle)
        assert float(mech.q0[0]) == crank_angle
        assert np.max(np.abs(residual(mech, mech.q0))) <= 1e-12
        assert np.linalg.svd(np.asarray(jacobian(mech, mech.q0)), compute_uv=False)[-1] > 1e-3


# --- 3-RRR (seed 004 §5.1, Table I; seed 000 §4.2, Tables 1-2, App. A.2) ----------------------


def test_three_rrr_reproduces_seed_004_initial_state():
    """The closed configuration holding theta1-3 = pi/3, 4pi/3, 11pi/6 agrees with every printed
    number of seed 004 §5.1 to its last digit (0.5e-3)."""
    mech = built("three_rrr")
    q = mech.q0
    np.testing.assert_array_equal(
        np.asarray(q)[list(mech.actuated)], [pi / 3, 4 * pi / 3, 11 * pi / 6]
    )
    position, rotation = poses(mech, q)
    k = mech.body_index("platform3")
    centroid = np.asarray(position[k] + rotation[k] @ mech.com[k])
    got = [
        wrapped(angle(mech, q, "distal2") - angle(mech, q, "proximal1")),
        wrapped(angle(mech, q, "distal4") + pi - angle(mech, q, "proximal6")),
        wrapped(angle(mech, q, "distal5") + pi - angle(mech, q, "proximal7")),
        centroid[0],
        centroid[1],
        angle(mech, q, "platform3") % (2 * pi),
    ]
    np.testing.assert_allclose(got, [*PASSIVE, *PLATFORM], rtol=0, atol=5e-4)
    # Seed 000 Table 2 prints the actuated angles as 1.04, 4.1883, 5.7637 (within 0.01 of ours).
    np.testing.assert_allclose(
        np.asarray(q)[list(mech.actuated)], [1.04, 4.1883, 5.7637], atol=1e-2
    )


def test_three_rrr_base_triangle_is_determined_by_the_published_state():
    """Independent of loopdyn: legs II and III of seed 004 §5.1, walked back from the platform
    pose, end at the vertices (1, 0) and (1/2, sqrt(3)/2) of the side-1 m base triangle."""
    (t1, t2, t3), (t4, t5, t6), (x7, y7, t7) = ACTUATED, PASSIVE, PLATFORM

    def e(a):
        return np.array([cos(a), sin(a)])

    vertex1 = np.array([x7, y7]) - 0.2 * e(t7) - 0.2 / math.sqrt(3) * e(t7 + pi / 2)
    vertices = [vertex1, vertex1 + 0.4 * e(t7), vertex1 + 0.4 * e(t7 + pi / 3)]
    pivots = [
        v - 0.6 * e(t + r) - 0.4 * e(t) for v, t, r in zip(vertices, (t1, t2, t3), (t4, t5, t6))
    ]
    np.testing.assert_allclose(pivots, [[0, 0], [1, 0], [0.5, math.sqrt(3) / 2]], atol=1e-3)


def test_three_rrr_tables_and_seed_000_tree():
    mech = built("three_rrr")
    assert mech.body_names == (
        "proximal1",
        "distal2",
        "platform3",
        "distal4",
        "distal5",
        "proximal6",
        "proximal7",
    )
    np.testing.assert_array_equal(mech.mass, [3, 4, 8, 4, 4, 3, 3])
    np.testing.assert_array_equal(
        mech.inertia[:, 2, 2], [0.04, 0.12, 0.0817, 0.12, 0.12, 0.04, 0.04]
    )
    q = mech.q0
    pins = {
        c.name: world_point(mech, q, c.body_b, mech.cut_position_b[i])
        for i, c in enumerate(mech.cut_joints)
    }
    tips = {k: joint_point(mech, q, f"theta{k}") for k in (2, 3, 4, 5)}
    vertices = [tips[3], tips[4], tips[5]]
    sides = [np.linalg.norm(vertices[i] - vertices[i - 1]) for i in range(3)]
    np.testing.assert_allclose(sides, 0.4, rtol=1e-12)
    np.testing.assert_allclose(
        [
            np.linalg.norm(tips[2] - joint_point(mech, q, "theta1")),
            np.linalg.norm(tips[3] - tips[2]),
            np.linalg.norm(pins["joint6"] - tips[4]),
            np.linalg.norm(pins["joint6"] - joint_point(mech, q, "theta6")),
            np.linalg.norm(pins["joint7"] - tips[5]),
        ],
        [0.4, 0.6, 0.6, 0.4, 0.6],
        rtol=1e-12,
    )
    np.testing.assert_allclose(mech.gravity, [0, -9.81, 0])
    top = mech.topology
    assert {b: top.block_shape(*b) for b in top.blocks} == {
        (0, 0): (2, 5),
        (0, 1): (2, 1),
        (1, 0): (2, 5),
        (1, 2): (2, 1),
    }  # seed 000 eq. 37


def test_three_rrr_jacobian_is_seed_000_appendix_a2():
    """Seed 000 Appendix A.2 (as printed, except the sign of d1 c7 in the first two entries of
    row 2 of J11, which contradicts the third) equals -J: the pi/3 offset of joint 5, the
    platform angle alpha7 and the tree of seed 000 are those of the paper."""
    mech = built("three_rrr")
    t = np.concatenate([[0.0], np.asarray(mech.q0)])
    a, b, d = 0.4, 0.6, 0.4
    al = {
        1: t[1],
        2: t[6],
        3: t[7],
        4: t[1] + t[2],
        5: t[1] + t[2] + t[3] + t[4] - pi,
        6: t[1] + t[2] + t[3] + t[5] - (pi - pi / 3),
        7: t[1] + t[2] + t[3],
    }
    al[8] = al[7] + pi / 3  # alpha7'
    s, c = {k: sin(v) for k, v in al.items()}, {k: cos(v) for k, v in al.items()}
    seed = np.zeros((4, 7))
    seed[0, :5] = [
        -a * s[1] - b * s[4] - d * s[7] + b * s[5],
        -b * s[4] - d * s[7] + b * s[5],
        -d * s[7] + b * s[5],
        b * s[5],
        0,
    ]
    seed[1, :5] = [
        a * c[1] + b * c[4] + d * c[7] - b * c[5],
        b * c[4] + d * c[7] - b * c[5],
        d * c[7] - b * c[5],
        -b * c[5],
        0,
    ]
    seed[2, :5] = [
        -a * s[1] - b * s[4] - d * s[8] + b * s[6],
        -b * s[4] - d * s[8] + b * s[6],
        -d * s[8] + b * s[6],
        0,
        b * s[6],
    ]
    seed[3, :5] = [
        a * c[1] + b * c[4] + d * c[8] - b * c[6],
        b * c[4] + d * c[8] - b * c[6],
        d * c[8] - b * c[6],
        0,
        -b * c[6],
    ]
    seed[0:2, 5] = [a * s[2], -a * c[2]]
    seed[2:4, 6] = [a * s[3], -a * c[3]]
    np.testing.assert_allclose(np.asarray(jacobian(mech, mech.q0)), -seed, atol=1e-14)


# --- single loops and the ladder --------------------------------------------------------------


@pytest.mark.parametrize("crank_angle", [0.0, 1.0, 2.5, 4.0])
def test_four_bar_satisfies_freudenstein(crank_angle):
    """Freudenstein: K1 cos psi - K2 cos phi + K3 = cos(phi - psi) for crank phi, rocker psi."""
    a, b, c, d = 0.038, 0.1152, 0.1152, 0.089
    mech = mechanisms.four_bar(crank_angle)
    phi, psi = float(mech.q0[0]), float(mech.q0[2])
    assert phi == crank_angle
    k1, k2, k3 = d / a, d / c, (a * a - b * b + c * c + d * d) / (2 * a * c)
    np.testing.assert_allclose(k1 * cos(psi) - k2 * cos(phi) + k3, cos(phi - psi), atol=1e-12)
    assert np.max(np.abs(residual(mech, mech.q0))) <= 1e-12


@pytest.mark.parametrize("crank_angle,offset", [(0.0, 0.0), (1.0, 0.05), (4.0, -0.02)])
def test_slider_crank_piston_position(crank_angle, offset):
    r, rod = 0.1, 0.4
    mech = mechanisms.slider_crank(crank_angle, offset=offset)
    x = r * cos(crank_angle) + math.sqrt(rod**2 - (offset - r * sin(crank_angle)) ** 2)
    np.testing.assert_allclose(float(mech.q0[2]), x, rtol=1e-14)
    np.testing.assert_allclose(
        joint_point(mech, mech.q0, "rod")[:2],
        [r * cos(crank_angle), r * sin(crank_angle)],
        atol=1e-15,
    )
    assert np.max(np.abs(residual(mech, mech.q0))) <= 1e-12


@pytest.mark.parametrize("k", [1, 2, 5])
def test_ladder_loops_form_a_chain(k):
    mech = mechanisms.ladder(k)
    top = mech.topology
    assert len(top.loops) == k
    assert top.loop_graph == tuple(tuple(j for j in (i - 1, i + 1) if 0 <= j < k) for i in range(k))
    assert top.fill_in == ()
    assert top.blocks == tuple((i, j) for i in range(k) for j in (i, i + 1))
    assert top.dof == 1  # closure and rank at q0: test_q0_closes_every_loop... (k = 4)
    rockers = [mech.coordinate_names.index(f"A{i}") for i in range(1, k + 1)]
    np.testing.assert_allclose(np.asarray(mech.q0)[rockers], float(mech.q0[rockers[0]]), rtol=1e-14)
    # loop 1 is the four-bar
    four = built("four_bar")
    np.testing.assert_allclose(np.asarray(mech.q0)[[0, 1, 2]], four.q0, rtol=1e-14)
    np.testing.assert_allclose(mech.mass[:3], four.mass, rtol=1e-14)


# --- excavator (seed 000 §2, Fig. 1, eq. 14) --------------------------------------------------


def seed_number(name):
    return int(re.search(r"\d+$", name).group())


def assert_seed_loops(mech, loops):
    """Each seed loop (joint numbers, read from the joints' and bodies' trailing digits) is a
    cycle of our joint graph: consecutive joints share exactly one body, all different. Returns
    the seed numbers of the bodies around each loop (0: the ground)."""
    pairs = {seed_number(n): (mech.parent[k], k) for k, n in enumerate(mech.coordinate_names)}
    pairs.update({seed_number(c.name): (c.body_a, c.body_b) for c in mech.cut_joints})
    number = {k: seed_number(n) for k, n in enumerate(mech.body_names)} | {-1: 0}
    around = []
    for loop in loops:
        shared = [set(pairs[j]) & set(pairs[loop[i - 1]]) for i, j in enumerate(loop)]
        assert all(len(s) == 1 for s in shared), loop
        around.append(sorted(number[s.pop()] for s in shared))
        assert len(set(around[-1])) == len(loop), loop
    return around


def test_carpet_scraper_has_the_loops_of_seed_000():
    around = assert_seed_loops(
        built("carpet_scraper"), [(1, 2, 3, 8), (2, 3, 9, 5, 4), (5, 6, 7, 10)]
    )
    assert around == [[0, 1, 2, 3], [0, 2, 3, 4, 5], [4, 5, 6, 7]]


def test_excavator_has_the_loops_of_seed_000():
    mech = built("excavator")
    names = mech.coordinate_names + tuple(c.name for c in mech.cut_joints)
    joints = sorted(seed_number(n) for n in names)
    assert joints == list(range(1, 16)) and mech.num_bodies == 11
    assert mech.actuator_names == ("joint4", "joint13", "joint10")
    assert {mech.joint_kinds[k] for k in mech.actuated} == {"prismatic"}
    around = assert_seed_loops(
        mech, [(1, 2, 15, 6), (7, 14, 13, 12), (3, 4, 5, 8, 7, 15), (9, 10, 11, 2, 1)]
    )
    assert around[0] == [0, 1, 2, 6]  # ground, #1, #2 (subsystem I), #6 (subsystem II)
    assert around[1] == [5, 6, 8, 9]  # all in subsystem II
    top = mech.topology
    assert top.blocks == ((0, 0), (0, 1), (1, 1), (2, 0), (2, 1), (3, 0), (3, 2))  # eq. 14


# --- spatial mechanisms -----------------------------------------------------------------------


def test_rssr_is_the_7r_chain_of_seed_002():
    mech = built("rssr")
    assert mech.body_names == ("crank6", "rocker1", "joint23[1]", "coupler3")
    assert [c.kind for c in mech.cut_joints] == ["spherical"]
    assert mech.topology.subsystems == ((0,), (1, 2, 3))
    assert mech.actuator_names == ("joint7",)
    # 4 coordinates + 3 multipliers: the 4x4 system approach of seed 002 Table 3
    assert mech.num_bodies + mech.topology.num_rows == 7
    pin = world_point(mech, mech.q0, 0, mech.cut_position_b[0])
    centre = world_point(mech, mech.q0, 3, np.zeros(3))
    np.testing.assert_allclose(np.linalg.norm(pin - centre), 0.15, rtol=1e-12)
    np.testing.assert_allclose(pin, [0.04, 0.0, 0.0], atol=1e-15)


def test_rssr_crank_turns_a_full_revolution():
    """Holding the crank at 12 angles, Newton closes the loop each time, on the drawn branch:
    the rocker swings within 0.5 rad of its drawn angle (the other branch is 2.3 rad away)."""
    mech = built("rssr")
    angles = jnp.linspace(0.0, 2 * pi, 12, endpoint=False)
    guesses = jnp.zeros((12, 4)).at[:, 0].set(angles)
    result = eqx.filter_jit(eqx.filter_vmap(kinematics.try_assemble, in_axes=(None, 0, None)))(
        mech, guesses, ("joint7",)
    )
    assert bool(jnp.all(result.converged))
    np.testing.assert_array_equal(result.q[:, 0], angles)
    assert float(jnp.max(jnp.abs(result.q[:, 1]))) < 0.5


@eqx.filter_jit
def quarter_car_statics(mech):
    """Along the motion ``t`` (``J t = 0``) at q0: the generalized gravity-plus-spring force from
    `forces.spring_wrenches` through the tree's inverse dynamics, the potential energy gradient,
    a force scale, and the velocity of the upright's origin."""
    q, zero = mech.q0, jnp.zeros_like(mech.q0)
    t = jnp.linalg.svd(kinematics.loop_jacobian(mech, q))[2][-1]
    net = tree.inverse_dynamics(mech, q, zero, zero, forces.spring_wrenches(mech, q, zero))
    grad = jax.grad(energy.potential_energy, argnums=1)(mech, q)
    scale = jnp.abs(tree.bias_forces(mech, q, zero)) @ jnp.abs(t)
    upright = mech.body_index("upright")
    lift = jax.jacfwd(lambda x: tree.forward_kinematics(mech, x)[0][upright])(q) @ t
    return t @ net, t @ grad, scale, lift


def test_quarter_car_rests_in_its_design_pose():
    """At q0, gravity and the coil-over's force have no component along the motion: computed
    through the spring wrenches and the tree's inverse dynamics (not the factory's energy
    gradient), and as the potential energy's gradient."""
    mech = built("quarter_car")
    assert mech.spring_bodies == ((-1, mech.body_index("lower_arm")),)
    net, grad, scale, lift = (np.asarray(x) for x in quarter_car_statics(mech))
    assert abs(net) <= 1e-12 * scale and abs(grad) <= 1e-12 * scale
    # the motion is wheel travel: the upright (origin at the lower ball joint) moves vertically
    assert abs(lift[2]) > 3 * max(abs(lift[0]), abs(lift[1]))


def test_stewart_platform_legs():
    mech = built("stewart")
    assert mech.actuator_names == tuple(f"P{k}" for k in range(1, 7))
    assert [c.name for c in mech.cut_joints] == [f"S{k}" for k in range(2, 7)]
    q = mech.q0
    platform = mech.body_index("platform")
    np.testing.assert_allclose(world_point(mech, q, platform, np.zeros(3)), [0, 0, 0.6], atol=1e-15)
    for k in range(1, 7):
        base = world_point(mech, q, mech.body_index(f"cylinder{k}"), np.zeros(3))
        top = world_point(mech, q, mech.body_index(f"rod{k}"), np.zeros(3))
        np.testing.assert_allclose(
            float(q[mech.coordinate_names.index(f"P{k}")]), np.linalg.norm(top - base), rtol=1e-14
        )
        np.testing.assert_allclose(np.linalg.norm(base[:2]), 0.5, rtol=1e-14)
        np.testing.assert_allclose(np.linalg.norm(top[:2]), 0.3, rtol=1e-14)


# --- bad input ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda: mechanisms.four_bar(coupler=0.01), "cannot span"),
        (lambda: mechanisms.slider_crank(rod=0.05, offset=0.2), "cannot reach"),
        (lambda: mechanisms.ladder(0), "positive integer"),
        (lambda: mechanisms.carpet_scraper(lengths=(0.038, 0.1)), "link #1-#7"),
        (lambda: mechanisms.carpet_scraper(inertias=(1e-5,) * 7), "link #1"),
        (lambda: mechanisms.excavator(points={16: (0, 0)}), "unknown joints"),
        (lambda: mechanisms.excavator(masses={"dipper": 1.0}), "unknown bodies"),
        (lambda: mechanisms.quarter_car(points={"hub": (0, 0, 0)}), "unknown points"),
        (lambda: mechanisms.rssr(coupler=0.5), "cannot join"),
    ],
)
def test_bad_input_is_refused(call, match):
    with pytest.raises(ValueError, match=match):
        call()
