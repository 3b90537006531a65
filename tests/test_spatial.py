"""Spatial algebra (`loopdyn.spatial`) against Pinocchio's SE3/Motion/Force/Inertia, joint poses
and motion subspaces against each other, and every planar function as the ``PLANAR_ROWS``
sub-block of its spatial counterpart."""

import jax
import jax.numpy as jnp
import numpy as np
import pinocchio as pin
import pytest
from random_trees import random_inertia, random_rotation, swap_matrix

from loopdyn import spatial

ROWS = np.array(spatial.PLANAR_ROWS)
OTHER = np.setdiff1d(np.arange(6), ROWS)
SEEDS = range(4)


def unit(rng):
    u = rng.normal(size=3)
    return u / np.linalg.norm(u)


def rotation_z(angle):
    c, s = np.cos(angle), np.sin(angle)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def block(matrix, rows, cols):
    return np.asarray(matrix)[np.ix_(rows, cols)]


@pytest.mark.parametrize("seed", SEEDS)
def test_skew_is_the_cross_product(seed):
    r, u = np.random.default_rng(seed).normal(size=(2, 3))
    k = np.asarray(spatial.skew(r))
    np.testing.assert_allclose(k @ u, np.cross(r, u), rtol=0, atol=1e-14)
    np.testing.assert_array_equal(k, -k.T)


@pytest.mark.parametrize("seed", SEEDS)
def test_rotation_about_is_the_exponential_map(seed):
    rng = np.random.default_rng(seed)
    axis, angle = unit(rng), rng.uniform(-4.0, 4.0)
    rotation = np.asarray(spatial.rotation_about(axis, angle))
    np.testing.assert_allclose(rotation, pin.exp3(axis * angle), rtol=0, atol=1e-14)
    np.testing.assert_allclose(rotation.T @ rotation, np.eye(3), rtol=0, atol=1e-14)


@pytest.mark.parametrize("seed", SEEDS)
def test_motion_transform_matches_pinocchio(seed):
    """``X`` maps twists of frame A to frame B at pose (R, p) in A: Pinocchio's inverse action."""
    rng = np.random.default_rng(seed)
    rotation, position = random_rotation(rng), rng.normal(size=3)
    reference = swap_matrix(pin.SE3(rotation, position).toActionMatrixInverse())
    np.testing.assert_allclose(
        spatial.motion_transform(rotation, position), reference, rtol=0, atol=1e-14
    )


@pytest.mark.parametrize("seed", SEEDS)
def test_cross_products_match_pinocchio(seed):
    twist = np.random.default_rng(seed).normal(size=6)
    motion = pin.Motion(twist[3:], twist[:3])  # Pinocchio: (linear, angular)
    np.testing.assert_allclose(
        spatial.cross_motion(twist), swap_matrix(motion.action), rtol=0, atol=1e-15
    )
    np.testing.assert_allclose(
        spatial.cross_force(twist, spatial.cross_motion),
        swap_matrix(motion.dualAction),
        rtol=0,
        atol=1e-15,
    )


@pytest.mark.parametrize("seed", SEEDS)
def test_spatial_inertia_matches_pinocchio(seed):
    rng = np.random.default_rng(seed)
    mass, com, inertia = rng.uniform(0.5, 3.0), rng.normal(size=3), random_inertia(rng)
    reference = swap_matrix(pin.Inertia(mass, com, inertia).matrix())
    np.testing.assert_allclose(
        spatial.spatial_inertia(mass, com, inertia), reference, rtol=0, atol=1e-14
    )


def random_joint(rng):
    """Axis, parent-side and child-side joint frames of a random joint."""
    return {
        "axis": unit(rng),
        "parent_rotation": random_rotation(rng),
        "parent_position": rng.normal(size=3),
        "child_rotation": random_rotation(rng),
        "child_position": rng.normal(size=3),
    }


