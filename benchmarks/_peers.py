"""The same mechanisms in the peers of `closed_loop.py`: a Pinocchio model with one 3-D point
constraint per cut joint (the construction of tests/support/pinocchio_model.py) and an MJCF model with one
``connect`` equality per cut joint, plus a worker that times Pinocchio on one pinned core."""

import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def pinocchio_problem(mech, aligned=False):
    """``(pin, model, constraints)``: the construction of tests/support/pinocchio_model.py (the tree by the
    converter of tests/random_trees.py, one ``CONTACT_3D`` constraint per cut joint, every joint
    ``RevoluteUnaligned`` / ``PrismaticUnaligned``). ``aligned``: the same model with a joint
    along a coordinate axis as Pinocchio's own ``RX``/``RY``/``RZ``/``PX``/``PY``/``PZ`` (its
    fastest joints; a planar mechanism's hinges are all ``RZ``), the others unaligned."""
    if not aligned:
        sys.path.insert(0, str(ROOT / "tests"))
        from support.pinocchio_model import pinocchio_problem

        return pinocchio_problem(mech)
    import pinocchio as pin

    aligned_joints = {
        ("revolute", 0): pin.JointModelRX,
        ("revolute", 1): pin.JointModelRY,
        ("revolute", 2): pin.JointModelRZ,
        ("prismatic", 0): pin.JointModelPX,
        ("prismatic", 1): pin.JointModelPY,
        ("prismatic", 2): pin.JointModelPZ,
    }
    model = pin.Model()
    model.gravity.linear = np.asarray(mech.gravity, dtype=float).copy()
    # Pinocchio's body frame is the joint frame; loopdyn's body frame sits in it
    body_in_joint = {-1: pin.SE3.Identity()}
    for i in range(mech.num_bodies):
        axis = np.asarray(mech.axis[i], dtype=float)
        body_in_joint[i] = pin.SE3(
            np.asarray(mech.child_rotation[i]), np.asarray(mech.child_position[i])
        ).inverse()
        unit = np.flatnonzero(np.abs(axis) == 1.0)
        kind = mech.joint_kinds[i]
        if unit.size == 1 and axis[unit[0]] == 1.0 and np.count_nonzero(axis) == 1:
            joint = aligned_joints[kind, int(unit[0])]()
        elif kind == "revolute":
            joint = pin.JointModelRevoluteUnaligned(axis)
        else:
            joint = pin.JointModelPrismaticUnaligned(axis)
        placement = body_in_joint[mech.parent[i]] * pin.SE3(
            np.asarray(mech.parent_rotation[i]), np.asarray(mech.parent_position[i])
        )
        jid = model.addJoint(mech.parent[i] + 1, joint, placement, f"j{i}")
        inertia = pin.Inertia(
            float(mech.mass[i]), np.asarray(mech.com[i]), np.asarray(mech.inertia[i])
        )
        model.appendBodyToJoint(jid, inertia, body_in_joint[i])
    constraints = []
    for k, cut in enumerate(mech.cut_joints):
        if cut.kind not in ("revolute", "spherical"):
            raise ValueError(f"cut joint {cut.name!r}: {cut.kind} is not a point constraint")
        frames = []
        for body, rotation, position in (
            (cut.body_a, mech.cut_rotation_a[k], mech.cut_position_a[k]),
            (cut.body_b, mech.cut_rotation_b[k], mech.cut_position_b[k]),
        ):
            in_body = pin.SE3(np.asarray(rotation), np.asarray(position))
            frames += [body + 1, body_in_joint[body] * in_body]
        constraints.append(
            pin.RigidConstraintModel(
                pin.ContactType.CONTACT_3D, model, *frames, pin.ReferenceFrame.LOCAL
            )
        )
    return pin, model, pin.StdVec_RigidConstraintModel(constraints)


class PinocchioSolver:
    """One Pinocchio model/data pair and a call ``(q, qd, tau) -> qdd`` by ``constraintDynamics``
    or ``lcaba`` (loop-constrained ABA), both proximal with the same settings; ``aligned``: see
    `pinocchio_problem`. ``mech`` may also be a ready ``(pin, model, constraints)``."""

    def __init__(self, mech, algorithm, accuracy=1e-12, mu=1e-10, max_iter=100, aligned=False):
        problem = mech if isinstance(mech, tuple) else pinocchio_problem(mech, aligned)
        pin, model, constraints = problem
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


