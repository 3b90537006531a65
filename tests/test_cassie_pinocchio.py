"""Cassie (Pinocchio's closed_chain.xml: free base, two ball joints, four connects, joint
damping, armature and springs) against an independent Pinocchio model built from MuJoCo's
compiled model (tests/support/pinocchio_mujoco.py), and against MuJoCo's soft constraints as
they are made stiffer."""

import pathlib
import warnings

import jax
import mujoco
import numpy as np
import pytest
from support.pinocchio_mujoco import ConstraintDynamics, pinocchio_from_mujoco

import loopdyn
from loopdyn import configuration, kinematics

PATH = pathlib.Path(__file__).parent / "data" / "published" / "closed_chain.xml"
# loopdyn has no contacts and enforces no joint limits (it loads them with a warning)
CONTACT_AND_LIMITS = mujoco.mjtDisableBit.mjDSBL_CONTACT | mujoco.mjtDisableBit.mjDSBL_LIMIT


@pytest.fixture(scope="module")
def cassie():
    """loopdyn's model, MuJoCo's compiled model (contacts off), the Pinocchio model, and three
    assembled random states (the free base's six velocities held) with random forces."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the ignored joint limits
        mech = loopdyn.load_mjcf(PATH)
    mj = mujoco.MjModel.from_xml_path(str(PATH))
    mj.opt.disableflags |= CONTACT_AND_LIMITS
    rng = np.random.default_rng(11)
    base = tuple(range(6))
    states = []
    for _ in range(3):
        q = configuration.integrate(mech, mech.q0, 0.2 * rng.standard_normal(mech.nv))
        q = kinematics.assemble(mech, q, fixed=base)
        v = kinematics.project_velocity(mech, q, rng.standard_normal(mech.nv), fixed=base)
        states.append((np.asarray(q), np.asarray(v), rng.standard_normal(mech.nv)))
    q, v, tau = (np.stack(x) for x in zip(*states, strict=True))
    return mech, mj, pinocchio_from_mujoco(mj), q, v, tau


def test_pinocchio_model_is_mujocos_tree(cassie):
    """The reference itself, loops aside: Pinocchio's ABA on the model built from MuJoCo's
    arrays, with the passive forces, equals MuJoCo's qacc with its equalities disabled at random
    (unassembled) states, so the reference does not lean on loopdyn. Measured: 2.7e-13."""
    import pinocchio as pin

    _, _, problem, *_ = cassie
    free = mujoco.MjModel.from_xml_path(str(PATH))
    free.opt.disableflags |= CONTACT_AND_LIMITS
    free.opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_EQUALITY
    data, pdata = mujoco.MjData(free), problem.model.createData()
    rng = np.random.default_rng(5)
    for _ in range(3):
        qpos = free.qpos0 + 0.0
        mujoco.mj_integratePos(free, qpos, 0.3 * rng.standard_normal(free.nv), 1.0)
        qvel, tau = rng.standard_normal(free.nv), rng.standard_normal(free.nv)
        data.qpos[:], data.qvel[:], data.qfrc_applied[:] = qpos, qvel, tau
        mujoco.mj_forward(free, data)
        q, v = problem.to_pinocchio(qpos, qvel)
        a = pin.aba(problem.model, pdata, q, v, problem.generalized_force(qpos, qvel, tau))
        qacc = problem.to_mujoco_acceleration(qpos, qvel, np.asarray(a))
        np.testing.assert_allclose(qacc, data.qacc, atol=1e-11 * np.abs(data.qacc).max())


def test_cassie_matches_pinocchio(cassie):
    """Every method's accelerations equal Pinocchio's ``constraintDynamics`` (proximal, accuracy
    1e-14, mu 1e-12, 100 iterations) at the assembled random states, relative to the largest
    acceleration. Measured: 3.4e-12 (system, slm, embedding), 3.3e-12 (sslm)."""
    mech, _, problem, q, v, tau = cassie
    solver = ConstraintDynamics(problem)
    reference = np.stack([solver(*x) for x in zip(q, v, tau, strict=True)])
    scale = np.abs(reference).max(axis=1, keepdims=True)
    independent = loopdyn.forward.independent_coordinates(mech)  # for "embedding", at q0
    for method in loopdyn.forward.GENERAL_METHODS:
        keep = independent if method == "embedding" else None

        def call(*x, method=method, keep=keep):
            return loopdyn.forward_dynamics(mech, *x, method=method, independent=keep)[0]

        call = jax.jit(jax.vmap(call))
        qdd = np.asarray(call(q, v, tau))
        error = np.max(np.abs(qdd - reference) / scale)
        assert error < 1e-10, (method, error)


def _mujoco_qacc(q, v, tau, impedance, timeconst):
    """MuJoCo's qacc with every equality at ``solimp = (d, d, 1e-6, 0.5, 2)`` and
    ``solref = (timeconst, 1)``, the time step a tenth of timeconst (solref's safety clamp at
    twice the step stays inactive), the solver to convergence."""
    model = mujoco.MjModel.from_xml_path(str(PATH))
    model.opt.disableflags |= CONTACT_AND_LIMITS
    model.opt.timestep = timeconst / 10
    model.opt.tolerance, model.opt.iterations = 1e-15, 1000
    model.eq_solimp[:] = (impedance, impedance, 1e-6, 0.5, 2.0)
    model.eq_solref[:] = (timeconst, 1.0)
    data = mujoco.MjData(model)
    data.qpos[:], data.qvel[:], data.qfrc_applied[:] = q, v, tau
    mujoco.mj_forward(model, data)
    return data.qacc.copy()


def test_mujoco_approaches_loopdyn_as_it_stiffens(cassie):
    """MuJoCo's soft connects (contacts and joint limits off) at impedance d = 0.99, 0.999 and
    0.9999 (MuJoCo's cap): its qacc approaches loopdyn's exact one tenfold per step, as 1 - d,
    the stiffest within 2e-4 of the largest acceleration. Measured at state 0: 9.6e-3, 9.6e-4,
    9.6e-5 (and 8.7e-2 at d = 0.9). The time constant changes nothing here (the same to 3
    digits from 1e-2 to 1e-6 s): at an assembled state with loop-consistent velocities the
    reference acceleration -b J v - k r vanishes. MuJoCo's rows also leave out J' v, which
    moves the exact answer by 3.9e-6 at this state: below what d's cap allows to show."""
    mech, _, _, q, v, tau = cassie
    exact = np.asarray(loopdyn.forward_dynamics(mech, q[0], v[0], tau[0], method="sslm")[0])
    scale = np.abs(exact).max()
    errors = [
        np.abs(_mujoco_qacc(q[0], v[0], tau[0], d, 1e-3) - exact).max() / scale
        for d in (0.99, 0.999, 0.9999)
    ]
    assert errors[0] > errors[1] > errors[2], errors
    assert errors[2] < 2e-4, errors
