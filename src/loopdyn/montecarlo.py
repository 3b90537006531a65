"""Monte Carlo studies: many runs over sampled parameters and initial states, jit-batched in chunks
sharded over every device (`loopdyn.sharding`), stored chunk by chunk in a zarr group that
survives a crash, across one or several processes (`jax.distributed`).

Run ``i`` is a pure function of ``(mech, i)``: its key is ``fold_in(key(seed), i)``, a
sampler turns the nominal mechanism, the key and ``i`` into a `Sample` (a mechanism, an initial guess
and velocity, and the recorded parameter vector), the loops are closed with the ``fixed``
coordinates held (`kinematics.try_assemble`), the velocities projected onto ``J qd = 0``, and the
run is a forward simulation (`simulation.simulate`) or a prescribed inverse-dynamics cycle
(`prescribed.prescribed_inverse_dynamics`). Any subset of runs can be recomputed by `run_sample`.

Failures are result codes (`CODES`), never exceptions: an unassemblable sample (the loops do not
close to ``closure_tol``), a singular start (``J`` over the coordinates not held has
``s_min <= singular_rtol s_max``: a dead centre of the held coordinates or a change point), or a
solver failure. A sample that fails at the start is replaced, inside the batch, by the nominal
mechanism at ``mech.q0`` so that it costs no more than a good one, and its summaries are NaN; the
statistics count it by its code and leave it out of the means and quantiles.

Store (zarr v3 group, one chunk per batch along the ``run`` axis): ``index``, ``code``,
``params`` (labels in the ``params_labels`` attribute), ``summary/<name>``, with
``trajectories=True`` also ``trajectory/ts``, ``trajectory/q``, ``trajectory/qd`` (forward
runs), and ``done`` (one entry per chunk). A chunk's data is written before its ``done`` entry,
and zarr's local store writes every chunk file to a temporary file renamed into place, so a
process killed at any moment leaves each file whole (old or new) and never a chunk marked done
whose data is not all written; a resumed study recomputes exactly the chunks not marked done,
with the same keys, hence the same results.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from . import forward, kinematics, parameters, prescribed, sharding, simulation
from .io.files import save_figure
from .mechanism import Mechanism

UNASSEMBLED, SINGULAR = 3, 4
CODES = {
    simulation.SUCCESS: "success",
    simulation.MAX_STEPS: "max_steps",
    simulation.FAILED: "solver_failed",
    UNASSEMBLED: "unassemblable",
    SINGULAR: "singular_start",
}
KINDS = ("simulate", "inverse")
#: Summaries kept for failed runs too (solver statistics); the others are NaN there.
DIAGNOSTICS = ("steps", "rejected_steps", "t_reached")


class Sample(NamedTuple):
    """One run's inputs from a sampler: the mechanism, an initial guess ``q0`` (closed by
    assembly with the ``fixed`` coordinates held), velocities ``qd0`` (projected onto
    ``J qd = 0``) and ``params``, the parameter vector recorded in the store."""

    mech: Mechanism
    q0: Float[Array, " n"]
    qd0: Float[Array, " n"]
    params: Float[Array, " k"]


@dataclasses.dataclass(frozen=True)
class Tolerances:
    """Sampler of declarative tolerances (from `tolerances`): every mass ``m (1 + mass u)`` and
    every joint placement coordinate ``x + length u``, ``u`` uniform on ``[-1, 1]``, independent
    per entry; the initial state is the nominal ``q0`` (re-assembled) at rest. ``params``:
    masses in kg and placements in m (labels `labels`)."""

    mass: float
    length: float
    selection: parameters.Free

    @property
    def labels(self) -> tuple[str, ...]:
        return tuple(s.replace(".log_mass", ".mass") for s in self.selection.labels)

    def _is_mass(self):
        return np.array([b.field == "mass" for b in self.selection.blocks for _ in b.labels])

    def __call__(self, mech: Mechanism, key, index=None) -> Sample:
        theta = parameters.to_vector(mech, self.selection)
        u = jax.random.uniform(key, theta.shape, theta.dtype, -1.0, 1.0)
        is_mass = self._is_mass()
        theta = theta + jnp.where(is_mass, jnp.log1p(self.mass * u), self.length * u)
        sampled = parameters.from_vector(theta, mech, self.selection)
        recorded = jnp.where(is_mass, jnp.exp(theta), theta)
        return Sample(sampled, mech.q0, jnp.zeros(mech.nv, mech.q0.dtype), recorded)


def tolerances(mech: Mechanism, mass: float = 0.0, length: float = 0.0) -> Tolerances:
    """Relative ``mass`` tolerance on every body with mass and absolute ``length`` tolerance [m]
    on every joint placement: tree joints on their parent body, cut joints on both bodies (x and
    y for planar mechanisms; a link's length is the distance between its joint placements)."""
    for name, value in (("mass", mass), ("length", length)):
        if not (math.isfinite(value) and value >= 0.0):
            raise ValueError(f"tolerances: {name} must be finite and >= 0, got {value}")
    if mass >= 1.0:
        raise ValueError(f"tolerances: the relative mass tolerance must be < 1, got {mass}")
    bodies = [b for b, m in zip(mech.body_names, np.asarray(mech.mass)) if m > 0.0]
    cuts = [c.name for c in mech.cut_joints]
    selection = parameters.free(
        mech,
        masses=bodies,
        placements=list(mech.coordinate_names) + cuts,
        child_placements=cuts,
    )
    return Tolerances(float(mass), float(length), selection)


@dataclasses.dataclass(frozen=True)
class Options:
    """What each run does (static, hashable).

    ``kind``: ``"simulate"`` (free motion from the sample's state over ``[0, t1]``, ``saves``
    saved instants, `simulation.simulate` with ``rtol``, ``atol``, ``method``,
    ``stabilization``, ``max_steps``) or ``"inverse"`` (``drive``, a function ``t -> (a,)`` of the
    actuated coordinates, over the grid ``0, dt, ...`` up to ``t1``, by
    `prescribed.prescribed_inverse_dynamics`). ``fixed``: coordinates held while assembling
    (default the actuated ones). ``trajectories``: store ``q`` and ``qd`` at the saves.
    ``summarize(mech, result) -> dict`` replaces the default summaries (`summaries`)."""

    kind: str = "simulate"
    t1: float = 5.0
    saves: int = 51
    rtol: float = 1e-6
    atol: float = 1e-6
    method: str = "auto"
    stabilization: str = "baumgarte"
    max_steps: int = 16_384
    drive: Callable | None = None
    dt: float = 0.01
    fixed: tuple[int, ...] | None = None
    closure_tol: float = 1e-10
    singular_rtol: float = 1e-6
    trajectories: bool = False
    summarize: Callable | None = None

    def checked(self, mech: Mechanism) -> Options:
        """These options with ``fixed`` resolved for ``mech``; raises on bad values."""
        if self.kind not in KINDS:
            raise ValueError(f"montecarlo: kind must be one of {KINDS}, got {self.kind!r}")
        if not self.t1 > 0.0:
            raise ValueError(f"montecarlo: t1 must be positive, got {self.t1}")
        if self.kind == "inverse" and self.drive is None:
            raise ValueError("montecarlo: kind='inverse' needs a drive t -> (a,) (Options.drive)")
        if self.kind == "simulate" and self.saves < 2:
            raise ValueError(f"montecarlo: saves must be >= 2, got {self.saves}")
        if self.kind == "simulate":
            forward.check_method(self.method, "montecarlo")
        if self.stabilization not in simulation.STABILIZATIONS:
            raise ValueError(
                f"montecarlo: stabilization must be one of {simulation.STABILIZATIONS}"
            )
        fixed = mech.actuated if self.fixed is None else self.fixed
        fixed = tuple(
            sorted(set(range(mech.num_bodies)) - set(kinematics.free_coordinates(mech, fixed)))
        )
        return dataclasses.replace(self, fixed=fixed)


class Outcome(NamedTuple):
    """One run's results: its ``code`` (`CODES`), the sampled ``params``, ``summary`` (name ->
    array) and ``trajectory`` (name -> array; empty unless requested)."""

    code: Array
    params: Array
    summary: dict
    trajectory: dict


def summaries(mech: Mechanism, result) -> dict:
    """Default per-run summaries. Forward runs (a `simulation.Simulation`): final ``q`` and
    ``qd``, ``energy_drift`` ``max |E - E0|`` [J], ``max_closure`` ``max |Phi|``. Inverse cycles
    (``(motion, InverseDynamics)``): RMS and peak of each actuator force, peak reaction force per
    joint, ``max_closure`` and ``min_conditioning`` (of ``J`` over the passive coordinates)."""
    if isinstance(result, simulation.Simulation):
        return {
            "q_final": result.q[-1],
            "qd_final": result.qd[-1],
            "energy_drift": jnp.max(jnp.abs(result.energy - result.energy[0])),
            "max_closure": jnp.max(result.loop_residual[:, 0]),
        }
    motion, dynamics = result
    forces = dynamics.actuator_forces
    reaction = jnp.linalg.norm(dynamics.reactions[..., -(2 if mech.planar else 3) :], axis=-1)
    return {
        "actuator_rms": jnp.sqrt(jnp.mean(forces**2, axis=0)),
        "actuator_peak": jnp.max(jnp.abs(forces), axis=0),
        "reaction_peak": jnp.max(reaction, axis=0),
        "max_closure": jnp.max(motion.closure),
        "min_conditioning": jnp.min(motion.conditioning),
    }


def _select(flag, a, b):
    """``a`` where ``flag``, else ``b``, leaf by leaf. Leaves ``a`` shares with ``b`` (those the
    sampler left alone) are kept as they are: selected, they would become per-sample arrays under
    ``vmap``, and every dynamics evaluation of a chunk ~30 % slower."""
    return jax.tree.map(lambda x, y: x if x is y else jnp.where(flag, x, y), a, b)


def run_sample(
    mech: Mechanism, index, sampler: Callable, options: Options, seed: int = 0
) -> Outcome:
    """Run ``index`` of a study (traceable; `run` maps it over chunks): sample with the key
    ``fold_in(key(seed), index)``, assemble, check the start, simulate or run the inverse
    cycle, summarise. ``options`` must be `Options.checked` for ``mech``."""
    key = jax.random.fold_in(jax.random.key(seed), index)
    sample = sampler(mech, key, index)
    fixed = options.fixed
    assembly = kinematics.try_assemble(sample.mech, sample.q0, fixed, options.closure_tol)
    q0 = assembly.q
    qd0 = kinematics.project_velocity(sample.mech, q0, sample.qd0, fixed)
    if mech.topology.loops:
        s = kinematics.singular_values(sample.mech, q0, fixed)
        singular = ~(s[-1] > options.singular_rtol * s[0])  # NaN counts as singular
    else:
        singular = jnp.array(False)
    unassembled = ~assembly.converged | ~jnp.all(jnp.isfinite(q0))
    good = ~(unassembled | singular)
    used = _select(good, sample.mech, mech)
    q0 = jnp.where(good, q0, mech.q0)
    qd0 = jnp.where(good, qd0, 0.0)
    summarize = options.summarize or summaries
    trajectory = {}
    if options.kind == "simulate":
        result = simulation.simulate(
            used,
            q0,
            qd0,
            options.t1,
            saveat=jnp.linspace(0.0, options.t1, options.saves),
            rtol=options.rtol,
            atol=options.atol,
            method=options.method,
            stabilization=options.stabilization,
            max_steps=options.max_steps,
        )
        code = result.stats.result
        stats = {
            "steps": result.stats.accepted_steps,
            "rejected_steps": result.stats.rejected_steps,
            "t_reached": result.stats.t_reached,
        }
        if options.trajectories:
            trajectory = {"q": result.q, "qd": result.qd}
    else:
        steps = max(2, int(options.t1 / options.dt + 1e-9) + 1)
        grid = jnp.arange(steps) * options.dt
        result = prescribed.prescribed_inverse_dynamics(used, options.drive, grid, q_guess=q0)
        motion = result[0]
        code = jnp.where(
            jnp.max(motion.closure) > options.closure_tol,
            UNASSEMBLED,
            jnp.where(jnp.min(motion.conditioning) <= options.singular_rtol, SINGULAR, 0),
        )
        stats = {}
        if options.trajectories:
            trajectory = {"q": motion.q, "qd": motion.qd}
    code = jnp.where(unassembled, UNASSEMBLED, jnp.where(singular, SINGULAR, code))
    ok = code == simulation.SUCCESS
    summary = {k: jnp.where(ok, v, jnp.nan) for k, v in summarize(used, result).items()}
    summary |= {k: jnp.asarray(v, q0.dtype) for k, v in stats.items()}
    return Outcome(code.astype(jnp.int8), sample.params, summary, trajectory)


def check_sampler(mech: Mechanism, sampler: Callable) -> Sample:
    """Trace ``sampler`` once (no computation) and check what it returns; returns the shapes."""
    if not callable(sampler):
        raise TypeError(f"sampler must be callable (mech, key, index) -> Sample, got {sampler!r}")
    key, index = jax.random.key(0), jnp.zeros((), jnp.int64)
    sample = jax.eval_shape(lambda m: sampler(m, key, index), mech)
    if not isinstance(sample, Sample):
        raise TypeError(f"sampler must return a montecarlo.Sample, got {type(sample).__name__}")
    if jax.tree.structure(sample.mech) != jax.tree.structure(mech):
        raise ValueError("sampler: Sample.mech must have the nominal mechanism's structure")
    n = mech.num_bodies
    for name in ("q0", "qd0"):
        if getattr(sample, name).shape != (n,):
            raise ValueError(
                f"sampler: Sample.{name} must have shape ({n},), got {getattr(sample, name).shape}"
            )
    if sample.params.ndim != 1:
        raise ValueError(f"sampler: Sample.params must be 1-D, got shape {sample.params.shape}")
    return sample


@functools.lru_cache(maxsize=16)
def _chunk_function(sampler, options, seed, devices):
    """The sharded, jitted map of `run_sample` over a chunk of indices (one per study setup)."""
    return sharding.batch(
        lambda mech, index: run_sample(mech, index, sampler, options, seed),
        in_axes=(None, 0),
        devices=devices,
    )


def compute(
    mech: Mechanism,
    sampler: Callable,
    indices,
    options: Options = Options(),
    seed: int = 0,
    devices: Sequence[jax.Device] | None = None,
) -> Outcome:
    """The outcomes of the runs ``indices`` (any subset of a study: the same numbers as in its
    store), as one sharded batch over ``devices`` (default all)."""
    options = options.checked(mech)
    check_sampler(mech, sampler)
    indices = np.asarray(indices, dtype=np.int64)
    if indices.ndim != 1 or indices.size == 0:
        raise ValueError(
            f"compute: indices must be a non-empty 1-D array, got shape {indices.shape}"
        )
    devices = tuple(jax.devices() if devices is None else devices)
    outcome = _chunk_function(sampler, options, int(seed), devices)(mech, jnp.asarray(indices))
    return jax.tree.map(np.asarray, outcome)


# ------------------------------------------------------------------------------------------------
# The store


def _describe(value):
    if callable(value) and not dataclasses.is_dataclass(value):
        return f"{getattr(value, '__module__', '?')}.{getattr(value, '__qualname__', repr(value))}"
    return value if isinstance(value, (int, float, str, bool, type(None))) else repr(value)


def _fingerprint(mech: Mechanism) -> str:
    digest = hashlib.sha256(repr((mech.body_names, mech.coordinate_names)).encode())
    for leaf in jax.tree.leaves(mech):
        digest.update(np.ascontiguousarray(np.asarray(leaf)).tobytes())
    return digest.hexdigest()[:16]


def _study(mech, sampler, n, chunk, options, seed) -> dict:
    """The description a store is created with and a resume must match."""
    return {
        "n": n,
        "chunk": chunk,
        "seed": seed,
        "mechanism": _fingerprint(mech),
        "sampler": _describe(sampler),
        "options": {
            f.name: _describe(getattr(options, f.name)) for f in dataclasses.fields(options)
        },
    }


def _axis(mech, name, shape):
    """The dimension name of a summary's second axis (xarray needs one size per name) and the
    labels of its columns."""
    if shape == ():
        return None, [name]
    if name == "q_final":
        dim, names = "configuration", mech.configuration_names
    elif shape == (mech.num_bodies,):
        dim, names = "coordinate", mech.coordinate_names
    elif name in ("actuator_rms", "actuator_peak"):
        dim, names = "actuator", mech.actuator_names
    elif name == "reaction_peak":
        dim, names = "joint", mech.joint_names
    else:
        dim, names = f"{name}_component", range(int(np.prod(shape)))
    return dim, [f"{name}[{c}]" for c in names]


def _units(mech, name, default=True):
    """The unit of every column of summary ``name``: the solver's `DIAGNOSTICS` and those of the
    default `summaries` (when ``default``); none where unknown."""
    actuators = [mech.force_units[k] for k in mech.actuated]
    units = {
        "q_final": list(mech.configuration_units),
        "qd_final": [f"{unit}/s" for unit in mech.coordinate_units],
        "energy_drift": ["J"],
        "max_closure": ["m"],
        "actuator_rms": actuators,
        "actuator_peak": actuators,
        "reaction_peak": ["N"] * len(mech.joint_names),
        "min_conditioning": ["1"],
    }
    diagnostics = {"steps": ["1"], "rejected_steps": ["1"], "t_reached": ["s"]}
    return diagnostics.get(name) or (units.get(name, []) if default else [])


def _create(path, mech, sampler, n, chunk, options, seed, study, ts):
    """A new store with every array sized for ``n`` runs, chunked by ``chunk`` along ``run``."""
    import zarr

    probe = jax.eval_shape(
        lambda m: run_sample(m, jnp.zeros((), jnp.int64), sampler, options, seed), mech
    )
    group = zarr.open_group(os.fspath(path), mode="w-")

    def array(name, spec, fill, dims):
        return group.create_array(
            name,
            shape=(n, *spec.shape),
            chunks=(chunk, *spec.shape),
            dtype=spec.dtype,
            fill_value=fill,
            dimension_names=("run", *dims[: len(spec.shape)]),
        )

    array("index", jax.ShapeDtypeStruct((), np.int64), -1, ())
    array("code", probe.code, -1, ())
    array("params", probe.params, np.nan, ("parameter",))
    for name, spec in probe.summary.items():
        array(f"summary/{name}", spec, np.nan, (_axis(mech, name, spec.shape)[0],))
    for name, spec in probe.trajectory.items():
        array(f"trajectory/{name}", spec, np.nan, ("time", "coordinate"))
    if ts is not None and probe.trajectory:
        group.create_array("trajectory/ts", data=np.asarray(ts), dimension_names=("time",))
    chunks = -(-n // chunk)
    group.create_array(
        "done",
        shape=(chunks,),
        chunks=(1,),
        dtype=np.int8,
        fill_value=0,
        dimension_names=("chunk",),
    )
    labels = getattr(sampler, "labels", [f"p{k}" for k in range(probe.params.shape[0])])
    group.attrs.update(
        {
            "loopdyn_montecarlo": study,
            "params_labels": list(labels),
            "summary_labels": {k: _axis(mech, k, v.shape)[1] for k, v in probe.summary.items()},
            "summary_units": {
                label: unit
                for k, v in probe.summary.items()
                for label, unit in zip(
                    _axis(mech, k, v.shape)[1], _units(mech, k, options.summarize is None)
                )
            },
            "codes": {str(k): v for k, v in CODES.items()},
        }
    )
    return group


def _open(path, study):
    """An existing store for ``study``: refuses one created for another study."""
    import zarr

    group = zarr.open_group(os.fspath(path), mode="r+")
    stored = group.attrs.get("loopdyn_montecarlo")
    if stored != json.loads(json.dumps(study)):
        differ = sorted(
            k for k in study if (stored or {}).get(k) != json.loads(json.dumps(study[k]))
        )
        raise ValueError(
            f"montecarlo: {path} holds another study (differs in {differ}); use another --out or "
            "the same settings"
        )
    return group


def _write(group, chunk_index, chunk, outcome, indices):
    """Write one chunk's data, then mark it done (the order the module docstring relies on)."""
    rows = slice(chunk_index * chunk, chunk_index * chunk + len(indices))
    group["index"][rows] = indices
    group["code"][rows] = outcome.code
    group["params"][rows] = outcome.params
    for name, value in outcome.summary.items():
        group[f"summary/{name}"][rows] = value
    for name, value in outcome.trajectory.items():
        group[f"trajectory/{name}"][rows] = value
    group["done"][chunk_index] = 1


def _barrier(name):
    """Wait for every process (`jax.distributed`); nothing to do in a single process."""
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(name)


def default_chunk(n: int, devices: int = 1) -> int:
    """Runs per chunk when none is given: about 20 chunks, so progress shows in 5 % steps, but at
    least 16 runs per device (a batch that keeps each device busy) and at most 1000."""
    return int(min(n, 1000, max(-(-n // 20), 16 * devices)))


def run(
    mech: Mechanism,
    sampler: Callable,
    n: int,
    out,
    *,
    options: Options = Options(),
    chunk: int | None = None,
    seed: int = 0,
    resume: bool = False,
    devices: Sequence[jax.Device] | None = None,
    progress: bool = True,
    verbose: bool = False,
) -> dict:
    """Run a study of ``n`` runs into the zarr store ``out`` and return its `statistics`.

    ``sampler(mech, key, index) -> Sample`` (e.g. `tolerances`; ``index`` is the run's number,
    for samplers that need it, e.g. to take designs from a table). Chunks of ``chunk`` runs are one
    sharded, jitted batch each (`sharding.batch` over ``devices``, default all local devices;
    ``chunk=None``: `default_chunk`); a progress bar shows runs/s and the time left, after a line
    saying that the first chunk compiles the program. ``resume=True`` continues a store of the same
    study, computing only the chunks not marked done; without it an existing ``out`` is an error.
    Under `jax.distributed` (several processes) every process takes the chunks ``c`` with
    ``c % process_count == process_index`` and writes them into the same store (a filesystem all
    processes see); process 0 creates the store and, after all are done, the statistics.
    ``verbose`` prints a line per computed chunk.
    """
    import zarr
    from tqdm.auto import tqdm

    if not isinstance(mech, Mechanism):
        raise TypeError(f"montecarlo.run: mech must be a Mechanism, got {type(mech).__name__}")
    check_sampler(mech, sampler)
    devices = tuple(jax.local_devices() if devices is None else devices)
    chunk = default_chunk(n, len(devices)) if chunk is None else chunk
    if int(n) < 1 or int(chunk) < 1:
        raise ValueError(f"montecarlo.run: n and chunk must be positive, got n={n}, chunk={chunk}")
    n, chunk, seed = int(n), min(int(chunk), int(n)), int(seed)
    options = options.checked(mech)
    study = _study(mech, sampler, n, chunk, options, seed)
    rank, processes = jax.process_index(), jax.process_count()
    if rank == 0:  # the others wait for it at the barrier
        if os.path.exists(os.path.join(os.fspath(out), "zarr.json")):
            if not resume:
                raise FileExistsError(
                    f"montecarlo: {out} exists; pass resume=True (--resume) to continue it"
                )
            _open(out, study)
        else:
            ts = (
                jnp.linspace(0.0, options.t1, options.saves) if options.kind == "simulate" else None
            )
            _create(out, mech, sampler, n, chunk, options, seed, study, ts)
    _barrier("loopdyn-montecarlo-store")
    group = _open(out, study)
    done = group["done"][:]
    mine = [c for c in range(len(done)) if c % processes == rank]
    todo = [c for c in mine if not done[c]]
    function = _chunk_function(sampler, options, seed, devices)
    already = sum(min(chunk, n - c * chunk) for c in mine if done[c])
    total = sum(min(chunk, n - c * chunk) for c in mine)
    if todo and progress:  # the bar stays at its start through the compile: say so
        print(f"compiling the program of a chunk of {chunk} runs ...", file=sys.stderr, flush=True)
    with tqdm(total=total, initial=already, unit="run", disable=not progress, smoothing=0.3) as bar:
        for number, c in enumerate(todo):
            start = time.perf_counter()
            indices = np.arange(c * chunk, min(n, (c + 1) * chunk))
            padded = np.pad(indices, (0, chunk - len(indices)), mode="edge")  # one compiled shape
            count = len(indices)
            outcome = jax.tree.map(lambda x, k=count: np.asarray(x)[:k], function(mech, padded))
            if number == 0 and progress:
                seconds = time.perf_counter() - start
                bar.write(f"first chunk, compile included: {seconds:.1f} s", file=sys.stderr)
            _write(group, c, chunk, outcome, indices)
            bar.update(len(indices))
            if verbose:
                failed = int(np.sum(outcome.code != 0))
                tqdm.write(
                    f"chunk {c}: computed {len(indices)} runs, {failed} failed", file=sys.stdout
                )
                sys.stdout.flush()
    _barrier("loopdyn-montecarlo-done")
    stats = statistics(out) if rank == 0 else {}
    if rank == 0:
        zarr.open_group(os.fspath(out), mode="r+").attrs["statistics"] = stats
    return stats


# ------------------------------------------------------------------------------------------------
# Reading a store


def _columns(group):
    """``(label, values)`` for every scalar column of every summary, runs along the first axis."""
    labels = group.attrs["summary_labels"]
    for name in sorted(labels):
        values = np.asarray(group[f"summary/{name}"][:]).reshape(group["code"].shape[0], -1)
        yield from zip(labels[name], values.T)


def _number(x):
    return float(x) if x is not None and np.isfinite(x) else None


def statistics(out, quantiles: Sequence[float] = (0.05, 0.5, 0.95)) -> dict:
    """Counts by result code and, over the successful runs of the chunks done, the mean, standard
    deviation and ``quantiles`` of every summary column (``None`` where undefined, e.g. without
    successful runs), and ``units``: each column's unit where known. Returns a dict that is
    strict JSON (no NaN)."""
    import zarr

    group = zarr.open_group(os.fspath(out), mode="r")
    n, chunk = group.attrs["loopdyn_montecarlo"]["n"], group.attrs["loopdyn_montecarlo"]["chunk"]
    done = np.repeat(group["done"][:].astype(bool), chunk)[:n]
    code = group["code"][:]
    ok = done & (code == simulation.SUCCESS)
    counts = {name: int(np.sum(done & (code == k))) for k, name in CODES.items()}
    columns = {}
    for label, values in _columns(group):
        v = values[ok]
        row = {"mean": np.mean(v) if v.size else None}
        row["std"] = np.std(v, ddof=1) if v.size > 1 else None
        row |= {f"q{100 * q:g}": np.quantile(v, q) if v.size else None for q in quantiles}
        columns[label] = {k: _number(x) for k, x in row.items()}
    units = group.attrs.get("summary_units", {})
    return {"runs": n, "done": int(done.sum()), "codes": counts, "columns": columns, "units": units}


def histograms(out, labels: Sequence[str], path=None, bins: int = 40):
    """A figure with one histogram per summary column in ``labels`` (successful runs); written
    to ``path`` (PNG, atomically) when given."""
    import zarr
    from matplotlib.figure import Figure

    group = zarr.open_group(os.fspath(out), mode="r")
    columns = dict(_columns(group))
    unknown = [label for label in labels if label not in columns]
    if unknown:
        raise ValueError(f"histograms: unknown columns {unknown}; known: {sorted(columns)}")
    ok = group["code"][:] == simulation.SUCCESS
    cols = min(3, len(labels))
    rows = -(-len(labels) // cols)
    fig = Figure(figsize=(4 * cols, 3 * rows))
    for k, label in enumerate(labels):
        ax = fig.add_subplot(rows, cols, k + 1)
        ax.hist(columns[label][ok], bins=bins)
        unit = group.attrs.get("summary_units", {}).get(label)
        ax.set(xlabel=f"{label} [{unit}]" if unit else label, ylabel="runs")
    return save_figure(fig, path, dpi=100)
