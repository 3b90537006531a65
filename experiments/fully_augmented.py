"""Fully augmented formulation of a spatial mechanism (seed 003's "FA" model): every body is a free
rigid body with its own absolute coordinates and every joint, tree or cut, is a constraint.

State of body i: the world position ``c_i`` of its centre of mass and its rotation ``R_i`` (pose),
the velocity ``v_i`` of the centre of mass and the angular velocity ``w_i`` (both world axes):
6 velocity coordinates per body, ``u = [v_1, w_1, v_2, w_2, ...]``. Equations of motion with the
joint constraints ``Phi(c, R) = 0`` (multipliers ``lam``)::

    M du/dt + G^T lam = f,     G du/dt = gamma,

``M = diag(m_i 1, R_i I_i R_i^T)``, ``f`` = gravity, spring-dampers and the gyroscopic moment
``-w_i x (R_i I_i R_i^T) w_i``; ``G u = d/dt Phi`` (rotations move as ``dR/dt = [w]x R``) and
``gamma = -(dG/dt) u``, both by forward-mode differentiation of ``Phi`` along the motion. The
dense KKT matrix ``[[M, G^T], [G, 0]]`` of size ``6N + m`` is solved by LU at every call.

Joint constraints (position level): coincident joint points (3 rows); a revolute adds 2 rows
(two directions normal to the axis on one body stay normal to the axis on the other: 5 rows),
a universal 1 row (its two axes stay perpendicular: 4 rows), a spherical none (3 rows).

The model is read from a loopdyn `Mechanism` at its (assembled) ``q0``: massless frames of
loopdyn's spherical and universal tree joints are merged into one joint between the massive
bodies they connect; joint points and axes are taken in world axes at ``q0`` and stored in the
frames of the bodies they belong to. Spatial mechanisms with revolute, universal and spherical
joints, gravity and spring-dampers; no joint torques (the quarter car has none).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from loopdyn import kinematics
from loopdyn.mechanism import Mechanism

ROWS = {"revolute": 5, "universal": 4, "spherical": 3}


class Joint(NamedTuple):
    """A joint between bodies ``a`` and ``b`` (indices of massive bodies, -1 the ground): its
    point on each (body frame, or world for the ground) and the axis directions that its rows
    use: ``normals_a`` (rows of directions fixed in a) and ``axis_b`` (fixed in b)."""

    name: str
    kind: str
    a: int
    b: int
    point_a: np.ndarray
    point_b: np.ndarray
    normals_a: np.ndarray
    axis_b: np.ndarray


class Model(NamedTuple):
    """The fully augmented model: body inertias (centroidal, body frame), joints and springs."""

    bodies: tuple[int, ...]  # indices in mech.body_names of the massive bodies
    mass: np.ndarray
    com: np.ndarray
    inertia: np.ndarray
    gravity: np.ndarray
    joints: tuple[Joint, ...]
    springs: tuple[tuple, ...]  # (a, b, point_a, point_b, stiffness, damping, rest length)

    @property
    def num_coordinates(self) -> int:
        return 6 * len(self.bodies)

    @property
    def num_rows(self) -> int:
        return sum(ROWS[j.kind] for j in self.joints)


def _normals(axis):
    """Two unit vectors normal to ``axis`` and to each other."""
    axis = axis / np.linalg.norm(axis)
    helper = np.eye(3)[np.argmin(np.abs(axis))]
    first = np.cross(axis, helper)
    first /= np.linalg.norm(first)
    return np.stack([first, np.cross(axis, first)])


def build(mech: Mechanism) -> Model:
    """The fully augmented model of ``mech`` (module docstring); refuses planar mechanisms,
    prismatic joints and cut joints other than revolute and spherical."""
    if mech.planar:
        raise ValueError("fully_augmented.build: spatial mechanisms only")
    mass = np.asarray(mech.mass)
    bodies = tuple(int(i) for i in np.flatnonzero(mass > 0))
    index = {body: k for k, body in enumerate(bodies)}
    position, rotation = (np.asarray(x) for x in kinematics.body_poses(mech, mech.q0))

    def pose(body):
        return (np.zeros(3), np.eye(3)) if body < 0 else (position[body], rotation[body])

    def local(body, world_point):
        r, rot = pose(body)
        return rot.T @ (world_point - r)

    def massive_ancestor(body):
        chain = []
        while body >= 0 and mass[body] == 0:
            chain.append(body)
            body = mech.parent[body]
        return body, chain[::-1]

    joints = []
    for b in bodies:
        if mech.joint_kinds[b] != "revolute":
            raise ValueError(
                f"fully_augmented.build: joint of body {mech.body_names[b]!r} is "
                f"{mech.joint_kinds[b]}; only revolute chains are supported"
            )
        a, chain = massive_ancestor(mech.parent[b])
        chain = [*chain, b]
        kind = {1: "revolute", 2: "universal", 3: "spherical"}[len(chain)]
        points, axes = [], []
        for body in chain:
            r, rot = pose(mech.parent[body])
            frame = rot @ np.asarray(mech.parent_rotation[body])
            points.append(r + rot @ np.asarray(mech.parent_position[body]))
            axes.append(frame @ np.asarray(mech.axis[body]))
        if np.ptp(np.stack(points), axis=0).max() > 1e-12:
            raise ValueError(
                f"fully_augmented.build: the axes into {mech.body_names[b]!r} "
                "do not meet in one point"
            )
        ra = pose(a)[1]
        if kind == "revolute":
            normals, axis_b = ra.T @ _normals(axes[0]).T, rotation[b].T @ axes[0]
        elif kind == "universal":
            normals, axis_b = (ra.T @ axes[0])[:, None], rotation[b].T @ axes[1]
        else:
            normals, axis_b = np.zeros((3, 0)), np.zeros(3)
        name = mech.coordinate_names[chain[0]].split("[")[0]
        joints.append(
            Joint(
                name,
                kind,
                index.get(a, -1),
                index[b],
                local(a, points[0]),
                local(b, points[0]),
                normals.T,
                axis_b,
            )
        )
    for k, cut in enumerate(mech.cut_joints):
        if cut.kind not in ("revolute", "spherical"):
            raise ValueError(f"fully_augmented.build: cut joint kind {cut.kind!r} not supported")
        r, rot = pose(cut.body_a)
        point = r + rot @ np.asarray(mech.cut_position_a[k])
        frame = rot @ np.asarray(mech.cut_rotation_a[k])
        axis = frame @ np.asarray(mech.cut_axis[k])
        if cut.kind == "revolute":
            normals = (rot.T @ _normals(axis).T).T
            axis_b = pose(cut.body_b)[1].T @ axis
        else:
            normals, axis_b = np.zeros((0, 3)), np.zeros(3)
        joints.append(
            Joint(
                cut.name,
                cut.kind,
                index.get(cut.body_a, -1),
                index.get(cut.body_b, -1),
                local(cut.body_a, point),
                local(cut.body_b, point),
                normals,
                axis_b,
            )
        )
    springs = []
    for k, (a, b) in enumerate(mech.spring_bodies):
        for body in (a, b):
            if body >= 0 and body not in index:
                raise ValueError("fully_augmented.build: a spring ends on a massless frame")
        springs.append(
            (
                index.get(a, -1),
                index.get(b, -1),
                np.asarray(mech.spring_point_a[k]),
                np.asarray(mech.spring_point_b[k]),
                float(mech.spring_stiffness[k]),
                float(mech.spring_damping[k]),
                float(mech.spring_rest_length[k]),
            )
        )
    return Model(
        bodies,
        mass[list(bodies)],
        np.asarray(mech.com)[list(bodies)],
        np.asarray(mech.inertia)[list(bodies)],
        np.asarray(mech.gravity),
        tuple(joints),
        tuple(springs),
    )


# ------------------------------------------------------------------------------------------------
# Absolute state from joint coordinates (to start from, and to compare with loopdyn).


def _vee(skew):
    return jnp.stack([skew[2, 1], skew[0, 2], skew[1, 0]])


def absolute_state(model: Model, mech: Mechanism, q, qd, qdd=None):
    """``(c, R, u)`` of the massive bodies at the loopdyn state ``(q, qd)``; with ``qdd``, also
    ``du/dt`` (centre-of-mass and angular accelerations), by differentiating the tree's
    kinematics along ``q(s) = q + s qd + s^2/2 qdd``."""
    bodies = jnp.asarray(model.bodies)
    qdd = jnp.zeros_like(q) if qdd is None else qdd

    def poses(s):
        r, rot = kinematics.body_poses(mech, q + s * qd + 0.5 * s**2 * qdd)
        r, rot = r[bodies], rot[bodies]
        return r + jnp.einsum("nij,nj->ni", rot, model.com), rot

    def rates(s):
        (c, rot), (v, rot_dot) = jax.jvp(poses, (s,), (jnp.ones_like(s),))
        w = jax.vmap(lambda a, b: _vee(a @ b.T))(rot_dot, rot)
        return c, rot, jnp.concatenate([v, w], axis=1).reshape(-1)

    zero = jnp.zeros((), q.dtype)
    (c, rot, u), (_, _, u_dot) = jax.jvp(rates, (zero,), (jnp.ones_like(zero),))
    return c, rot, u, u_dot


# ------------------------------------------------------------------------------------------------
# The fully augmented equations.


def _point(model, c, rot, body, point):
    """World position of a point given in the frame of ``body`` (body frame origin based)."""
    if body < 0:
        return jnp.asarray(point, c.dtype)
    return c[body] + rot[body] @ (jnp.asarray(point) - model.com[body])


def _direction(rot, body, d):
    return jnp.asarray(d) if body < 0 else rot[body] @ jnp.asarray(d)


def constraints(model: Model, c, rot):
    """``Phi(c, R)``: every joint's rows (module docstring), stacked joint by joint."""
    rows = []
    for j in model.joints:
        rows.append(_point(model, c, rot, j.a, j.point_a) - _point(model, c, rot, j.b, j.point_b))
        if j.kind != "spherical":
            axis_b = _direction(rot, j.b, j.axis_b)
            rows.append(jnp.stack([_direction(rot, j.a, n) @ axis_b for n in j.normals_a]))
    return jnp.concatenate(rows)


