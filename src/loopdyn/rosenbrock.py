"""A linearly implicit (Rosenbrock-W) solver for diffrax: stiff joint damping at explicit cost.

MuJoCo models damp light bodies hard (Cassie's foot cranks: 1 N m s on a few grams), which limits
an explicit solver's step by stability, not accuracy: the damped velocity mode decays at a rate
``d / I`` of thousands per second. A Rosenbrock method treats the stiff part through a matrix
``W`` close to the Jacobian ``df/dy``, solving one linear system per stage instead of a
nonlinear one; a W-method keeps its order for *any* ``W``, so ``W`` need only hold the stiff
part. For the constrained dynamics ``y = (q, qd)``, ``W`` is the share of the Jacobian that
the joints' own dampers ``D`` (with the smoothed friction's slope) and springs ``K`` make,
``W = [[0, R], [-G K P, -G D]]`` (``R`` the configuration rate's map from velocities, ``P`` its
inverse on the scalar coordinates, ``G`` the constrained inverse inertia), and its stage
system is a forward dynamics solve with the mass matrix ``M + h gamma D + (h gamma)^2 K``: the
armature raised (MuJoCo's Euler integrator raises it by ``h damping``). One dynamics
evaluation per stage, as an explicit method's; `simulate` builds the stage
(`simulation._integrate`). ``G`` is taken at each stage's configuration, not at the step's
start as the W-method theory assumes: on a test equation with a ``W`` that moves with the
stage, the third order held until errors near 1e-8.

The scheme is ROS34PW2 (Rang and Angermann 2005; docs/references.md): 4 stages, order 3 for any
``W``, an embedded order-2 solution for the error estimate, L-stable and stiffly accurate.
Stage ``i`` (``k_i`` increments, ``s_i = sum_j gamma_ij k_j``):
``(I - h gamma W) k_i = h f(t + c_i h, y + sum_j alpha_ij k_j) + h W s_i``,
``y_1 = y + sum_i b_i k_i``. `LinearlyImplicitTerm` supplies the stage solve.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import diffrax
import diffrax._term as diffrax_terms  # WrapTerm: how diffrax hands a solver its term
import jax
import jax.numpy as jnp
import numpy as np

# ROS34PW2 (Rang and Angermann 2005).
_GAMMA = 0.435866521508459
_ALPHA = np.array(
    [
        [0.0, 0.0, 0.0, 0.0],
        [0.87173304301691801, 0.0, 0.0, 0.0],
        [0.84457060015369423, -0.11299064236484185, 0.0, 0.0],
        [0.0, 0.0, 1.0, 0.0],
    ]
)
_GAMMAS = np.array(  # gamma_ij, j < i (the diagonal is _GAMMA)
    [
        [0.0, 0.0, 0.0, 0.0],
        [-0.87173304301691801, 0.0, 0.0, 0.0],
        [-0.90338057013044082, 0.054180672388095326, 0.0, 0.0],
        [0.24212380706095346, -1.2232505839045147, 0.54526025533510214, 0.0],
    ]
)
_B = np.array([0.24212380706095346, -1.2232505839045147, 1.5452602553351020, _GAMMA])
_B_EMBEDDED = np.array([0.37810903145819369, -0.096042292212423178, 0.5, 0.21793326075422950])


class LinearlyImplicitTerm(diffrax.ODETerm):
    """An ODE term ``f(t, y, args)`` with the stage solve of a Rosenbrock-W method:
    ``stage(t, y, y0, args, hg, s) = (I - hg W)^-1 (f(t, y, args) + W s)``, ``W`` the chosen
    approximation of ``df/dy`` at the step's start ``y0`` and ``hg`` the step times the method's
    ``gamma``. ``stage`` returning ``f(t, y, args)`` (``W = 0``) makes the method explicit."""

    stage: Callable


class ROS34PW2(diffrax.AbstractAdaptiveSolver):
    """Rosenbrock-W method ROS34PW2 (module docstring) for a `LinearlyImplicitTerm`: 4 stage
    solves per step, order 3 (embedded 2). Steps land on the save times (`simulate` asks its
    step-size controller to), so the saved states are steps' ends, not interpolated."""

    term_structure: ClassVar = LinearlyImplicitTerm
    interpolation_cls: ClassVar = diffrax.LocalLinearInterpolation

    def order(self, terms):
        return 3

    def init(self, terms, t0, t1, y0, args):
        return None

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        # diffrax hands the term wrapped (time reversed, t -> -t, for a solve backwards)
        term, direction = (terms.term, terms.direction) if _wrapped(terms) else (terms, 1)
        h = direction * (t1 - t0)
        alpha, gammas = jnp.asarray(_ALPHA, h.dtype), jnp.asarray(_GAMMAS, h.dtype)
        times = direction * t0 + h * jnp.asarray(_ALPHA.sum(1), h.dtype)
        combine = lambda w, k: jax.tree.map(lambda x: jnp.tensordot(w, x, axes=1), k)

        def stage(i, k):
            y = jax.tree.map(jnp.add, y0, combine(alpha[i], k))
            z = term.stage(times[i], y, y0, args, h * _GAMMA, combine(gammas[i], k))
            return jax.tree.map(lambda ki, zi: ki.at[i].set(h * zi), k, z)

        k = jax.tree.map(lambda x: jnp.zeros((4, *jnp.shape(x)), x.dtype), y0)
        k = jax.lax.fori_loop(0, 4, stage, k)  # one copy of the stage solve in the program
        y1 = jax.tree.map(jnp.add, y0, combine(jnp.asarray(_B, h.dtype), k))
        error = combine(jnp.asarray(_B - _B_EMBEDDED, h.dtype), k)
        return y1, error, {"y0": y0, "y1": y1}, None, diffrax.RESULTS.successful

    def func(self, terms, t0, y0, args):
        return terms.vf(t0, y0, args)


def _wrapped(terms) -> bool:
    return isinstance(terms, diffrax_terms.WrapTerm)
