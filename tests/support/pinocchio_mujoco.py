"""A Pinocchio model built from MuJoCo's COMPILED model (``mujoco.MjModel``), independently of
loopdyn and of Pinocchio's own MJCF parser, and the maps between MuJoCo's state (``qpos``,
``qvel``, ``qacc``) and Pinocchio's.

Why not ``pin.buildModelFromMJCF``: in pin 4.1 it keeps only the first top-level body tree,
drops the root's pos/quat, ignores joint ``pos`` from defaults and misplaces some ``connect``
anchors. Here every number comes from the compiled arrays:

- Each MuJoCo body with one joint is one Pinocchio joint whose frame is the body frame moved to
  ``jnt_pos`` (same axes), drawn at ``qpos0``: free -> ``JointModelFreeFlyer`` (placement the
  identity, so Pinocchio's translation is the body origin, as MuJoCo's), ball ->
  ``JointModelSpherical``, hinge -> ``JointModelRevoluteUnaligned(jnt_axis)`` with angle
  ``qpos - qpos0`` (MuJoCo draws a hinge with ``ref`` at ``qpos = ref``), slide ->
  ``JointModelPrismaticUnaligned``. A body without joints is welded: its inertia is appended
  to its parent's joint. Bodies with several joints are refused.
- Inertia: ``body_mass``, ``body_ipos`` and ``body_inertia`` turned by ``body_iquat``.
- ``dof_armature`` -> ``model.armature`` (pin 4.1's constraintDynamics adds it to M).
- Passive forces Pinocchio does not model (joint damping ``-d v``, hinge/slide stiffness
  ``-k (q - qpos_spring)``) are returned by `passive` and added to the generalized force.
- Each active body-anchored ``connect`` -> ``RigidConstraintModel(CONTACT_3D, ..., LOCAL)``
  between body1's ``eq_data[0:3]`` and body2's ``eq_data[3:6]`` (MuJoCo's point on body2,
  computed at ``qpos0``).

States. Free joint: MuJoCo ``(p, w, x, y, z)``, ``(p_dot world, omega body)``; Pinocchio
``(p, x, y, z, w)``, ``(R^T p_dot, omega body)``, and its acceleration is the time derivative of
that body-axes velocity, so MuJoCo's linear ``qacc`` is ``R (a_lin + omega x v_lin)``. Ball:
the quaternion reordered, velocity and acceleration the same. Hinge: the angle less
``qpos0``.
"""

from dataclasses import dataclass

import mujoco
import numpy as np
import pinocchio as pin  # the reference: a missing one fails loudly, never skips


def _rotation(quat):
    w, x, y, z = quat / np.linalg.norm(quat)
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    )


