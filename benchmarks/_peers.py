"""The same mechanisms in the peers of `closed_loop.py`: a Pinocchio model with one 3-D point
constraint per cut joint (the construction of tests/test_forward.py) and an MJCF model with one
``connect`` equality per cut joint, plus a worker that times Pinocchio on one pinned core."""

import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def pinocchio_problem(mech):
    """``(pin, model, constraints)``: the construction of tests/test_forward.py (the tree by the
    converter of tests/random_trees.py, one ``CONTACT_3D`` constraint per cut joint)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from test_forward import pinocchio_problem

    return pinocchio_problem(mech)


class PinocchioSolver:
    """One Pinocchio model/data pair and a call ``(q, qd, tau) -> qdd`` by ``constraintDynamics``
    or ``lcaba`` (loop-constrained ABA), both proximal with the same settings."""

    def __init__(self, mech, algorithm, accuracy=1e-12, mu=1e-10, max_iter=100):
        pin, model, constraints = pinocchio_problem(mech)
        self.pin, self.model, self.constraints = pin, model, constraints
        self.data = model.createData()
        self.datas = pin.StdVec_RigidConstraintData([c.createData() for c in constraints])
        self.settings = pin.ProximalSettings(accuracy, mu, max_iter)
        if algorithm == "constraintDynamics":
            pin.initConstraintDynamics(model, self.data, constraints, self.datas)
            self.function = pin.constraintDynamics
        elif algorithm == "lcaba":
            pin.computeJointMinimalOrdering(model, self.data, constraints)
            self.function = pin.lcaba
        else:
            raise ValueError(algorithm)

    def __call__(self, q, qd, tau):
        return self.function(
            self.model, self.data, q, qd, tau, self.constraints, self.datas, self.settings
        )

    @property
    def iterations(self):
        return int(self.settings.iter)


def _pose_xml(rotation, position):
    import mujoco

    quat = np.zeros(4)
    mujoco.mju_mat2Quat(quat, np.ascontiguousarray(rotation, dtype=float).ravel())
    return f'pos="{_vec(position)}" quat="{_vec(quat)}"'


def _vec(x):
    return " ".join(f"{float(v):.17g}" for v in np.asarray(x).ravel())


def mjcf(mech, solimp=None, solref=None):
    """MJCF text of ``mech``: each MuJoCo body is a loopdyn body's tree-joint frame (as in
    Pinocchio), its hinge or slide about ``axis`` through the origin, the body's inertia moved
    into that frame, and a ``connect`` between two sites per cut joint (the sites coincide when the
    loop is closed, so MuJoCo does not rely on ``qpos0``). No geoms: no contacts."""
    n = mech.num_bodies
    children = {i: [k for k in range(n) if mech.parent[k] == i] for i in range(-1, n)}
    frame = {  # joint frame of body i in its body frame
        i: (np.asarray(mech.child_rotation[i]), np.asarray(mech.child_position[i]))
        for i in range(n)
    }
    frame[-1] = (np.eye(3), np.zeros(3))

    def in_joint_frame(body, rotation, position):
        r, p = frame[body]
        return r.T @ rotation, r.T @ (np.asarray(position) - p)

    sites = {i: [] for i in range(-1, n)}
    equalities = []
    for k, cut in enumerate(mech.cut_joints):
        if cut.kind not in ("revolute", "spherical"):
            raise ValueError(f"cut joint {cut.name!r}: {cut.kind} is not a connect")
        for end, body, position in (
            ("a", cut.body_a, mech.cut_position_a[k]),
            ("b", cut.body_b, mech.cut_position_b[k]),
        ):
            _, p = in_joint_frame(body, np.eye(3), np.asarray(position))
            sites[body].append(f'<site name="{cut.name}_{end}" pos="{_vec(p)}"/>')
        equalities.append(f'<connect name="{cut.name}" site1="{cut.name}_a" site2="{cut.name}_b"/>')
    extra = "".join(f' {k}="{v}"' for k, v in (("solimp", solimp), ("solref", solref)) if v)

    def body_xml(i):
        p = mech.parent[i]
        r_p, p_p = frame[p]
        # placement of the joint frame on the parent's body frame, in the parent's joint frame
        rotation = r_p.T @ np.asarray(mech.parent_rotation[i])
        position = r_p.T @ (np.asarray(mech.parent_position[i]) - p_p)
        r_c, p_c = frame[i]
        com = r_c.T @ (np.asarray(mech.com[i]) - p_c)
        inertia = r_c.T @ np.asarray(mech.inertia[i]) @ r_c
        full = [inertia[0, 0], inertia[1, 1], inertia[2, 2]]
        full += [inertia[0, 1], inertia[0, 2], inertia[1, 2]]
        kind = "hinge" if mech.joint_kinds[i] == "revolute" else "slide"
        return (
            f'<body name="{mech.body_names[i]}" {_pose_xml(rotation, position)}>'
            f'<joint name="{mech.coordinate_names[i]}" type="{kind}" '
            f'axis="{_vec(mech.axis[i])}"/>'
            f'<inertial pos="{_vec(com)}" mass="{float(mech.mass[i]):.17g}" '
            f'fullinertia="{_vec(full)}"/>'
            + "".join(sites[i])
            + "".join(body_xml(c) for c in children[i])
            + "</body>"
        )

    return (
        f'<mujoco><compiler angle="radian" balanceinertia="true"/>'
        f'<option gravity="{_vec(mech.gravity)}"><flag contact="disable"/></option>'
        f"<default><equality{extra}/></default>"
        f"<worldbody>{''.join(sites[-1])}{''.join(body_xml(c) for c in children[-1])}"
        f"</worldbody><equality>{''.join(equalities)}</equality></mujoco>"
    )


class MujocoSolver:
    """``mj_forward`` on the MJCF of ``mech``; ``addresses`` map loopdyn coordinates to MuJoCo's."""

    def __init__(self, mech, **options):
        import mujoco

        self.mujoco = mujoco
        self.model = mujoco.MjModel.from_xml_string(mjcf(mech, **options))
        self.data = mujoco.MjData(self.model)
        ids = [
            mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_JOINT, c)
            for c in mech.coordinate_names
        ]
        self.qpos = np.array([self.model.jnt_qposadr[j] for j in ids])
        self.dofs = np.array([self.model.jnt_dofadr[j] for j in ids])

    def set_state(self, q, qd, tau):
        self.data.qpos[self.qpos] = q
        self.data.qvel[self.dofs] = qd
        self.data.qfrc_applied[self.dofs] = tau

    def forward(self):
        self.mujoco.mj_forward(self.model, self.data)

    def __call__(self, q, qd, tau):
        self.set_state(q, qd, tau)
        self.forward()
        return self.data.qacc[self.dofs].copy()


def pinocchio_worker(args, queue):
    """Time ``algorithm`` over ``states`` on core ``core`` after all workers meet at ``barrier``:
    the wall time of this worker's share (one thread, the call through Python)."""
    name, algorithm, states, core, barrier, repeats = args
    os.sched_setaffinity(0, {core})
    import jax

    jax.config.update("jax_enable_x64", True)
    from loopdyn import mechanisms

    solver = PinocchioSolver(getattr(mechanisms, name)(), algorithm)
    q, qd, tau = (np.ascontiguousarray(x) for x in states)
    for k in range(min(8, len(q))):  # warm up
        solver(q[k], qd[k], tau[k])
    times = []
    for _ in range(repeats):
        barrier.wait()
        start = time.perf_counter()
        for k in range(len(q)):
            solver(q[k], qd[k], tau[k])
        times.append(time.perf_counter() - start)
    queue.put(times)
