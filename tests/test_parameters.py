"""Consistent parameterisations: exact round trips, physical mechanisms from any vector, filter."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from loopdyn import mechanisms, parameters, tree

FOUR_BAR = mechanisms.four_bar(0.3)
RSSR = mechanisms.rssr()
SPATIAL = [b for b, m in zip(RSSR.body_names, np.asarray(RSSR.mass)) if m > 0]


def _max_difference(a, b):
    leaves = jax.tree_util.tree_leaves(jax.tree_util.tree_map(lambda x, y: jnp.abs(x - y), a, b))
    return max((float(jnp.max(x, initial=0.0)) for x in leaves), default=0.0)


def test_planar_round_trip_and_labels():
    sel = parameters.free(
        FOUR_BAR,
        masses=["crank", "coupler", "rocker"],
        inertias=["crank", "rocker"],
        com=["coupler"],
        placements=["C", "B"],
        child_placements=["C"],
    )
    assert sel.labels[:3] == ("crank.log_mass", "coupler.log_mass", "rocker.log_mass")
    assert "C.cut_position_a_x" in sel.labels and "C.cut_position_b_y" in sel.labels
    assert sel.size == 3 + 2 + 2 + 2 + 2 + 2
    theta = parameters.to_vector(FOUR_BAR, sel)
    np.testing.assert_allclose(theta[0], np.log(1.5), rtol=1e-15)
    np.testing.assert_allclose(theta[sel.labels.index("C.cut_position_a_x")], 0.1152, rtol=1e-15)
    back = parameters.from_vector(theta, FOUR_BAR, sel)
    assert _max_difference(back, FOUR_BAR) <= 1e-16
    assert jax.tree_util.tree_structure(back) == jax.tree_util.tree_structure(FOUR_BAR)


def test_spatial_pseudo_inertia_round_trip():
    sel = parameters.free(RSSR, inertias=SPATIAL)
    assert sel.size == 10 * len(SPATIAL)
    back = parameters.from_vector(parameters.to_vector(RSSR, sel), RSSR, sel)
    scale = float(jnp.max(jnp.abs(RSSR.inertia)))
    assert float(jnp.max(jnp.abs(back.inertia - RSSR.inertia))) <= 1e-13 * scale
    assert float(jnp.max(jnp.abs(back.com - RSSR.com))) <= 1e-15
    np.testing.assert_allclose(back.mass, RSSR.mass, rtol=1e-14)
    # The extended mass matrices, what the dynamics sees, agree too.
    np.testing.assert_allclose(
        tree.body_inertias(back), tree.body_inertias(RSSR), rtol=1e-12, atol=1e-15
    )


def test_any_vector_is_physical():
    key = jax.random.PRNGKey(0)
    sel = parameters.free(RSSR, inertias=SPATIAL)
    thetas = 3.0 * jax.random.normal(key, (200, sel.size))
    mechs = jax.vmap(lambda t: parameters.from_vector(t, RSSR, sel))(thetas)
    rows = np.array([RSSR.body_names.index(b) for b in SPATIAL])
    mass, inertia = np.asarray(mechs.mass)[:, rows], np.asarray(mechs.inertia)[:, rows]
    assert np.all(mass > 0)
    moments = np.linalg.eigvalsh(inertia)  # ascending principal moments about the COM
    assert np.all(moments[..., 0] > 0)
    assert np.all(moments[..., 0] + moments[..., 1] >= moments[..., 2] * (1 - 1e-9))
    planar = parameters.free(FOUR_BAR, masses=["crank"], inertias=["coupler"])
    out = jax.vmap(lambda t: parameters.from_vector(t, FOUR_BAR, planar))(
        jnp.array([[-40.0, 40.0], [30.0, -50.0]])
    )
    assert np.all(np.asarray(out.mass[:, 0]) > 0) and np.all(
        np.asarray(out.inertia[:, 1, 2, 2]) > 0
    )


def test_filter_spec_partitions_and_grad():
    sel = parameters.free(FOUR_BAR, masses=["coupler"], placements=["C"])
    spec = sel.spec(FOUR_BAR)
    free_part, static_part = eqx.partition(FOUR_BAR, spec)
    assert free_part.mass is not None and free_part.cut_position_a is not None
    assert free_part.inertia is None and static_part.mass is None
    assert _max_difference(eqx.combine(free_part, static_part), FOUR_BAR) == 0.0

    def potential(diff):  # gravity's potential energy at q0: -m g . c, c in world axes
        mech = eqx.combine(diff, static_part)
        position, rotation = tree.forward_kinematics(mech, mech.q0)
        com = position + jnp.einsum("nij,nj->ni", rotation, mech.com)
        return -jnp.sum(mech.mass * (com @ mech.gravity))

    grads = eqx.filter_grad(potential)(free_part)
    position, rotation = tree.forward_kinematics(FOUR_BAR, FOUR_BAR.q0)
    com = position + jnp.einsum("nij,nj->ni", rotation, FOUR_BAR.com)
    np.testing.assert_allclose(grads.mass, 9.81 * com[:, 1], rtol=1e-14)


def test_errors_name_the_argument():
    with pytest.raises(ValueError, match="masses: unknown body 'crankk'"):
        parameters.free(FOUR_BAR, masses=["crankk"])
    with pytest.raises(ValueError, match="placements: unknown joint 'Z'"):
        parameters.free(FOUR_BAR, placements=["Z"])
    with pytest.raises(ValueError, match="massless"):
        parameters.free(RSSR, masses=[b for b in RSSR.body_names if b not in SPATIAL][:1])
    with pytest.raises(ValueError, match="in both masses and inertias"):
        parameters.free(RSSR, masses=SPATIAL[:1], inertias=SPATIAL[:1])
    with pytest.raises(ValueError, match="named twice"):
        parameters.free(FOUR_BAR, masses=["crank", "crank"])
    sel = parameters.free(FOUR_BAR, masses=["crank"])
    with pytest.raises(ValueError, match=r"theta must have shape \(1,\)"):
        parameters.from_vector(jnp.zeros(2), FOUR_BAR, sel)
