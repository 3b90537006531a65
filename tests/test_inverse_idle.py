"""Inverse dynamics of mechanisms with idle or passive freedoms, and at singular configurations.

A subsystem whose unknowns number its coordinates is determinate by seed 002's count, but an idle
freedom (a coupler spinning about its own axis between two ball joints) or a passive one (a
pendulum hanging from a link) gives its step matrix ``[B  J^T]`` a zero row: the step is singular
at every configuration, and solving it alone returned a wrong torque. `solve_plan` now decides by
rank. Every method must give the forces that `forward_dynamics` turns back into the motion, at rest
and moving; singular configurations are refused with the loop named, never answered with NaN.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import loopdyn
from loopdyn import MechanismBuilder, inverse, kinematics, topology
from loopdyn.inverse import METHODS, inverse_dynamics, solve_plan

# The newcomer's RSSR: crank about x, a ball joint at the crank pin A = (0, 0.1, 0), coupler to
# B = (0.25, 0.1, 0.25), rocker about y through (0.25, 0.1, 0.05); closed at q = 0 by a connect
# at B. Five coordinates, three rows: the rocker's motion and the coupler's spin about AB.
RSSR = """
<mujoco model="rssr_x">
  <worldbody>
    <body name="crank">
      <joint name="crank" type="hinge" axis="1 0 0"/>
      <inertial pos="0 0.05 0" mass="0.5" diaginertia="0.0005 0.0001 0.0005"/>
      <body name="coupler" pos="0 0.1 0">
        <joint name="ball" type="ball"/>
        <inertial pos="0.125 0 0.125" mass="1" diaginertia="0.006 0.007 0.002"/>
      </body>
    </body>
    <body name="rocker" pos="0.25 0.1 0.05">
      <joint name="rocker" type="hinge" axis="0 1 0"/>
      <inertial pos="0 0 0.1" mass="0.8" diaginertia="0.003 0.003 0.0002"/>
    </body>
  </worldbody>
  <equality>
    <connect name="B" body1="coupler" body2="rocker" anchor="0.25 0 0.25"/>
  </equality>
  <actuator>
    <motor joint="crank"/>
  </actuator>
</mujoco>
"""


def _bars(b, links):
    for name, length, mass in links:
        b.add_body(name, mass, (length / 2, 0, 0), mass * length**2 / 12)


def four_bar_with_pendulum():
    """A crank-driven four-bar with a passive pendulum hanging from the middle of the coupler:
    the crank's subsystem (crank, coupler, pendulum) counts 3 unknowns for 3 coordinates, but the
    pendulum's row of its step matrix is zero."""
    b = MechanismBuilder(planar=True)
    _bars(b, (("crank", 0.1, 1.0), ("coupler", 0.3, 2.0), ("rocker", 0.25, 1.5)))
    _bars(b, (("pendulum", 0.2, 0.7),))
    b.add_joint("A", "revolute", "ground", "crank", actuated=True)
    b.add_joint("B", "revolute", "crank", "coupler", position=(0.1, 0, 0))
    b.add_joint("P", "revolute", "coupler", "pendulum", position=(0.15, 0, 0))
    b.add_joint("D", "revolute", "ground", "rocker", position=(0.3, 0, 0))
    b.add_joint(
        "C", "revolute", "coupler", "rocker", position=(0.3, 0, 0), child_position=(0.25, 0, 0)
    )
    mech = b.build()
    guess = mech.q0.at[0].set(0.9).at[1].set(-0.5).at[3].set(1.6)
    return _with_q0(mech, kinematics.assemble(mech, guess, fixed=(0,)))


def slider_crank_with_pendulum():
    """A slider-crank whose slider carries a passive pendulum: the slider's subsystem (slider,
    pendulum) counts 2 multipliers for 2 coordinates, but the pendulum's row is zero."""
    b = MechanismBuilder(planar=True)
    _bars(b, (("crank", 0.1, 1.0), ("rod", 0.4, 2.0)))
    b.add_body("slider", 1.5, (0, 0, 0), 1e-3)
    _bars(b, (("pendulum", 0.15, 0.5),))
    b.add_joint("crank", "revolute", "ground", "crank", actuated=True)
    b.add_joint("rod", "revolute", "crank", "rod", position=(0.1, 0, 0))
    b.add_joint("slider", "prismatic", "ground", "slider", axis=(1, 0, 0))
    b.add_joint("swing", "revolute", "slider", "pendulum")
    b.add_joint("pin", "revolute", "rod", "slider", position=(0.4, 0, 0), cut=True)
    mech = b.build()
    guess = mech.q0.at[0].set(0.7).at[1].set(-0.9).at[2].set(0.42).at[3].set(-1.2)
    return _with_q0(mech, kinematics.assemble(mech, guess, fixed=(0,)))


def _with_q0(mech, q0):
    return eqx.tree_at(lambda m: m.q0, mech, q0)


MECHANISMS = {
    "rssr": lambda: loopdyn.load_mjcf(RSSR),
    "four_bar_pendulum": four_bar_with_pendulum,
    "slider_crank_pendulum": slider_crank_with_pendulum,
}


def states(mech, seed=0):
    """Producible states: at rest (``qd = 0``) and moving (random ``qd`` in the null space of J),
    each at a configuration assembled near ``q0``, with random actuator forces and the ``qdd``
    they produce (`forward_dynamics`, dense KKT)."""
    rng = np.random.default_rng(seed)
    out = []
    for moving in (False, True):
        move = 0.05 * rng.standard_normal(mech.nv) if moving else np.zeros(mech.nv)
        q = kinematics.assemble(mech, loopdyn.integrate(mech, mech.q0, move), fixed=mech.actuated)
        jac = np.asarray(kinematics.loop_jacobian(mech, q))
        raw = rng.standard_normal(mech.nv)
        qd = jnp.asarray(raw - np.linalg.pinv(jac) @ (jac @ raw)) if moving else jnp.zeros(mech.nv)
        tau = jnp.zeros(mech.nv).at[np.array(mech.actuated)].set(rng.standard_normal(1))
        qdd, _ = loopdyn.forward_dynamics(mech, q, qd, tau, method="system")
        out.append((q, qd, qdd, tau))
    return out


