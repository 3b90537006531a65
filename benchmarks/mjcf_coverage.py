"""Which MuJoCo features load: every published model file vendored in tests/data/published/
(Pinocchio's closed_chain.xml, Menagerie's Cassie and 2F-85 without meshes, MuJoCo's own test and
example models with equalities) through `loopdyn.load_mjcf`.

    taskset -c 1 .venv/bin/python benchmarks/mjcf_coverage.py [--from-json]

writes benchmarks/results/mjcf_coverage.md and .json (atomically). Per file:

- the outcome: loads unchanged (``load_mjcf(path)``), loads with ``unsupported="warn"`` (and
  what that warning says the simulation leaves out), or refused (the error's first lines);
  the other warnings of the load (ignored joint limits, loops drawn open at ``qpos0``);
- the MuJoCo features present, read from the compiled ``mujoco.MjModel`` (joint kinds, equality
  kinds active or not, tendons, actuator kinds, passive joint elements, gravity compensation,
  keyframes, contacts, fluid forces, flexes, ...), nq/nv in MuJoCo and in loopdyn, loops;
- for a file that loads: at 3 random states closed by `loopdyn.kinematics.assemble`, the largest
  difference of `loopdyn.forward_dynamics` against the KKT solve of MuJoCo's own terms with its
  equality constraints made exact (tests/support/mujoco_kkt.py), relative to the largest
  acceleration, constrained or not (MuJoCo's ``qacc_smooth``). For a file loaded with
  ``unsupported="warn"``, the reference MuJoCo model has the same features switched off (fluid
  forces, tendon springs, dampers and armature, ball/free joint springs, the dropped equalities
  and actuators), so the figure checks what loopdyn does model. States where MuJoCo's own
  equality residual is not zero are counted apart (Findings).

tests/test_mjcf_coverage.py checks the outcomes recorded here against the current loopdyn.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORE = max(os.sched_getaffinity(0))
os.sched_setaffinity(0, {CORE})

import jax

jax.config.update("jax_enable_x64", True)

import mujoco
import numpy as np

from loopdyn.io.files import write_atomic

sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))
import tree_dynamics
from support.mujoco_kkt import compare, load

PUBLISHED = ROOT / "tests" / "data" / "published"
RESULTS = ROOT / "benchmarks" / "results"
STATES = 3
SEED = 0
WRONG = 1e-8  # relative difference beyond which a load counts as a wrong answer (exact KKT)
CLOSED = 1e-8  # MuJoCo's equality residual (m, rad) under which it agrees the loops are closed

_JOINTS = ("free", "ball", "slide", "hinge")  # mjtJoint
_EQUALITIES = ("connect", "weld", "joint", "tendon", "flex", "flexvert", "flexstrain", "distance")
_TRANSMISSIONS = ("joint", "jointinparent", "slidercrank", "tendon", "site", "body")  # mjtTrn
_DYNAMICS = ("none", "integrator", "filter", "filterexact", "muscle", "user")  # mjtDyn
_GAINS = ("fixed", "affine", "muscle", "user")  # mjtGain
_BIASES = ("none", "affine", "muscle", "user")  # mjtBias


def published_files():
    """The vendored files: the three hand-picked ones, then MuJoCo's, sorted by path."""
    return sorted(PUBLISHED.glob("*.xml")) + sorted((PUBLISHED / "mujoco").rglob("*.xml"))


def _fixed_tendon(model, t):
    wraps = model.wrap_type[model.tendon_adr[t] : model.tendon_adr[t] + model.tendon_num[t]]
    return bool(np.all(wraps == mujoco.mjtWrap.mjWRAP_JOINT))


def _actuator_kind(model, a):
    """A short description of actuator ``a``: transmission, and dynamics/gain/bias unless plain."""
    trn = _TRANSMISSIONS[model.actuator_trntype[a]]
    if trn == "tendon":
        trn = (
            "fixed tendon" if _fixed_tendon(model, model.actuator_trnid[a, 0]) else "spatial tendon"
        )
    gain, bias = _GAINS[model.actuator_gaintype[a]], _BIASES[model.actuator_biastype[a]]
    dyn = _DYNAMICS[model.actuator_dyntype[a]]
    if (gain, bias, dyn) == ("fixed", "none", "none"):
        law = "motor"
    elif (gain, dyn) == ("fixed", "none") and bias == "affine":
        law = "servo (fixed gain, affine bias)"
    else:
        law = f"gain {gain}, bias {bias}, dynamics {dyn}"
    return f"actuator: {law} on {trn}"


