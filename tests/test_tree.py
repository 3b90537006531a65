"""Recursive tree dynamics (`loopdyn.tree`): against Pinocchio on random serial and branched trees
(revolute, prismatic, spherical and universal joints), an analytic double pendulum, planar vs
spatial models of one planar mechanism, identities, gradients against finite differences, and
``vmap`` against a loop.

Each model's checks evaluate every function in one jitted program over a native batch of
states (one compile per model); Pinocchio runs state by state.
"""

import types

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pinocchio as pin
import pytest
from jax.flatten_util import ravel_pytree
from random_trees import (
    random_inertia,
    random_multidof_tree,
    random_planar_tree,
    random_rotation,
    random_tree,
    swap_vector,
)

from loopdyn import MechanismBuilder, chunking, spatial, tree

ROWS = np.array(spatial.PLANAR_ROWS)
OTHER = np.setdiff1d(np.arange(6), ROWS)


def assert_close(actual, expected, rtol, scale=0.0):
    """``max |actual - expected| <= rtol * max(max |expected|, scale)`` (max-norm relative error;
    ``scale`` for quantities that vanish in some cases)."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    error = np.max(np.abs(actual - expected)) / max(np.max(np.abs(expected)), scale)
    assert error <= rtol, f"relative error {error:.2e} > {rtol:.0e}"


def random_states(seed, n, k=2, dim=6):
    """``k`` random states: q, qd, qdd, tau ``(k, n)`` and body wrenches ``(k, n, dim)``."""
    rng = np.random.default_rng(seed)
    q, qd, qdd = rng.uniform(-2.0, 2.0, (3, k, n))
    return types.SimpleNamespace(
        q=q, qd=qd, qdd=qdd, tau=rng.normal(size=(k, n)) * 5, f_ext=rng.normal(size=(k, n, dim)) * 3
    )


def evaluate(mech, s):
    """Every `tree` function at the states ``s``, one jitted program over their native batch."""

    n = mech.num_bodies

    @jax.jit
    def batch(q, qd, qdd, tau, f_ext):
        position, rotation = tree.forward_kinematics(mech, q)
        tau_id = tree.inverse_dynamics(mech, q, qd, qdd)
        tau_ext = tree.inverse_dynamics(mech, q, qd, qdd, f_ext)
        return {
            "id": tau_id,
            "id_ext": tau_ext,
            "bias": tree.bias_forces(mech, q, qd),
            "wrenches": tree.joint_wrenches(mech, q, qd, qdd, f_ext),
            "mass": tree.mass_matrix(mech, q),
            "fd": tree.forward_dynamics(mech, q, qd, tau),
            "fd_ext": tree.forward_dynamics(mech, q, qd, tau, f_ext),
            "rotation": rotation,
            "position": position,
            "twists": tree.twists(mech, q, qd),
            "rates": tree.twist_rates(mech, q, qd, qdd),
            "fd_of_id": tree.forward_dynamics(mech, q, qd, tau_id),
            "fd_of_id_ext": tree.forward_dynamics(mech, q, qd, tau_ext, f_ext),
            "motion": tree.body_motion(mech, q, qd),
            "terms": tree.subsystem_terms(mech, q, qd, tau, [(0, n), (n // 2, n)], f_ext),
            "blocks": tree.mass_matrix_blocks(mech, q, [(0, n), (n // 2, n)]),
            "system": tree.system_terms(mech, q, qd, tau, f_ext),
            "bias_ext": tree.bias_forces(mech, q, qd, f_ext),
        }

    return jax.tree.map(np.asarray, batch(s.q, s.qd, s.qdd, s.tau, s.f_ext))


def pinocchio_forces(f_ext, body_in_joint):
    """loopdyn body wrenches (body coordinates, [n; f]) as Pinocchio's ``fext`` (joint frames,
    [f; n], with the universe first)."""
    return [pin.Force.Zero()] + [
        b.act(pin.Force(swap_vector(f))) for b, f in zip(body_in_joint, f_ext)
    ]


def pinocchio_results(model, mech, s):
    """Pinocchio's values at the states ``s`` in loopdyn's conventions. Pinocchio's frame of body
    ``i`` is its joint frame; ``body_in_joint`` is loopdyn's body frame in it."""
    data = model.createData()
    body_in_joint = [
        pin.SE3(r, p).inverse()
        for r, p in zip(np.asarray(mech.child_rotation), np.asarray(mech.child_position))
    ]
    out, n = [], model.njoints
    for q, qd, qdd, tau, f_ext in zip(s.q, s.qd, s.qdd, s.tau, s.f_ext):
        fext = pinocchio_forces(f_ext, body_in_joint)
        r = {
            "id": pin.rnea(model, data, q, qd, qdd).copy(),
            "bias": pin.nonLinearEffects(model, data, q, qd).copy(),
            "fd": pin.aba(model, data, q, qd, tau).copy(),
            "fd_ext": pin.aba(model, data, q, qd, tau, fext).copy(),
        }
        upper = pin.crba(model, data, q)  # the upper triangle only
        r["mass"] = np.triu(upper) + np.triu(upper, 1).T
        r["id_ext"] = pin.rnea(model, data, q, qd, qdd, fext).copy()
        r["wrenches"] = [
            swap_vector(b.actInv(data.f[i + 1]).vector) for i, b in enumerate(body_in_joint)
        ]
        pin.forwardKinematics(model, data, q, qd, qdd)
        poses = [data.oMi[i + 1] * b for i, b in enumerate(body_in_joint)]
        r["rotation"] = [p.rotation for p in poses]
        r["position"] = [p.translation for p in poses]
        r["twists"] = [
            swap_vector(b.actInv(data.v[i + 1]).vector) for i, b in enumerate(body_in_joint)
        ]
        r["rates"] = [
            swap_vector(b.actInv(data.a[i + 1]).vector) for i, b in enumerate(body_in_joint)
        ]
        r["world_twists"] = [swap_vector(data.oMi[i].act(data.v[i]).vector) for i in range(1, n)]
        pin.forwardKinematics(model, data, q, qd, np.zeros_like(qdd))
        r["world_rates"] = [swap_vector(data.oMi[i].act(data.a[i]).vector) for i in range(1, n)]
        jacobian = np.reshape(
            pin.computeJointJacobians(model, data, q), (6, -1)
        )  # (6,) when nv = 1
        r["axes"] = [swap_vector(c) for c in jacobian.T]
        out.append(r)
    return {k: np.array([r[k] for r in out]) for k in out[0]}


