"""Force elements: linear point-to-point spring-dampers, as body wrenches for the tree algorithms;
the joints' own springs, dampers and (smoothed) dry friction (`joint_forces`) and gravity
compensation (`gravcomp_forces`), as generalized forces (`passive_forces`: both).

A spring between point ``a`` on one body and point ``b`` on another has length ``L = |r_b - r_a|``
and tension ``T = k (L - L0) + c dL/dt``. It pulls ``b`` towards ``a`` with ``-T u`` and ``a``
towards ``b`` with ``+T u``, ``u = (r_b - r_a) / L``. The wrenches are returned in body
coordinates about each body frame origin, the ``f_ext`` convention of `tree`.
"""

import dataclasses

import jax.numpy as jnp
from jaxtyping import Array, Float

from . import configuration, spatial, tree
from .mechanism import Mechanism


def _point_state(rotation, position, twist, point):
    """World position and world velocity of a body-fixed point, given the body's pose and twist
    (``[w; v]`` in body coordinates)."""
    velocity = rotation @ (twist[3:] + jnp.cross(twist[:3], point))
    return position + rotation @ point, velocity


def spring_lengths(mech: Mechanism, q: Float[Array, " n"], frames=None) -> Float[Array, " s"]:
    """Current length ``L`` of every spring; ``frames``: the bodies' ``(position, rotation)`` at
    ``q`` when known (`tree.forward_kinematics`)."""
    if not mech.spring_bodies:
        return jnp.zeros(0, jnp.result_type(q))
    position, rotation = tree.forward_kinematics(mech, q) if frames is None else frames
    lengths = []
    for k, (a, b) in enumerate(mech.spring_bodies):
        ends = [
            point if body < 0 else position[body] + rotation[body] @ point
            for body, point in ((a, mech.spring_point_a[k]), (b, mech.spring_point_b[k]))
        ]
        lengths.append(jnp.linalg.norm(ends[1] - ends[0]))
    return jnp.stack(lengths)


def spring_wrenches(
    mech: Mechanism, q: Float[Array, " n"], qd: Float[Array, " n"]
) -> Float[Array, "n d"]:
    """Body wrenches ``(n, d)`` of all spring-dampers at ``(q, qd)``."""
    if not mech.spring_names:
        return jnp.zeros((mech.num_bodies, mech.dim), q.dtype)
    position, rotation = tree.forward_kinematics(mech, q)
    twist = tree.twists(mech, q, qd)
    if mech.planar:  # back to the spatial layout [0, 0, w_z, v_x, v_y, 0]
        twist = spatial.from_planar(twist)
    wrenches = [[] for _ in range(mech.num_bodies)]  # each body's, summed at the end
    zero = jnp.zeros(3, q.dtype)
    for k, (a, b) in enumerate(mech.spring_bodies):
        ends = []
        for body, point in ((a, mech.spring_point_a[k]), (b, mech.spring_point_b[k])):
            if body < 0:
                ends.append((point, zero))
            else:
                ends.append(_point_state(rotation[body], position[body], twist[body], point))
        (ra, va), (rb, vb) = ends
        span = rb - ra
        length = jnp.linalg.norm(span)
        unit = span / length
        tension = mech.spring_stiffness[k] * (
            length - mech.spring_rest_length[k]
        ) + mech.spring_damping[k] * unit @ (vb - va)
        for body, point, sign in (
            (a, mech.spring_point_a[k], 1.0),
            (b, mech.spring_point_b[k], -1.0),
        ):
            if body >= 0:
                force = rotation[body].T @ (sign * tension * unit)
                wrenches[body].append(jnp.concatenate([jnp.cross(point, force), force]))
    wrench = jnp.stack([sum(w) if w else jnp.zeros(6, q.dtype) for w in wrenches])
    return wrench[:, jnp.array(spatial.PLANAR_ROWS)] if mech.planar else wrench


def joint_forces(
    mech: Mechanism, q: Float[Array, "... nq"], qd: Float[Array, "... nv"]
) -> Float[Array, "... nv"]:
    """The joints' passive generalized forces ``-damping qd - stiffness (q - springref)``
    (MuJoCo's joint damping and stiffness; the armature is an inertia, in `tree`) and
    ``-frictionloss tanh(qd / friction_velocity)``.

    The last is a smooth stand-in for MuJoCo's ``frictionloss``, which is a dry-friction
    constraint: a force up to ``frictionloss`` that holds the joint still while it can and opposes
    sliding with all of it otherwise. The smooth law equals it (to 1 - tanh(3) < 1 %) above three
    times ``friction_velocity``, and is a damper of ``frictionloss / friction_velocity`` near
    rest: unlike MuJoCo's, it cannot hold a joint at rest under a load, only slow it to creep."""
    angles = configuration.scalar_coordinates(mech, q)
    friction = mech.frictionloss * jnp.tanh(qd / mech.friction_velocity)
    return -mech.damping * qd - mech.stiffness * (angles - mech.springref) - friction


def gravcomp_forces(mech: Mechanism, q: Float[Array, "... nq"]) -> Float[Array, "... nv"]:
    """Generalized forces of gravity compensation (MuJoCo's ``qfrc_gravcomp``): the upward force
    ``-gravcomp_i mass_i gravity`` at every body's centre of mass, that is minus the gravity
    forces of the bodies with their masses scaled by ``gravcomp``. Zero without
    ``mech.gravcomp_bodies``."""
    rest = jnp.zeros((*jnp.shape(q)[:-1], mech.nv), jnp.result_type(q))
    if not mech.gravcomp_bodies:
        return rest
    held = dataclasses.replace(mech, mass=mech.gravcomp * mech.mass)
    return tree.bias_forces(held, q, rest)


def passive_forces(
    mech: Mechanism, q: Float[Array, "... nq"], qd: Float[Array, "... nv"]
) -> Float[Array, "... nv"]:
    """All generalized forces that depend on the state only and are not the tree's own: the
    joints' (`joint_forces`) and gravity compensation (`gravcomp_forces`), MuJoCo's
    ``qfrc_passive`` (with ``frictionloss`` smoothed)."""
    return joint_forces(mech, q, qd) + gravcomp_forces(mech, q)