def features(model):
    """``{feature: count}`` of the MuJoCo features in the compiled ``model``."""
    out = {}

    def add(feature, count=1):
        if count:
            out[feature] = out.get(feature, 0) + int(count)

    for j in range(model.njnt):
        kind = _JOINTS[model.jnt_type[j]]
        add(f"{kind} joint")
        dofs = slice(model.jnt_dofadr[j], model.jnt_dofadr[j] + {0: 6, 1: 3}.get(kind, 1))
        for what, values in (
            ("damping", model.dof_damping[dofs]),
            ("armature", model.dof_armature[dofs]),
            ("frictionloss", model.dof_frictionloss[dofs]),
            ("stiffness", model.jnt_stiffness[j : j + 1]),
        ):
            joints = "hinge/slide" if kind in ("hinge", "slide") else "ball/free"
            add(f"joint {what} ({joints})", np.any(values != 0))
        add("joint limits (range)", model.jnt_limited[j])
        add("joint actuatorfrcrange", model.jnt_actfrclimited[j])
    add("body with several joints", np.sum(model.body_jntnum > 1))
    for e in range(model.neq):
        kind = _EQUALITIES[model.eq_type[e]]
        if kind == "tendon":
            fixed = all(
                _fixed_tendon(model, t) for t in (model.eq_obj1id[e], model.eq_obj2id[e]) if t >= 0
            )
            kind = "fixed-tendon" if fixed else "spatial-tendon"
        add(f"{kind} equality" + ("" if model.eq_active0[e] else " (inactive)"))
        if kind in ("connect", "weld") and model.eq_objtype[e] == mujoco.mjtObj.mjOBJ_SITE:
            add(f"{kind} equality on sites")
        if kind == "weld" and model.eq_data[e, 10] != 1:
            add("weld torquescale != 1")
    for t in range(model.ntendon):
        add("fixed tendon" if _fixed_tendon(model, t) else "spatial tendon")
        for what in ("stiffness", "damping", "frictionloss", "armature"):
            add(f"tendon {what}", np.any(getattr(model, f"tendon_{what}")[t] != 0))
        add("tendon limits", model.tendon_limited[t])
    for a in range(model.nu):
        add(_actuator_kind(model, a))
        add("actuator ctrlrange", model.actuator_ctrllimited[a])
        add("actuator forcerange", model.actuator_forcelimited[a])
    add("body gravcomp", np.sum(model.body_gravcomp != 0))
    add("keyframe", model.nkey)
    add("mocap body", model.nmocap)
    add("flex", model.nflex)
    add("plugin", model.nplugin)
    add("sensor", model.nsensor)
    add("explicit contact pair", model.npair)
    colliding = (model.geom_contype != 0) | (model.geom_conaffinity != 0)
    contact_on = not model.opt.disableflags & mujoco.mjtDisableBit.mjDSBL_CONTACT
    add("geom collisions (contacts)", contact_on * np.sum(colliding))
    fluid = model.opt.density > 0 or model.opt.viscosity > 0 or np.any(model.opt.wind != 0)
    add("fluid forces (density/viscosity/wind)", fluid)
    return out


def _first_lines(text, n=3):
    return "\n".join(str(text).splitlines()[:n])


def examine(path):
    """The record of one file (module docstring)."""
    record = {"file": str(path.relative_to(PUBLISHED)), "bytes": path.stat().st_size}
    model = mujoco.MjModel.from_xml_path(str(path))
    record.update(features=features(model), nq_mujoco=model.nq, nv_mujoco=model.nv)
    mech, error, caught = load(path)
    record["outcome"], record["warnings"] = "loads unchanged", caught
    if mech is None:
        record["error"] = error
        mech, warn_error, caught = load(path, unsupported="warn")
        if mech is None:
            record["outcome"], record["warn_error"] = "refused", warn_error
        else:
            record["outcome"] = 'loads with unsupported="warn"'
            left_out = [w for w in caught if w.startswith("loading without")]
            record["left_out"] = left_out[0] if left_out else ""
            record["warnings"] = [w for w in caught if not w.startswith("loading without")]
    if mech is None:
        return record
    record.update(nq=mech.nq, nv=mech.nv, loops=len(mech.topology.loops))
    record["loop_kinds"] = sorted({loop.kind for loop in mech.topology.loops})
    try:
        warned = record["outcome"] != "loads unchanged"
        pairs = compare(path, mech, warned, STATES, SEED)
        record["kkt_states"] = [
            {"difference": d, "mujoco_residual": r, "acceleration_scale": a, "mass_condition": c}
            for d, r, a, c in pairs
        ]
        closed = [d for d, r, _, _ in pairs if r < CLOSED]
        record["closed_states"] = len(closed)
        if closed:
            record["kkt_difference"] = max(closed)
    except ValueError as failure:  # assembly or a singular state: recorded, not hidden
        record["kkt_failure"] = _first_lines(failure, 2)
    return record


