"""Identification of inertial parameters from measured driving forces and from trajectories.

Linear route (torque data). The actuator forces of a consistent motion are linear in the inertial
parameters of the bodies (seed 002 eq. 10: ``tau_id = I qdd + C qd + g`` is linear in every
extended mass matrix, and ``[B J^T]`` does not depend on them), when each body is described by

- planar: ``m, m c_x, m c_y, Izz_O`` (``Izz_O`` about the body frame origin);
- spatial: ``m, m c_x, m c_y, m c_z`` and the six entries ``Ixx, Iyy, Izz, Ixy, Ixz, Iyz`` of the
  inertia about the body frame origin (body axes),

so ``u = Y(q, qd, qdd) pi + u_0`` (``u_0``: springs, zero without them). `regressor` builds ``Y``
with ``jax.jacfwd`` of `loopdyn.inverse.solve` (exact, the map being linear), `identify` stacks
it over samples, solves the least-squares problem by the SVD of the column-scaled regressor,
names the unidentifiable directions (the null space, in reduced row echelon form so that each
direction involves few parameters) and gives standard errors and confidence intervals from the
residual variance.

Nonlinear route (trajectory data). `fit_trajectory` fits the free parameters of a
`loopdyn.parameters.Free` selection (unconstrained: masses stay positive, inertias physical) to
measured coordinates by nonlinear least squares on the residuals ``q_sim(t_k) - q_measured(t_k)``
of one `loopdyn.simulate` run: Levenberg-Marquardt (Nocedal and Wright, Numerical Optimization,
2nd ed., Springer 2006, §10.3) with the residual Jacobian from ``jax.jacfwd`` through the
diffrax solve (``diffrax.ForwardMode``, one tangent per free parameter). At the optimum the
same Jacobian gives the Gauss-Newton covariance ``s^2 (J^T J)^-1`` (``s^2`` the residual
variance), its rank and null space (what the data cannot determine) and confidence intervals,
by the same column-scaled SVD as the linear route. Whether a record determines the parameters
shows in those singular values: the 3-RRR's seven masses from 0.4 s of driven motion span
0.03..2.3 (column-scaled) and the fit converges in a few iterations
(experiments/rrr_mass_fit.py), while a four-bar's three masses from 1 s leave 1.7, 0.07, 0.002
(one degree of freedom: the masses act through the scalar generalized inertia and gravity
torque along the crank angle) and the iterations crawl.
"""

from __future__ import annotations

import warnings
from typing import NamedTuple

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from . import compilation, configuration, inverse, parameters
from .mechanism import Mechanism
from .simulation import simulate

_SPATIAL = ("m", "mx", "my", "mz", "Ixx", "Iyy", "Izz", "Ixy", "Ixz", "Iyz")
_UPPER = ((0, 0), (1, 1), (2, 2), (0, 1), (0, 2), (1, 2))


def _bodies(mech, bodies):
    """Indices of the chosen bodies (names), default every body with mass."""
    if bodies is None:
        return tuple(i for i in range(mech.num_bodies) if float(mech.mass[i]) > 0.0)
    if isinstance(bodies, str):
        bodies = (bodies,)
    out = []
    for name in bodies:
        if isinstance(name, (int, np.integer)) and 0 <= name < mech.num_bodies:
            out.append(int(name))
            continue
        if name not in mech.body_names:
            raise ValueError(f"bodies: unknown body {name!r}; bodies are {list(mech.body_names)}")
        out.append(mech.body_names.index(name))
    return tuple(out)


def parameter_labels(mech: Mechanism, bodies=None) -> tuple[str, ...]:
    """Names ``body.m``, ``body.mx``, ... of the entries of `inertial_parameters`, axes named as
    in the model's file (``mech.axis_names``: ``mx, mz, Iyy`` for a model drawn in the xz-plane)."""
    x, y, z = mech.axis_names
    z = z.lstrip("-")  # I about -y is I about y
    names = ("m", f"m{x}", f"m{y}", f"I{z}{z}") if mech.planar else _SPATIAL
    return tuple(f"{mech.body_names[i]}.{p}" for i in _bodies(mech, bodies) for p in names)


def unit(label: str) -> str:
    """The unit of a parameter named as in `parameter_labels`, `Free.labels` (a ``log_`` entry
    has the unit of the quantity whose logarithm it is) or `TrajectoryFit.value_labels`."""
    field = label.rsplit(".", 1)[-1].removeprefix("log_")
    if field in ("m", "mass"):
        return "kg"
    if "position" in field or field.startswith("com_"):
        return "m"
    if field.startswith("chol_"):  # P = L L^T: row 3 of L carries the mass, the rest m sqrt(kg)
        return "kg^1/2" if field[5] == "3" else "kg^1/2 m"
    if field.startswith("m"):  # m x, m y, m z
        return "kg m"
    return "kg m^2"


