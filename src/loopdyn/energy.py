"""Mechanical energy: kinetic ``T = 1/2 qd^T I qd`` (the joints' armature included), gravity (less
what gravity compensation holds up) and spring potentials (point-to-point springs and the joints'
own stiffness).

Conservation of their sum is the standard check of a conservative simulation.
"""

import jax.numpy as jnp
from jaxtyping import Array, Float

from . import configuration, forces, tree
from .mechanism import Mechanism


def kinetic_energy(
    mech: Mechanism, q: Float[Array, " nq"], qd: Float[Array, " n"], motion=None
) -> Float[Array, ""]:
    """``1/2 sum_i t_i^T M_i t_i`` over the body twists plus ``1/2 sum_i armature_i qd_i^2``
    (equal to ``1/2 qd^T I qd``); ``motion``: the bodies' `tree.Motion` at ``(q, qd)`` when
    known."""
    motion = tree.body_motion(mech, q, qd, accelerations=False) if motion is None else motion
    t = tree.body_twists(mech, motion)
    bodies = 0.5 * jnp.einsum("ni,nij,nj->", t, tree.body_inertias(mech), t)
    return bodies + 0.5 * jnp.sum(mech.armature * qd**2)


def potential_energy(mech: Mechanism, q: Float[Array, " nq"], motion=None) -> Float[Array, ""]:
    """Gravity potential ``-sum_i (1 - gravcomp_i) m_i g . r_i`` (``r_i`` the world centre of
    mass; gravity compensation holds up its share, `forces.gravcomp_forces`) plus the elastic
    energy ``1/2 k (L - L0)^2`` of every spring and ``1/2 k_i (q_i - springref_i)^2`` of every
    joint's stiffness; ``motion``: the bodies' `tree.Motion` at ``q`` when known."""
    frames = (
        tree.forward_kinematics(mech, q) if motion is None else (motion.position, motion.rotation)
    )
    position, rotation = frames
    com = position + jnp.einsum("nij,nj->ni", rotation, mech.com)
    held = mech.gravcomp if mech.gravcomp_bodies else 0.0
    gravity = -jnp.sum((1.0 - held) * mech.mass * (com @ mech.gravity))
    stretch = forces.spring_lengths(mech, q, frames) - mech.spring_rest_length
    angles = configuration.scalar_coordinates(mech, q)
    joints = 0.5 * jnp.sum(mech.stiffness * (angles - mech.springref) ** 2)
    return gravity + 0.5 * jnp.sum(mech.spring_stiffness * stretch**2) + joints


def total_energy(mech: Mechanism, q, qd, motion=None) -> Float[Array, ""]:
    """`kinetic_energy` plus `potential_energy`, from one tree pass (``motion``: the bodies'
    `tree.Motion` at ``(q, qd)``, when known)."""
    motion = tree.body_motion(mech, q, qd, accelerations=False) if motion is None else motion
    return kinetic_energy(mech, q, qd, motion) + potential_energy(mech, q, motion)