@pytest.mark.parametrize("kind", ["revolute", "prismatic"])
@pytest.mark.parametrize("seed", SEEDS)
def test_joint_pose_matches_pinocchio(kind, seed):
    """Child pose in the parent = parent joint frame * joint motion * child joint frame^-1."""
    rng = np.random.default_rng(seed)
    j, q = random_joint(rng), rng.uniform(-3.0, 3.0)
    joint = (
        pin.JointModelRevoluteUnaligned if kind == "revolute" else pin.JointModelPrismaticUnaligned
    )(j["axis"])
    model = pin.Model()
    model.addJoint(0, joint, pin.SE3.Identity(), "joint")
    data = model.createData()
    pin.forwardKinematics(model, data, np.array([q]))
    pose = (
        pin.SE3(j["parent_rotation"], j["parent_position"])
        * data.oMi[1]
        * pin.SE3(j["child_rotation"], j["child_position"]).inverse()
    )
    rotation, position = spatial.joint_pose(
        kind,
        j["axis"],
        q,
        j["parent_rotation"],
        j["parent_position"],
        j["child_rotation"],
        j["child_position"],
    )
    np.testing.assert_allclose(rotation, pose.rotation, rtol=0, atol=1e-14)
    np.testing.assert_allclose(position, pose.translation, rtol=0, atol=1e-14)


@pytest.mark.parametrize("kind", ["revolute", "prismatic"])
@pytest.mark.parametrize("seed", SEEDS)
def test_joint_subspace_is_the_twist_of_joint_pose(kind, seed):
    """``p`` is the child's twist relative to the parent per unit rate, in child coordinates:
    ``[vee(R^T dR/dq); R^T dr/dq]`` with (R, r) = `joint_pose` differentiated by autodiff."""
    rng = np.random.default_rng(seed)
    j, q = random_joint(rng), rng.uniform(-3.0, 3.0)

    def pose(angle):
        return spatial.joint_pose(
            kind,
            jnp.asarray(j["axis"]),
            angle,
            j["parent_rotation"],
            j["parent_position"],
            j["child_rotation"],
            j["child_position"],
        )

    (rotation, _), (d_rotation, d_position) = jax.jvp(pose, (q,), (1.0,))
    omega = rotation.T @ d_rotation
    twist = np.concatenate([[omega[2, 1], omega[0, 2], omega[1, 0]], rotation.T @ d_position])
    subspace = spatial.joint_subspace(kind, j["axis"], j["child_rotation"], j["child_position"])
    np.testing.assert_allclose(subspace, twist, rtol=0, atol=1e-14)


def test_joint_subspace_rejects_unknown_kind():
    with pytest.raises(ValueError, match="unknown joint kind 'helical'"):
        spatial.joint_subspace("helical", np.ones(3), np.eye(3), np.zeros(3))


@pytest.mark.parametrize("seed", SEEDS)
def test_planar_motion_transform_is_sub_block(seed):
    """For a turn about z, the planar ``X`` is the ``PLANAR_ROWS`` block of the spatial one, and
    the spatial one keeps planar twists planar (an out-of-plane offset of the origin included)."""
    rng = np.random.default_rng(seed)
    angle, position = rng.uniform(-np.pi, np.pi), rng.normal(size=3)
    spatial_x = spatial.motion_transform(rotation_z(angle), position)
    planar_x = spatial.planar_motion_transform(rotation_z(angle)[:2, :2], position[:2])
    np.testing.assert_allclose(planar_x, block(spatial_x, ROWS, ROWS), rtol=0, atol=1e-15)
    np.testing.assert_array_equal(block(spatial_x, OTHER, ROWS), 0.0)


@pytest.mark.parametrize("seed", SEEDS)
def test_planar_cross_products_are_sub_blocks(seed):
    planar_t = np.random.default_rng(seed).normal(size=3)
    spatial_t = np.zeros(6)
    spatial_t[ROWS] = planar_t
    for cross, planar_cross in (
        (spatial.cross_motion, spatial.planar_cross_motion),
        (
            lambda t: spatial.cross_force(t, spatial.cross_motion),
            lambda t: spatial.cross_force(t, spatial.planar_cross_motion),
        ),
    ):
        full = cross(spatial_t)
        np.testing.assert_array_equal(planar_cross(planar_t), block(full, ROWS, ROWS))
        np.testing.assert_array_equal(block(full, OTHER, ROWS), 0.0)


@pytest.mark.parametrize("seed", SEEDS)
def test_planar_inertia_is_sub_block(seed):
    """A full 3-D inertia and an out-of-plane centre of mass: only the planar block is kept."""
    rng = np.random.default_rng(seed)
    mass, com, inertia = rng.uniform(0.5, 3.0), rng.normal(size=3), random_inertia(rng)
    np.testing.assert_allclose(
        spatial.planar_inertia(mass, com, inertia),
        block(spatial.spatial_inertia(mass, com, inertia), ROWS, ROWS),
        rtol=0,
        atol=1e-14,
    )
