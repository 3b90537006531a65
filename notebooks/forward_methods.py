# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Four ways to the closed-loop accelerations
#
# `loopdyn.forward_dynamics(mech, q, qd, tau, method=...)` solves the same equations four ways
# (docs/references.md, seed 000 §3 and seed 003):
#
# - `"system"`: the dense KKT matrix `[[I, -J^T], [J, 0]]` (seed 000 eq. 10);
# - `"slm"`: system-level multipliers, `(J I^-1 J^T) lam = psi - J I^-1 phi` (eqs. 11-12);
# - `"sslm"`: subsystem-level multipliers: per-subsystem blocks of the generalized inverse
#   inertia (GICM), block elimination in a static order, recursive tree dynamics per subsystem;
# - `"embedding"`: minimal coordinates, no multipliers in the motion.

# %%
import os
import time

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

import loopdyn
from loopdyn import forward, kinematics, mechanisms, recursive

jax.config.update("jax_enable_x64", True)
loopdyn.compilation.use_loop_kernels()  # loops as single kernels: before any computation
OUT = os.environ.get("LOOPDYN_NOTEBOOK_OUT", "out")
QUICK = bool(os.environ.get("LOOPDYN_NOTEBOOK_QUICK"))  # the test suite runs a small ladder
os.makedirs(OUT, exist_ok=True)

# %% [markdown]
# ## Side by side on the carpet scraper (seed 000 §4.1)

# %%
mech = mechanisms.carpet_scraper()
n = mech.num_bodies
qd = kinematics.project_velocity(mech, mech.q0, jnp.zeros(n).at[0].set(4.712), fixed=(0,))
tau = jnp.zeros(n).at[0].set(2.0)
methods = forward.GENERAL_METHODS  # the fifth, "recursive", needs a body graph without cycles:
print("recursive:", recursive.unsupported(mech))  # the scraper has a loop of bodies only
results = {m: loopdyn.forward_dynamics(mech, mech.q0, qd, tau, method=m) for m in methods}
reference = results["system"][0]
for m, (qdd, lam) in results.items():
    spread = float(jnp.max(jnp.abs(qdd - reference)) / jnp.max(jnp.abs(reference)))
    print(f"{m:10s} qdd {np.round(np.asarray(qdd), 3)}  relative difference {spread:.1e}")
lam_spread = max(
    float(jnp.max(jnp.abs(results[m][1] - results["system"][1]))) for m in ("slm", "sslm")
)
print("multipliers (system, SLM, SSLM) agree to", f"{lam_spread:.1e} N")

# %% [markdown]
# ## The block picture
# The loop Jacobian `J` has a block per (loop, subsystem) that the loop passes through (seed 000
# eq. 26); the GICM `J I^-1 J^T` has a block per pair of loops that share a subsystem, and SSLM
# computes only those. Left: `J` at `q0`, with the loops' rows and subsystems' columns marked;
# right: the non-zero GICM blocks.

# %%
top = mech.topology
jac = np.asarray(kinematics.loop_jacobian(mech, mech.q0))
gicm = np.zeros((len(top.loops),) * 2)
for i, loop_i in enumerate(top.loops):
    for j, loop_j in enumerate(top.loops):
        gicm[i, j] = bool(set(loop_i.subsystems) & set(loop_j.subsystems))
fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
left.imshow(np.abs(jac) > 1e-12, cmap="Greys")
for start, _ in top.row_slices[1:]:
    left.axhline(start - 0.5, color="r")
for start, _ in top.coordinate_slices[1:]:
    left.axvline(start - 0.5, color="b")
left.set(xlabel="coordinate (subsystems split in blue)", ylabel="constraint row (loops in red)")
left.set_title("non-zeros of J")
right.imshow(gicm, cmap="Greys")
names = [loop.name for loop in top.loops]
right.set(xticks=range(len(names)), yticks=range(len(names)), xticklabels=names, yticklabels=names)
right.set(xlabel="loop (cut joint)", ylabel="loop (cut joint)", title="non-zero GICM blocks")
fig.tight_layout()
fig.savefig(os.path.join(OUT, "forward_blocks.png"), dpi=100)
print("subsystems", top.subsystems, "| SSLM elimination order", top.elimination_order)

# %% [markdown]
# ## SLM against SSLM on the ladder
# `ladder(k)`: k loops in a row, each coupled to its neighbours only. SLM forms and factors the
# dense `m x m` GICM; SSLM eliminates the block-tridiagonal pattern, so its cost grows linearly.
# (Time per jitted call on this machine; the benchmark `benchmarks/closed_loop.py` has the
# careful figures.)


# %%
def per_call(fn, *args, repeats=200):
    jax.block_until_ready(fn(*args))
    start = time.perf_counter()
    for _ in range(repeats):
        out = fn(*args)
    jax.block_until_ready(out)
    return (time.perf_counter() - start) / repeats


sizes = (1, 2) if QUICK else (1, 2, 4, 8, 16, 32)
cost = {"slm": [], "sslm": []}
for k in sizes:
    ladder = mechanisms.ladder(k)
    zeros = jnp.zeros(ladder.num_bodies)
    for m, times in cost.items():
        solve = jax.jit(
            lambda q, qd, t, m=m, ladder=ladder: forward.solve(ladder, q, qd, t, method=m).qdd
        )
        times.append(1e6 * per_call(solve, ladder.q0, zeros, zeros))
fig, ax = plt.subplots(figsize=(5, 3.6))
for m, times in cost.items():
    ax.loglog(sizes, times, "o-", label=m.upper())
ax.set(xlabel="loops k", ylabel="time per call [us]", title="ladder(k)")
ax.legend()
fig.tight_layout()
fig.savefig(os.path.join(OUT, "forward_ladder.png"), dpi=100)
print({m: np.round(times, 1).tolist() for m, times in cost.items()})
