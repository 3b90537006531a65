# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Monte Carlo over manufacturing tolerances
#
# How much do 5 % mass and 1 mm length tolerances change the free swing of a four-bar, and the
# torque its motor needs over a revolution? Every run samples its own masses and joint
# placements, re-closes the loop, and simulates (or runs the inverse dynamics); runs go through
# jitted `vmap` chunks sharded over all devices, and land in a zarr store that survives a crash.
# (A jupytext percent script: open it as a notebook with `jupytext --to ipynb`, or run it as it
# is with `python notebooks/monte_carlo.py`; `LOOPDYN_NOTEBOOK_RUNS` sets the number of runs.)

# %%
import os
import pathlib
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import zarr

import loopdyn
from loopdyn import montecarlo, prescribed

jax.config.update("jax_enable_x64", True)
loopdyn.compilation.use_loop_kernels()  # loops as single kernels: before any computation
OUT = pathlib.Path(os.environ.get("LOOPDYN_NOTEBOOK_OUT", "out"))
RUNS = int(os.environ.get("LOOPDYN_NOTEBOOK_RUNS", "2000"))
CHUNK = max(2, RUNS // 4)
OUT.mkdir(parents=True, exist_ok=True)

# %% [markdown]
# ## The tolerances
# `tolerances` perturbs every body's mass by a uniform relative amount within +-5 % and every
# joint placement coordinate (x and y on each body: the link lengths and pivot positions) within
# +-1 mm. Run `i` draws from `fold_in(key(seed), i)` only, so any run can be recomputed alone.

# %%
mech = loopdyn.mechanisms.four_bar()
sampler = montecarlo.tolerances(mech, mass=0.05, length=0.001)
print(len(sampler.labels), "sampled parameters:", ", ".join(sampler.labels))

# %% [markdown]
# ## Free swing for one second
# The crank angle is held while each sample's loop is re-closed; then the mechanism falls from
# rest. `run` writes chunk after chunk (each marked done after its data) and returns the
# statistics: counts by result code, mean, standard deviation and quantiles of every summary.

# %%
store = OUT / "four_bar_swing.zarr"
shutil.rmtree(store, ignore_errors=True)
options = montecarlo.Options(t1=1.0, saves=21, method="system")
stats = montecarlo.run(mech, sampler, RUNS, store, options=options, chunk=CHUNK, progress=False)
print("outcomes:", stats["codes"])
for label in ("q_final[A]", "q_final[D]", "energy_drift"):
    row = stats["columns"][label]
    print(
        f"{label}: mean {row['mean']:.5g}, std {row['std']:.3g}, 5-95 % {row['q5']:.5g} .. {row['q95']:.5g}"
    )

# %% [markdown]
# The store opens with zarr alone (or xarray): one array per result, runs along the first axis.

# %%
group = zarr.open_group(str(store), mode="r")
print(group.tree())
crank = group["summary/q_final"][:, 0]
print("crank angle after 1 s: range", crank.min(), "..", crank.max())
montecarlo.histograms(
    store, ["q_final[A]", "q_final[D]", "energy_drift"], OUT / "monte_carlo_swing.png"
)

# %% [markdown]
# ## Nothing lost, nothing recomputed
# Running the same study again with `resume=True` finds every chunk done and computes nothing;
# a run killed midway would compute only its unfinished chunks. Any runs recomputed with
# `compute` equal the stored ones.

# %%
again = montecarlo.run(
    mech,
    sampler,
    RUNS,
    store,
    options=options,
    chunk=CHUNK,
    resume=True,
    progress=False,
    verbose=True,
)
assert again == stats
picked = np.arange(CHUNK) * 3 % RUNS  # one chunk's worth of runs: the same compiled program
recomputed = montecarlo.compute(mech, sampler, picked, options)
print(
    "recomputed vs stored:",
    np.max(np.abs(recomputed.summary["q_final"] - group["summary/q_final"][picked])),
)

# %% [markdown]
# ## The motor torque over a revolution
# With `kind="inverse"` each run is a prescribed cycle instead: the crank turns at 45 rpm, the
# other coordinates follow from the loop, and the inverse dynamics gives the driving torque at
# every instant. The summaries are its RMS and peak, the peak reaction at each joint, the loop
# closure and the conditioning of the passive Jacobian.

# %%
speed = 4.712
start = float(mech.q0[mech.actuated[0]])


def drive(t):
    return jnp.atleast_1d(start + speed * t)


cycle = montecarlo.Options(kind="inverse", drive=drive, t1=2 * np.pi / speed, dt=0.02)
torque_store = OUT / "four_bar_torque.zarr"
shutil.rmtree(torque_store, ignore_errors=True)
torque = montecarlo.run(
    mech, sampler, RUNS, torque_store, options=cycle, chunk=CHUNK, progress=False
)
print("outcomes:", torque["codes"])
for label in ("actuator_rms[A]", "actuator_peak[A]", "reaction_peak[C]"):
    row = torque["columns"][label]
    print(
        f"{label}: mean {row['mean']:.5g}, std {row['std']:.3g}, 5-95 % {row['q5']:.5g} .. {row['q95']:.5g}"
    )
montecarlo.histograms(
    torque_store, ["actuator_rms[A]", "actuator_peak[A]"], OUT / "monte_carlo_torque.png"
)

# %% [markdown]
# A check against the plain inverse dynamics: run 1's sampled mechanism through
# `prescribed_inverse_dynamics` directly gives the stored RMS torque.

# %%
key = jax.random.fold_in(jax.random.key(0), 1)
sample = sampler(mech, key, 1)
q_guess = loopdyn.kinematics.assemble(sample.mech, sample.q0, fixed=mech.actuated, tol=1e-10)
grid = jnp.arange(int(cycle.t1 / cycle.dt + 1e-9) + 1) * cycle.dt
_, direct = prescribed.prescribed_inverse_dynamics(sample.mech, drive, grid, q_guess=q_guess)
rms = float(jnp.sqrt(jnp.mean(direct.actuator_forces[:, 0] ** 2)))
stored = float(zarr.open_group(str(torque_store), mode="r")["summary/actuator_rms"][1, 0])
print(f"RMS torque of run 1: direct {rms:.10g} N m, stored {stored:.10g} N m")
print("direct vs stored:", abs(rms - stored) / rms)
