"""Command line: ``loopdyn demo`` (``python -m loopdyn.cli demo``)."""

import argparse
import pathlib
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp

from . import energy, plot, simulate
from .mechanism import MechanismBuilder


def triple_pendulum():
    """The demo's default mechanism: three planar links with a spring from the ground to the tip."""
    b = MechanismBuilder(planar=True)
    parent = "ground"
    for k, (length, mass) in enumerate([(0.5, 2.0), (0.4, 1.5), (0.3, 1.0)]):
        b.add_body(f"link{k + 1}", mass, com=(length / 2, 0, 0), inertia=mass * length**2 / 12)
        b.add_joint(f"joint{k + 1}", "revolute", parent, f"link{k + 1}",
                    position=(0.5 if k == 1 else 0.4 if k == 2 else 0.0, 0, 0))
        parent = f"link{k + 1}"
    b.add_spring("spring", "ground", "link3", point_a=(1.0, 0.2, 0), point_b=(0.3, 0, 0),
                 stiffness=40.0, damping=0.0, rest_length=0.3)
    return b.build()


def demo(out: pathlib.Path):
    mech = triple_pendulum()
    q0, qd0 = jnp.array([-0.3, 0.6, 0.4]), jnp.zeros(3)
    run = jax.jit(simulate.simulate, static_argnums=(3, 4))
    start = time.perf_counter()
    traj = jax.block_until_ready(run(mech, q0, qd0, 5.0, 401))
    compiled = time.perf_counter() - start
    start = time.perf_counter()
    traj = jax.block_until_ready(run(mech, q0, qd0, 5.0, 401))
    elapsed = time.perf_counter() - start
    e = jax.vmap(energy.total_energy, in_axes=(None, 0, 0))(mech, traj.q, traj.qd)
    print(f"loopdyn demo: {mech.num_bodies}-link pendulum with a spring, {float(traj.t[-1]):.1f} s "
          f"simulated in {int(traj.steps)} adaptive Tsit5 steps")
    print(f"  compile + run {compiled:.2f} s, run {1e3 * elapsed:.1f} ms")
    print(f"  energy {float(e[0]):.6f} J, largest drift {float(jnp.max(jnp.abs(e - e[0]))):.2e} J")
    out.mkdir(parents=True, exist_ok=True)
    plot.trajectory_figure(mech, traj, e, out / "demo.png")
    print(f"  figure: {out / 'demo.png'}")


def main(argv=None):
    parser = argparse.ArgumentParser(prog="loopdyn", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    cmd = sub.add_parser("demo", help="simulate the built-in default mechanism and plot it")
    cmd.add_argument("--out", type=pathlib.Path, default=pathlib.Path("out"))
    args = parser.parse_args(argv)
    if args.command == "demo":
        demo(args.out)


if __name__ == "__main__":
    main()
