"""Spring-dampers: generalized forces equal minus the gradient of the spring energy (stiffness) and
the Rayleigh dissipation gradient (damping), both by autodiff of the spring lengths."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import loopdyn
from loopdyn import energy, forces, tree


def chain(planar):
    b = loopdyn.MechanismBuilder(planar=planar)
    axis = (0, 0, 1) if planar else (0.3, 0.2, 1.0)
    b.add_body("l1", 1.0, com=(0.2, 0, 0), inertia=(0.01, 0.02, 0.025))
    b.add_body("l2", 2.0, com=(0.3, 0, 0), inertia=(0.02, 0.03, 0.045))
    b.add_joint("j1", "revolute", "ground", "l1", axis=axis)
    b.add_joint("j2", "revolute", "l1", "l2", axis=axis, position=(0.4, 0.0, 0.0))
    b.add_spring(
        "s1",
        "ground",
        "l2",
        point_a=(0.1, 0.5, 0.0),
        point_b=(0.5, 0.1, 0.0),
        stiffness=300.0,
        damping=0.0,
        rest_length=0.2,
    )
    b.add_spring(
        "s2",
        "l1",
        "l2",
        point_a=(0.1, 0.1, 0.0),
        point_b=(0.3, -0.1, 0.0),
        stiffness=0.0,
        damping=7.0,
        rest_length=0.1,
    )
    return b.build()


def spring_length(mech, q, k):
    return forces.spring_lengths(mech, q)[k]


def generalized(mech, q, qd):
    """``N^T f_ext``: the joint-space image of the spring wrenches."""
    zero = jnp.zeros_like(q)
    w = forces.spring_wrenches(mech, q, qd)
    return tree.inverse_dynamics(mech, q, zero, zero) - tree.inverse_dynamics(
        mech, q, zero, zero, w
    )


@pytest.mark.parametrize("planar", [True, False])
def test_spring_forces_are_energy_and_dissipation_gradients(planar):
    mech = chain(planar)
    q, qd = jnp.array([0.4, -0.9]), jnp.array([1.3, -0.7])
    grad_l1 = jax.grad(spring_length, argnums=1)(mech, q, 0)
    grad_l2 = jax.grad(spring_length, argnums=1)(mech, q, 1)
    energy_force = -300.0 * (spring_length(mech, q, 0) - 0.2) * grad_l1
    damping_force = -7.0 * (grad_l2 @ qd) * grad_l2
    np.testing.assert_allclose(
        generalized(mech, q, qd), energy_force + damping_force, rtol=1e-12, atol=1e-12
    )


@pytest.mark.parametrize("planar", [True, False])
def test_kinetic_energy_is_half_qd_mass_matrix_qd(planar):
    mech = chain(planar)
    q, qd = jnp.array([0.4, -0.9]), jnp.array([1.3, -0.7])
    np.testing.assert_allclose(
        energy.kinetic_energy(mech, q, qd), 0.5 * qd @ tree.mass_matrix(mech, q) @ qd, rtol=1e-13
    )


@pytest.mark.parametrize("planar", [True, False])
def test_potential_energy_gradient_is_static_joint_load(planar):
    """With springs and gravity, ``dV/dq`` equals the torque that holds the mechanism still."""
    mech = eqx.tree_at(lambda m: m.spring_damping, chain(planar), jnp.zeros(2))
    q = jnp.array([0.4, -0.9])
    zero = jnp.zeros_like(q)
    holding = tree.inverse_dynamics(mech, q, zero, zero, forces.spring_wrenches(mech, q, zero))
    np.testing.assert_allclose(
        jax.grad(energy.potential_energy, argnums=1)(mech, q), holding, rtol=1e-12
    )
