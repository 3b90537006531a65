"""Control actuators: generalized forces from the control input ``ctrl``, as MuJoCo's actuators
with a joint transmission on a hinge or slide, or a fixed tendon's, and no activation dynamics.

Actuator ``k`` with transmission row ``a = ctrl_arm[k]`` (a unit vector on a hinge's or slide's
coordinate, or a fixed tendon's coefficients) and gear ``g`` has length ``l = g a . q`` (the
coordinates' entries of ``q``, MuJoCo's ``qpos``) and velocity ``v = g a . qd``. With
``ctrl_k`` clamped to ``ctrl_range`` (where ``ctrl_limited``) its force is ``f = (gain_0 + gain_1 l + gain_2 v) ctrl_k + bias_0 + bias_1 l + bias_2 v``
(MuJoCo's ``gaintype``/``biastype`` affine; fixed and none are the cases with zeros), clamped to
``ctrl_force_range`` (where ``ctrl_force_limited``): MuJoCo's ``actuator_force``. It adds
``g f a`` to the generalized forces (MuJoCo's ``qfrc_actuator``).
"""

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from . import configuration
from .mechanism import Mechanism


def _clamp(x, limits, limited):
    limited = np.array(limited, dtype=bool)
    return jnp.clip(
        x, jnp.where(limited, limits[:, 0], -jnp.inf), jnp.where(limited, limits[:, 1], jnp.inf)
    )


def actuator_force(
    mech: Mechanism,
    q: Float[Array, "... nq"],
    qd: Float[Array, "... nv"],
    ctrl: Float[Array, "... u"],
) -> Float[Array, "... u"]:
    """Each actuator's scalar force ``f`` (module docstring; MuJoCo's ``actuator_force``)."""
    gear = mech.ctrl_gear
    length = gear * (configuration.scalar_coordinates(mech, q) @ mech.ctrl_arm.T)
    terms = jnp.stack([jnp.ones_like(ctrl), length, gear * (qd @ mech.ctrl_arm.T)], axis=-1)
    ctrl = _clamp(ctrl, mech.ctrl_range, mech.ctrl_limited)
    force = jnp.sum(mech.ctrl_gain * terms, -1) * ctrl + jnp.sum(mech.ctrl_bias * terms, -1)
    return _clamp(force, mech.ctrl_force_range, mech.ctrl_force_limited)


def actuator_forces(
    mech: Mechanism,
    q: Float[Array, "... nq"],
    qd: Float[Array, "... nv"],
    ctrl: Float[Array, "... u"],
) -> Float[Array, "... nv"]:
    """The actuators' generalized forces ``gear f arm`` summed on the coordinates (MuJoCo's
    ``qfrc_actuator``); zero for a mechanism without control actuators."""
    return (mech.ctrl_gear * actuator_force(mech, q, qd, ctrl)) @ mech.ctrl_arm
