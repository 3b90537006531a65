"""The fully augmented formulation of experiments/fully_augmented.py (absolute coordinates, every
joint a constraint, dense KKT) against `loopdyn.forward`: on the quarter car at random assembled
states, the centre-of-mass and angular accelerations of every body agree, and the absolute state
satisfies the joint constraints."""

import pathlib
import sys

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from loopdyn import forward, kinematics, mechanisms

sys.path.insert(0, str(pathlib.Path(__file__).parents[1] / "experiments"))
import fully_augmented

MECH = mechanisms.quarter_car()
MODEL = fully_augmented.build(MECH)


@eqx.filter_jit
def _both(mech, q, qd):
    """Body accelerations from loopdyn's SSLM (differentiated kinematics) and from the fully
    augmented KKT solve at the same state; the constraint residual of the absolute state."""
    qdd = forward.solve(mech, q, qd, jnp.zeros_like(q), method="sslm").qdd
    c, rot, u, u_dot = fully_augmented.absolute_state(MODEL, mech, q, qd, qdd)
    ours, _ = fully_augmented.accelerations(MODEL, c, rot, u)
    return ours, u_dot, fully_augmented.constraints(MODEL, c, rot)


def test_sizes():
    assert (MODEL.num_coordinates, MODEL.num_rows) == (24, 23)
    assert [j.kind for j in MODEL.joints] == [
        "revolute",
        "spherical",
        "revolute",
        "universal",
        "spherical",
        "spherical",
    ]


@pytest.mark.parametrize("seed", range(3))
def test_same_accelerations_as_loopdyn(seed):
    k1, k2 = jax.random.split(jax.random.PRNGKey(seed))
    q = MECH.q0.at[0].set(0.15 * jax.random.normal(k1))
    q = kinematics.assemble(MECH, q, fixed=(0,))
    qd = kinematics.project_velocity(MECH, q, 2.0 * jax.random.normal(k2, q.shape), fixed=(0,))
    ours, reference, residual = _both(MECH, q, qd)
    scale = 1.0 + float(jnp.max(jnp.abs(reference)))
    np.testing.assert_allclose(ours, reference, rtol=0, atol=1e-8 * scale)
    assert float(jnp.max(jnp.abs(residual))) < 1e-10


def test_refuses_planar():
    with pytest.raises(ValueError, match="spatial"):
        fully_augmented.build(mechanisms.four_bar())