def inertial_parameters(mech: Mechanism, bodies=None) -> Float[Array, " p"]:
    """The parameters ``pi`` in which inverse dynamics is linear (module docstring), body after
    body in the order of ``bodies`` (default every body with mass)."""
    parts = []
    for i in _bodies(mech, bodies):
        m, c, inertia = mech.mass[i], mech.com[i], mech.inertia[i]
        about_origin = inertia + m * (jnp.dot(c, c) * jnp.eye(3) - jnp.outer(c, c))
        if mech.planar:
            parts.append(jnp.stack([m, m * c[0], m * c[1], about_origin[2, 2]]))
        else:
            entries = jnp.stack([about_origin[r, s] for r, s in _UPPER])
            parts.append(jnp.concatenate([m[None], m * c, entries]))
    return jnp.concatenate(parts)


def with_inertial_parameters(mech: Mechanism, pi: Float[Array, " p"], bodies=None) -> Mechanism:
    """``mech`` with the inertial parameters of ``bodies`` set from ``pi`` (the inverse of
    `inertial_parameters`; needs ``m != 0``). Planar bodies keep their ``com_z`` and the inertia
    entries other than ``Izz``, which planar dynamics does not see."""
    chosen = _bodies(mech, bodies)
    size = 4 if mech.planar else len(_SPATIAL)
    pi = jnp.asarray(pi)
    if pi.shape != (size * len(chosen),):
        raise ValueError(
            f"with_inertial_parameters: pi must have shape ({size * len(chosen)},) "
            f"({size} per body), got {pi.shape}"
        )
    mass, com, inertia = mech.mass, mech.com, mech.inertia
    for k, i in enumerate(chosen):
        x = pi[size * k : size * (k + 1)]
        m = x[0]
        if mech.planar:
            c = jnp.stack([x[1] / m, x[2] / m, com[i, 2]])
            izz = x[3] - m * (c[0] ** 2 + c[1] ** 2)
            inertia = inertia.at[i, 2, 2].set(izz)
        else:
            c = x[1:4] / m
            about_origin = jnp.zeros((3, 3), pi.dtype)
            for value, (r, s) in zip(x[4:], _UPPER):
                about_origin = about_origin.at[r, s].set(value).at[s, r].set(value)
            shift = m * (jnp.dot(c, c) * jnp.eye(3) - jnp.outer(c, c))
            inertia = inertia.at[i].set(about_origin - shift)
        mass, com = mass.at[i].set(m), com.at[i].set(c)
    return eqx.tree_at(lambda t: (t.mass, t.com, t.inertia), mech, (mass, com, inertia))


def _actuator_forces(pi, mech, bodies, q, qd, qdd, method):
    return inverse.solve(with_inertial_parameters(mech, pi, bodies), q, qd, qdd, method)[0]


@compilation.jit
def _stacked(mech, bodies, q, qd, qdd, method):
    pi = inertial_parameters(mech, bodies)

    def one(q, qd, qdd):
        y = jax.jacfwd(_actuator_forces)(pi, mech, bodies, q, qd, qdd, method)
        return y, _actuator_forces(pi, mech, bodies, q, qd, qdd, method) - y @ pi

    return jax.vmap(one)(q, qd, qdd)


def _states(mech, function, **arrays):
    out, samples = [], None
    for name, x in arrays.items():
        x = jnp.asarray(x, mech.q0.dtype)
        if x.ndim == 1:
            x = x[None]
        names = mech.configuration_names if name == "q" else mech.coordinate_names
        if x.ndim != 2 or x.shape[1] != len(names) or samples not in (None, x.shape[0]):
            want = f"({samples if samples is not None else 'T'}, {len(names)})"
            raise ValueError(
                f"{function}: {name} must have shape {want} (one row per sample, one column "
                f"per entry {list(names)}), got {x.shape}"
            )
        samples = x.shape[0]
        out.append(x)
    return out