# ---------------------------------------------------------------------------------------------
# Against Pinocchio, and identities, on random trees

# Seeds giving revolute and prismatic joints (n > 1) and, for branched trees, a real branching.
# Sizes 1 (a single body), 2, 5 and 30 (deep chains and wide branchings): a size in between
# would be one more compilation and proves nothing these do not.
SERIAL_SEEDS = {1: 101, 2: 104, 5: 105, 30: 130}
BRANCHED_SEEDS = {2: 4, 5: 105, 30: 130}
CASES = (
    [f"serial-{n}" for n in SERIAL_SEEDS]
    + [f"branched-{n}" for n in BRANCHED_SEEDS]
    + ["multidof-6"]
)


def build_case(name):
    """Serial trees keep body frame = joint frame; branched trees get random joint frames on the
    child bodies too; ``multidof`` mixes revolute, spherical and universal joints."""
    kind, n = name.split("-")
    n = int(n)
    if kind == "multidof":
        mech, model = random_multidof_tree(n, seed=1)
        assert {"j1[2]", "j3[1]", "j4"} <= set(mech.coordinate_names)  # all three kinds
    elif kind == "serial":
        mech, model = random_tree(n, seed=SERIAL_SEEDS[n], serial=True)
    else:
        mech, model = random_tree(n, seed=BRANCHED_SEEDS[n], child_frames=True)
    assert mech.coordinate_names == tuple(model.names[1:])  # same coordinate order
    serial = mech.parent == tuple(range(-1, mech.num_bodies - 1))
    assert serial == (kind == "serial" or n == 1)
    assert n == 1 or kind == "multidof" or set(mech.joint_kinds) == {"revolute", "prismatic"}
    return mech, model


