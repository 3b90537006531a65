"""Robotiq's 2F-85 from MuJoCo Menagerie (meshes stripped): two five-bar fingers closed by
connects, their drivers coupled by a joint equality and driven through a fixed tendon by a
position servo with control and force ranges. It loads as published and closes under
``ctrl``, and MuJoCo's soft constraints approach loopdyn's exact motion as they stiffen."""

import pathlib
import warnings

import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import loopdyn
from loopdyn import actuators

PATH = pathlib.Path(__file__).parent / "data" / "published" / "robotiq_2f85_no_meshes.xml"
CLOSED = 255.0  # ctrl: the servo's target 0.3137255 * 255 / 100 = 0.8 rad, the drivers' range


@pytest.fixture(scope="module")
def gripper():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mech = loopdyn.load_mjcf(PATH)
    return mech, caught


def test_loads_as_published(gripper):
    """One warning (the ignored joint limits); the tendon actuator acts on both drivers, the
    joint equality is a coupling, and each finger's connect keeps its two in-plane rows: the
    left finger is mirrored (a half turn about an in-plane axis), so the model is spatial."""
    mech, caught = gripper
    assert len(caught) == 1 and "joint limits (range) are ignored" in str(caught[0].message)
    right, left = (
        mech.coordinate_names.index(f"{side}_driver_joint") for side in ("right", "left")
    )
    assert mech.ctrl_names == ("fingers_actuator",) and not mech.planar
    np.testing.assert_array_equal(mech.ctrl_arm[0], 0.5 * (np.eye(8)[right] + np.eye(8)[left]))
    assert mech.coupling_names == ("equality2",)
    assert [len(rows) for _, rows in mech.reduced_points] == [2, 2]
    assert mech.topology.num_rows == 5 and mech.nv - mech.topology.num_rows == 3  # adaptive
    np.testing.assert_array_equal(mech.limits[right], [0.0, 0.8])  # kept, not enforced
    force = actuators.actuator_force(mech, mech.q0, jnp.zeros(mech.nv), jnp.array([CLOSED]))
    np.testing.assert_allclose(force, [5.0])  # 80 N asked for, forcerange caps it


def test_closes_under_ctrl_and_matches_mujoco_at_its_stiffest(gripper):
    """1 s from rest at ctrl = 255: the drivers reach 0.8 rad together (a warning names the
    limits the saved states pass) and the loops stay closed; MuJoCo (contacts and joint limits off, RK4) approaches the same trajectory as its
    equality constraints stiffen (solimp 0.9999, shorter solref and step): the largest
    difference over 101 saves falls from 9e-4 to 4e-6 rad (measured)."""
    mech, _ = gripper
    ts = np.linspace(0.0, 1.0, 101)
    with pytest.warns(UserWarning, match="pass joint limits.*'right_driver_joint' at t = "):
        sim = loopdyn.simulate(  # the servo overshoots the drivers' 0.8 rad limit a little
            mech, mech.q0, jnp.zeros(mech.nv), 1.0, ctrl=jnp.array([CLOSED]), saveat=ts,
            rtol=1e-10, atol=1e-10,
        )  # fmt: skip
    assert sim.succeeded, sim.message
    q = np.asarray(sim.q)
    right, left = (
        mech.coordinate_names.index(f"{side}_driver_joint") for side in ("right", "left")
    )
    np.testing.assert_allclose(q[-1, [right, left]], 0.8, atol=2e-3)
    np.testing.assert_allclose(q[:, right], q[:, left], atol=1e-12)
    assert np.asarray(sim.loop_residual)[:, 0].max() < 1e-11
    model = mujoco.MjModel.from_xml_path(str(PATH))
    model.opt.disableflags |= (
        mujoco.mjtDisableBit.mjDSBL_CONTACT | mujoco.mjtDisableBit.mjDSBL_LIMIT
    )
    model.opt.integrator = mujoco.mjtIntegrator.mjINT_RK4
    errors = []
    for width, timeconst, step in ((1e-3, 5e-3, 1e-4), (1e-4, 2e-3, 2e-5), (1e-5, 5e-4, 5e-6)):
        model.eq_solimp[:] = [0.9999, 0.9999, width, 0.5, 2.0]
        model.eq_solref[:] = [timeconst, 1.0]
        model.opt.timestep = step
        data = mujoco.MjData(model)
        data.ctrl[:] = CLOSED
        saved, every = [data.qpos.copy()], round(0.01 / step)
        for _ in range(len(ts) - 1):
            mujoco.mj_step(model, data, nstep=every)
            saved.append(data.qpos.copy())
        errors.append(np.abs(np.array(saved) - q).max())
    assert errors[0] > errors[1] > errors[2] and errors[2] < 4e-5, errors