@pytest.mark.parametrize("name", MECHANISMS)
def test_every_method_returns_the_forces_that_produce_the_motion(name):
    mech = MECHANISMS[name]()
    top = mech.topology
    # Counting calls a subsystem determinate whose step is singular at every configuration ...
    counted, _, _ = topology.determinate_order(top.loops, top.subsystems, set(mech.actuated))
    assert counted, "the count of seed 002 finds a determinate subsystem"
    # ... the rank does not, so no step of the plan is solved alone with a zero row.
    assert solve_plan(mech)[0].subsystems != (counted[0],)
    for q, qd, qdd, tau in states(mech):
        system = inverse_dynamics(mech, q, qd, qdd, method="system")
        for method in METHODS:
            result = inverse_dynamics(mech, q, qd, qdd, method=method)
            np.testing.assert_allclose(result.tau, tau, rtol=0, atol=1e-10)
            np.testing.assert_allclose(result.tau, system.tau, rtol=0, atol=1e-10)
            np.testing.assert_allclose(result.multipliers, system.multipliers, rtol=0, atol=1e-10)
            back, _ = loopdyn.forward_dynamics(mech, q, qd, result.tau, method="system")
            np.testing.assert_allclose(back, qdd, rtol=0, atol=1e-9 * (1 + np.abs(qdd).max()))
            assert float(result.residual) < 1e-10


def test_rssr_static_balance_is_the_system_solution():
    """The newcomer's case: at rest in ``q0`` the subsystem recursion returned 0.82625 N m where
    the static balance needs 0.73575 N m (the system solve, and MuJoCo's)."""
    mech = MECHANISMS["rssr"]()
    zero = jnp.zeros(mech.nv)  # the ball joint's q is a quaternion: nq = 6, nv = 5
    system = inverse_dynamics(mech, mech.q0, zero, zero, method="system")
    subsystem = inverse_dynamics(mech, mech.q0, zero, zero)
    np.testing.assert_allclose(subsystem.actuator_forces, system.actuator_forces, atol=1e-12)
    # Static balance by hand: the rocker and coupler are held by the crank pin A and the rocker
    # pivot; the crank's torque about x balances gravity's moment on the crank and the force at A.
    back, _ = loopdyn.forward_dynamics(mech, mech.q0, zero, system.tau, method="system")
    np.testing.assert_allclose(back, zero, atol=1e-12)
    assert abs(float(system.actuator_forces[0])) > 0.1  # gravity loads the crank


def collinear_four_bar(ground=0.2):
    """Crank 0.1, coupler 0.3, rocker 0.2 from pivots 0 and ``ground`` on x; at q = 0 all lie on
    the x axis: a change point of the loop (J has rank 1)."""
    b = MechanismBuilder(planar=True)
    _bars(b, (("crank", 0.1, 1.0), ("coupler", 0.3, 1.0), ("rocker", 0.2, 1.0)))
    b.add_joint("A", "revolute", "ground", "crank", actuated=True)
    b.add_joint("B", "revolute", "crank", "coupler", position=(0.1, 0, 0))
    b.add_joint("D", "revolute", "ground", "rocker", position=(ground, 0, 0))
    b.add_joint(
        "C", "revolute", "coupler", "rocker", position=(0.3, 0, 0), child_position=(0.2, 0, 0)
    )
    return b.build()


def test_a_change_point_is_refused_with_the_loop_named_not_nan():
    mech = collinear_four_bar()
    zero = jnp.zeros(3)
    assert float(jnp.abs(kinematics.loop_residual(mech, zero)).max()) < 1e-15
    for method in METHODS:
        with pytest.raises(ValueError, match="cut joint 'C'.*rank 1"):
            inverse_dynamics(mech, zero, zero, zero, method=method)
    # Under jit the non-finite result is refused at run time.
    with pytest.raises(Exception, match="forces are not determined"):
        jax.jit(lambda q: inverse_dynamics(mech, q, zero, zero).tau)(zero).block_until_ready()


def test_an_actuator_singularity_is_refused():
    """Coupler and rocker in line (ground 0.5): J has full rank but the crank cannot move the
    linkage; ``[B  J^T]`` is singular and the torque is unbounded."""
    mech = collinear_four_bar(ground=0.5)
    theta = float(np.arccos(0.1))  # |crank pin - rocker pivot| = coupler + rocker = 0.5
    pin = 0.1 * np.array([np.cos(theta), np.sin(theta)])
    direction = (np.array([0.5, 0.0]) - pin) / np.linalg.norm(np.array([0.5, 0.0]) - pin)
    coupler = np.arctan2(direction[1], direction[0])
    q = jnp.array([theta, coupler - theta, coupler + np.pi])
    assert float(jnp.abs(kinematics.loop_residual(mech, q)).max()) < 1e-15
    zero = jnp.zeros(3)
    with pytest.raises(ValueError, match="lose control"):
        inverse_dynamics(mech, q, zero, zero)
    # The inverse refuses where the rows of J are independent: not a change point.
    assert np.linalg.matrix_rank(np.asarray(kinematics.loop_jacobian(mech, q))) == 2
    assert inverse.solve_plan(mech, "system")[0].shape == (3, 3)