def _tangent(c, rot, u):
    """Time derivative of the pose: ``dc/dt = v``, ``dR/dt = [w]x R``."""
    vw = u.reshape(-1, 6)
    skew = jax.vmap(lambda w: jnp.cross(jnp.eye(3), w))(vw[:, 3:])  # rows e_k x w: [w]x
    return vw[:, :3], jnp.einsum("nij,njk->nik", skew, rot)


def _forces(model: Model, c, rot, u):
    """Applied forces per body, ``[f_i, n_i]`` about the centre of mass, world axes: gravity,
    spring-dampers and the gyroscopic moment; and the world inertias."""
    vw = u.reshape(-1, 6)
    inertia = jnp.einsum("nij,njk,nlk->nil", rot, model.inertia, rot)
    force = jnp.asarray(model.mass)[:, None] * jnp.asarray(model.gravity)
    moment = -jnp.cross(vw[:, 3:], jnp.einsum("nij,nj->ni", inertia, vw[:, 3:]))
    for a, b, pa, pb, stiffness, damping, rest in model.springs:
        ends = []
        for body, point in ((a, pa), (b, pb)):
            x = _point(model, c, rot, body, point)
            if body < 0:
                ends.append((x, jnp.zeros(3, c.dtype)))
            else:
                arm = x - c[body]
                ends.append((x, vw[body, :3] + jnp.cross(vw[body, 3:], arm)))
        (xa, va), (xb, vb) = ends
        length = jnp.linalg.norm(xb - xa)
        unit = (xb - xa) / length
        tension = stiffness * (length - rest) + damping * unit @ (vb - va)
        for body, x, sign in ((a, xa, 1.0), (b, xb, -1.0)):
            if body >= 0:
                f = sign * tension * unit
                force = force.at[body].add(f)
                moment = moment.at[body].add(jnp.cross(x - c[body], f))
    return jnp.concatenate([force, moment], axis=1).reshape(-1), inertia


def accelerations(model: Model, c, rot, u):
    """``(du/dt, lam)`` by the dense KKT solve of the fully augmented equations."""
    n = model.num_coordinates
    tangent = _tangent(c, rot, u)

    def phi_dot(c, rot, u):  # G(c, R) u
        return jax.jvp(lambda c, rot: constraints(model, c, rot), (c, rot), _tangent(c, rot, u))[1]

    jac = jax.jacfwd(phi_dot, argnums=2)(c, rot, u)
    gamma = -jax.jvp(lambda c, rot: phi_dot(c, rot, u), (c, rot), tangent)[1]
    f, inertia = _forces(model, c, rot, u)
    blocks = [
        jnp.eye(3) * m if k % 2 == 0 else inertia[k // 2]
        for k, m in enumerate(np.repeat(model.mass, 2))
    ]
    mass_matrix = jax.scipy.linalg.block_diag(*blocks)
    m = jac.shape[0]
    kkt = jnp.block([[mass_matrix, jac.T], [jac, jnp.zeros((m, m), u.dtype)]])
    solution = jnp.linalg.solve(kkt, jnp.concatenate([f, gamma]))
    return solution[:n], -solution[n:]
