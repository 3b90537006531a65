"""MuJoCo's own terms at a state, and the accelerations they give with its equality constraints
made exact: a KKT solve independent of loopdyn, shared by the tests and benchmarks that compare
loopdyn against MuJoCo."""

import mujoco
import numpy as np


def mujoco_model(xml):
    """``(model, data)`` of the MJCF text ``xml``, contacts disabled."""
    model = mujoco.MjModel.from_xml_string(xml)
    model.opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_CONTACT
    return model, mujoco.MjData(model)


def evaluate(model, data, q, v, tau=None):
    """``mj_forward`` at ``(q, v)`` with the generalized force ``tau`` applied; returns the
    dense mass matrix (armature included)."""
    data.qpos[:], data.qvel[:] = q, v
    data.qfrc_applied[:] = 0.0 if tau is None else tau
    mujoco.mj_forward(model, data)
    mass = np.zeros((model.nv, model.nv))
    mujoco.mj_fullM(model, data, mass)
    return mass


def kkt_reference(model, data, q, v, tau, h=1e-6, ctrl=None):
    """Accelerations from MuJoCo's terms with exact equality constraints: its mass matrix, bias,
    passive and actuator forces (at ``ctrl``), its equality rows' Jacobian J, and J' v by central
    differences of J v along ``mj_integratePos``; least squares over redundant rows."""
    data.ctrl[:] = 0.0 if ctrl is None else ctrl

    def rows(at):
        evaluate(model, data, at, v)
        equality = data.efc_type == mujoco.mjtConstraint.mjCNSTR_EQUALITY
        return data.efc_J.reshape(data.nefc, model.nv)[equality].copy()

    def moved(s):
        out = q.copy()
        mujoco.mj_integratePos(model, out, v, s)
        return out

    jac_rate = (rows(moved(h)) @ v - rows(moved(-h)) @ v) / (2 * h)
    jac = rows(q)
    mass = evaluate(model, data, q, v, tau)
    kkt = np.block([[mass, -jac.T], [jac, np.zeros((len(jac), len(jac)))]])
    forces = tau - data.qfrc_bias + data.qfrc_passive + data.qfrc_actuator
    return np.linalg.lstsq(kkt, np.concatenate([forces, -jac_rate]), rcond=None)[0][: model.nv]
