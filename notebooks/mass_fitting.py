# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Link masses and inertias from measurements
#
# Two routes (`loopdyn.fit`). From **driving torques** measured along a known motion, inverse
# dynamics is linear in the inertial parameters (mass, first moments, inertia of every link),
# so one least-squares solve gives them, and the SVD of the regressor says which ones (or which
# combinations) the data cannot see. From a **measured trajectory**, the masses enter through
# the simulation: Levenberg-Marquardt on the residuals, with derivatives by forward-mode
# differentiation through the closed-loop simulation, and confidence intervals from the
# Gauss-Newton covariance at the optimum.
# (A jupytext percent script: open it as a notebook with `jupytext --to ipynb`, or run it as it
# is with `python notebooks/mass_fitting.py`; `LOOPDYN_NOTEBOOK_SAMPLES` shortens the records.)

# %%
import os
import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

import loopdyn
from loopdyn import fit, parameters, prescribed

jax.config.update("jax_enable_x64", True)
loopdyn.compilation.use_loop_kernels()  # loops as single kernels: before any computation
OUT = os.environ.get("LOOPDYN_NOTEBOOK_OUT", "out")
SAMPLES = int(os.environ.get("LOOPDYN_NOTEBOOK_SAMPLES", "41"))
os.makedirs(OUT, exist_ok=True)
rng = np.random.default_rng(0)

# %% [markdown]
# ## The "true" machine and our model of it
# A four-bar whose real links are 20 % heavier, 20 % lighter and 10 % heavier than the model
# says (crank, coupler, rocker); the model is the starting guess.

# %%
model = loopdyn.mechanisms.four_bar(0.3)
true = eqx.tree_at(lambda m: m.mass, model, model.mass * jnp.array([1.2, 0.8, 1.1]))
print("model masses:", np.asarray(model.mass), "| true:", np.asarray(true.mass))

# %% [markdown]
# ## Route 1: driving torques along a prescribed motion
# The crank turns at a varying speed; the torque sensor has noise of 1 % of the torque's spread.
# Crank and rocker turn about their own frame origins, so their masses alone only load the
# pivots: the report names them as not identifiable, while their first moments `m c` are.

# %%
t = jnp.linspace(0.0, 1.6, 2 * SAMPLES)
with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # the four-bar has no determinate order: one 3x3 solve
    motion, exact = prescribed.prescribed_inverse_dynamics(
        true, lambda t: jnp.array([0.3 + 4.0 * t + 0.5 * jnp.sin(3.0 * t)]), t
    )
sigma = 0.01 * float(jnp.std(exact.actuator_forces))
torque = np.asarray(exact.actuator_forces) + sigma * rng.standard_normal(
    exact.actuator_forces.shape
)
ident = fit.identify(model, motion.q, motion.qd, motion.qdd, torque)
print(ident.summary())
truth = np.asarray(fit.inertial_parameters(true))
for label, ok, low, high, value in zip(ident.labels, ident.identifiable, *ident.interval.T, truth):
    if ok:
        print(f"{label:>12}: true {value:.5g} in [{low:.5g}, {high:.5g}]: {low <= value <= high}")

# %% [markdown]
# ## Route 2: a measured trajectory
# The 3-RRR parallel manipulator (seed 004) starts from rest under gravity with constant torques
# on its three base joints; the encoders record all seven joint angles for 0.4 s with noise of
# 1 % of each angle's range. The seven link masses are free (positive by their log
# parameterisation), starting 30 % off, alternately heavy and light. (A four-bar's three masses
# are a poor example here: its single degree of freedom over a short record leaves a
# Jacobian with singular values 1.7, 0.07, 0.002 and Levenberg-Marquardt crawls.)

# %%
rrr = loopdyn.mechanisms.three_rrr()
ts = jnp.linspace(0.0, 0.4, SAMPLES)
rest = jnp.zeros(7)
options = {"tau": (4.0, 0.0, 0.0, 0.0, 0.0, -3.0, 2.0), "rtol": 1e-10, "atol": 1e-10}
record = loopdyn.simulate(rrr, rrr.q0, rest, 0.4, saveat=ts, **options).q
noise = 0.01 * np.asarray(jnp.max(record, axis=0) - jnp.min(record, axis=0))
measured = np.asarray(record) + noise * rng.standard_normal(record.shape)
measured[0] = record[0]  # the start is known
sel = parameters.free(rrr, masses=list(rrr.body_names))
off = jnp.log(jnp.where(jnp.arange(7) % 2 == 0, 1.3, 0.7))
start = parameters.from_vector(parameters.to_vector(rrr, sel) + off, rrr, sel)
result = fit.fit_trajectory(
    start,
    sel,
    ts,
    measured,
    rrr.q0,
    rest,
    weight=noise,
    progress=lambda k, cost, mu: print(f"  iteration {k}: cost {cost:.4e}"),
    **options,
)
stats = result.statistics
print(
    f"rank {stats.rank} of {sel.size}, singular values {np.round(stats.singular_values, 3)}, "
    f"weighted residual std {stats.noise_std:.2f} (1 when the weights are the noise level)"
)
for label, value, (low, high), real in zip(
    result.value_labels, result.values, result.interval, np.asarray(rrr.mass)
):
    print(f"{label:>16}: {value:.3f} kg, 95 % [{low:.3f}, {high:.3f}], true {real:g}")

# %% [markdown]
# The fitted model reproduces the record; the start does not.

# %%
before = loopdyn.simulate(start, rrr.q0, rest, 0.4, saveat=ts, **options).q
after = loopdyn.simulate(result.mech, rrr.q0, rest, 0.4, saveat=ts, **options).q
fig, axes = plt.subplots(1, 2, figsize=(11, 4))
for k in (0, 1, 2):
    name = rrr.coordinate_names[k]
    axes[0].plot(ts, measured[:, k], ".", label=f"{name} measured")
    axes[0].plot(ts, after[:, k], "-", label=f"{name} fitted")
    axes[0].plot(ts, before[:, k], ":", color="gray")
axes[0].set(xlabel="t [s]", ylabel="angle [rad]", title="record, fit (—) and start (··)")
axes[0].legend(fontsize=7)
axes[1].semilogy(result.cost, "o-")
axes[1].set(xlabel="iteration", ylabel="cost", title="Levenberg-Marquardt")
fig.tight_layout()
fig.savefig(os.path.join(OUT, "mass_fitting.png"), dpi=110)
print(
    "fit error",
    float(np.max(np.abs(after - record))),
    "start error",
    float(np.max(np.abs(before - record))),
)
