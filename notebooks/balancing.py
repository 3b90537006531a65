# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Shaking-force balancing by counterweights
#
# A mechanism running at speed pushes its frame around: the shaking force is minus the rate of
# change of its linear momentum, the shaking moment minus that of its angular momentum. Adding
# counterweights (a mass at a chosen place on a link) changes both, and the driving torque with
# them. `loopdyn.design` finds the counterweights that minimise a weighted sum of the three over
# one crank revolution, under bounds on every counterweight's mass and position.
# (A jupytext percent script: open it as a notebook with `jupytext --to ipynb`, or run it as it
# is with `python notebooks/balancing.py`; `LOOPDYN_NOTEBOOK_POSITIONS` shortens the cycle.)

# %%
import os

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

import loopdyn
from loopdyn import design, tree
from loopdyn.cli_balance import figure, record

jax.config.update("jax_enable_x64", True)
loopdyn.compilation.use_loop_kernels()  # loops as single kernels: before any computation
OUT = os.environ.get("LOOPDYN_NOTEBOOK_OUT", "out")
POSITIONS = int(os.environ.get("LOOPDYN_NOTEBOOK_POSITIONS", "72"))
os.makedirs(OUT, exist_ok=True)

# %% [markdown]
# ## A four-bar turning at 60 rpm
# The crank turns at constant speed; the coupler and rocker follow from the loop. The motion
# does not depend on the masses, so it is computed once; counterweights change only the forces.

# %%
mech = loopdyn.mechanisms.four_bar(0.3)
motion = design.crank_cycle(mech, 2 * np.pi, POSITIONS)
unbalanced = design.terms(mech, motion, method="system")
print(
    f"unbalanced RMS: shaking force {float(unbalanced.force):.4g} N, moment "
    f"{float(unbalanced.moment):.4g} N m, driving torque {float(unbalanced.torque):.4g} N m"
)

# %% [markdown]
# ## Counterweights on crank and rocker: full force balance
# Each counterweight may weigh 0.1 to 5 kg and sit anywhere within 0.2 m of its link's pivot.
# Minimising the RMS shaking force alone finds the classic full force balance: the total centre
# of mass stands still.

# %%
box = ((-0.2, 0.2), (-0.2, 0.2))
slots = [design.Slot("crank", (0.1, 5.0), box), design.Slot("rocker", (0.1, 5.0), box)]
force_only = design.balance(mech, motion, slots, design.Weights(1, 0, 0), method="system")
ratio = float(force_only.terms.force / force_only.unbalanced.force)
print(f"RMS shaking force ratio: {ratio:.3e}")
for slot, m, r in zip(slots, force_only.counterweights.mass, force_only.counterweights.position):
    print(f"  {slot.body}: {float(m):.4f} kg at ({float(r[0]):.4f}, {float(r[1]):.4f}) m")

# %% [markdown]
# Only the counterweights' mass moments `m r` matter for the force (a lighter counterweight
# further out does the same). Berkof and Lowen's conditions give them in closed form from the
# link lengths `a` (crank), `b` (coupler), `c` (rocker) and the coupler's mass `m2` and centre
# of mass `z2` (complex, in the coupler's frame): crank `m2 a (z2/b - 1)`, rocker `-m2 z2 c/b`,
# minus what the links already carry.

# %%
a = float(jnp.linalg.norm(mech.parent_position[1]))  # joint B on the crank
b = float(jnp.linalg.norm(mech.cut_position_a[0]))  # joint C on the coupler
c = float(jnp.linalg.norm(mech.cut_position_b[0]))  # joint C on the rocker
m1, m2, m3 = (float(x) for x in mech.mass)
z1, z2, z3 = (complex(float(mech.com[i, 0]), float(mech.com[i, 1])) for i in range(3))
exact = np.array([m2 * a * (z2 / b - 1) - m1 * z1, -m2 * z2 * c / b - m3 * z3])
cw = force_only.counterweights
found = np.asarray(cw.mass) * (np.asarray(cw.position[:, 0]) + 1j * np.asarray(cw.position[:, 1]))
print(f"Berkof-Lowen difference: {np.max(np.abs(found - exact)):.2e} kg m")


def total_com(mech, q):
    position, rotation = tree.forward_kinematics(mech, q)
    com = position + jnp.einsum("nij,nj->ni", rotation, mech.com)
    return jnp.sum(mech.mass[:, None] * com, axis=0) / jnp.sum(mech.mass)


for label, m in (("unbalanced", mech), ("balanced", force_only.mechanism)):
    path = jax.vmap(lambda q, m=m: total_com(m, q))(motion.q)
    print(f"total centre of mass moves {float(jnp.max(jnp.abs(path - path[0]))):.2e} m ({label})")

# %% [markdown]
# ## The price: shaking moment and driving torque
# Force balance adds inertia, so the shaking moment grows; the driving torque here falls,
# because the counterweights also balance the links' weight. Weighting force against moment
# (and torque) traces the trade-off; the optimum of a weighted sum is a (weakly) Pareto point.

# %%
print(
    f"force-balanced: moment x {float(force_only.terms.moment / unbalanced.moment):.3g}, "
    f"torque x {float(force_only.terms.torque / unbalanced.torque):.3g}"
)
curve = design.trade_off(mech, motion, slots, np.linspace(0, 1, 5), (0.0, 1.0), method="system")
rms = curve.terms / curve.unbalanced
fig, ax = plt.subplots(figsize=(6, 4.5))
points = ax.scatter(rms[:, 0], rms[:, 1], c=rms[:, 2], cmap="viridis")
fig.colorbar(points, label="RMS torque / unbalanced")
ax.set(xlabel="RMS shaking force / unbalanced", ylabel="RMS shaking moment / unbalanced")
ax.set_title("four-bar: force, moment and torque trade-off")
fig.savefig(f"{OUT}/balancing_tradeoff.png", dpi=110)
print(f"trade-off: {int(curve.pareto.sum())} of {len(curve.pareto)} points Pareto")

# %% [markdown]
# ## A bound on the driving torque
# Balance force and moment equally, but with the RMS driving torque no higher than half the
# unbalanced one. The bound is kept by an augmented Lagrangian; its multiplier says what a
# relaxation of the bound would be worth.

# %%
bounded = design.balance(
    mech, motion, slots, design.Weights(1, 1, 0), max_torque_increase=-0.5, method="system"
)
print(
    f"torque bound: torque x {float(bounded.terms.torque / bounded.unbalanced.torque):.6f}, "
    f"force x {float(bounded.terms.force / unbalanced.force):.3g}, moment x "
    f"{float(bounded.terms.moment / unbalanced.moment):.3g}, multiplier "
    f"{bounded.torque_multiplier:.3g}"
)
fig = figure(
    record(mech, motion, slots, bounded, curve, method="system"),
    f"{OUT}/balancing_cycle.png",
    "four-bar",
)
