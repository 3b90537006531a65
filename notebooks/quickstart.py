# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # loopdyn quickstart
#
# Load a closed-loop mechanism, simulate it with its loops held closed, plot the motion.
# (Stored as a jupytext percent script: open it as a notebook with `jupytext --to ipynb`, or run
# it as it is with `python notebooks/quickstart.py`.)

# %%
import os

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

import loopdyn
from loopdyn import plot

jax.config.update("jax_enable_x64", True)
loopdyn.compilation.use_loop_kernels()  # loops as single kernels: before any computation
OUT = os.environ.get("LOOPDYN_NOTEBOOK_OUT", "out")
os.makedirs(OUT, exist_ok=True)

# %% [markdown]
# ## A mechanism
# The library holds the seeds' examples; `loopdyn.load_mjcf("model.xml")` reads a MuJoCo model
# (hinges, slides, balls; `connect`/`weld` equalities become cut joints).

# %%
mech = loopdyn.mechanisms.three_rrr()
top = mech.topology
print(mech.coordinate_names, "actuated:", [mech.coordinate_names[k] for k in mech.actuated])
print(f"{len(top.loops)} loops, {top.num_rows} constraint rows, {top.dof} degrees of freedom")

# %% [markdown]
# ## One state: accelerations and loop multipliers
# `forward_dynamics` solves the constrained equations of motion (method "auto" by default: SSLM
# here, "recursive" where loops share a large subsystem); `lam` holds
# the multipliers, the forces that keep each cut joint together (N in the cut joint's rows).

# %%
tau = jnp.zeros(mech.num_bodies).at[jnp.array(mech.actuated)].set(jnp.array([1.0, -0.5, 0.2]))
qdd, lam = loopdyn.forward_dynamics(mech, mech.q0, jnp.zeros(mech.num_bodies), tau)
print("qdd", np.round(np.asarray(qdd), 4))
print("lam", np.round(np.asarray(lam), 4))

# %% [markdown]
# ## A trajectory
# The whole run is one jitted diffrax solve; `loop_residual` shows the loops stay closed.

# %%
sim = loopdyn.simulate(mech, mech.q0, jnp.zeros(mech.num_bodies), 2.0, tau=tau)
print(sim.message, "| max |Phi| =", float(sim.loop_residual[:, 0].max()), "m")

# %%
fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
for k in range(0, len(sim.ts), 50):
    label = f"t = {float(sim.ts[k]):.1f} s"
    plot.draw(mech, sim.q[k], left, label=label, alpha=0.2 + 0.8 * k / len(sim.ts))
left.set(title="3-RRR, every 0.5 s (darker: later)")
left.legend(fontsize=7)
right.plot(sim.ts, sim.q[:, list(mech.actuated)], label=list(mech.actuator_names))
right.set(xlabel="t [s]", ylabel="actuated joint angle [rad]", title="actuated joints")
right.legend(fontsize=7)
fig.tight_layout()
fig.savefig(os.path.join(OUT, "quickstart.png"), dpi=100)
