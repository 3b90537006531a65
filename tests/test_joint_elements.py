"""The joints' own elements, as MuJoCo models them: armature (rotor inertia on the mass matrix's
diagonal), damping and stiffness about springref. Loaded from MJCF and checked against MuJoCo's
mass matrix, bias and passive forces; every forward method, inverse dynamics (both methods and
the fully augmented solve), the energy balance and the builder's refusals."""

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

from loopdyn import energy, forces, forward, kinematics, tree
from loopdyn.inverse import augmented, inverse_dynamics
from loopdyn.io.mjcf import load_mjcf
from loopdyn.mechanism import MechanismBuilder

jax.config.update("jax_enable_x64", True)

# A four-bar with a slider-pendulum: every hinge and the slide carry their own elements.
XML = """<mujoco><option gravity="0 -9.81 0"/><worldbody>
  <body name="crank"><joint name="crank" axis="0 0 1" armature="0.02" damping="0.3"
      stiffness="2" springref="0.4"/>
    <geom type="capsule" fromto="0 0 0 0.2 0 0" size="0.02" mass="1"/>
    <body name="coupler" pos="0.2 0 0"><joint name="coupler" axis="0 0 1" damping="0.1"
        stiffness="0.5" springref="-0.2"/>
      <geom type="capsule" fromto="0 0 0 0.5 0.3 0" size="0.02" mass="2"/>
      <body name="slider" pos="0.25 0.15 0"><joint name="slide" type="slide" axis="1 0 0"
          armature="0.5" damping="1.5" stiffness="40" springref="0.01"/>
        <geom type="box" size="0.03 0.02 0.02" mass="0.4"/></body></body></body>
  <body name="rocker" pos="0.6 0 0"><joint name="rocker" axis="0 0 1" armature="0.01"
      stiffness="1" springref="0.1"/>
    <geom type="capsule" fromto="0 0 0 0.1 0.3 0" size="0.02" mass="1.5"/></body>
</worldbody>
<equality><connect body1="coupler" body2="rocker" anchor="0.5 0.3 0"/></equality>
<actuator><motor joint="crank"/></actuator></mujoco>"""


@pytest.fixture(scope="module")
def loaded():
    mech, model = load_mjcf(XML), mujoco.MjModel.from_xml_string(XML)
    qpos = [model.joint(name).qposadr[0] for name in mech.coordinate_names]
    dofs = [model.joint(name).dofadr[0] for name in mech.coordinate_names]
    rng = np.random.default_rng(3)
    states = [(mech.q0 + rng.uniform(-0.5, 0.5, mech.num_bodies), rng.normal(size=4))]
    closed = kinematics.assemble(mech, mech.q0 + jnp.array([0.3, 0.0, 0.02, 0.0]))
    states += [(closed, rng.normal(size=4))]
    return mech, model, qpos, dofs, states


def mujoco_terms(model, qpos, dofs, q, qd):
    """MuJoCo's mass matrix (armature included), bias and passive forces at ``(q, qd)``."""
    data = mujoco.MjData(model)
    data.qpos[qpos], data.qvel[dofs] = q, qd
    mujoco.mj_forward(model, data)
    full = np.zeros((model.nv, model.nv))
    mujoco.mj_fullM(model, data, full)
    return full[np.ix_(dofs, dofs)], data.qfrc_bias[dofs], data.qfrc_passive[dofs]


def test_loaded_elements_match_mujoco(loaded):
    mech, model, qpos, dofs, states = loaded
    np.testing.assert_array_equal(mech.armature, [0.02, 0.0, 0.5, 0.01])
    springref = [np.deg2rad(0.4), np.deg2rad(-0.2), 0.01, np.deg2rad(0.1)]  # hinges: degrees
    np.testing.assert_allclose(mech.springref, springref, rtol=1e-15, atol=0)
    for q, qd in states:
        mass, bias, passive = mujoco_terms(model, qpos, dofs, q, qd)
        np.testing.assert_allclose(tree.mass_matrix(mech, q), mass, rtol=0, atol=1e-14)
        np.testing.assert_allclose(tree.bias_forces(mech, q, qd), bias, rtol=0, atol=1e-13)
        np.testing.assert_allclose(forces.joint_forces(mech, q, qd), passive, rtol=0, atol=1e-14)
        assert np.all(np.abs(passive) > 0.01)


