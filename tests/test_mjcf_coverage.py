"""MuJoCo's own published test and example models (tests/data/published/mujoco/): each loads, or
is refused, exactly as benchmarks/results/mjcf_coverage.json recorded (rerun
benchmarks/mjcf_coverage.py when loopdyn's coverage changes); one refusal lists every unsupported
feature at once; a representative subset of the files that load agrees with the KKT solve of
MuJoCo's terms at one assembled state (all of them: the benchmark, about 5 s of compilation
each); and the problems the benchmark found, marked xfail until fixed."""

import json
import pathlib

import mujoco
import numpy as np
import pytest
from support.mujoco_kkt import compare, evaluate, kkt_reference, load, mujoco_model, reference_model

import loopdyn
from loopdyn import configuration, kinematics

ROOT = pathlib.Path(__file__).resolve().parents[1]
PUBLISHED = ROOT / "tests" / "data" / "published"
MUJOCO = PUBLISHED / "mujoco"
RECORDED = json.loads((ROOT / "benchmarks" / "results" / "mjcf_coverage.json").read_text())
RECORDS = {record["file"]: record for record in RECORDED["files"]}
FILES = sorted(MUJOCO.rglob("*.xml"))
ENGINE = "mujoco/test/engine/testdata/"
# One state each (the benchmark's first): connects and welds on bodies and sites, a planar
# model, a joint equality with actuators, a weld's torquescale, a warn load.
SUBSET = (
    "connect.xml",
    "core_constraint/jdotv_connect_2d.xml",
    "core_constraint/jdotv_weld_3d.xml",
    "actuation/tendon_dampratio.xml",
    "sleep/equality.xml",
    "weld.xml",
    "core_smooth/rne_post/connect/multiple_constraints.xml",
)


def _key(path):
    return str(path.relative_to(PUBLISHED))


def _listed(message):
    """The features a refusal lists (its ``  - `` lines), or its first line when it lists none."""
    items = {line.strip() for line in message.splitlines() if line.startswith("  - ")}
    return items or {message.splitlines()[0]}


def test_every_vendored_file_is_recorded():
    recorded = {key for key in RECORDS if key.startswith("mujoco/")}
    assert recorded == {_key(path) for path in FILES}
    assert len(FILES) == 33


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(MUJOCO)))
def test_outcome_is_the_recorded_one(path):
    """Loads unchanged, loads with ``unsupported="warn"`` leaving out the same features, or is
    refused with the same features named, as recorded."""
    record = RECORDS[_key(path)]
    mech, error, _ = load(path)
    if record["outcome"] == "loads unchanged":
        assert error is None
        assert (mech.nq, mech.nv, len(mech.topology.loops)) == (
            record["nq"],
            record["nv"],
            record["loops"],
        )
        return
    assert mech is None and _listed(error) == _listed(record["error"])
    mech, error, caught = load(path, unsupported="warn")
    if record["outcome"] == "refused":
        assert mech is None and _listed(error) == _listed(record["warn_error"])
    else:
        assert record["outcome"] == 'loads with unsupported="warn"' and error is None
        left_out = [text for text in caught if text.startswith("loading without")]
        assert len(left_out) == 1 and _listed(left_out[0]) == _listed(record["left_out"])
        assert (mech.nq, mech.nv) == (record["nq"], record["nv"])


def test_one_refusal_lists_every_unsupported_feature():
    """MuJoCo's solver test model has eight unsupported features of four kinds; one error names
    them all, each element by name, and ``unsupported="warn"`` names the same ones."""
    path = PUBLISHED / ENGINE / "solver" / "model.xml"
    mech, error, _ = load(path)
    assert mech is None
    assert error.startswith("the MJCF model uses 8 feature(s) loopdyn cannot represent")
    for part in (
        "density/viscosity/wind",
        "tendon 'spatial' is a spatial tendon",
        "tendon 'knee' is a spatial tendon",
        "actuator 'actuator1' acts on a spatial tendon",
        "actuator 'actuator6' has activation dynamics",
        "actuator 'actuator7' does not act on a joint",
        "actuator 'actuator8' has activation dynamics",
        "actuator 'actuator9' has activation dynamics",
    ):
        assert part in error
    _, _, caught = load(path, unsupported="warn")
    assert [_listed(t) for t in caught if t.startswith("loading without")] == [_listed(error)]
    flag = load(MUJOCO / "model" / "flex" / "flag.xml", unsupported="warn")[1]
    assert "flex 'flag': deformable bodies are not supported" in flag


