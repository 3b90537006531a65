# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Inverse dynamics of a closed-loop mechanism: driving torque, every joint reaction, shaking
#
# The carpet scraper of seed 002 §6.1 (a Hoekens four-bar driving a pantograph: 7 links, 3 loops,
# 1 degree of freedom) turns its crank at 45 rpm. What torque must the motor give, what does every
# joint carry, and how hard does the machine shake its frame?
# (A jupytext percent script: open it as a notebook with `jupytext --to ipynb`, or run it as it
# is with `python notebooks/inverse_dynamics.py`; `LOOPDYN_NOTEBOOK_POSITIONS` shortens the
# cycle.)

# %%
import os

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

import loopdyn
from loopdyn import inverse, prescribed, shaking

jax.config.update("jax_enable_x64", True)
loopdyn.compilation.use_loop_kernels()  # loops as single kernels: before any computation
OUT = os.environ.get("LOOPDYN_NOTEBOOK_OUT", "out")
POSITIONS = int(os.environ.get("LOOPDYN_NOTEBOOK_POSITIONS", "134"))  # one turn at 0.01 s
os.makedirs(OUT, exist_ok=True)

# %% [markdown]
# ## The mechanism and the solve plan
# Cutting three joints leaves three subsystems (branches of the spanning tree). Seed 002's
# subsystem recursion solves the one whose unknowns (multipliers of its loops and its actuator
# forces) are as many as its coordinates, passes its multipliers on as known forces, and repeats:
# 4x4, then 2x2, then 1x1, instead of one 7x7 system.

# %%
mech = loopdyn.mechanisms.carpet_scraper()
print("joints:", mech.joint_names, "| cut:", [c.name for c in mech.cut_joints])
for step in inverse.solve_plan(mech):
    print(f"subsystem {step.subsystems}: {step.shape[0]}x{step.shape[1]}, loops {step.loops}")

# %% [markdown]
# ## One revolution at 45 rpm
# The crank angle is prescribed as a function of time; `prescribed_inverse_dynamics` assembles
# every position, solves `J qd = 0` and `J qdd = Psi` for the passive joints, and runs the inverse
# dynamics at every instant, all in one compiled, vectorised program.

# %%
speed = 4.712  # rad/s
start = float(mech.q0[mech.actuated[0]])
t = jnp.arange(POSITIONS) * 0.01
motion, result = prescribed.prescribed_inverse_dynamics(
    mech, lambda t: jnp.atleast_1d(start + speed * t), t
)
crank = np.degrees(np.asarray(motion.q[:, mech.actuated[0]]))
torque = np.asarray(result.actuator_forces[:, 0])
print(f"driving torque {torque.min():.2f} .. {torque.max():.2f} N m")
print("largest loop residual", float(result.closure.max()))

# %% [markdown]
# Two independent checks: the system approach (one 7x7 solve) gives the same numbers, and the
# motor's power equals the rate of change of the mechanical energy (the joints do no work).

# %%
system = jax.vmap(lambda q, qd, qdd: inverse.solve(mech, q, qd, qdd, "system"))(
    motion.q, motion.qd, motion.qdd
)
print("subsystem vs system:", float(jnp.max(jnp.abs(system.reactions - result.reactions))))
rate = jax.vmap(
    lambda q, qd, qdd: jax.jvp(
        lambda q, qd: loopdyn.energy.total_energy(mech, q, qd), (q, qd), (qd, qdd)
    )[1]
)(motion.q, motion.qd, motion.qdd)
power = jnp.sum(result.tau * motion.qd, axis=1)
print("power balance error:", float(jnp.max(jnp.abs(power - rate))), "W")

# %% [markdown]
# ## Driving torque and joint reactions
# `result.reactions[:, j]` is the wrench on joint j's child body from its parent, in world axes,
# about the joint: `[n_z, f_x, f_y]` for a planar mechanism.

# %%
force, _ = inverse.reaction_magnitudes(mech, result.reactions)
fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
left.plot(crank, torque)
left.set(xlabel="crank angle [deg]", ylabel="torque [N m]", title="driving torque at joint 1")
for j, name in enumerate(mech.joint_names):
    right.plot(crank, force[:, j], ls="--" if j >= mech.num_bodies else "-", label=name)
right.set(xlabel="crank angle [deg]", ylabel="|f| [N]", title="reaction force per joint")
right.legend(fontsize=7, ncol=2)
fig.tight_layout()
fig.savefig(os.path.join(OUT, "inverse_dynamics_reactions.png"), dpi=100)

# %% [markdown]
# ## Shaking force
# The wrench the machine applies to its frame is the opposite of the ground reactions; without
# its constant weight it is minus the rate of change of the momentum, the quantity that
# counterweights balance. `shaking.rms` and `shaking.peak` summarise it, and are differentiable
# with respect to the link parameters (`jax.grad`), for balancing by optimisation.

# %%
shake = shaking.shaking(mech, result, motion.q, include_weight=False)
print({k: round(float(v), 2) for k, v in shaking.summary(shake).items()})
f = np.asarray(shake.force)
fig = plt.figure(figsize=(5, 5))
ax = fig.add_subplot(projection="polar")
ax.plot(np.arctan2(f[:, 1], f[:, 0]), np.hypot(f[:, 0], f[:, 1]), "-o", ms=2)
ax.set_title("shaking force (dynamic part) [N], polar", pad=20)
fig.tight_layout()
fig.savefig(os.path.join(OUT, "inverse_dynamics_shaking.png"), dpi=100)