# What loopdyn does with each feature of `features` (its module docstring, io/mjcf.py).
SUPPORTED, REFUSED, IGNORED_WARN, IGNORED = (
    "supported",
    'refused (unsupported="warn" leaves it out)',
    "ignored, with a warning",
    "ignored (documented, no warning)",
)


_TINY = (
    "the largest difference, {difference:.1e}, is at a free body of tiny inertia (`joint15`) "
    "whose accelerations reach {scale:.1e} (m/s^2, rad/s^2); the mass matrix's condition number "
    "is up to {condition:.1e}, so the dense reference solve alone may err by about condition x "
    "machine epsilon = {bound:.0e} relative: conditioning, not a model difference."
)
NOTES = {
    "mujoco/test/engine/testdata/solver/model.xml": _TINY,
    "mujoco/test/testdata/model.xml": _TINY,
}
LEFT_OUT = "kept switched off (loopdyn.switch_equalities switches it on at run time)"
VERDICTS = {
    "joint frictionloss (hinge/slide)": REFUSED + "; frictionloss='smooth' loads an approximation",
    "joint frictionloss (ball/free)": REFUSED,
    "joint stiffness (ball/free)": REFUSED,
    "joint limits (range)": IGNORED_WARN,
    "joint actuatorfrcrange": IGNORED_WARN + " (where a loaded actuator drives the joint)",
    "spatial-tendon equality": REFUSED,
    "flex equality": REFUSED,
    "flexvert equality": REFUSED,
    "flexstrain equality": REFUSED,
    "distance equality": REFUSED,
    "spatial tendon": REFUSED,
    "tendon stiffness": REFUSED,
    "tendon damping": REFUSED,
    "tendon frictionloss": REFUSED,
    "tendon armature": REFUSED,
    "tendon limits": "ignored, no warning (not read; here only on spatial tendons, left out)",
    "weld equality": SUPPORTED + "; drawn open (short of a half turn), assembly closes it aligned",
    "weld equality on sites": SUPPORTED + "; drawn open, as a weld equality",
    "mocap body": REFUSED,
    "flex": "refused, also with warn",
    "plugin": "not checked by loopdyn",
    "sensor": IGNORED,
    "explicit contact pair": REFUSED,
    "geom collisions (contacts)": IGNORED,
    "fluid forces (density/viscosity/wind)": REFUSED,
}


def verdict(feature):
    """loopdyn's handling of a feature name of `features` (io/mjcf.py's module docstring)."""
    if feature.endswith("(inactive)"):
        return LEFT_OUT
    if feature.startswith("actuator: "):
        loaded = (" on joint", " on jointinparent", " on fixed tendon")
        plain = "dynamics" not in feature and "muscle" not in feature and "user" not in feature
        return SUPPORTED if plain and feature.endswith(loaded) else REFUSED
    return VERDICTS.get(feature, SUPPORTED)


def _short(file):
    """A file's path as the tables show it: MuJoCo's test models without their common folders."""
    for long, short in (("mujoco/test/engine/testdata/", "engine/"), ("mujoco/", "")):
        if file.startswith(long):
            return short + file[len(long) :]
    return file


def machine():
    """The date, machine and software versions, and loopdyn's git commit."""

    def git(*args):
        return subprocess.run(
            ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=False
        ).stdout.strip()

    base = tree_dynamics.machine()
    dirty = " (src modified)" if git("status", "--porcelain", "--", "src") else ""
    return {
        **{k: base[k] for k in ("date", "cpu", "cores", "ram_gib", "os", "python", "jax")},
        "pinned_to_core": CORE,
        "mujoco": mujoco.__version__,
        "loopdyn_commit": git("rev-parse", "--short", "HEAD") + dirty,
    }