@pytest.fixture(scope="module", params=CASES)
def case(request):
    mech, model = build_case(request.param)
    s = random_states(len(request.param), mech.num_bodies)
    return types.SimpleNamespace(
        mech=mech, s=s, ours=evaluate(mech, s), ref=pinocchio_results(model, mech, s)
    )


QUANTITIES = {
    "id": "rnea",
    "id_ext": "rnea with fext",
    "wrenches": "rnea's data.f with fext",
    "bias": "nonLinearEffects",
    "mass": "crba",
    "fd": "aba",
    "fd_ext": "aba with fext",
    "rotation": "oMi rotation",
    "position": "oMi translation",
    "twists": "data.v",
    "rates": "data.a",
}


def test_level_children_list_every_body_once_under_its_parent():
    """The passes from the tips sum a level's values into the slots above through
    `_Levels.children` (a gather, linear in the width): each body with a parent is listed once,
    under its parent's slot; roots and padding nowhere. A forest of k two-body trees (the
    ladder's layout: width k) needs one child per slot."""
    rng = np.random.default_rng(3)
    forests = [tuple(p for i in range(k) for p in (-1, 2 * i)) for k in (1, 5)]
    branched = tuple(int(rng.integers(-1, i)) for i in range(30))  # parent < body, -1 a root
    for parent in [*forests, branched]:
        levels = tree._levels(parent)
        width, listed = levels.body.shape[1], []
        assert np.all(levels.children[0] == width)  # level 0 hands to the ground
        for level in range(1, len(levels.body)):
            for above, slots in enumerate(levels.children[level]):
                for body in levels.body[level, slots[slots < width]]:
                    assert parent[body] == levels.body[level - 1, above]
                    listed.append(int(body))
        assert sorted(listed) == [i for i, p in enumerate(parent) if p >= 0]
    assert tree._levels(forests[1]).children.shape[1:] == (5, 1)


@pytest.mark.parametrize("quantity", sorted(QUANTITIES))
def test_matches_pinocchio(case, quantity):
    assert_close(case.ours[quantity], case.ref[quantity], 1e-9)


def test_body_motion_matches_pinocchio_in_world_axes(case):
    """`tree.body_motion` at the world origin: Pinocchio's ``oMi.act(v)``, ``oMi.act(a)`` at
    ``qdd = 0`` (no gravity; zero for a single joint: scaled by the squared twists) and the
    columns of its world joint Jacobian."""
    motion, ref = case.ours["motion"], case.ref
    assert_close(motion.twist, ref["world_twists"], 1e-9)
    squared = float(np.max(np.abs(ref["world_twists"]))) ** 2
    assert_close(motion.acceleration, ref["world_rates"], 1e-9, squared)
    assert_close(motion.axes, ref["axes"], 1e-9)


def test_subsystem_terms_equal_the_separate_passes(case):
    """One pass each way of `tree.subsystem_terms` gives ``tau`` less `bias_forces` and what
    `mass_matrix_blocks` and `body_motion` give apart."""
    phi, blocks, motion = case.ours["terms"]
    assert_close(phi, case.s.tau - case.ours["bias_ext"], 1e-12)
    for ours, separate in zip(blocks, case.ours["blocks"]):
        assert_close(ours, separate, 1e-12)
    assert_close(case.ours["blocks"][0], case.ours["mass"], 1e-12)
    for ours, separate in zip(motion, case.ours["motion"]):
        np.testing.assert_allclose(ours, separate, rtol=1e-12, atol=1e-15)
    assert_close(motion.position, case.ours["position"], 1e-12)


