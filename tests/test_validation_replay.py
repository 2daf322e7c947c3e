"""Validation from the store: guardrail defaults, production-like replay check (PSI), rollback criteria."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from accel import stats
from tests.incident_runs import (
    PRODUCTION_SHAPES,
    VALIDATION_N,
    Spec,
    incident_runs,
    triage_doc,
    write,
)
from workbench.errors import WorkbenchError
from workbench.incident import workflow
from workbench.incident.guardrails import default_guardrails, load_guardrails, rollback_criteria
from workbench.incident.incident import create_incident, load_incident
from workbench.incident.validation import (
    PSI_THRESHOLD,
    compute_validation,
    load_samples,
    replay_check,
    shape_size,
)
from workbench.store import db


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    s = incident_runs(tmp_path_factory.mktemp("validation") / "store")
    # Production shapes, but a mix production never had: the big shape dominates.
    write(s, Spec("candidate-skewed", seed=6, shape_p=(0.05, 0.05, 0.9)))
    # A fifth of the traffic on one shape production never sent.
    write(
        s,
        Spec(
            "candidate-partly-new",
            seed=7,
            shapes=(*PRODUCTION_SHAPES, "[[256,1,1]]"),
            shape_p=(0.4, 0.24, 0.16, 0.2),
        ),
    )
    write(s, Spec("candidate-noquality", n=VALIDATION_N, seed=8, quality=None))
    create_incident(s, "t", "sev2", "alice", incident_id="INC-v")
    workflow.attach_triage(s, "INC-v", triage_doc(), "alice")
    return s


def samples(store: Path, run: str):  # type: ignore[no-untyped-def]
    con = db.connect(store)
    try:
        return load_samples(con, run)
    finally:
        con.close()


def test_samples_come_from_the_store(store: Path) -> None:
    s = samples(store, "failing")
    con = db.connect(store)
    lat = con.execute(
        "SELECT latency_us FROM requests WHERE run_id='failing' ORDER BY arrival_us"
    ).fetchnumpy()
    assert s.n == 400 and np.allclose(np.sort(s.latency_us), np.sort(lat["latency_us"]))
    assert set(s.stage_us) == {"ingress", "lowering", "scheduling", "execution", "assembly"}
    assert s.has_quality() and not samples(store, "candidate-noquality").has_quality()
    with pytest.raises(WorkbenchError, match="unknown run id"):
        samples(store, "nope")


def test_production_like_candidate_passes_the_replay_check(store: Path) -> None:
    rc = replay_check(samples(store, "failing"), samples(store, "candidate-rollback"))
    assert rc.passed and rc.psi is not None and rc.psi < PSI_THRESHOLD and rc.unseen_share == 0.0
    assert (rc.n_reference, rc.n_candidate) == (400, VALIDATION_N)
    # Sizes 8x128x512, 16x.. and 32x.. elements: the reference's deciles bound the buckets.
    assert [s["shape_key"] for s in rc.top_shapes] == [
        "< 524,288 elements",
        "524,288 to < 1,048,576 elements",
        "1,048,576 to < 2,097,152 elements",
        ">= 2,097,152 elements",
    ]
    ref = [s["n_reference"] for s in rc.top_shapes]
    cand = [s["n_candidate"] for s in rc.top_shapes]
    assert (sum(ref), sum(cand)) == (400, VALIDATION_N) and ref[0] == cand[0] == 0
    assert rc.psi == pytest.approx(stats.psi(ref, cand))


def test_shape_sizes() -> None:
    assert shape_size("[2,512]") == 1024.0
    assert shape_size("[[8,128,512],[512,512]]") == 8 * 128 * 512
    assert (
        np.isnan(shape_size(None)) and np.isnan(shape_size("tall")) and np.isnan(shape_size("[]"))
    )


def test_unparsable_shape_keys_are_compared_as_categories(store: Path) -> None:
    ref = samples(store, "failing")
    named = replace(ref, shape_key=["small" if i % 3 else "large" for i in range(ref.n)])
    same = replace(named, run_id="same")
    other = replace(named, run_id="other", shape_key=["huge"] * 30 + named.shape_key[30:])
    assert replay_check(named, same).passed
    rc = replay_check(named, other)
    assert not rc.passed and rc.unseen_share == pytest.approx(30 / ref.n)
    assert "7.5% of its requests use shapes failing never saw" in rc.reason


def test_shapes_production_never_saw_fail_the_replay_check(store: Path) -> None:
    rc = replay_check(samples(store, "failing"), samples(store, "candidate-synthetic"))
    assert not rc.passed and rc.unseen_share == 1.0 and rc.psi is not None and rc.psi > 5
    assert "100.0% of its requests use sizes outside the 524,288 to 2,097,152 elements" in rc.reason


def test_a_skewed_mix_of_known_shapes_fails_on_psi(store: Path) -> None:
    rc = replay_check(samples(store, "failing"), samples(store, "candidate-skewed"))
    assert not rc.passed and rc.unseen_share == 0.0
    assert rc.psi is not None and rc.psi >= PSI_THRESHOLD and "PSI" in rc.reason


def test_a_fifth_of_unseen_shapes_fails(store: Path) -> None:
    rc = replay_check(samples(store, "failing"), samples(store, "candidate-partly-new"))
    assert not rc.passed and rc.unseen_share is not None and 0.1 < rc.unseen_share < 0.3
    assert f"{100 * rc.unseen_share:.1f}% of its requests use sizes outside" in rc.reason
    assert rc.top_shapes[0]["n_reference"] == 0 and rc.top_shapes[0]["n_candidate"] > 40


def test_no_shape_data_fails_naming_the_run(store: Path) -> None:
    ref = samples(store, "failing")
    cand = replace(samples(store, "candidate-rollback"), shape_key=[None] * 400)
    rc = replay_check(ref, cand)
    assert (
        not rc.passed
        and rc.psi is None
        and "candidate-rollback records no request shapes" in rc.reason
    )


def test_default_guardrails() -> None:
    rails = default_guardrails("lowering", with_quality=True)
    assert [g.metric for g in rails] == [
        "e2e_p95",
        "e2e_p99",
        "stage_p99",
        "throughput",
        "fallback_rate",
        "recompile_rate",
        "quality",
    ]
    assert rails[2].stage == "lowering" and rails[2].label == "lowering p99"
    assert {g.metric for g in rails if g.critical} == {"e2e_p99", "quality"}
    assert "quality" not in [g.metric for g in default_guardrails("lowering", with_quality=False)]
    assert "stage_p99" not in [g.metric for g in default_guardrails(None, with_quality=False)]


def test_rollback_criteria_are_the_tolerated_edges(store: Path) -> None:
    base = samples(store, "comparator")
    crit = {c.metric: c for c in rollback_criteria(default_guardrails("lowering", True), base)}
    p99 = float(stats.quantile(base.latency_us, 0.99))
    assert crit["e2e_p99"].op == ">" and crit["e2e_p99"].threshold == pytest.approx(1.05 * p99)
    assert crit["stage_p99:lowering"].threshold == pytest.approx(
        1.10 * float(stats.quantile(base.stage_us["lowering"], 0.99))
    )
    assert crit["throughput"].op == "<" and crit["throughput"].unit == "req/s"
    assert crit["fallback_rate"].threshold == pytest.approx(0.01)  # the absolute floor at rate 0
    assert crit["quality"].op == "<"
    assert all(c.window_requests == 1000 and c.source == "guardrail" for c in crit.values())


def test_compute_validation_uses_the_comparator_as_baseline(store: Path) -> None:
    inc = load_incident(store, "INC-v")
    validation, check, criteria = compute_validation(store, inc, "candidate-noquality", "bob")
    assert validation.baseline == "comparator" and validation.baseline_role == "comparator"
    assert validation.validated_by == "bob" and check.passed and criteria
    q = next(c for c in validation.cells if c.metric == "quality")
    assert q.classification == "Nodata" and validation.verdict == "INCONCLUSIVE"
    assert validation.reasons == ["quality p05: no quality p05 samples in the candidate"]
    with pytest.raises(WorkbenchError, match="must be a new run"):
        compute_validation(store, inc, "failing", "bob")
    with pytest.raises(WorkbenchError, match="unknown run id"):
        compute_validation(store, inc, "nope", "bob")


def test_guardrail_set_from_toml(store: Path, tmp_path: Path) -> None:
    path = tmp_path / "rails.toml"
    path.write_text(
        "[[guardrail]]\nmetric = 'e2e_p99'\ndirection = 'increase'\ntolerance = 0.02\n"
        "critical = true\n\n[[guardrail]]\nmetric = 'stage_p99'\nstage = 'execution'\n"
        "direction = 'both'\ntolerance = 0.1\n",
        encoding="utf-8",
    )
    rails = load_guardrails(path)
    assert [(g.metric, g.stage, g.direction, g.critical) for g in rails] == [
        ("e2e_p99", None, "increase", True),
        ("stage_p99", "execution", "both", False),
    ]
    inc = load_incident(store, "INC-v")
    validation, _, criteria = compute_validation(store, inc, "candidate-rollback", "bob", rails)
    assert [c.metric for c in validation.cells] == ["e2e_p99", "stage_p99:execution"]
    assert [(c.metric, c.op) for c in criteria] == [
        ("e2e_p99", ">"),
        ("stage_p99:execution", ">"),
        ("stage_p99:execution", "<"),
    ]
    path.write_text(
        "[[guardrail]]\nmetric = 'stage_p99'\ndirection = 'increase'\ntolerance = 0.1\n"
    )
    with pytest.raises(WorkbenchError, match="guardrail 1: stage_p99 needs a stage"):
        load_guardrails(path)
    path.write_text("[[guardrail]]\nmetric = 'p42'\n")
    with pytest.raises(WorkbenchError, match="metric must be one of"):
        load_guardrails(path)
    path.write_text("[[guardrail]\n")
    with pytest.raises(WorkbenchError, match="malformed guardrails TOML"):
        load_guardrails(path)