@pytest.mark.parametrize("method", forward.GENERAL_METHODS)
def test_every_method_solves_the_constrained_equations_with_mujocos_terms(loaded, method):
    """qdd and lambda against a dense KKT solve built from MuJoCo's M, bias and passive forces
    (the loop rows from loopdyn's kinematics, checked against MuJoCo elsewhere)."""
    mech, model, qpos, dofs, states = loaded
    tau = jnp.array([0.7, 0.0, 0.0, 0.0])
    for q, qd in states:
        mass, bias, passive = mujoco_terms(model, qpos, dofs, q, qd)
        _, jac, rate = (np.asarray(x) for x in kinematics.loop_terms(mech, q, qd))
        m = jac.shape[0]
        kkt = np.block([[mass, -jac.T], [jac, np.zeros((m, m))]])
        want = np.linalg.solve(kkt, np.concatenate([tau + passive - bias, -rate]))
        qdd, lam = forward.forward_dynamics(mech, q, qd, tau, method=method)
        np.testing.assert_allclose(qdd, want[:4], rtol=0, atol=1e-11)
        np.testing.assert_allclose(lam, want[4:], rtol=0, atol=1e-11)


def test_inverse_dynamics_returns_the_driving_force_and_the_augmented_solve_agrees(loaded):
    mech, _, _, _, states = loaded
    q, qd = states[1]  # closed loop
    qd = kinematics.project_velocity(mech, q, qd)
    tau = jnp.array([0.7, 0.0, 0.0, 0.0])
    qdd, lam = forward.forward_dynamics(mech, q, qd, tau)
    for method in ("subsystem", "system"):
        result = inverse_dynamics(mech, q, qd, qdd, method=method)
        np.testing.assert_allclose(result.actuator_forces, [0.7], rtol=0, atol=1e-11)
        np.testing.assert_allclose(result.multipliers, lam, rtol=0, atol=1e-11)
    full = augmented(mech, q, qd, qdd)
    np.testing.assert_allclose(full.actuator_forces, result.actuator_forces, rtol=0, atol=1e-11)
    np.testing.assert_allclose(full.reactions, result.reactions, rtol=0, atol=1e-11)
    np.testing.assert_allclose(full.ground_force, result.ground_force, rtol=0, atol=1e-11)


def test_power_balance_with_armature_springs_and_dampers(loaded):
    """dE/dt = (tau - damping qd) . qd along the motion: armature energy and joint springs are
    part of E, the dampers take power out."""
    mech, _, _, _, states = loaded
    q, qd = states[1]
    qd = kinematics.project_velocity(mech, q, qd)
    tau = jnp.array([0.7, 0.0, 0.0, 0.0])
    qdd, _ = forward.forward_dynamics(mech, q, qd, tau)
    rate = jax.jvp(lambda q, qd: energy.total_energy(mech, q, qd), (q, qd), (qd, qdd))[1]
    power = jnp.dot(tau - mech.damping * qd, qd)
    np.testing.assert_allclose(rate, power, rtol=1e-12, atol=1e-13)
    assert abs(float(jnp.dot(mech.damping * qd, qd))) > 0.1


def test_builder_refuses_bad_elements():
    def builder():
        b = MechanismBuilder(planar=True).add_body("link", mass=1.0, inertia=0.1)
        return b.add_body("other", mass=1.0, inertia=0.1)

    with pytest.raises(ValueError, match="joint 'j': damping must be >= 0, got -1"):
        builder().add_joint("j", "revolute", "ground", "link", damping=-1.0)
    with pytest.raises(ValueError, match="joint 'j': armature must be a finite number"):
        builder().add_joint("j", "revolute", "ground", "link", armature=float("nan"))
    b = builder().add_joint("j", "revolute", "ground", "link")
    b.add_joint("k", "revolute", "ground", "other")
    with pytest.raises(
        ValueError, match="joint 'c': armature, damping, stiffness and frictionloss act on"
    ):
        b.add_joint("c", "revolute", "link", "other", cut=True, stiffness=1.0)
