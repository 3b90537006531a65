"""The mechanism model (`loopdyn.mechanism`): every bad input is refused with a ValueError naming
the body or joint, and the builder's documented rules (spanning tree, cut joints, depth-first
order, multi-DOF joint chains, reference configuration)."""

import numpy as np
import pytest

from loopdyn import CutJoint, MechanismBuilder

GOOD_INERTIA = (0.1, 0.2, 0.25)


def one_link(planar=False, joint=True, kind="revolute", **options):
    """A builder with body ``link`` and (if ``joint``) its joint ``j`` to the ground."""
    b = MechanismBuilder(planar=planar)
    b.add_body("link", mass=1.0, com=(0.1, 0.0, 0.0), inertia=GOOD_INERTIA)
    if joint:
        b.add_joint("j", kind, "ground", "link", **options)
    return b


# ---------------------------------------------------------------------------------------------
# Bad bodies


@pytest.mark.parametrize("mass", [0.0, -1.0, np.nan, np.inf])
def test_rejects_non_positive_or_non_finite_mass(mass):
    with pytest.raises(ValueError, match="body 'arm': mass must be positive"):
        MechanismBuilder().add_body("arm", mass=mass, inertia=GOOD_INERTIA)


def test_rejects_asymmetric_inertia():
    inertia = [[0.2, 0.01, 0.0], [0.0, 0.2, 0.0], [0.0, 0.0, 0.3]]
    with pytest.raises(ValueError, match="body 'arm': inertia is not symmetric"):
        MechanismBuilder().add_body("arm", mass=1.0, inertia=inertia)


@pytest.mark.parametrize("moments", [(0.2, 0.2, -0.1), (0.2, 0.2, 0.0)])
def test_rejects_inertia_not_positive_definite(moments):
    with pytest.raises(ValueError, match="body 'arm': inertia is not positive-definite"):
        MechanismBuilder().add_body("arm", mass=1.0, inertia=moments)