def test_system_terms_equal_the_separate_passes(case):
    """One pass of `tree.system_terms` gives ``tau`` less `bias_forces`, `mass_matrix` and
    `body_motion`."""
    phi, mass, motion = case.ours["system"]
    assert_close(phi, case.s.tau - case.ours["bias_ext"], 1e-12)
    assert_close(mass, case.ours["mass"], 1e-12)
    for ours, separate in zip(motion, case.ours["motion"]):
        np.testing.assert_allclose(ours, separate, rtol=1e-12, atol=1e-15)


def test_forward_dynamics_inverts_inverse_dynamics(case):
    assert_close(case.ours["fd_of_id"], case.s.qdd, 1e-12)
    assert_close(case.ours["fd_of_id_ext"], case.s.qdd, 1e-12)


def test_mass_matrix_is_symmetric_positive_definite(case):
    mass = case.ours["mass"]
    np.testing.assert_array_equal(mass, np.swapaxes(mass, -1, -2))
    assert np.min(np.linalg.eigvalsh(mass)) > 0


def test_mass_matrix_and_bias_forces_give_inverse_dynamics(case):
    mass, ours = case.ours["mass"], case.ours
    assert_close(np.einsum("kij,kj->ki", mass, case.s.qdd) + ours["bias"], ours["id"], 1e-12)


# ---------------------------------------------------------------------------------------------
# A spherical tree joint against Pinocchio's JointModelSpherical (quaternion, body rates)


SPHERICAL_ARM = (
    ("ball", "S", "spherical", "ground"),
    ("arm", "R", "revolute", "ball"),
    ("hand", "P", "prismatic", "arm"),
)


def spherical_arm():
    """Three bodies on a spherical, a revolute and a prismatic joint, in loopdyn and in Pinocchio
    (JointModelSpherical: quaternion configuration, body angular velocity)."""
    rng = np.random.default_rng(7)
    builder = MechanismBuilder(gravity=rng.normal(size=3) * 5)
    model = pin.Model()
    model.gravity.linear = builder.gravity.copy()
    pin_joints = {
        "spherical": lambda axis: pin.JointModelSpherical(),
        "revolute": pin.JointModelRevoluteUnaligned,
        "prismatic": pin.JointModelPrismaticUnaligned,
    }
    ids = {"ground": 0}  # Pinocchio joint moving each body
    for body, joint, kind, parent in SPHERICAL_ARM:
        axis, placement = rng.normal(size=3), pin.SE3(random_rotation(rng), rng.normal(size=3))
        axis /= np.linalg.norm(axis)
        mass, com, inertia = rng.uniform(0.5, 3.0), rng.normal(size=3) * 0.3, random_inertia(rng)
        builder.add_body(body, mass=mass, com=com, inertia=inertia)
        builder.add_joint(
            joint,
            kind,
            parent,
            body,
            axis=axis,
            position=placement.translation,
            rotation=placement.rotation,
        )
        ids[body] = model.addJoint(ids[parent], pin_joints[kind](axis), placement, joint)
        model.appendBodyToJoint(ids[body], pin.Inertia(mass, com, inertia), pin.SE3.Identity())
    return builder.build(), model


def rates_map(q):
    """``T`` with Pinocchio's velocity ``v = T qd``. The spherical chain turns about x, y, z in
    turn (R = Rx(a) Ry(b) Rz(c)), so its body angular velocity is
    ``Rz^T Ry^T e_x a' + Rz^T e_y b' + e_z c'``; the other two coordinates are Pinocchio's."""
    b, c = q[1], q[2]
    cz, sz = jnp.cos(c), jnp.sin(c)

    def rz_t(v):  # Rz(c)^T v
        return jnp.stack([cz * v[0] + sz * v[1], -sz * v[0] + cz * v[1], v[2]])

    ry_t_ex = jnp.stack([jnp.cos(b), 0.0 * b, jnp.sin(b)])
    omega = jnp.stack([rz_t(ry_t_ex), rz_t(jnp.array([0.0, 1.0, 0.0])), jnp.array([0, 0, 1.0])])
    return jax.scipy.linalg.block_diag(omega.T, jnp.eye(2))