@pytest.mark.parametrize("name", SUBSET)
def test_dynamics_match_a_kkt_solve_from_mujoco(name):
    """At the benchmark's first state, closed by `kinematics.assemble`, MuJoCo agrees the loops
    are closed and the accelerations agree with its KKT solve within 10x the recorded figure."""
    path = PUBLISHED / ENGINE / name
    record = RECORDS[_key(path)]
    warned = record["outcome"] != "loads unchanged"
    mech = load(path, **({"unsupported": "warn"} if warned else {}))[0]
    ((difference, residual, _, _),) = compare(path, mech, warned, states=1)
    assert residual < 1e-8
    assert difference <= max(10 * record["kkt_states"][0]["difference"], 1e-15)


@pytest.mark.parametrize("name", ["equality_site.xml", "equality_site_body_compare.xml"])
def test_site_welds_close_where_mujoco_does(name):
    """The files draw their site welds a quarter turn open. The weld's angle rows (dot products
    of the frames' axes) vanish also at a half turn or a cyclic swap of the axes, and Newton
    reached such a root from 2 of 3 random starts; its steps now measure the turn by the Gibbs
    vector (`kinematics._closure`), and from each start the welds close where MuJoCo's weld
    residual vanishes too."""
    path = PUBLISHED / ENGINE / name
    mech = load(path, unsupported="warn")[0]
    model, data = mujoco_model(path.read_text())
    rng = np.random.default_rng(0)
    equality = None
    for _ in range(3):
        q = configuration.integrate(mech, mech.q0, 0.2 * rng.standard_normal(mech.nv))
        q = np.asarray(kinematics.assemble(mech, q))
        assert np.all(np.asarray(kinematics.locked_turns(mech, q)) < 1e-7)
        evaluate(model, data, q, np.zeros(model.nv))
        equality = data.efc_type == mujoco.mjtConstraint.mjCNSTR_EQUALITY
        assert np.abs(data.efc_pos[equality]).max() < 1e-8
    rows = {int(mujoco.mjtEq.mjEQ_CONNECT): 3, int(mujoco.mjtEq.mjEQ_WELD): 6}
    active = zip(model.eq_type, model.eq_active0, strict=True)
    assert equality.sum() == sum(rows[int(kind)] for kind, on in active if on)  # all were compared


def test_redundant_rows_across_loops():
    """Two connects on one free body (island_efc.xml): six point rows of rank 5 across two
    loops. The later connect keeps its two rows across the line joining the anchors (the free
    body's x axis, its frame b: `loopdyn.redundancy`); at an assembled state every method's
    accelerations equal the least-squares KKT solve of MuJoCo's terms with its full,
    rank-deficient rows (the motion is unique), and each other."""
    path = PUBLISHED / ENGINE / "island" / "island_efc.xml"
    mech = load(path, unsupported="warn")[0]
    assert mech.reduced_points == ((1, ((0.0, 1.0, 0.0), (0.0, 0.0, 1.0))),)
    assert mech.reduced_on_b == (1,) and mech.topology.num_rows == 6
    model, data, _ = reference_model(path, mech, True)
    rng = np.random.default_rng(0)
    q = configuration.integrate(mech, mech.q0, 0.2 * rng.standard_normal(mech.nv))
    q = np.asarray(kinematics.assemble(mech, q))
    v = np.asarray(kinematics.project_velocity(mech, q, rng.standard_normal(mech.nv)))
    tau = rng.standard_normal(mech.nv)
    expected = kkt_reference(model, data, q, v, tau)
    equality = data.efc_type == mujoco.mjtConstraint.mjCNSTR_EQUALITY
    rows = data.efc_J.reshape(data.nefc, model.nv)[equality]
    assert rows.shape[0] == 7 and np.linalg.matrix_rank(rows) == 6  # MuJoCo's rows: redundant
    scale = np.abs(expected).max()
    qdd, _ = loopdyn.forward_dynamics(mech, q, v, tau, method="system")
    np.testing.assert_allclose(qdd, expected, rtol=0, atol=2e-13 * scale)  # measured 2.0e-14
    for method in loopdyn.forward.GENERAL_METHODS:
        other, _ = loopdyn.forward_dynamics(mech, q, v, tau, method=method)
        np.testing.assert_allclose(other, qdd, rtol=0, atol=3e-13 * scale)  # sslm: 2.6e-14


def test_an_equality_without_freedoms_loads():
    """A weld between two bodies fixed to the world constrains nothing: MuJoCo keeps it as a
    constraint without rows, loopdyn leaves it out with a warning naming it."""
    path = PUBLISHED / ENGINE / "core_constraint" / "dofless_weld.xml"
    mech, error, caught = load(path)
    assert error is None and (mech.nq, mech.nv) == (14, 12)
    assert any("equality 'equality1'" in text and "left out" in text for text in caught)
