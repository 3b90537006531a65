"""Couplings of coordinates (MuJoCo's joint and fixed-tendon equalities): their rows against
MuJoCo's, the dynamics against a KKT solve of MuJoCo's terms, inverse dynamics, a simulation,
and the builder's checks."""

import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from support.mujoco_kkt import kkt_reference

import loopdyn
from loopdyn import kinematics, tree
from loopdyn.mechanism import MechanismBuilder

# A double pendulum and a pendulum carrying a slider, coupled by a quartic joint equality
# (c against a) and a cubic equality of two fixed tendons (a - 2 d against b / 2).
XML = """<mujoco><option gravity="0 0 -9.81"><flag contact="disable"/></option><worldbody>
<body name="l1"><joint name="a" axis="0 1 0"/>
 <geom type="capsule" fromto="0 0 0 0.5 0 0" size="0.05"/>
 <body name="l2" pos="0.5 0 0"><joint name="b" axis="0 1 0" ref="0.2"/>
  <geom type="capsule" fromto="0 0 0 0.4 0 0" size="0.04"/></body></body>
<body name="p" pos="1 0 0"><joint name="c" axis="1 0 0"/>
 <geom type="capsule" fromto="0 0 0 0 0 -0.3" size="0.03"/>
 <body name="s" pos="0 0 -0.3"><joint name="d" type="slide" axis="0 0 1"/><geom size="0.05"/>
 </body></body></worldbody>
<tendon><fixed name="t"><joint joint="a" coef="1"/><joint joint="d" coef="-2"/></fixed>
 <fixed name="u"><joint joint="b" coef="0.5"/></fixed></tendon>
<equality><joint name="gear" joint1="c" joint2="a" polycoef="0.1 1.5 0.3 -0.2 0.05"/>
 <tendon name="belt" tendon1="t" tendon2="u" polycoef="0 0.7 0 0.1 0"/></equality>
<actuator><motor joint="a"/><motor joint="b"/></actuator></mujoco>"""


@pytest.fixture(scope="module")
def coupled():
    mech = loopdyn.load_mjcf(XML)
    model = mujoco.MjModel.from_xml_string(XML)
    q = kinematics.assemble(mech, mech.q0 + jnp.array([0.3, -0.2, 0.0, 0.0]), fixed=(0, 1))
    v = kinematics.project_velocity(mech, q, jnp.array([1.0, -0.5, 0.3, 0.2]), fixed=(0, 1))
    return mech, model, mujoco.MjData(model), np.asarray(q), np.asarray(v)


def _equality_rows(model, data, q, v):
    data.qpos[:], data.qvel[:] = q, v
    mujoco.mj_forward(model, data)
    rows = data.efc_type == mujoco.mjtConstraint.mjCNSTR_EQUALITY
    return data.efc_pos[rows].copy(), data.efc_J.reshape(data.nefc, model.nv)[rows].copy()


def test_rows_match_mujoco(coupled):
    """Phi, J and J' v of both couplings equal MuJoCo's equality rows (its residual ``efc_pos``,
    Jacobian ``efc_J``, and J' v by central differences), also away from closure; so do Phi and
    J v of `kinematics.residuals_at`."""
    mech, model, data, q, v = coupled
    assert mech.coupling_names == ("gear", "belt")
    assert [loop.kind for loop in mech.topology.loops] == ["coupling", "coupling"]
    assert mech.topology.loops[1].coordinates == (0, 1, 3)
    h = 1e-6
    for at in (q, q + np.array([0.2, -0.1, 0.3, 0.05])):
        phi, jac, bias = kinematics.loop_terms(mech, at, v)
        position, rows = _equality_rows(model, data, at, v)
        ahead, behind = (_equality_rows(model, data, at + s * v, v)[1] @ v for s in (h, -h))
        np.testing.assert_allclose(phi, position, atol=1e-15)
        np.testing.assert_allclose(jac, rows, atol=1e-15)
        np.testing.assert_allclose(bias, (ahead - behind) / (2 * h), atol=1e-8)
        motion = tree.body_motion(mech, jnp.asarray(at), jnp.asarray(v), accelerations=False)
        measured, velocity, _ = kinematics.residuals_at(mech, motion)  # J not formed
        np.testing.assert_allclose(measured, position, atol=1e-15)
        np.testing.assert_allclose(velocity, rows @ v, atol=1e-14)
    assert np.abs(kinematics.loop_residual(mech, q)).max() < 1e-15


def test_dynamics_match_a_kkt_solve_from_mujoco(coupled):
    """Every method's accelerations equal the KKT solution of MuJoCo's mass matrix, bias and
    equality rows (J' v by central differences), and inverse dynamics returns the driving
    forces and the multipliers."""
    mech, model, data, q, v = coupled
    tau = np.array([0.3, -0.2, 0.0, 0.0])
    expected = kkt_reference(model, data, q, v, tau)
    for method in loopdyn.forward.GENERAL_METHODS:  # measured: 1.5e-12 relative
        qdd, lam = loopdyn.forward_dynamics(mech, q, v, tau, method=method)
        np.testing.assert_allclose(qdd, expected, atol=2e-11 * np.abs(expected).max())
    result = loopdyn.inverse_dynamics(mech, q, v, qdd)
    np.testing.assert_allclose(result.tau, tau, atol=1e-12)
    np.testing.assert_allclose(result.multipliers, lam, rtol=1e-10)
    with pytest.raises(ValueError, match=r"augmented: the couplings \['gear', 'belt'\]"):
        loopdyn.inverse.augmented(mech, q, v, qdd)


def test_simulation_keeps_the_couplings(coupled):
    mech, _, _, q, v = coupled
    sim = loopdyn.simulate(mech, q, v, 1.0, rtol=1e-10, atol=1e-10)
    assert sim.succeeded, sim.message
    assert np.asarray(sim.loop_residual).max() < 1e-9
    energy = np.asarray(sim.energy)
    assert np.ptp(energy) < 1e-8 * np.abs(energy).max()


def test_builder_checks_couplings():
    b = MechanismBuilder()
    b.add_body("arm", 1.0, inertia=(1.0, 1.0, 1.0)).add_body("hand", 1.0, inertia=(1, 1, 1))
    b.add_joint("a", "revolute", "ground", "arm").add_joint("w", "ball", "arm", "hand")
    with pytest.raises(ValueError, match="polycoef must be 1 to 5 finite numbers"):
        b.add_coupling("c", "a", polycoef=np.zeros(6))
    with pytest.raises(ValueError, match="coefficient of 'a' must be a finite number"):
        b.add_coupling("c", {"a": np.nan})
    with pytest.raises(ValueError, match="coupling name 'a' is already used"):
        b.add_coupling("a", "a")
    b.add_coupling("c", "a", {"w[0]": 1.0})
    with pytest.raises(ValueError, match="'w\\[0\\]' is not the coordinate of a hinge or slide"):
        b.build()