def test_rejects_inertia_violating_triangle_inequality():
    rotation = np.array([[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    inertia = rotation @ np.diag([0.1, 0.5, 0.2]) @ rotation.T  # 0.1 + 0.2 < 0.5
    with pytest.raises(ValueError, match="body 'arm': inertia violates the triangle inequality"):
        MechanismBuilder().add_body("arm", mass=1.0, inertia=inertia)


def test_rejects_scalar_inertia_of_spatial_body():
    with pytest.raises(ValueError, match="body 'arm': inertia: a scalar inertia is only"):
        MechanismBuilder().add_body("arm", mass=1.0, inertia=0.1)


@pytest.mark.parametrize(
    "field, value",
    [
        ("com", (0.0, np.nan, 0.0)),
        ("com", (np.inf, 0.0, 0.0)),
        ("inertia", [[0.2, 0.0, 0.0], [0.0, np.nan, 0.0], [0.0, 0.0, 0.3]]),
        ("inertia", (0.2, np.inf, 0.3)),
    ],
)
def test_rejects_nan_or_inf_in_body(field, value):
    kwargs = {"com": (0.0, 0.0, 0.0), "inertia": GOOD_INERTIA, field: value}
    with pytest.raises(ValueError, match=f"body 'arm': {field} contains NaN or inf"):
        MechanismBuilder().add_body("arm", mass=1.0, **kwargs)


@pytest.mark.parametrize("name", ["link", "ground"])
def test_rejects_duplicate_body_name(name):
    with pytest.raises(ValueError, match=f"body name '{name}' is already used"):
        one_link().add_body(name, mass=1.0, inertia=GOOD_INERTIA)


# ---------------------------------------------------------------------------------------------
# Bad joints


@pytest.mark.parametrize("axis", [(0.0, 0.0, 0.0), (0.0, np.nan, 1.0), (np.inf, 0.0, 0.0)])
def test_rejects_zero_or_non_finite_axis(axis):
    with pytest.raises(ValueError, match="joint 'j': axis must be a finite non-zero 3-vector"):
        one_link(axis=axis)


@pytest.mark.parametrize("field", ["position", "child_position"])
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_rejects_nan_or_inf_in_joint_position(field, bad):
    with pytest.raises(ValueError, match=f"joint 'j': {field} contains NaN or inf"):
        one_link(**{field: (0.1, bad, 0.0)})


@pytest.mark.parametrize("field", ["rotation", "child_rotation"])
@pytest.mark.parametrize(
    "value",
    [
        np.diag([1.0, 1.0, -1.0]),  # a reflection
        2.0 * np.eye(3),  # not orthogonal
    ],
)
def test_rejects_bad_rotation_matrix(field, value):
    with pytest.raises(ValueError, match=f"joint 'j': {field} is not a proper rotation matrix"):
        one_link(**{field: value})


def test_rejects_nan_rotation():
    with pytest.raises(ValueError, match="joint 'j': rotation contains NaN or inf"):
        one_link(rotation=np.full((3, 3), np.nan))


@pytest.mark.parametrize("role", ["parent", "child"])
def test_rejects_unknown_body(role):
    bodies = {"parent": "ground", "child": "link", role: "nowhere"}
    with pytest.raises(ValueError, match=f"joint 'j': unknown {role} body 'nowhere'"):
        one_link(joint=False).add_joint("j", "revolute", bodies["parent"], bodies["child"])


def test_rejects_joint_from_body_to_itself():
    with pytest.raises(ValueError, match="joint 'j' connects body 'link' to itself"):
        one_link(joint=False).add_joint("j", "revolute", "link", "link")


def test_rejects_duplicate_joint_name():
    b = one_link()
    b.add_body("tip", mass=1.0, inertia=GOOD_INERTIA)
    with pytest.raises(ValueError, match="joint name 'j' is already used"):
        b.add_joint("j", "revolute", "link", "tip")


def test_rejects_joint_named_like_a_chain_coordinate():
    b = one_link(kind="spherical")
    b.add_body("tip", mass=1.0, inertia=GOOD_INERTIA)
    with pytest.raises(ValueError, match=r"joint name 'j\[1\]' is already used"):
        b.add_joint("j[1]", "revolute", "link", "tip")


def test_rejects_chain_whose_coordinates_are_taken():
    """A spherical joint ``s`` would add coordinates ``s[0..2]``; ``s[0]`` already names a joint."""
    b = one_link(joint=False)
    b.add_body("tip", mass=1.0, inertia=GOOD_INERTIA)
    b.add_joint("s[0]", "revolute", "ground", "link")
    with pytest.raises(ValueError, match=r"'s\[0\]'"):
        b.add_joint("s", "spherical", "link", "tip")
        b.build()


def test_rejects_unknown_joint_kind():
    with pytest.raises(ValueError, match="joint 'j': unknown kind 'screw'"):
        one_link(kind="screw")


def test_rejects_weld_tree_joint():
    with pytest.raises(ValueError, match="joint 'j': a weld joint can only be a cut joint"):
        one_link(kind="weld")


@pytest.mark.parametrize("cut", [True, False])
def test_rejects_actuated_cut_joint(cut):
    """Marked ``cut=True``, or implicitly cut as the second joint into ``link``."""
    b = one_link()
    with pytest.raises(ValueError, match="joint 'k': only revolute or prismatic tree joints"):
        b.add_joint("k", "revolute", "ground", "link", cut=cut, actuated=True)


def test_rejects_actuated_spherical_joint():
    with pytest.raises(ValueError, match="joint 'j': only revolute or prismatic tree joints"):
        one_link(kind="spherical", actuated=True)


# ---------------------------------------------------------------------------------------------
# Bad structure (found by build)


def test_rejects_cyclic_tree():
    """Two tree joints forming a cycle that does not reach the ground."""
    b = one_link()
    for name in ("a", "b"):
        b.add_body(name, mass=1.0, inertia=GOOD_INERTIA)
    b.add_joint("ab", "revolute", "a", "b")
    b.add_joint("ba", "revolute", "b", "a")
    with pytest.raises(ValueError, match="joint 'ba' would make the tree part cyclic"):
        b.build()


def test_rejects_disconnected_body():
    b = one_link()
    b.add_body("loose", mass=1.0, inertia=GOOD_INERTIA)
    with pytest.raises(ValueError, match="body 'loose' is disconnected"):
        b.build()


def test_rejects_massless_tip():
    """A massless frame (`add_frame`) at a tip of the tree: its joint has no inertia to move, the
    mass matrix is singular and forward dynamics returns NaN."""
    b = one_link()
    b.add_frame("sensor")
    b.add_joint("k", "revolute", "link", "sensor", axis=(1.0, 0.0, 0.0))
    with pytest.raises(ValueError, match="'sensor'"):
        b.build()


def test_rejects_empty_mechanism():
    with pytest.raises(ValueError, match="no bodies"):
        MechanismBuilder().build()


@pytest.mark.parametrize(
    "kind, axis",
    [("revolute", (1.0, 0.0, 0.0)), ("revolute", (0.0, 0.6, 0.8)), ("prismatic", (0.0, 0.0, 1.0))],
)
def test_rejects_non_planar_axis_in_planar_mechanism(kind, axis):
    b = one_link(planar=True, kind=kind, axis=axis)
    with pytest.raises(ValueError, match="joint 'j': axis .* does not fit a planar mechanism"):
        b.build()


def test_rejects_out_of_plane_joint_frame_in_planar_mechanism():
    b = one_link(planar=True, rotation=[[1.0, 0.0, 0.0], [0.0, 0.0, -1.0], [0.0, 1.0, 0.0]])
    with pytest.raises(ValueError, match="joint 'j': rotation turns out of the plane"):
        b.build()


def test_rejects_out_of_plane_gravity_in_planar_mechanism():
    with pytest.raises(ValueError, match="gravity .* leaves the plane"):
        MechanismBuilder(planar=True, gravity=(0.0, -9.81, 0.1))


@pytest.mark.parametrize(
    "q0, match",
    [
        ({"nope": 1.0}, "unknown coordinates \\['nope'\\]"),
        ([0.1, 0.2], r"q0: expected shape \(1,\)"),
        ([np.nan], "q0 contains NaN"),
    ],
)
def test_rejects_bad_reference_configuration(q0, match):
    with pytest.raises(ValueError, match=match):
        one_link().build(q0=q0)


# ---------------------------------------------------------------------------------------------
# The builder's rules


FOUR_BARS = {
    # how the loop is closed: its joints (name, parent, child, cut), and the cut joint expected
    "second joint into a body": (
        (
            ("A", "ground", "crank", False),
            ("D", "ground", "rocker", False),
            ("B", "crank", "coupler", False),
            ("C", "coupler", "rocker", False),
        ),
        ("C", "coupler", "rocker"),
    ),
    "joint into the ground": (
        (
            ("A", "ground", "crank", False),
            ("B", "crank", "coupler", False),
            ("C", "coupler", "rocker", False),
            ("D", "rocker", "ground", False),
        ),
        ("D", "rocker", "ground"),
    ),
    "marked cut": (
        (
            ("A", "ground", "crank", False),
            ("B", "crank", "coupler", True),
            ("D", "ground", "rocker", False),
            ("C", "rocker", "coupler", False),
        ),
        ("B", "crank", "coupler"),
    ),
}


def four_bar(closure):
    """One planar four-bar (ground, crank, coupler, rocker), its joints declared as ``closure``
    says; each joint frame at (k, 0.1 k, 0) on the parent side and (0.2 k, 0, 0) on the child."""
    b = MechanismBuilder(planar=True)
    for name in ("rocker", "coupler", "crank"):
        b.add_body(name, mass=1.0, com=(0.1, 0.0, 0.0), inertia=0.01)
    for k, (name, parent, child, cut) in enumerate(FOUR_BARS[closure][0]):
        b.add_joint(
            name,
            "revolute",
            parent,
            child,
            position=(k, 0.1 * k, 0.0),
            child_position=(0.2 * k, 0.0, 0.0),
            cut=cut,
            actuated=name == "A",
        )
    return b.build(q0={"A": 0.3})


@pytest.mark.parametrize("closure", sorted(FOUR_BARS))
def test_spanning_tree_rule_and_cut_joints(closure):
    """The first joint into a body is its tree joint; a second joint into it, a joint into the
    ground and a joint marked ``cut=True`` are cut joints, keeping their two frames."""
    joints, (name, body_a, body_b) = FOUR_BARS[closure]
    mech = four_bar(closure)
    index = {"ground": -1, **{b: mech.body_index(b) for b in mech.body_names}}
    assert mech.cut_joints == (CutJoint(name, "revolute", index[body_a], index[body_b]),)
    k = [j[0] for j in joints].index(name)
    np.testing.assert_array_equal(mech.cut_position_a, [[k, 0.1 * k, 0.0]])
    np.testing.assert_array_equal(mech.cut_position_b, [[0.2 * k, 0.0, 0.0]])
    tree_joints = [j for j in joints if j[0] != name]
    assert sorted(mech.coordinate_names) == sorted(j[0] for j in tree_joints)
    for joint, parent, child, _ in tree_joints:
        assert mech.parent[index[child]] == index[parent]
        assert mech.coordinate_names[index[child]] == joint
    assert mech.joint_names == tuple(j[0] for j in joints)
    assert mech.actuator_names == ("A",) and mech.actuated == (mech.coordinate_names.index("A"),)


def test_depth_first_body_order_and_reference_configuration():
    """Joints declared ground->crank, ground->rocker, crank->coupler (bodies in the reverse order):
    numbered crank, coupler, rocker, so each subsystem is a contiguous range; ``q0`` by name lands
    on the right coordinate."""
    mech = four_bar("second joint into a body")
    assert mech.body_names == ("crank", "coupler", "rocker")
    assert mech.parent == (-1, 0, -1)
    assert mech.coordinate_names == ("A", "B", "D")
    np.testing.assert_array_equal(mech.q0, [0.3, 0.0, 0.0])
    np.testing.assert_array_equal(mech.parent_position[:, :2], [[0, 0], [2, 0.2], [1, 0.1]])


def test_reference_configuration_as_array_and_default():
    np.testing.assert_array_equal(one_link().build(q0=[0.7]).q0, [0.7])
    np.testing.assert_array_equal(one_link().build().q0, [0.0])


def test_spherical_and_universal_joints_become_revolute_chains():
    """Coordinates ``s[0..2]`` about x, y, z and ``u[0..1]`` about x, y of the joint frame, through
    massless bodies ``s[1]``, ``s[2]``, ``u[1]``; the joint frames sit at the chain's two ends."""
    b = MechanismBuilder()
    for name in ("upper", "lower"):
        b.add_body(name, mass=1.0, inertia=GOOD_INERTIA)
    turn = np.array([[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    b.add_joint("s", "spherical", "ground", "upper", position=(0.0, 0.0, 1.0), rotation=turn)
    b.add_joint("u", "universal", "upper", "lower", child_position=(0.5, 0.0, 0.0))
    mech = b.build(q0={"s[1]": 0.4, "u[0]": -0.2})
    assert mech.body_names == ("s[1]", "s[2]", "upper", "u[1]", "lower")
    assert mech.coordinate_names == ("s[0]", "s[1]", "s[2]", "u[0]", "u[1]")
    assert mech.joint_kinds == ("revolute",) * 5
    assert mech.parent == (-1, 0, 1, 2, 3)
    assert mech.joint_names == ("s", "u")
    np.testing.assert_array_equal(mech.axis, np.eye(3)[[0, 1, 2, 0, 1]])
    np.testing.assert_array_equal(mech.mass, [0.0, 0.0, 1.0, 0.0, 1.0])
    np.testing.assert_array_equal(mech.parent_rotation[0], turn)
    np.testing.assert_array_equal(mech.parent_position, [[0, 0, 1.0]] + [[0, 0, 0]] * 4)
    np.testing.assert_array_equal(mech.child_position, [[0, 0, 0]] * 4 + [[0.5, 0, 0]])
    np.testing.assert_array_equal(mech.q0, [0.0, 0.4, 0.0, -0.2, 0.0])


def test_builder_conversions():
    """Axes are normalised, an angle means a turn about z, a planar scalar inertia is a thin
    lamina (Ixx + Iyy = Izz) and 3 numbers are principal moments."""
    b = MechanismBuilder(planar=True)
    b.add_body("plate", mass=2.0, inertia=0.4)
    b.add_body("slider", mass=1.0, inertia=(0.1, 0.2, 0.3))
    b.add_joint("r", "revolute", "ground", "plate", axis=(0.0, 0.0, -3.0), rotation=np.pi / 2)
    b.add_joint("p", "prismatic", "plate", "slider", axis=(3.0, 4.0, 0.0))
    mech = b.build()
    np.testing.assert_array_equal(mech.axis, [[0.0, 0.0, -1.0], [0.6, 0.8, 0.0]])
    np.testing.assert_allclose(
        mech.parent_rotation[0], [[0, -1, 0], [1, 0, 0], [0, 0, 1]], atol=1e-16
    )
    np.testing.assert_array_equal(
        mech.inertia, [np.diag([0.2, 0.2, 0.4]), np.diag([0.1, 0.2, 0.3])]
    )
    assert mech.planar and mech.dim == 3 and mech.num_bodies == 2


def test_refused_chain_leaves_no_frames_behind():
    b = MechanismBuilder()
    for name in ("link", "S[2]"):
        b.add_body(name, 1.0, inertia=GOOD_INERTIA)
    b.add_joint("j2", "revolute", "ground", "S[2]")
    with pytest.raises(
        ValueError, match=r"joint 'S': its spherical chain needs body name 'S\[2\]'"
    ):
        b.add_joint("S", "spherical", "ground", "link")
    b.add_joint("j", "revolute", "ground", "link")
    assert b.build().body_names == ("S[2]", "link")