def regressor(
    mech: Mechanism, q, qd, qdd, bodies=None, method: str = "subsystem"
) -> tuple[Float[Array, "T a p"], Float[Array, "T a"]]:
    """Regressor ``Y`` and offset ``u_0`` with ``actuator_forces = Y pi + u_0`` at every sample
    (``q``, ``qd``, ``qdd`` of shape ``(T, n)`` or ``(n,)``, consistent states; ``pi`` from
    `inertial_parameters`, columns `parameter_labels`). One compiled program per topology."""
    q, qd, qdd = _states(mech, "regressor", q=q, qd=qd, qdd=qdd)
    with warnings.catch_warnings():  # only the method is checked here; solve has no warnings
        warnings.simplefilter("ignore")
        inverse.solve_plan(mech, method)
    return _stacked(mech, _bodies(mech, bodies), q, qd, qdd, method)


class Identification(NamedTuple):
    """Outcome of `identify` (numpy arrays, entries aligned with ``labels``).

    ``estimate``: the least-squares parameters; along unidentifiable directions the prior values
    are kept (the correction is the minimum-norm one in column-scaled units). ``std_error`` and
    ``interval`` (``(p, 2)``, at ``confidence``): for identifiable parameters; ``inf`` for the
    others. ``identifiable``: parameters whose value the data determine (orthogonal to the null
    space). ``rank`` of the regressor and its ``singular_values`` (column-scaled).
    ``null_space`` ``(p, k)``: unidentifiable directions in parameter units, reduced row echelon
    form; ``unidentifiable`` names them, e.g. ``"crank.m"`` or ``"coupler.m + 2 rocker.mx"``.
    ``noise_std``: residual standard deviation; ``dof``: samples minus rank."""

    labels: tuple[str, ...]
    estimate: np.ndarray
    std_error: np.ndarray
    interval: np.ndarray
    identifiable: np.ndarray
    rank: int
    singular_values: np.ndarray
    null_space: np.ndarray
    unidentifiable: tuple[str, ...]
    noise_std: float
    dof: int
    confidence: float

    def summary(self, noise_unit: str = "") -> str:
        """Rank, noise (in ``noise_unit``, the data's), estimates with units, what is unknown."""
        noise = f"{self.noise_std:.3g} {noise_unit}".rstrip()
        lines = [f"rank {self.rank} of {len(self.labels)}, noise std {noise}"]
        for k, label in enumerate(self.labels):
            if self.identifiable[k]:
                value = f"{self.estimate[k]:.6g} +- {self.std_error[k]:.2g}"
                lines.append(f"  {label:>16} = {value} {unit(label)}")
        lines += [f"  not identifiable: {name}" for name in self.unidentifiable]
        return "\n".join(lines)


def _echelon(basis, tol=1e-10):
    """Reduced row echelon form of the rows of ``basis`` (k, p): sparse names for a null space."""
    a = np.array(basis, dtype=float)
    row = 0
    for col in range(a.shape[1]):
        if row == a.shape[0]:
            break
        pivot = row + int(np.argmax(np.abs(a[row:, col])))
        if abs(a[pivot, col]) < tol:
            continue
        a[[row, pivot]] = a[[pivot, row]]
        a[row] /= a[row, col]
        others = np.arange(a.shape[0]) != row
        a[others] -= np.outer(a[others, col], a[row])
        row += 1
    a[np.abs(a) < tol] = 0.0
    return a[:row]


def _name(direction, labels):
    terms = []
    for value, label in zip(direction, labels):
        if value == 0.0:
            continue
        sign = "-" if value < 0 else "+"
        size = "" if abs(abs(value) - 1.0) < 1e-9 else f"{abs(value):.6g} "
        terms.append(f"{sign} {size}{label}")
    text = " ".join(terms)
    return text.removeprefix("+ ")


def identify(
    mech: Mechanism,
    q,
    qd,
    qdd,
    actuator_forces,
    bodies=None,
    method: str = "subsystem",
    confidence: float = 0.95,
    rtol: float = 1e-9,
) -> Identification:
    """Least-squares inertial parameters from measured ``actuator_forces`` ``(T, a)`` at the
    states ``q, qd, qdd`` ``(T, n)``: the regressor (`regressor`) stacked over the samples, its
    columns scaled to unit norm, singular values below ``rtol`` times the largest treated as zero
    (the rank). ``mech`` gives the prior values kept along unidentifiable directions. Standard
    errors from the residual variance ``|r|^2 / (T a - rank)`` and Student's t intervals."""
    q, qd, qdd = _states(mech, "identify", q=q, qd=qd, qdd=qdd)
    forces = jnp.asarray(actuator_forces, q.dtype)
    expected = (q.shape[0], len(mech.actuated))
    if forces.shape != expected:
        raise ValueError(
            f"identify: actuator_forces must have shape {expected} (one row per sample, one "
            f"column per actuator {list(mech.actuator_names)}), got {forces.shape}"
        )
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"identify: confidence must be in (0, 1), got {confidence}")
    labels = parameter_labels(mech, bodies)
    y, offset = (np.asarray(x) for x in regressor(mech, q, qd, qdd, bodies, method))
    y = y.reshape(-1, len(labels))
    prior = np.asarray(inertial_parameters(mech, bodies))
    rhs = np.asarray(forces).reshape(-1) - offset.reshape(-1) - y @ prior
    return _least_squares(y, rhs, prior, labels, confidence, rtol)