@dataclass
class MujocoPinocchio:
    """The Pinocchio model of a MuJoCo model, its constraints and the state maps."""

    mj: object  # mujoco.MjModel
    model: object  # pin.Model
    constraints: object  # pin.StdVec_RigidConstraintModel
    joints: list  # per MuJoCo joint: (type, qposadr, dofadr, pinocchio idx_q, idx_v)

    def to_pinocchio(self, qpos, qvel):
        """Pinocchio's ``(q, v)`` of MuJoCo's ``(qpos, qvel)``."""
        free, ball = 0, 1
        q, v = np.zeros(self.model.nq), np.zeros(self.model.nv)
        for kind, a, d, iq, iv in self.joints:
            if kind == free:
                quat = qpos[a + 3 : a + 7] / np.linalg.norm(qpos[a + 3 : a + 7])
                q[iq : iq + 3] = qpos[a : a + 3]
                q[iq + 3 : iq + 7] = [*quat[1:], quat[0]]
                v[iv : iv + 3] = _rotation(quat).T @ qvel[d : d + 3]
                v[iv + 3 : iv + 6] = qvel[d + 3 : d + 6]
            elif kind == ball:
                quat = qpos[a : a + 4] / np.linalg.norm(qpos[a : a + 4])
                q[iq : iq + 4] = [*quat[1:], quat[0]]
                v[iv : iv + 3] = qvel[d : d + 3]
            else:
                q[iq] = qpos[a] - self.mj.qpos0[a]
                v[iv] = qvel[d]
        return q, v

    def to_mujoco_acceleration(self, qpos, qvel, a):
        """MuJoCo's ``qacc`` of Pinocchio's acceleration ``a`` at MuJoCo's ``(qpos, qvel)``."""
        free = 0
        out = np.zeros(self.mj.nv)
        for kind, adr, d, _, iv in self.joints:
            n = {free: 6, 1: 3}.get(kind, 1)
            out[d : d + n] = a[iv : iv + n]
            if kind == free:
                rotation = _rotation(qpos[adr + 3 : adr + 7])
                v_lin = rotation.T @ qvel[d : d + 3]
                omega = qvel[d + 3 : d + 6]
                out[d : d + 3] = rotation @ (a[iv : iv + 3] + np.cross(omega, v_lin))
        return out

    def passive(self, qpos, qvel):
        """MuJoCo's joint damping and hinge/slide stiffness forces (dof order), as MuJoCo."""
        force = -self.mj.dof_damping * qvel
        for j in range(self.mj.njnt):
            if self.mj.jnt_type[j] in (2, 3):  # slide, hinge
                a, d = self.mj.jnt_qposadr[j], self.mj.jnt_dofadr[j]
                force[d] -= self.mj.jnt_stiffness[j] * (qpos[a] - self.mj.qpos_spring[a])
        return force

    def generalized_force(self, qpos, qvel, tau):
        """Pinocchio's ``tau``: MuJoCo's applied ``tau`` plus the passive forces, moved into
        Pinocchio's velocity space (the free joint's linear force into body axes)."""
        total = np.asarray(tau, dtype=float) + self.passive(qpos, qvel)
        out = np.zeros(self.model.nv)
        for kind, adr, d, _, iv in self.joints:
            n = {0: 6, 1: 3}.get(kind, 1)
            out[iv : iv + n] = total[d : d + n]
            if kind == 0:
                out[iv : iv + 3] = _rotation(qpos[adr + 3 : adr + 7]).T @ total[d : d + 3]
        return out