def random_states(mech, batch, seed):
    """``batch`` assembled, regular states near ``q0`` (the independent coordinates held, the
    others closed by `kinematics.try_assemble`), velocities by `kinematics.project_velocity`,
    random torques; and how many of the guesses were kept. A guess is dropped when it did not
    close or when loopdyn's default method flags its loop constraints singular (a dead centre:
    there the accelerations need not be unique, so no two solvers need agree); the kept states
    are repeated in their place. The states every peer of `closed_loop.py` is timed on."""
    import jax
    import jax.numpy as jnp

    from loopdyn import forward, kinematics

    rng = np.random.default_rng(seed)
    n, fixed = mech.num_bodies, forward.independent_coordinates(mech)
    guess = mech.q0 + 0.1 * rng.normal(size=(batch, n))
    assembled = jax.jit(jax.vmap(lambda q: kinematics.try_assemble(mech, q, fixed=fixed)))(guess)
    q = assembled.q
    qd = jax.jit(jax.vmap(lambda q, v: kinematics.project_velocity(mech, q, v)))(
        q, jnp.asarray(rng.normal(size=(batch, n)))
    )
    tau = jnp.asarray(rng.normal(size=(batch, n)))
    singular = jax.jit(jax.vmap(lambda *x: forward.solve(mech, *x).singular))
    ok = np.asarray(assembled.converged) & ~np.asarray(singular(q, qd, tau))
    if not ok.any():
        raise RuntimeError(f"random_states: none of {batch} guesses closed to a regular state")
    keep = np.flatnonzero(ok)[np.arange(batch) % int(ok.sum())]
    return q[keep], qd[keep], tau[keep], int(ok.sum())


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

    solver = PinocchioSolver(getattr(mechanisms, name)(), algorithm, aligned=True)
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


def loopdyn_worker(args, queue):
    """`pinocchio_worker`'s timing of loopdyn: SSLM's accelerations by ``jit(vmap)`` over this
    worker's share of the states on core ``core`` (one process per core, no host devices)."""
    name, states, core, barrier, repeats = args
    os.sched_setaffinity(0, {core})
    import jax

    jax.config.update("jax_enable_x64", True)
    from loopdyn import compilation, forward, mechanisms

    mech = getattr(mechanisms, name)()
    accelerations = lambda q, qd, tau: forward.solve(mech, q, qd, tau, method="sslm").qdd
    solve = compilation.jit(jax.vmap(accelerations))
    states = [jax.numpy.asarray(x) for x in states]
    solve(*states).block_until_ready()  # compile
    times = []
    for _ in range(repeats):  # ten calls a repeat: one (2 ms) is short beside the barrier's skew
        barrier.wait()
        start = time.perf_counter()
        for _ in range(10):
            solve(*states).block_until_ready()
        times.append((time.perf_counter() - start) / 10)
    queue.put(times)


# --------------------------------------------------------- the ladder drawn the usual MJCF way


