"""The compiled Pinocchio peer of the benchmarks (benchmarks/cpp/pinocchio_peer.cpp, built by
benchmarks/pinocchio_cpp.py): its ``constraintDynamics`` accelerations equal the Python
binding's and loopdyn's on the four-bar and the 3-RRR at varied assembled states, its
Dormand-Prince run keeps the loops closed, and the MJCF ladder of the benchmark loads alike in
loopdyn and Pinocchio. The first run builds the program unoptimised, on Pinocchio's library (TEST_FLAGS; cached in
benchmarks/build/)."""

import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from loopdyn import mechanisms

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ to build the peer")


@pytest.fixture(scope="module")
def peer_binary():
    import pinocchio_cpp

    return pinocchio_cpp.build(flags=pinocchio_cpp.TEST_FLAGS)[0]


@pytest.mark.parametrize("name", ["four_bar", "three_rrr"])
def test_constraint_dynamics_agrees(peer_binary, name):
    import _peers
    import pinocchio_cpp

    mech = getattr(mechanisms, name)()
    problem = _peers.pinocchio_problem(mech, aligned=True)
    assert problem[1].joints[1].shortname() == "JointModelRZ"
    q, qd, tau, closed = (np.asarray(x) for x in _peers.random_states(mech, 32, seed=3))
    assert closed >= 16
    peer = pinocchio_cpp.Peer(problem, peer_binary)
    try:
        found = pinocchio_cpp.check(peer, problem, mech, q, qd, tau, tolerance=1e-12)
        # per machine: the threads split the batch, same answers
        result, qdd = peer.constraint_dynamics(q, qd, tau, repeats=1, threads=2)
        _, one = peer.constraint_dynamics(q, qd, tau, repeats=1)
    finally:
        peer.close()
    assert found["states"] == 32
    assert result["threads"] == 2 and result["batch"] == 32
    np.testing.assert_array_equal(qdd, one)


def test_dormand_prince_keeps_the_loops_closed(peer_binary):
    import _peers
    import pinocchio_cpp

    mech = mechanisms.four_bar()
    peer = pinocchio_cpp.Peer(_peers.pinocchio_problem(mech, aligned=True), peer_binary)
    try:
        run, trajectory = peer.simulate(mech.q0, np.zeros(3), 1.0, 1e-8, 1e-8, saves=11)
    finally:
        peer.close()
    assert trajectory.shape == (11, 6)
    np.testing.assert_array_equal(trajectory[0], np.concatenate([mech.q0, np.zeros(3)]))
    assert run["steps"] > 10 and run["evaluations"] >= 6 * run["steps"]
    assert run["max_loop_residual"] < 1e-7


def test_mjcf_ladder_chain_agrees(peer_binary):
    """The benchmark's ladder drawn the usual MJCF way (one deep chain, each rocker its own tree,
    k connects), loaded by loopdyn and by Pinocchio's own MJCF parser, at k = 4."""
    import _peers
    import pinocchio_cpp

    mech, problem = _peers.ladder_chain(4)
    assert mech.num_bodies == 9 and len(problem[2]) == 4
    assert mech.parent[:5] == (-1, 0, 1, 2, 3)  # crank, coupler1..4: one deep chain
    q, qd, tau, _ = (np.asarray(x) for x in _peers.random_states(mech, 16, seed=4))
    peer = pinocchio_cpp.Peer(problem, peer_binary)
    try:
        # the deep chain's accelerations are less well conditioned: 1.5e-12 seen
        found = pinocchio_cpp.check(peer, problem, mech, q, qd, tau, tolerance=1e-11)
    finally:
        peer.close()
    # 1.2e-12 seen between the compiled peer and the wheel (two builds of one iterative solve)
    assert found["states"] == 16 and found["cpp_vs_python"] < 1e-11


def test_free_flyer_spherical_and_armature(peer_binary):
    """Cassie's Pinocchio model built from MuJoCo's compiled arrays (free flyer, spherical
    joints, armature, four point constraints; tests/support/pinocchio_mujoco.py): the compiled
    peer's accelerations equal the Python binding's at random states (nq = 35 != nv = 32)."""
    import mujoco
    import pinocchio_cpp
    from support.pinocchio_mujoco import ConstraintDynamics, pinocchio_from_mujoco

    path = Path(__file__).parent / "data" / "published" / "closed_chain.xml"
    problem = pinocchio_from_mujoco(mujoco.MjModel.from_xml_path(str(path)))
    assert problem.model.nq == 35 and problem.model.nv == 32
    settings = (1e-12, 1e-10, 100)
    solver = ConstraintDynamics(problem, *settings)
    rng = np.random.default_rng(7)
    states = []
    for _ in range(4):
        qpos = problem.mj.qpos0.copy()
        mujoco.mj_integratePos(problem.mj, qpos, 0.2 * rng.standard_normal(32), 1.0)
        states.append(solver.pinocchio_state(qpos, *rng.standard_normal((2, 32))))
    q, v, tau = (np.stack(x) for x in zip(*states, strict=True))
    peer = pinocchio_cpp.Peer((None, problem.model, problem.constraints), peer_binary)
    try:
        _, cpp = peer.constraint_dynamics(q, v, tau, repeats=1, settings=settings)
    finally:
        peer.close()
    pin = solver.pin
    python = np.stack([
        pin.constraintDynamics(problem.model, solver.data, *x, problem.constraints, solver.datas,
                               solver.settings).copy()
        for x in zip(q, v, tau, strict=True)
    ])  # fmt: skip
    scale = np.abs(python).max(axis=1, keepdims=True)
    assert np.max(np.abs(cpp - python) / scale) < 1e-11