@jax.jit
def rates_map_jvp(q, qd):
    """``T`` and ``T' = dT/dq qd`` (forward-mode autodiff), one small compiled program."""
    return jax.jvp(rates_map, (q,), (qd,))


def test_spherical_joint_matches_pinocchio_spherical():
    """``M = T^T M_pin T``, ``tau = T^T rnea(T qd, T qdd + T' qd)``, ``qdd = T^-1 (aba(T^-T tau)
    - T' qd)`` and the body poses, with ``T'`` by forward-mode autodiff."""
    mech, model = spherical_arm()
    assert mech.coordinate_names == ("S[0]", "S[1]", "S[2]", "R", "P")
    s = random_states(8, 5)
    ours, data = evaluate(mech, s), model.createData()
    for k, (q, qd, qdd, tau) in enumerate(zip(s.q, s.qd, s.qdd, s.tau)):
        t_map, t_dot = (np.asarray(x) for x in rates_map_jvp(q, qd))
        turn = [pin.exp3(angle * axis) for angle, axis in zip(q[:3], np.eye(3))]
        q_pin = np.concatenate([pin.Quaternion(turn[0] @ turn[1] @ turn[2]).coeffs(), q[3:]])
        v_pin, a_pin = t_map @ qd, t_map @ qdd + t_dot @ qd
        upper = pin.crba(model, data, q_pin)
        mass = np.triu(upper) + np.triu(upper, 1).T
        assert_close(ours["mass"][k], t_map.T @ mass @ t_map, 1e-12)
        assert_close(ours["id"][k], t_map.T @ pin.rnea(model, data, q_pin, v_pin, a_pin), 1e-12)
        a_pin = pin.aba(model, data, q_pin, v_pin, np.linalg.solve(t_map.T, tau))
        assert_close(ours["fd"][k], np.linalg.solve(t_map, a_pin - t_dot @ qd), 1e-12)
        pin.forwardKinematics(model, data, q_pin)
        for body, joint, _, _ in SPHERICAL_ARM:
            i, pose = mech.body_index(body), data.oMi[model.getJointId(joint)]
            assert_close(ours["rotation"][k, i], pose.rotation, 1e-12)
            assert_close(ours["position"][k, i], pose.translation, 1e-12)


# ---------------------------------------------------------------------------------------------
# Analytic double pendulum: joints about z, centres of mass on the links' x-axes

LINK, COM, MASS, IZZ, GRAVITY = 0.7, (0.3, 0.25), (1.3, 0.6), (0.05, 0.02), 9.81


def double_pendulum(model):
    """``planar``, ``spatial`` (the same model in 6-D algebra) or ``tilted`` (spatial, its plane
    and gravity turned by a random rotation)."""
    tilt = random_rotation(np.random.default_rng(5)) if model == "tilted" else np.eye(3)
    b = MechanismBuilder(planar=model == "planar", gravity=tilt @ [0.0, -GRAVITY, 0.0])
    for name, m, c, izz in zip(("upper", "lower"), MASS, COM, IZZ):
        b.add_body(name, mass=m, com=(c, 0.0, 0.0), inertia=(0.5 * izz, 0.7 * izz, izz))
    b.add_joint("shoulder", "revolute", "ground", "upper", rotation=tilt)
    b.add_joint("elbow", "revolute", "upper", "lower", position=(LINK, 0.0, 0.0))
    return b.build()


def double_pendulum_terms(q, qd):
    """Lagrange's equations with ``q[0]`` the upper link's angle from x and ``q[1]`` the elbow
    angle: mass matrix and ``C qd + g``."""
    (c1, c2), (m1, m2), (i1, i2) = COM, MASS, IZZ
    h = m2 * LINK * c2
    m12 = i2 + m2 * c2**2 + h * np.cos(q[1])
    mass = np.array(
        [
            [i1 + m1 * c1**2 + i2 + m2 * (LINK**2 + c2**2) + 2 * h * np.cos(q[1]), m12],
            [m12, i2 + m2 * c2**2],
        ]
    )
    coriolis = h * np.sin(q[1]) * np.array([-2 * qd[0] * qd[1] - qd[1] ** 2, qd[0] ** 2])
    gravity = GRAVITY * np.array([(m1 * c1 + m2 * LINK) * np.cos(q[0]), 0.0])
    gravity += GRAVITY * m2 * c2 * np.cos(q[0] + q[1])
    return mass, coriolis + gravity