def pinocchio_from_mujoco(mj):
    """`MujocoPinocchio` of the compiled ``mujoco.MjModel`` ``mj`` (see the module docstring)."""
    model = pin.Model()
    model.gravity.linear = np.asarray(mj.opt.gravity, dtype=float).copy()
    # per MuJoCo body: its Pinocchio joint id and the body frame in that joint's frame
    joint_of = {0: 0}
    body_in_joint = {0: pin.SE3.Identity()}
    joints, armature = [], []
    for b in range(1, mj.nbody):
        parent = int(mj.body_parentid[b])
        relative = pin.SE3(_rotation(mj.body_quat[b]), np.asarray(mj.body_pos[b], dtype=float))
        in_parent_joint = body_in_joint[parent] * relative  # body b's frame at qpos0
        count = int(mj.body_jntnum[b])
        if count > 1:
            raise ValueError(f"body {b}: several joints are not supported")
        if count == 0:  # welded to the parent's joint
            joint_of[b], body_in_joint[b] = joint_of[parent], in_parent_joint
        else:
            j = int(mj.body_jntadr[b])
            kind = int(mj.jnt_type[j])
            anchor = np.asarray(mj.jnt_pos[j], dtype=float)
            if kind == mujoco.mjtJoint.mjJNT_FREE:
                if parent != 0:
                    raise ValueError("a free joint must be a child of the world")
                joint, placement, anchor = pin.JointModelFreeFlyer(), pin.SE3.Identity(), 0 * anchor
            else:
                placement = in_parent_joint * pin.SE3(np.eye(3), anchor)
                axis = np.asarray(mj.jnt_axis[j], dtype=float)
                if kind == mujoco.mjtJoint.mjJNT_BALL:
                    joint = pin.JointModelSpherical()
                elif kind == mujoco.mjtJoint.mjJNT_HINGE:
                    joint = pin.JointModelRevoluteUnaligned(axis)
                else:
                    joint = pin.JointModelPrismaticUnaligned(axis)
            jid = model.addJoint(joint_of[parent], joint, placement, mj.joint(j).name or f"j{j}")
            joints.append(
                (kind, int(mj.jnt_qposadr[j]), int(mj.jnt_dofadr[j]), model.idx_qs[jid],
                 model.idx_vs[jid])
            )  # fmt: skip
            d = int(mj.jnt_dofadr[j])
            armature += list(mj.dof_armature[d : d + joint.nv])
            joint_of[b], body_in_joint[b] = jid, pin.SE3(np.eye(3), -anchor)
        principal = _rotation(mj.body_iquat[b])
        inertia = principal @ np.diag(mj.body_inertia[b]) @ principal.T
        body = pin.Inertia(float(mj.body_mass[b]), np.asarray(mj.body_ipos[b], float), inertia)
        model.appendBodyToJoint(joint_of[b], body, body_in_joint[b])
    model.armature = np.asarray(armature, dtype=float)
    constraints = []
    for e in range(mj.neq):
        if mj.eq_type[e] != mujoco.mjtEq.mjEQ_CONNECT or not mj.eq_active0[e]:
            raise ValueError(f"equality {e}: only active connects are supported")
        if mj.eq_objtype[e] != mujoco.mjtObj.mjOBJ_BODY:
            raise ValueError(f"equality {e}: only body-anchored connects are supported")
        frames = []
        for body, point in (
            (mj.eq_obj1id[e], mj.eq_data[e, :3]),
            (mj.eq_obj2id[e], mj.eq_data[e, 3:6]),
        ):
            at = body_in_joint[int(body)] * pin.SE3(np.eye(3), np.asarray(point, dtype=float))
            frames += [joint_of[int(body)], at]
        constraints.append(
            pin.RigidConstraintModel(
                pin.ContactType.CONTACT_3D, model, *frames, pin.ReferenceFrame.LOCAL
            )
        )
    return MujocoPinocchio(mj, model, pin.StdVec_RigidConstraintModel(constraints), joints)


class ConstraintDynamics:
    """``pin.constraintDynamics`` of a `MujocoPinocchio` in MuJoCo's terms: ``(qpos, qvel,
    tau) -> qacc`` with the passive forces added (proximal settings ``accuracy, mu, max_iter``;
    mu > 0 since Cassie's planar sub-loops make rows redundant)."""

    def __init__(self, problem, accuracy=1e-14, mu=1e-12, max_iter=100):
        self.pin, self.problem = pin, problem
        self.data = problem.model.createData()
        self.datas = pin.StdVec_RigidConstraintData([c.createData() for c in problem.constraints])
        self.settings = pin.ProximalSettings(accuracy, mu, max_iter)
        pin.initConstraintDynamics(problem.model, self.data, problem.constraints, self.datas)

    def pinocchio_state(self, qpos, qvel, tau):
        """Pinocchio's ``(q, v, tau)`` (the passive forces in tau)."""
        q, v = self.problem.to_pinocchio(qpos, qvel)
        return q, v, self.problem.generalized_force(qpos, qvel, tau)

    def __call__(self, qpos, qvel, tau):
        qpos, qvel = np.asarray(qpos, dtype=float), np.asarray(qvel, dtype=float)
        a = self.pin.constraintDynamics(
            self.problem.model, self.data, *self.pinocchio_state(qpos, qvel, tau),
            self.problem.constraints, self.datas, self.settings,
        )  # fmt: skip
        return self.problem.to_mujoco_acceleration(qpos, qvel, np.asarray(a))
