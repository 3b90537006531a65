"""Consistent closed-loop states from a dense KKT solve, independent of `loopdyn.inverse`."""

import jax.numpy as jnp
import numpy as np

from loopdyn import forces, kinematics, tree


def kkt(mech, q, qd, tau):
    """``qdd`` and lambda of ``I qdd + C qd + g = tau + J^T lambda`` (springs included) with
    ``J qdd = -J' qd``: one dense solve (seed 000 eq. 10), independent of `loopdyn.inverse`."""
    _, jac, bias = kinematics.loop_terms(mech, q, qd)
    springs = forces.spring_wrenches(mech, q, qd)
    m = jac.shape[0]
    matrix = jnp.block([[tree.mass_matrix(mech, q), -jac.T], [jac, jnp.zeros((m, m))]])
    rhs = jnp.concatenate([tau - tree.bias_forces(mech, q, qd, springs), -bias])
    x = jnp.linalg.solve(matrix, rhs)
    return x[: mech.num_bodies], x[mech.num_bodies :]


def random_draws(mech, k=3, seed=0):
    """``k`` configurations near ``mech.q0`` (the first ``q0``, the others assembled from a
    perturbed guess with the actuated coordinates held), and per configuration a random vector
    for the velocity and random actuator forces, each stacked ``(k, ...)``."""
    rng = np.random.default_rng(seed)
    out = []
    for s in range(k):
        q = mech.q0
        if s and mech.cut_joints:
            guess = mech.q0 + 0.03 * rng.normal(size=mech.num_bodies)
            q = kinematics.assemble(mech, guess, fixed=mech.actuated or (0,))
        out.append((q, rng.normal(size=mech.num_bodies), rng.normal(size=len(mech.actuated)) * 5.0))
    return tuple(jnp.stack([jnp.asarray(x) for x in xs]) for xs in zip(*out))


def complete(mech, q, raw, u):
    """Traceable: ``qd`` the projection of ``raw`` onto the null space of J at ``q``, and the
    accelerations and multipliers that the actuator forces ``u`` produce (`kkt`). Returns
    ``(q, qd, qdd, u, lam)``."""
    jac = kinematics.loop_jacobian(mech, q)
    qd = raw - jnp.linalg.pinv(jac) @ (jac @ raw)
    tau = jnp.zeros(mech.num_bodies).at[np.array(mech.actuated, dtype=int)].set(u)
    qdd, lam = kkt(mech, q, qd, tau)
    return q, qd, qdd, u, lam