def ladder_chain_mjcf(
    k,
    *,
    crank=0.038,
    coupler=0.1152,
    rocker=0.1152,
    ground=0.089,
    spacing=0.1,
    masses=(1.5, 2.5, 3.0),
):
    """MJCF text of the ladder of ``k`` four-bar loops (`mechanisms.ladder`'s dimensions and
    masses) drawn the way MuJoCo models usually are: in the xz-plane, hinges about y, gravity
    along -z, one deep chain crank - coupler1 - coupler2 - ... - coupler k (coupler i + 1 hinged
    to coupler i at the pin where rocker i meets it), each rocker its own tree on the ground,
    and one body-anchored ``connect`` per loop (coupler i's far end to rocker i). Every loop
    passes through the chain. Each bar's body frame sits at its first pin with x along the bar;
    uniform-rod inertias. No geoms: no contacts. All under one fixed ``base`` body: Pinocchio's
    MJCF parser (4.1) reads only the first body of ``worldbody``."""
    crank_mass, coupler_mass, rocker_mass = masses
    pivots = [np.zeros(2)] + [np.array([ground + i * spacing, 0.0]) for i in range(k)]
    # the first coupler's far pin: distance `coupler` from the crank tip, `rocker` from pivot 1,
    # on the left of the line crank tip -> pivot 1 (as mechanisms.ladder assembles it)
    tip0 = np.array([crank, 0.0])
    d = pivots[1] - tip0
    length = np.linalg.norm(d)
    along = (length**2 + coupler**2 - rocker**2) / (2 * length)
    e = d / length
    tips = [tip0, tip0 + along * e + np.sqrt(coupler**2 - along**2) * np.array([-e[1], e[0]])]
    tips += [tips[1] + pivots[i] - pivots[1] for i in range(2, k + 1)]

    def angle(start, end):  # rotation about +y taking x to the bar (x, z) = (u, v): atan2(-v, u)
        return float(np.arctan2(-(end[1] - start[1]), end[0] - start[0]))

    def bar(name, start, end, mass, relative_angle, position, inner=""):
        length = float(np.linalg.norm(np.subtract(end, start)))
        moment = mass * length**2 / 12.0
        return (
            f'<body name="{name}" pos="{_vec(position)}" axisangle="0 1 0 {relative_angle!r}">'
            f'<joint name="{name}_pin" type="hinge" axis="0 1 0"/>'
            f'<inertial pos="{length / 2!r} 0 0" mass="{mass!r}" '
            f'diaginertia="{moment / 100!r} {moment!r} {moment!r}"/>{inner}</body>'
        )

    xz = lambda p: (p[0], 0.0, p[1])
    # the chain from the far end inwards: coupler i hangs on coupler i - 1 at tips[i - 1]
    chain = ""
    for i in range(k, 0, -1):
        parent_angle = angle(tips[i - 2], tips[i - 1]) if i > 1 else angle(pivots[0], tips[0])
        parent_length = float(np.linalg.norm(tips[i - 1] - (tips[i - 2] if i > 1 else pivots[0])))
        chain = bar(
            f"coupler{i}",
            tips[i - 1],
            tips[i],
            coupler_mass,
            angle(tips[i - 1], tips[i]) - parent_angle,
            (parent_length, 0.0, 0.0),
            chain,
        )
    world = bar(
        "crank", pivots[0], tips[0], crank_mass, angle(pivots[0], tips[0]), (0, 0, 0), chain
    )
    for i in range(1, k + 1):
        world += bar(
            f"rocker{i}", pivots[i], tips[i], rocker_mass, angle(pivots[i], tips[i]), xz(pivots[i])
        )
    connects = "".join(
        f'<connect name="C{i}" body1="coupler{i}" body2="rocker{i}" '
        f'anchor="{float(np.linalg.norm(tips[i] - tips[i - 1]))!r} 0 0"/>'
        for i in range(1, k + 1)
    )
    return (
        f'<mujoco model="ladder_chain_{k}"><compiler angle="radian"/>'
        '<option gravity="0 0 -9.81"><flag contact="disable"/></option>'
        f'<worldbody><body name="base">{world}</body></worldbody>'
        f"<equality>{connects}</equality></mujoco>"
    )


def ladder_chain(k):
    """``(mechanism, (pin, model, constraints))``: `ladder_chain_mjcf` loaded by
    `loopdyn.load_mjcf` and by Pinocchio's own MJCF parser (its connects as ``CONTACT_3D``
    rigid constraints), coordinates in the same order (checked)."""
    import tempfile

    import pinocchio as pin

    import loopdyn

    text = ladder_chain_mjcf(k)
    mech = loopdyn.load_mjcf(text)
    with tempfile.NamedTemporaryFile("w", suffix=".xml") as f:
        f.write(text)
        f.flush()
        model, constraints = pin.buildModelAndLegacyConstraintsFromMJCF(f.name)[:2]
    index = [model.idx_vs[model.getJointId(name)] for name in mech.coordinate_names]
    if index != list(range(mech.num_bodies)) or model.nq != model.nv:
        raise ValueError("loopdyn's and Pinocchio's coordinates are not in the same order")
    return mech, (pin, model, constraints)