def _least_squares(y, rhs, prior, labels, confidence, rtol) -> Identification:
    """``prior + argmin |y x - rhs|`` by the SVD of the column-scaled ``y``, with the rank, named
    null space, residual variance and t intervals of `Identification`."""
    scale = np.linalg.norm(y, axis=0)
    negligible = scale <= 1e-12 * max(float(np.max(scale, initial=0.0)), 1e-300)
    scale[negligible] = max(float(np.max(scale, initial=0.0)), 1.0)  # rounding: keep it tiny
    u, s, vt = np.linalg.svd(y / scale, full_matrices=True)
    rank = int(np.sum(s > rtol * s[0])) if s.size and s[0] > 0 else 0
    v_r, s_r = vt[:rank].T, s[:rank]
    step = v_r @ ((u[:, :rank].T @ rhs) / s_r)
    estimate = prior + step / scale
    residual = rhs - y @ (step / scale)
    dof = y.shape[0] - rank
    noise = float(np.sqrt(residual @ residual / dof)) if dof > 0 else float("nan")
    covariance = (v_r / s_r) @ (v_r / s_r).T * noise**2 / np.outer(scale, scale)
    null = vt[rank:]  # scaled units; parameter units: divide by the column scale
    identifiable = np.linalg.norm(null, axis=0) < 1e-6
    std_error = np.where(identifiable, np.sqrt(np.abs(np.diag(covariance))), np.inf)
    import scipy.stats  # here: at import it took 0.36 of `import loopdyn`'s 1.55 s

    t = scipy.stats.t.ppf(0.5 + confidence / 2.0, max(dof, 1))
    interval = np.stack([estimate - t * std_error, estimate + t * std_error], axis=1)
    directions = _echelon(null / scale) if null.size else np.zeros((0, len(labels)))
    return Identification(
        labels=labels,
        estimate=estimate,
        std_error=std_error,
        interval=interval,
        identifiable=identifiable,
        rank=rank,
        singular_values=s,
        null_space=directions.T,
        unidentifiable=tuple(_name(d, labels) for d in directions),
        noise_std=noise,
        dof=dof,
        confidence=confidence,
    )


class TrajectoryFit(NamedTuple):
    """Outcome of `fit_trajectory`. ``mech``: the fitted mechanism. ``statistics``: an
    `Identification` in the unconstrained parameters (labels ``sel.labels``, e.g.
    ``crank.log_mass``) from the Jacobian at the optimum: estimate, standard errors, t intervals,
    rank and unidentifiable directions; ``noise_std`` is the residual standard deviation in the
    weighted units. ``values`` and ``interval``: the same in physical units (``log_`` entries
    exponentiated, labels without ``log_``: ``crank.mass``, positive intervals), labels
    ``value_labels``. ``cost``: ``|r|^2 / 2`` after every iteration (the start first);
    ``converged``: the step fell below ``xtol``."""

    mech: Mechanism
    statistics: Identification
    value_labels: tuple[str, ...]
    values: np.ndarray
    interval: np.ndarray
    cost: np.ndarray
    converged: bool


@compilation.jit
def _residual_and_jacobian(theta, mech, sel, q0, qd0, t1, ts, q_measured, weight, options):
    """Weighted residuals ``(q_sim - q_measured) / weight`` over the samples (flattened; on the
    configuration manifold, `configuration.difference`, where there are quaternions) and their
    Jacobian with respect to ``theta`` (forward mode through the solve)."""

    def residual(theta):
        fitted = parameters.from_vector(theta, mech, sel)
        sim = simulate(fitted, q0, qd0, t1, saveat=ts, adjoint=diffrax.ForwardMode(), **options)
        r = (configuration.difference(mech, q_measured, sim.q) / weight).reshape(-1)
        return r, r

    jac, r = jax.jacfwd(residual, has_aux=True)(theta)
    return r, jac


