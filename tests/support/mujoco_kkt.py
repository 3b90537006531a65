"""MuJoCo's own terms at a state, and the accelerations they give with its equality constraints
made exact: a KKT solve independent of loopdyn (`kkt_reference`), shared by the tests and
benchmarks that compare loopdyn against MuJoCo; and `compare`, which loads nothing itself but
measures a loaded MJCF mechanism against that solve at random assembled states (the published
files' coverage: benchmarks/mjcf_coverage.py, tests/test_mjcf_coverage.py)."""

import warnings

import mujoco
import numpy as np

import loopdyn
from loopdyn import configuration, kinematics


def mujoco_model(xml):
    """``(model, data)`` of the MJCF text ``xml``, contacts disabled, constraint Jacobians dense
    (MuJoCo's default turns sparse for large models; `kkt_reference` reads ``efc_J`` dense)."""
    model = mujoco.MjModel.from_xml_string(xml)
    model.opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_CONTACT
    model.opt.jacobian = mujoco.mjtJacobian.mjJAC_DENSE
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


def mujoco_name(model, kind, k):
    """The name of MuJoCo element ``k`` of ``kind`` ("actuator", ...), or loopdyn's for an unnamed
    one (``actuator<id>``)."""
    obj = getattr(mujoco.mjtObj, f"mjOBJ_{kind.upper()}")
    return mujoco.mj_id2name(model, obj, k) or f"{kind}{k}"


def load(path, **kwargs):
    """`loopdyn.load_mjcf` of ``path``: ``(mech or None, its ValueError's text or None, [the
    texts of the warnings raised])``."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            mech = loopdyn.load_mjcf(path, **kwargs)
        except ValueError as error:
            return None, str(error), [str(w.message) for w in caught]
    return mech, None, [str(w.message) for w in caught]


def reference_model(path, mech, warned):
    """MuJoCo's model and data for the KKT reference (contacts off); for a ``warn`` load, with the
    features loopdyn left out switched off too. Returns ``(model, data, ctrl_ids)``, ``ctrl_ids``
    MuJoCo's actuator id of each of ``mech.ctrl_names``."""
    model, data = mujoco_model(path.read_text())
    # A weld's torquescale (not 0) scales its rotation rows: the same constraint, but tiny rows
    # (weld.xml: 0.002) cost the reference's J' v by central differences 1e-6 of accuracy.
    welds = model.eq_type == mujoco.mjtEq.mjEQ_WELD
    model.eq_data[welds, 10] = np.where(model.eq_data[welds, 10] != 0.0, 1.0, 0.0)
    names = [mujoco_name(model, "actuator", a) for a in range(model.nu)]
    ctrl_ids = [names.index(n) for n in mech.ctrl_names]
    if warned:
        model.opt.density, model.opt.viscosity, model.opt.wind[:] = 0.0, 0.0, 0.0
        model.tendon_stiffness[:], model.tendon_damping[:] = 0.0, 0.0
        model.tendon_armature[:] = 0.0
        for j in range(model.njnt):
            if model.jnt_type[j] in (mujoco.mjtJoint.mjJNT_FREE, mujoco.mjtJoint.mjJNT_BALL):
                model.jnt_stiffness[j] = 0.0
        for a in set(range(model.nu)) - set(ctrl_ids):
            model.actuator_gainprm[a], model.actuator_biasprm[a] = 0.0, 0.0
    # MuJoCo's run-time switch (eq_active) set to loopdyn's loops: those loopdyn left out
    # (unsupported, off, or constraining nothing) are off, those switched on are on
    loops = {loop.name for loop in mech.topology.loops}
    for e in range(model.neq):
        data.eq_active[e] = mujoco_name(model, "equality", e) in loops
    return model, data, ctrl_ids


def compare(path, mech, warned, states=3, seed=0):
    """Per random assembled state: ``(difference, residual, scale, condition)``: the largest
    difference of `forward_dynamics` against the MuJoCo KKT solve relative to the larger of the
    largest constrained and the largest unconstrained acceleration (MuJoCo's ``qacc_smooth``: a
    body the loops lock has no acceleration of its own to compare with), the largest of MuJoCo's
    own equality residuals (``efc_pos``, m or rad) at loopdyn's closed state, that scale, and the
    condition number of MuJoCo's mass matrix there; ``(nan, inf, nan, nan)`` for a state
    `kinematics.assemble` refuses because a weld's frames end up a wrong turn apart."""
    model, data, ctrl_ids = reference_model(path, mech, warned)
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(states):
        q = configuration.integrate(mech, mech.q0, 0.2 * rng.standard_normal(mech.nv))
        try:
            q = np.asarray(kinematics.assemble(mech, q))
        except ValueError as error:  # a weld reached at a wrong turn: refused, not compared
            if "angle rows at zero" not in str(error):
                raise
            out.append((float("nan"), float("inf"), float("nan"), float("nan")))
            continue
        v = np.asarray(kinematics.project_velocity(mech, q, rng.standard_normal(mech.nv)))
        tau = rng.standard_normal(mech.nv)
        ctrl = rng.standard_normal(len(ctrl_ids)) if ctrl_ids else None
        full = np.zeros(model.nu)
        if ctrl is not None:
            full[ctrl_ids] = ctrl
        expected = kkt_reference(model, data, q, v, tau, ctrl=full)  # data: at (q, v, tau)
        equality = data.efc_type == mujoco.mjtConstraint.mjCNSTR_EQUALITY
        residual = float(np.max(np.abs(data.efc_pos[equality]), initial=0.0))
        scale = max(np.abs(expected).max(), np.abs(data.qacc_smooth).max())
        qdd, _ = loopdyn.forward_dynamics(mech, q, v, tau, ctrl=ctrl)
        mass = np.zeros((model.nv, model.nv))
        mujoco.mj_fullM(model, data, mass)
        difference = float(np.abs(np.asarray(qdd) - expected).max() / scale)
        out.append((difference, residual, scale, float(np.linalg.cond(mass))))
    return out
