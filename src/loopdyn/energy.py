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
    """``1/2 qd^T I qd``, body by body as ``1/2 m_i |v_ci|^2 + 1/2 w_i^T I_ci w_i`` (``v_ci``
    the velocity of the centre of mass, ``I_ci`` the inertia about it) plus ``1/2 sum_i
    armature_i qd_i^2``; ``motion``: the bodies' `tree.Motion` at ``(q, qd)`` when known."""
    motion = tree.body_motion(mech, q, qd, accelerations=False) if motion is None else motion
    return _kinetic(mech, motion, _centres(mech, motion.position, motion.rotation), qd)


def _centres(mech, position, rotation):
    """The bodies' centres of mass in world coordinates ``(n, 3)``."""
    return position + jnp.einsum("nij,nj->ni", rotation, mech.com)


def _kinetic(mech, motion, centres, qd):
    """`kinetic_energy` from the world twists (at the world origin) and ``centres``."""
    if mech.planar:  # twists [w_z, v_x, v_y], turning about z
        w = motion.twist[:, 0]
        v = motion.twist[:, 1:] + w[:, None] * jnp.stack([-centres[:, 1], centres[:, 0]], -1)
        spin = mech.inertia[:, 2, 2] * w**2
    else:
        w = motion.twist[:, :3]
        v = motion.twist[:, 3:] + jnp.cross(w, centres)
        local = jnp.einsum("nji,nj->ni", motion.rotation, w)  # in body axes
        spin = jnp.einsum("ni,nij,nj->n", local, mech.inertia, local)
    bodies = jnp.sum(mech.mass * jnp.sum(v * v, axis=-1) + spin)
    return 0.5 * (bodies + jnp.sum(mech.armature * qd**2))


def potential_energy(mech: Mechanism, q: Float[Array, " nq"], motion=None) -> Float[Array, ""]:
    """Gravity potential ``-sum_i (1 - gravcomp_i) m_i g . r_i`` (``r_i`` the world centre of
    mass; gravity compensation holds up its share, `forces.gravcomp_forces`) plus the elastic
    energy ``1/2 k (L - L0)^2`` of every spring and ``1/2 k_i (q_i - springref_i)^2`` of every
    joint's stiffness; ``motion``: the bodies' `tree.Motion` at ``q`` when known."""
    frames = (
        tree.forward_kinematics(mech, q) if motion is None else (motion.position, motion.rotation)
    )
    return _potential(mech, q, frames, _centres(mech, *frames))


def _potential(mech, q, frames, centres):
    """`potential_energy` from the body frames ``(position, rotation)`` and ``centres``."""
    held = mech.gravcomp if mech.gravcomp_bodies else 0.0
    gravity = -jnp.sum((1.0 - held) * mech.mass * (centres @ mech.gravity))
    angles = configuration.scalar_coordinates(mech, q)
    joints = 0.5 * jnp.sum(mech.stiffness * (angles - mech.springref) ** 2)
    if not mech.spring_names:
        return gravity + joints
    stretch = forces.spring_lengths(mech, q, frames) - mech.spring_rest_length
    return gravity + 0.5 * jnp.sum(mech.spring_stiffness * stretch**2) + joints


def total_energy(mech: Mechanism, q, qd, motion=None) -> Float[Array, ""]:
    """`kinetic_energy` plus `potential_energy`, from one tree pass (``motion``: the bodies'
    `tree.Motion` at ``(q, qd)``, when known)."""
    motion = tree.body_motion(mech, q, qd, accelerations=False) if motion is None else motion
    frames = (motion.position, motion.rotation)
    centres = _centres(mech, *frames)
    return _kinetic(mech, motion, centres, qd) + _potential(mech, q, frames, centres)