def fit_trajectory(
    mech: Mechanism,
    sel: parameters.Free,
    ts,
    q_measured,
    q0,
    qd0,
    *,
    weight=1.0,
    max_steps: int = 50,
    xtol: float = 1e-10,
    confidence: float = 0.95,
    rtol: float = 1e-9,
    progress=None,
    **simulate_kwargs,
) -> TrajectoryFit:
    """Fit the free parameters ``sel`` of ``mech`` (the starting guess) to coordinates
    ``q_measured`` ``(T, n)`` measured at ``ts`` ``(T,)`` (``0 <= ts``, the last the horizon) of a
    motion from the known state ``(q0, qd0)``: Levenberg-Marquardt on the residuals of
    `loopdyn.simulate` (keyword arguments passed on, e.g. ``tau``, ``rtol``), divided by
    ``weight`` (scalar or ``(n,)``, e.g. each coordinate's noise level).

    Each iteration solves ``(J^T J + mu D^2) dx = -J^T r`` (``D^2`` the diagonal of ``J^T J``),
    accepts a step that lowers the cost and then lowers ``mu``, else raises ``mu``; it stops when
    ``|dx| <= xtol (|theta| + xtol)`` or after ``max_steps``. ``progress(iteration, cost, mu)``
    is called after each iteration. Statistics at the optimum: `TrajectoryFit`; one compiled
    program for the residuals and their Jacobian."""
    ts = jnp.asarray(ts, mech.q0.dtype)
    q_measured = jnp.asarray(q_measured, mech.q0.dtype)
    if ts.ndim != 1 or ts.shape[0] < 2:
        raise ValueError(f"fit_trajectory: ts must be a 1-D grid of >= 2 times, got {ts.shape}")
    if q_measured.shape != (ts.shape[0], mech.nq):
        raise ValueError(
            f"fit_trajectory: q_measured must have shape ({ts.shape[0]}, {mech.nq}) "
            f"(one row per time in ts), got {q_measured.shape}"
        )
    weight = jnp.broadcast_to(jnp.asarray(weight, mech.q0.dtype), (mech.num_bodies,))
    if not bool(jnp.all(weight > 0)):
        raise ValueError(f"fit_trajectory: weight must be positive, got {weight}")
    if sel.size == 0:
        raise ValueError("fit_trajectory: sel frees no parameter")
    options = dict(sorted(simulate_kwargs.items()))
    theta = np.asarray(parameters.to_vector(mech, sel))

    def evaluate(theta):
        r, jac = _residual_and_jacobian(
            jnp.asarray(theta), mech, sel, q0, qd0, float(ts[-1]), ts, q_measured, weight, options
        )
        r, jac = np.asarray(r), np.asarray(jac)
        return (0.5 * float(r @ r), r, jac) if np.all(np.isfinite(r)) else (np.inf, r, jac)

    cost, r, jac = evaluate(theta)
    if not np.isfinite(cost):
        raise ValueError("fit_trajectory: the simulation fails at the starting parameters")
    history, mu, converged = [cost], 1e-3, False
    for iteration in range(max_steps):
        hessian, gradient = jac.T @ jac, jac.T @ r
        diagonal = np.maximum(np.diag(hessian), 1e-300)
        while True:
            step = np.linalg.solve(hessian + mu * np.diag(diagonal), -gradient)
            trial = evaluate(theta + step)
            if trial[0] < cost or np.linalg.norm(step) <= xtol * (np.linalg.norm(theta) + xtol):
                break
            mu *= 10.0
            if mu > 1e12:
                break
        if trial[0] <= cost:
            theta, (cost, r, jac), mu = theta + step, trial, max(mu / 10.0, 1e-12)
        history.append(cost)
        if progress is not None:
            progress(iteration + 1, cost, mu)
        if np.linalg.norm(step) <= xtol * (np.linalg.norm(theta) + xtol) or mu > 1e12:
            converged = mu <= 1e12
            break
    statistics = _least_squares(jac, -r, theta, sel.labels, confidence, rtol)
    statistics = statistics._replace(
        estimate=theta, interval=statistics.interval - (statistics.estimate - theta)[:, None]
    )
    logs = np.array(["log_" in label for label in sel.labels])
    values = np.where(logs, np.exp(theta), theta)
    interval = np.where(logs[:, None], np.exp(statistics.interval), statistics.interval)
    return TrajectoryFit(
        mech=parameters.from_vector(jnp.asarray(theta), mech, sel),
        statistics=statistics,
        value_labels=tuple(label.replace("log_", "") for label in sel.labels),
        values=values,
        interval=interval,
        cost=np.asarray(history),
        converged=converged,
    )
