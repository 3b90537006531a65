"""Spring-dampers: generalized forces equal minus the gradient of the spring energy (stiffness) and
the Rayleigh dissipation gradient (damping), computed independently from body positions."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import loopdyn
from loopdyn import forces, tree


def chain(planar):
    b = loopdyn.MechanismBuilder(planar=planar)
    axis = (0, 0, 1) if planar else (0.3, 0.2, 1.0)
    b.add_body("l1", 1.0, com=(0.2, 0, 0), inertia=(0.01, 0.02, 0.025))
    b.add_body("l2", 2.0, com=(0.3, 0, 0), inertia=(0.02, 0.03, 0.045))
    b.add_joint("j1", "revolute", "ground", "l1", axis=axis)
    b.add_joint("j2", "revolute", "l1", "l2", axis=axis, position=(0.4, 0.0, 0.0))
    b.add_spring("s1", "ground", "l2", point_a=(0.1, 0.5, 0.0), point_b=(0.5, 0.1, 0.0),
                 stiffness=300.0, damping=0.0, rest_length=0.2)
    b.add_spring("s2", "l1", "l2", point_a=(0.1, 0.1, 0.0), point_b=(0.3, -0.1, 0.0),
                 stiffness=0.0, damping=7.0, rest_length=0.1)
    return b.build()


def spring_length(mech, q, k):
    rotation, position = tree.forward_kinematics(mech, q)
    ends = []
    for body, point in zip(mech.spring_bodies[k], (mech.spring_point_a[k], mech.spring_point_b[k])):
        ends.append(point if body < 0 else position[body] + rotation[body] @ point)
    return jnp.linalg.norm(ends[1] - ends[0])


def generalized(mech, q, qd):
    """``N^T f_ext``: the joint-space image of the spring wrenches."""
    zero = jnp.zeros_like(q)
    w = forces.spring_wrenches(mech, q, qd)
    return tree.inverse_dynamics(mech, q, zero, zero) - tree.inverse_dynamics(mech, q, zero, zero, w)


@pytest.mark.parametrize("planar", [True, False])
def test_spring_forces_are_energy_and_dissipation_gradients(planar):
    mech = chain(planar)
    q, qd = jnp.array([0.4, -0.9]), jnp.array([1.3, -0.7])
    grad_l1 = jax.grad(spring_length, argnums=1)(mech, q, 0)
    grad_l2 = jax.grad(spring_length, argnums=1)(mech, q, 1)
    energy_force = -300.0 * (spring_length(mech, q, 0) - 0.2) * grad_l1
    damping_force = -7.0 * (grad_l2 @ qd) * grad_l2
    np.testing.assert_allclose(generalized(mech, q, qd), energy_force + damping_force, rtol=1e-12, atol=1e-12)