def summary(records):
    """``{feature: {"verdict": ..., "files": [...]}}`` over all files."""
    table = {}
    for record in records:
        for feature in record["features"]:
            entry = table.setdefault(feature, {"verdict": verdict(feature), "files": []})
            entry["files"].append(record["file"])
    return dict(sorted(table.items()))


def _cell(text):
    return str(text).replace("|", "\\|").replace("\n", "<br>")


def _kkt_cell(r):
    if "kkt_failure" in r:
        return "fails: " + r["kkt_failure"]
    if "kkt_states" not in r:
        return "-"
    text = f"{r['kkt_difference']:.1e}" if "kkt_difference" in r else "no state"
    if r.get("kkt_difference", 0.0) > WRONG:
        text += " **WRONG**"
    n = len(r["kkt_states"])
    refused = sum(s["mujoco_residual"] == float("inf") for s in r["kkt_states"])
    if refused:
        text += f" ({refused} of {n} states refused by assemble: a weld at a wrong turn)"
    if r["closed_states"] < n - refused:
        worst = max(s["mujoco_residual"] for s in r["kkt_states"] if s["mujoco_residual"] < 1e300)
        text += (
            f" ({n - refused - r['closed_states']} of {n} states not closed for MuJoCo: "
            f"{worst:.2g})"
        )
    return text


def findings(records):
    """The problems the records show, one line each (the report's "Findings")."""
    out = []
    for r in records:
        name = f"`{r['file']}`"
        if r.get("kkt_difference", 0.0) > WRONG:
            out.append(
                f"{name}: accelerations differ from MuJoCo's KKT solve by "
                f"{r['kkt_difference']:.2g} (relative) at states both call closed."
            )
        states = r.get("kkt_states", [])
        refused = sum(s["mujoco_residual"] == float("inf") for s in states)
        if refused:
            out.append(
                f"{name}: at {refused} of {len(states)} random starts, Newton reaches a "
                "configuration where a weld's three angle rows (dot products of the frames' "
                "axes) vanish with its frames a wrong turn apart (a half turn, or axes swapped "
                "round); `kinematics.assemble` refuses it, naming the weld "
                "(`kinematics.locked_turns`). Open: a rotation residual without these roots."
            )
        if r.get("closed_states", len(states)) < len(states) - refused:
            worst = max(s["mujoco_residual"] for s in states if s["mujoco_residual"] < 1e300)
            out.append(
                f"{name}: at {len(states) - refused - r['closed_states']} of {len(states)} "
                "states that `kinematics.assemble` closed, MuJoCo's own equality residual is up "
                f"to {worst:.3g} (m or rad): loopdyn's closed configuration is another one than "
                "MuJoCo's."
            )
        if "kkt_failure" in r:
            out.append(
                f"{name}: loads, but `forward_dynamics` raises at every state tried: "
                f"{_first_lines(r['kkt_failure'], 1)}"
            )
        if "constrains nothing" in r.get("warn_error", ""):
            out.append(
                f'{name}: refused, also with `unsupported="warn"`, for an equality '
                "between two bodies fixed to the world, which MuJoCo accepts (a "
                "constraint without freedoms, no rows)."
            )
    return out


