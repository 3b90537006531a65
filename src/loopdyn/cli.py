"""Command line: ``loopdyn demo`` (``python -m loopdyn.cli demo``)."""

import argparse
import pathlib
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp
import numpy as np

from . import energy, kinematics, mechanisms, plot, simulate
from .mechanism import MechanismBuilder


def triple_pendulum():
    """The demo's default mechanism: three planar links with a spring from the ground to the tip."""
    b = MechanismBuilder(planar=True)
    parent = "ground"
    for k, (length, mass) in enumerate([(0.5, 2.0), (0.4, 1.5), (0.3, 1.0)]):
        b.add_body(f"link{k + 1}", mass, com=(length / 2, 0, 0), inertia=mass * length**2 / 12)
        b.add_joint(
            f"joint{k + 1}",
            "revolute",
            parent,
            f"link{k + 1}",
            position=(0.5 if k == 1 else 0.4 if k == 2 else 0.0, 0, 0),
        )
        parent = f"link{k + 1}"
    b.add_spring(
        "spring",
        "ground",
        "link3",
        point_a=(1.0, 0.2, 0),
        point_b=(0.3, 0, 0),
        stiffness=40.0,
        damping=0.0,
        rest_length=0.3,
    )
    return b.build()


def crank_cycle(mech, crank_speed, steps):
    """Assemble ``mech`` over one turn of its actuated crank by continuation (each configuration
    starts Newton from the previous one) and project the velocities: one compiled scan."""
    crank = mech.actuated[0]
    angles = mech.q0[crank] + jnp.linspace(0.0, 2 * jnp.pi, steps)

    def step(q, angle):
        closed = kinematics.try_assemble(mech, q.at[crank].set(angle), fixed=(crank,))
        qd = kinematics.project_velocity(
            mech, closed.q, jnp.zeros_like(q).at[crank].set(crank_speed), fixed=(crank,)
        )
        return closed.q, (closed.q, qd, closed.residual)

    return jax.lax.scan(step, mech.q0, angles)[1]


def scraper_demo(out: pathlib.Path):
    mech = mechanisms.carpet_scraper()
    top = mech.topology
    print(
        f"carpet scraper (seed 000 §4.1): {mech.num_bodies} links, {len(top.loops)} loops, "
        f"{mech.num_bodies - top.num_rows} DOF, subsystems {top.subsystems}"
    )
    print(
        f"  J blocks {[top.block_shape(i, j) for i, j in top.blocks]} (seed 000 eq. 26); "
        f"SSLM elimination order {top.elimination_order}"
    )
    start = time.perf_counter()
    q, qd, residual = jax.block_until_ready(
        jax.jit(crank_cycle, static_argnums=2)(mech, 4.712, 134)
    )
    print(
        f"  one crank turn at 45 rpm, 134 positions assembled in {time.perf_counter() - start:.2f} s "
        f"(with compilation); largest |Phi| {float(residual.max()):.1e}, "
        f"largest |J qd| {float(jnp.abs(jax.vmap(kinematics.loop_jacobian, (None, 0))(mech, q) @ qd[..., None]).max()):.1e}"
    )
    fig, axes = plot.plt.subplots(1, 2, figsize=(11, 4.5))
    for k in range(0, 134, 27):
        plot.draw(mech, q[k], axes[0], alpha=0.3 + 0.7 * k / 133)
    tip = np.asarray(jax.vmap(kinematics.body_poses, (None, 0))(mech, q)[0][:, -1, :2])
    axes[0].plot(tip[:, 0], tip[:, 1], "r-", lw=1, label="origin of link #7")
    axes[0].set_title("carpet scraper over one crank turn")
    axes[0].legend(fontsize=8)
    t = np.arange(134) * 0.01
    axes[1].plot(t, np.asarray(qd))
    axes[1].set(xlabel="t [s]", ylabel="joint rate [rad/s]", title="joint rates at 45 rpm")
    axes[1].legend(mech.coordinate_names, fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(out / "scraper.png", dpi=120)
    print(f"  figure: {out / 'scraper.png'}")


def demo(out: pathlib.Path):
    out.mkdir(parents=True, exist_ok=True)
    scraper_demo(out)
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
    print(
        f"loopdyn demo: {mech.num_bodies}-link pendulum with a spring, {float(traj.t[-1]):.1f} s "
        f"simulated in {int(traj.steps)} adaptive Tsit5 steps"
    )
    print(f"  compile + run {compiled:.2f} s, run {1e3 * elapsed:.1f} ms")
    print(f"  energy {float(e[0]):.6f} J, largest drift {float(jnp.max(jnp.abs(e - e[0]))):.2e} J")
    plot.trajectory_figure(mech, traj, e, out / "pendulum.png")
    print(f"  figure: {out / 'pendulum.png'}")


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
