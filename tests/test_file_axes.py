"""Results, summaries and figures of a planar model drawn in an MJCF file's xz-plane name its
axes as the file does (x, z), not loopdyn's turned ones (x, y)."""

import jax
import matplotlib
import numpy as np
import pytest

from loopdyn import fit, plot
from loopdyn.cli_inverse import cycle, figure, results
from loopdyn.io.mjcf import load_mjcf

matplotlib.use("Agg")
jax.config.update("jax_enable_x64", True)

# A four-bar as MuJoCo users draw it: hinges about y, gravity along -z, crank actuated.
XZ_FOUR_BAR = """<mujoco><option gravity="0 0 -9.81"/><worldbody>
  <body name="crank"><joint name="crank" axis="0 1 0"/>
    <geom type="capsule" fromto="0 0 0 0.2 0 0" size="0.01" mass="1"/>
    <body name="coupler" pos="0.2 0 0"><joint name="coupler" axis="0 1 0"/>
      <geom type="capsule" fromto="0 0 0 0.5 0 0.3" size="0.01" mass="2"/></body></body>
  <body name="rocker" pos="0.6 0 0"><joint name="rocker" axis="0 1 0"/>
    <geom type="capsule" fromto="0 0 0 0.1 0 0.3" size="0.01" mass="1.5"/></body>
</worldbody>
<equality><connect body1="coupler" body2="rocker" anchor="0.5 0 0.3"/></equality>
<actuator><motor joint="crank"/></actuator></mujoco>"""


@pytest.fixture(scope="module")
def mech():
    return load_mjcf(XZ_FOUR_BAR)


def test_the_turned_axes_keep_the_files_names(mech):
    assert mech.planar and mech.axis_names == ("x", "z", "-y")
    assert mech.plane_axes == ("x", "z")
    np.testing.assert_array_equal(mech.gravity, [0.0, -9.81, 0.0])  # up is the file's z
    labels = fit.parameter_labels(mech, ["crank"])
    assert labels == ("crank.m", "crank.mx", "crank.mz", "crank.Iyy")
    assert [fit.unit(label) for label in labels] == ["kg", "kg m", "kg m", "kg m^2"]


def test_inverse_record_and_figure_name_the_files_axes(mech):
    motion, result = cycle(mech, [2.0], duration=0.2, dt=0.05)
    record = results(mech, motion, result)
    assert record["mechanism"]["world_axes"] == ["x", "z", "-y"]
    assert record["reaction_layout"].startswith("[n_-y, f_x, f_z]")
    assert record["units"]["actuator_forces"] == ["N m"]
    fig = figure(mech, motion, result)
    shaking = fig.axes[2]
    assert (shaking.get_xlabel(), shaking.get_ylabel()) == ("F_x [N]", "F_z [N]")
    assert fig.axes[3].get_legend().get_texts()[0].get_text() == "M_-y"


def test_drawings_label_the_files_axes(mech):
    ax = plot.draw(mech, mech.q0)
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("x [m]", "z [m]")
    # the drawing is the file's: the coupler's far end at file (x, z) = (0.7, 0.3) at qpos0
    ends = np.concatenate(plot.skeleton(mech, mech.q0))[:, :2]
    assert np.min(np.linalg.norm(ends - [0.7, 0.3], axis=1)) < 1e-12
