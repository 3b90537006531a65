"""Time integration with diffrax: the state ``y = (q, qd)`` under ``qdd = f(q, qd, tau)``.

For now the acceleration is the open-tree forward dynamics (`tree.forward_dynamics`) with spring
wrenches; closed-loop methods plug in through ``acceleration``.
"""

from collections.abc import Callable

import diffrax
import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float

from . import forces, tree
from .mechanism import Mechanism


class Trajectory(eqx.Module):
    t: Float[Array, " T"]
    q: Float[Array, "T n"]
    qd: Float[Array, "T n"]
    steps: Array


def tree_acceleration(mech: Mechanism, t, q, qd, tau):
    """``qdd`` of the open tree under joint forces ``tau`` and the mechanism's springs."""
    return tree.forward_dynamics(mech, q, qd, tau, forces.spring_wrenches(mech, q, qd))


def simulate(
    mech: Mechanism,
    q0: Float[Array, " n"],
    qd0: Float[Array, " n"],
    t_end: float,
    num_saves: int = 201,
    tau: Callable | None = None,
    acceleration=tree_acceleration,
    rtol: float = 1e-8,
    atol: float = 1e-10,
    max_steps: int = 100_000,
) -> Trajectory:
    """Integrate from ``(q0, qd0)`` over ``[0, t_end]`` with adaptive Tsit5, saving ``num_saves``
    evenly spaced states. ``tau(t, q, qd)`` gives joint forces (default zero). Differentiable
    (diffrax's recursive checkpoint adjoint) and usable under ``jit``/``vmap``."""
    torque = tau if tau is not None else (lambda t, q, qd: jnp.zeros_like(q))

    def field(t, y, args):
        q, qd = y
        return qd, acceleration(mech, t, q, qd, torque(t, q, qd))

    ts = jnp.linspace(0.0, t_end, num_saves)
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(field),
        diffrax.Tsit5(),
        0.0,
        t_end,
        None,
        (q0, qd0),
        saveat=diffrax.SaveAt(ts=ts),
        stepsize_controller=diffrax.PIDController(rtol=rtol, atol=atol),
        max_steps=max_steps,
    )
    return Trajectory(sol.ts, sol.ys[0], sol.ys[1], sol.stats["num_accepted_steps"])