@pytest.mark.parametrize("model", ["planar", "spatial", "tilted"])
def test_double_pendulum_matches_lagrange(model):
    mech = double_pendulum(model)
    s = random_states(1, 2, k=3, dim=mech.dim)
    ours = evaluate(mech, s)
    for k in range(3):
        mass, bias = double_pendulum_terms(s.q[k], s.qd[k])
        assert_close(ours["mass"][k], mass, 1e-13)
        assert_close(ours["bias"][k], bias, 1e-13)
        assert_close(ours["id"][k], mass @ s.qdd[k] + bias, 1e-13)
        assert_close(ours["fd"][k], np.linalg.solve(mass, s.tau[k] - bias), 1e-13)


# ---------------------------------------------------------------------------------------------
# One planar mechanism, built planar and spatial


def test_planar_model_equals_spatial_model():
    """A branched planar tree, revolute and prismatic joints, its placements, centres of mass and
    inertias fully 3-D, gravity in the plane: the planar and spatial models give the same q-space
    results, and the planar twists, twist-rates and joint wrenches are the planar rows of the
    spatial ones. Out-of-plane components of the external wrenches change nothing in q-space."""
    planar, spatial_ = (random_planar_tree(5, 22, p) for p in (True, False))
    assert planar.parent == (-1, 0, 1, 2, 0) and "prismatic" in planar.joint_kinds
    s = random_states(3, 5, dim=3)
    s6 = types.SimpleNamespace(**vars(s))
    s6.f_ext = np.random.default_rng(0).normal(size=(*s.f_ext.shape[:2], 6))
    s6.f_ext[..., ROWS] = s.f_ext
    ours, reference = evaluate(planar, s), evaluate(spatial_, s6)
    for key in ("id", "id_ext", "bias", "mass", "fd", "fd_ext", "rotation", "position"):
        assert_close(ours[key], reference[key], 1e-12)
    for key in ("twists", "rates", "wrenches"):
        assert_close(ours[key], reference[key][..., ROWS], 1e-12)
    for key in ("twists", "rates"):
        assert np.max(np.abs(reference[key][..., OTHER])) < 1e-12


# ---------------------------------------------------------------------------------------------
# Gradients against central finite differences

GRAD_MECH = random_tree(5, seed=BRANCHED_SEEDS[5], child_frames=True)[0]
GRAD_STATE = random_states(2, 5, k=1)


def central_differences(f, x, step=1e-6):
    """Gradient of the scalar ``f`` at the flat ``x``."""
    steps = step * np.eye(x.size)
    return np.array([(f(x + h) - f(x - h)) / (2 * step) for h in steps])


def qdd_loss(mech):
    s = GRAD_STATE
    return jnp.sum(tree.forward_dynamics(mech, s.q[0], s.qd[0], s.tau[0], s.f_ext[0]) ** 2)


def test_grad_forward_dynamics_wrt_inertial_parameters():
    """``filter_grad`` of ``|qdd|^2`` reaches ``mass``, ``com`` and ``inertia``; each matches
    central differences of the loss with the leaf replaced by ``eqx.tree_at``. One jitted
    ``filter_value_and_grad`` serves both (compiled once: perturbed models share the structure)."""
    value_and_grad = eqx.filter_jit(eqx.filter_value_and_grad(qdd_loss))
    grads = value_and_grad(GRAD_MECH)[1]
    for name in ("mass", "com", "inertia"):
        flat, unflatten = ravel_pytree(getattr(GRAD_MECH, name))

        def by_leaf(x, name=name, unflatten=unflatten):
            return value_and_grad(eqx.tree_at(lambda m: getattr(m, name), GRAD_MECH, unflatten(x)))[
                0
            ]

        assert_close(
            ravel_pytree(getattr(grads, name))[0], central_differences(by_leaf, flat), 1e-6
        )