def markdown(raw):
    m, records = raw["machine"], raw["files"]
    counts = {}
    for r in records:
        counts[r["outcome"]] = counts.get(r["outcome"], 0) + 1
    lines = [
        "# Which MuJoCo features load: the published files tried",
        "",
        f"Generated by `benchmarks/mjcf_coverage.py` on {m['date']}; {m['cpu']}, {m['cores']} "
        f"cores (pinned to core {m['pinned_to_core']}); Python {m['python']}, JAX {m['jax']}, "
        f"MuJoCo {m['mujoco']}, loopdyn commit {m['loopdyn_commit']}.",
        "",
        f"{len(records)} files (tests/data/published/: Pinocchio's closed_chain.xml, Menagerie's "
        "Cassie and 2F-85 without meshes, and under `mujoco/` MuJoCo's own test and example "
        "models with an `<equality>`, at their paths in MuJoCo's repository): "
        + ", ".join(f"{n} {k}" for k, n in counts.items())
        + ".",
        "",
        f"*KKT* is the largest difference of `loopdyn.forward_dynamics` (accelerations, "
        f"MuJoCo's `qacc` layout) against the KKT solve of MuJoCo's mass matrix, bias, passive "
        f"and actuator forces with its equality rows made exact (tests/support/mujoco_kkt.py), "
        "relative to the largest acceleration, constrained or not (MuJoCo's `qacc_smooth`: a "
        f"body the loops lock has none of its own; dimensionless), over {STATES} random states "
        "closed by `kinematics.assemble` with random velocities (projected), generalized "
        'forces and `ctrl`. For a file loaded with `unsupported="warn"` the reference has the '
        "left-out features switched off too. A weld's rows enter the reference with torquescale "
        "1 where it is not 0 (the same constraint; rows scaled by 0.002, as in `weld.xml`, cost "
        "the reference's J' v by central differences about 1e-6 of accuracy). Only states "
        f"where MuJoCo's own equality residual is under {CLOSED:g} (m or rad) count; others are "
        "noted. Loops: loopdyn's loop constraints (cut joints and couplings). Paths: `engine/` "
        "is MuJoCo's `test/engine/testdata/`.",
        "",
        "| file | outcome | nq / nv (MuJoCo) | nq / nv (loopdyn) | loops | KKT | features | "
        "message (refusal, or what warn leaves out; other warnings) |",
        "|---|---|---|---|---:|---:|---|---|",
    ]
    for r in records:
        kkt = _kkt_cell(r)
        message = r.get("warn_error") or r.get("left_out") or ""
        others = [_first_lines(w, 1)[:160] for w in r["warnings"]]
        if others:
            message = (message + "\n" if message else "") + "warnings: " + "\n".join(others)
        feats = ", ".join(f"{k}" + (f" x{n}" if n > 1 else "") for k, n in r["features"].items())
        loaded = f"{r['nq']} / {r['nv']}" if "nq" in r else "-"
        lines.append(
            f"| `{_short(r['file'])}` | {r['outcome']} | {r['nq_mujoco']} / {r['nv_mujoco']} | "
            f"{loaded} | "
            f"{r.get('loops', '-')} | {_cell(kkt)} | {_cell(feats)} | {_cell(message)} |"
        )
    lines += ["", "## Findings", ""]
    lines += [f"- {line}" for line in findings(records)] or ["None."]
    notes = [
        f"- `{_short(r['file'])}`: "
        + NOTES[r["file"]].format(
            difference=r["kkt_difference"],
            scale=max(s["acceleration_scale"] for s in r["kkt_states"]),
            condition=max(s["mass_condition"] for s in r["kkt_states"]),
            bound=max(s["mass_condition"] for s in r["kkt_states"]) * np.finfo(float).eps,
        )
        for r in records
        if r["file"] in NOTES and "kkt_difference" in r
    ]
    lines += ["", "## Notes", "", *notes] if notes else []
    lines += [
        "",
        "## Feature by feature",
        "",
        "| feature | loopdyn | files (count: names) |",
        "|---|---|---|",
    ]
    for feature, entry in raw["summary"].items():
        files = entry["files"]
        lines.append(
            f"| {_cell(feature)} | {entry['verdict']} | {len(files)}: "
            + ", ".join(f"`{_short(f)}`" for f in files)
            + " |"
        )
    return "\n".join(lines) + "\n"


def main():
    """Examine every file and write the report; ``--from-json`` rewrites the report (and the
    feature summary) from the recorded JSON without examining the files again."""
    path = RESULTS / "mjcf_coverage.json"
    if "--from-json" in sys.argv[1:]:
        raw = json.loads(path.read_text())
    else:
        records = []
        for file in published_files():
            record = examine(file)
            print(record["file"], record["outcome"], record.get("kkt_difference", ""), flush=True)
            records.append(record)
        raw = {"machine": machine(), "states": STATES, "seed": SEED, "files": records}
    raw["summary"] = summary(raw["files"])
    write_atomic(path, lambda f: f.write(json.dumps(raw, indent=1).encode()))
    write_atomic(RESULTS / "mjcf_coverage.md", lambda f: f.write(markdown(raw).encode()))


if __name__ == "__main__":
    main()
