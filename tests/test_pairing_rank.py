"""Comparator pairing: ranking with reasons, locked-tag warnings first, suspect and fixed runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from triage_stores import RunSpec, incident_store, write_run
from workbench.errors import WorkbenchError
from workbench.store import db
from workbench.triage import pairing


@pytest.fixture(scope="module")
def con(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    c = db.connect(incident_store(tmp_path_factory.mktemp("store")))
    yield c
    c.close()


def test_ranking_prefers_equal_tags_then_time(con) -> None:  # type: ignore[no-untyped-def]
    ranked = pairing.rank_comparators(con, "failing")
    assert [c.run_id for c in ranked] == [
        "comparator",  # eligible, 1 h apart
        "old-comparator",  # eligible, 30 days apart
        "tiny",  # too few requests
        "hot-box",  # locked tag thermal_state differs
        "other-model",  # different model
    ]
    assert [c.rank for c in ranked] == [1, 2, 3, 4, 5]
    assert ranked[0].eligible and ranked[1].eligible
    assert any("days apart" in r for r in ranked[1].reasons)
    assert any("12 requests" in r for r in ranked[2].reasons)
    assert ranked[3].mismatches[0].key == "thermal_state"
    assert any("different model" in r for r in ranked[4].reasons)


def test_suspect_tag_may_differ(tmp_path: Path) -> None:
    write_run(tmp_path, RunSpec("fail", seed=1, meta={"compiler_version": "2.6.0"}))
    write_run(tmp_path, RunSpec("base", seed=2, start_offset_s=7200))
    write_run(
        tmp_path, RunSpec("same", seed=3, start_offset_s=-36000, meta={"compiler_version": "2.6.0"})
    )
    c = db.connect(tmp_path)
    # without a suspect, the run that differs only in the compiler isolates that change
    plain = pairing.rank_comparators(c, "fail")
    assert [r.run_id for r in plain] == ["base", "same"]
    assert plain[0].eligible and any("isolates that change" in r for r in plain[0].reasons)
    assert [m.key for m in plain[0].mismatches] == ["compiler_version"]
    # the failing configuration from before the failure: a baseline, after the isolating run
    assert plain[1].eligible and any(
        "a baseline that isolates no change" in r for r in plain[1].reasons
    )
    suspected = pairing.rank_comparators(c, "fail", suspect="compiler_version")
    assert suspected[0].run_id == "base" and suspected[0].eligible
    assert any("isolates the suspect" in r for r in suspected[0].reasons)
    # the run that repeats the failing compiler isolates nothing: ranked after the comparison
    assert suspected[1].run_id == "same" and suspected[1].eligible
    assert any(
        "same compiler_version as the failing run, from before" in r for r in suspected[1].reasons
    )


def test_a_reproduction_is_not_an_eligible_comparator(tmp_path: Path) -> None:
    """The failing configuration run again after the failure reproduces it: listed last, not
    eligible, and saying why (the Pair screen and `triage --candidates` show this)."""
    write_run(tmp_path, RunSpec("fail", seed=1, meta={"compiler_version": "2.6.0"}))
    write_run(tmp_path, RunSpec("base", seed=2, start_offset_s=-7200))
    write_run(
        tmp_path, RunSpec("rerun", seed=3, start_offset_s=1800, meta={"compiler_version": "2.6.0"})
    )
    c = db.connect(tmp_path)
    for suspect in (None, "compiler_version"):
        ranked = pairing.rank_comparators(c, "fail", suspect=suspect)
        assert [(r.run_id, r.eligible) for r in ranked] == [("base", True), ("rerun", False)]
        assert any("run after it: a reproduction" in r for r in ranked[1].reasons), ranked[1]
    pinned = pairing.rank_comparators(c, "fail", fixed="rerun")
    assert [(r.run_id, r.eligible) for r in pinned] == [("base", True), ("rerun", False)]
    assert any("the pinned fixed-metadata run" in r for r in pinned[1].reasons)


def test_sample_store_pairing_with_the_compiler_under_suspicion() -> None:
    sample = Path(__file__).resolve().parents[1] / "sample_traces"
    c = db.connect(sample)
    ranked = pairing.rank_comparators(c, "failing", suspect="compiler_version")
    assert ranked[0].run_id == "comparator"
    assert ranked[-1].run_id == "fixed-metadata"
    synthetic = next(r for r in ranked if r.run_id == "candidate-synthetic")
    assert any("traffic production-mirror -> synthetic-load" in r for r in synthetic.reasons)
    # the headline command names no suspect: the compiler-only difference still wins, and the
    # baseline from before the failing run ranks before the fix candidate from after it
    inferred = pairing.rank_comparators(c, "failing")
    # The LLM incident's runs (another model and workload) are not eligible.
    llm = [r for r in inferred if r.run_id.startswith("llm-")]
    assert len(llm) == 2 and not any(r.eligible for r in llm)
    assert [r.run_id for r in inferred if r not in llm] == [
        "comparator",
        "candidate-rollback",
        "candidate-synthetic",  # also after, and its traffic tag differs
        "fixed-metadata",  # the failing configuration again: a reproduction
    ]
    assert [r.eligible for r in inferred if r not in llm] == [True, True, True, False]
    assert any("before the failing run" in r for r in inferred[0].reasons)
    assert any("after the failing run" in r for r in inferred[1].reasons)
    plain = pairing.pair_warnings(c, "failing", "comparator")
    assert plain[0] == "locked tag compiler_version differs: failing 2.5.0, comparator 2.4.0"
    assert pairing.pair_warnings(c, "failing", "comparator", suspect="compiler_version") == []


def test_hardware_mismatch_is_the_first_warning(tmp_path: Path) -> None:
    c = db.connect(incident_store(tmp_path, hardware_mismatch=True))
    warnings = pairing.pair_warnings(c, "failing", "comparator")
    assert warnings[0].startswith("locked tag hardware differs")
    assert "H200-SXM" in warnings[0] and "H100-SXM" in warnings[0]
    few = pairing.pair_warnings(c, "failing", "tiny")
    assert any("only 12 requests" in w for w in few)
    other = pairing.pair_warnings(c, "failing", "other-model")
    assert "comparator other-model is a different model (resnet)" in other


def test_fixed_metadata_run_is_the_reference(con) -> None:  # type: ignore[no-untyped-def]
    warnings = pairing.pair_warnings(con, "failing", "comparator", fixed="hot-box")
    assert any("fixed-metadata run hot-box" in w and "thermal_state" in w for w in warnings)
    ranked = pairing.rank_comparators(con, "failing", fixed="hot-box")
    assert ranked[0].run_id == "hot-box" or not ranked[0].mismatches


def test_unknown_runs_are_one_line_errors(con) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(WorkbenchError, match="not in the store"):
        pairing.rank_comparators(con, "nope")
    with pytest.raises(WorkbenchError, match="comparator run is not in the store"):
        pairing.pair_warnings(con, "failing", "nope")


def test_an_unknown_tag_reads_unknown_not_none(tmp_path: Path) -> None:
    """A tag the failing run does not record is "unknown" in the reasons, never "None"."""
    write_run(tmp_path, RunSpec("fail", seed=1, meta={"compiler": None}))
    write_run(tmp_path, RunSpec("base", seed=2, start_offset_s=7200))
    reasons = [r for c in pairing.rank_comparators(db.connect(tmp_path), "fail") for r in c.reasons]
    assert any("compiler unknown -> " in r for r in reasons), reasons
    assert not any("None" in r for r in reasons), reasons