def test_grad_inverse_dynamics_wrt_state():
    """``jax.grad`` of ``w . tau`` with respect to ``q`` and ``qd``."""
    s, weights = GRAD_STATE, np.random.default_rng(4).normal(size=5)

    def loss(q, qd):
        return weights @ tree.inverse_dynamics(GRAD_MECH, q, qd, s.qdd[0])

    # One jitted value_and_grad; the central differences reuse its values (one compilation).
    value_and_grad = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))
    grad_q, grad_qd = value_and_grad(s.q[0], s.qd[0])[1]
    by_q = lambda q: value_and_grad(q, s.qd[0])[0]
    by_qd = lambda qd: value_and_grad(s.q[0], qd)[0]
    assert_close(grad_q, central_differences(by_q, s.q[0]), 1e-6)
    assert_close(grad_qd, central_differences(by_qd, s.qd[0]), 1e-6)


# ---------------------------------------------------------------------------------------------
# vmap against a loop (jitted)


def dynamics(mech, q, qd, u):
    """Forward dynamics with ``u`` as forces, inverse dynamics with ``u`` as accelerations."""
    return tree.forward_dynamics(mech, q, qd, u), tree.inverse_dynamics(mech, q, qd, u)


def test_vmap_equals_loop_and_pinocchio():
    """1024 random states: ``jit(vmap(f))`` equals a Python loop over ``jit(f)`` (compiled once)
    to 1e-12, and the loop equals Pinocchio's aba and rnea to 1e-9."""
    mech, model = random_tree(3, seed=11, child_frames=True)
    q, qd, u = np.random.default_rng(6).uniform(-2.0, 2.0, (3, 1024, mech.num_bodies))
    single = jax.jit(dynamics)
    looped = [np.stack(r) for r in zip(*(single(mech, *x) for x in zip(q, qd, u)))]
    batched = jax.jit(jax.vmap(dynamics, in_axes=(None, 0, 0, 0)))(mech, q, qd, u)
    for k in range(2):
        assert_close(batched[k], looped[k], 1e-12)
    data = model.createData()
    assert_close(looped[0], [pin.aba(model, data, *x).copy() for x in zip(q, qd, u)], 1e-9)
    assert_close(looped[1], [pin.rnea(model, data, *x).copy() for x in zip(q, qd, u)], 1e-9)


def all_outputs(mech, q, qd, u, f_ext):
    """Every batched `tree` function at states ``(..., n)``."""
    return {
        "fd": tree.forward_dynamics(mech, q, qd, u, f_ext),
        "id": tree.inverse_dynamics(mech, q, qd, u, f_ext),
        "mass": tree.mass_matrix(mech, q),
        "twists": tree.twists(mech, q, qd),
        "rates": tree.twist_rates(mech, q, qd, u),
        "wrenches": tree.joint_wrenches(mech, q, qd, u),
        "poses": tree.forward_kinematics(mech, q),
    }


single_outputs = jax.jit(all_outputs)  # one state at a time: one program per mechanism structure


@pytest.mark.parametrize("model", ["planar", "branched"])
def test_native_batch_equals_single_states(model, monkeypatch):
    """States of batch shape (2, 3), split into chunks of 2 (the last padded), equal the
    single-state results to 1e-12."""
    if model == "planar":
        mech = random_planar_tree(4, seed=3, planar=True)
    else:
        mech = random_tree(5, seed=105, child_frames=True)[0]
    n = mech.num_bodies
    s = random_states(7, n, k=6, dim=mech.dim)
    shaped = [x.reshape((2, 3) + x.shape[1:]) for x in (s.q, s.qd, s.qdd, s.f_ext)]
    single = single_outputs
    expected = [single(mech, s.q[k], s.qd[k], s.qdd[k], s.f_ext[k]) for k in range(6)]
    expected = jax.tree.map(lambda *x: np.stack(x).reshape((2, 3) + x[0].shape), *expected)
    monkeypatch.setattr(chunking, "CHUNK", 2)
    batched = jax.jit(lambda *a: all_outputs(*a))(mech, *shaped)
    for key in expected:
        for b, e in zip(jax.tree.leaves(batched[key]), jax.tree.leaves(expected[key])):
            assert_close(b, e, 1e-12)


def perturbed_mechanisms(mech, k, seed):
    """``k`` copies of ``mech`` with other masses and joint placements, stacked leaf by leaf
    (a batched mechanism, as Monte Carlo samples are)."""
    rng = np.random.default_rng(seed)
    copies = [
        eqx.tree_at(
            lambda m: (m.mass, m.parent_position),
            mech,
            (
                mech.mass * rng.uniform(0.8, 1.2, mech.mass.shape),
                mech.parent_position + rng.normal(scale=0.05, size=mech.parent_position.shape),
            ),
        )
        for _ in range(k)
    ]
    dynamic = [eqx.partition(m, eqx.is_array)[0] for m in copies]
    static = eqx.partition(mech, eqx.is_array)[1]
    return copies, eqx.combine(jax.tree.map(lambda *x: jnp.stack(x), *dynamic), static)


def test_vmap_over_mechanisms_and_states_folds_into_the_native_batch():
    """``jax.vmap`` over a batched mechanism and states (a ``custom_vmap`` rule runs the native
    batch with per-state parameters), over a batched mechanism with a native batch of two states
    each, and nested ``vmap`` equal single calls to 1e-12; forward- and reverse-mode Jacobians
    through the rule agree to 1e-10."""
    mech = random_tree(5, seed=105, child_frames=True)[0]
    copies, stacked = perturbed_mechanisms(mech, 3, seed=8)
    s = random_states(9, mech.num_bodies, k=6)
    q, qd, u, f = (x.reshape((3, 2) + x.shape[1:]) for x in (s.q, s.qd, s.qdd, s.f_ext))
    single = single_outputs
    expected = [
        [single(copies[i], q[i, j], qd[i, j], u[i, j], f[i, j]) for j in range(2)] for i in range(3)
    ]
    expected = jax.tree.map(
        lambda *x: np.stack(x).reshape((3, 2) + x[0].shape), *[e for row in expected for e in row]
    )
    over_mechs = jax.jit(jax.vmap(all_outputs))(stacked, q, qd, u, f)
    nested = jax.jit(jax.vmap(jax.vmap(all_outputs, in_axes=(None, 0, 0, 0, 0))))(
        stacked, q, qd, u, f
    )
    for got in (over_mechs, nested):
        for b, e in zip(jax.tree.leaves(got), jax.tree.leaves(expected)):
            assert_close(b, e, 1e-12)
    fd = lambda q: tree.forward_dynamics(mech, q, s.qd[0], s.tau[0])
    assert_close(jax.jit(jax.jacfwd(fd))(s.q[0]), jax.jit(jax.jacrev(fd))(s.q[0]), 1e-10)


def test_batch_shape_errors_name_the_argument():
    mech = random_tree(3, seed=11)[0]
    with pytest.raises(ValueError, match=r"qd has batch shape \(4,\); the other states \(5,\)"):
        tree.forward_dynamics(mech, np.zeros((5, 3)), np.zeros((4, 3)), np.zeros((5, 3)))
    with pytest.raises(ValueError, match=r"tau has shape \(5, 2\); expected \(\.\.\., 3\)"):
        tree.forward_dynamics(mech, np.zeros((5, 3)), np.zeros((5, 3)), np.zeros((5, 2)))
    with pytest.raises(ValueError, match=r"f_ext has shape \(3, 3\); expected \(3, 6\)"):
        tree.inverse_dynamics(mech, np.zeros(3), np.zeros(3), np.zeros(3), np.zeros((3, 3)))
