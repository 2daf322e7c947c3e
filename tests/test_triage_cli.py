"""`workbench triage`: the known incidents are named, warnings come first, JSON is complete."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from accel.stages import STAGES
from triage_stores import incident_store
from workbench.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
TORCH = ROOT / "tests" / "fixtures" / "torch"
SAMPLE = ROOT / "sample_traces"
REQUIRED = {
    "failing",
    "comparator",
    "warnings",
    "stages",
    "origin_stage",
    "manifest_stage",
    "mechanism",
    "explained_share",
    "confidence",
    "claims",
    "primary_metric",
    "retuning",
}


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict:  # type: ignore[type-arg]
    assert main(argv) == 0
    doc: dict = json.loads(capsys.readouterr().out)  # type: ignore[type-arg]
    return doc


@pytest.fixture(scope="module")
def torch_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from workbench.store.ingest import ingest

    store = tmp_path_factory.mktemp("torch")
    for stem, rid in (
        ("serving_static_failing", "static"),
        ("serving_dynamic_comparator", "dynamic"),
    ):
        ingest(
            store,
            TORCH / f"{stem}.pt.trace.json.gz",
            run_id=rid,
            compile_log=TORCH / f"{stem}.torch_trace",
        )
    return store


def test_torch_compile_recompiles_are_localized(
    torch_store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = _json(
        capsys,
        [
            "triage",
            "--store",
            str(torch_store),
            "--failing",
            "static",
            "--comparator",
            "dynamic",
            "--json",
        ],
    )
    assert set(doc) >= REQUIRED
    assert doc["origin_stage"] == "lowering"
    assert doc["mechanism"] == "recompile"
    rc = doc["recompiles"]
    # the compile log holds 9 compilations: 0/0 at warmup#0, 0/1 and 0/2 at warmup#1-2, and six
    # while serving (the last one hits the recompile limit)
    assert rc["count"] == 6
    assert any("size mismatch at index 0" in r["reason"] for r in rc["reasons"])
    assert 0.5 < rc["share_of_p95_gap"] <= 1.2 and rc["share_of_p99_gap"] > 0.5
    assert doc["warmup"]["failing"]["warmup_compiles"] == 3
    actions = doc["retuning"]
    assert actions and actions[0]["kind"] in ("mark_dynamic", "precompile_shapes")
    assert actions[0]["predicted_p99_gain_us"] > 1e5
    claim = next(c for c in doc["claims"] if c["query"] == "compile_phases")
    assert claim["numbers"]["recompiles"] == 6 and claim["parameters"]["run_id"] == "static"
    lat = doc["stages"][0]
    assert lat["id"] == "latency" and lat["n_failing"] == 80
    # 6 of 80 requests recompile: p99 is clear of zero; p95 sits at their edge, and its
    # block-bootstrap interval (resampling the recompile burst as a run) reaches below zero.
    assert lat["diff"]["p99"]["lo"] > 0
    v = doc["verdict"]
    assert v["outcome"] == "regression" and v["reason"].startswith("p99 regressed")
    # The printed intervals are the ones the trigger decided on.
    assert v["p99_gap_us"] == doc["p99_gap_us"] == lat["diff"]["p99"]
    assert v["base_rerun"]["failing"]["reproduced"] == 1.0


def test_text_report_puts_hardware_mismatch_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = incident_store(tmp_path, hardware_mismatch=True)
    assert (
        main(
            ["triage", "--store", str(store), "--failing", "failing", "--comparator", "comparator"]
        )
        == 0
    )
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("TRIAGE")
    first_warning = next(line for line in lines if line.lstrip().startswith("!"))
    assert "locked tag hardware differs" in first_warning
    assert lines.index("WARNINGS") < lines.index("VERDICT")


def test_picks_a_comparator_when_none_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = incident_store(tmp_path)
    doc = _json(capsys, ["triage", "--store", str(store), "--failing", "failing", "--json"])
    assert doc["comparator"] == "comparator"
    assert doc["comparator_reasons"][0] == "picked as rank 1"
    assert doc["recompiles"]["count"] == 3


def test_sample_store_known_incident(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "sample"
    shutil.copytree(SAMPLE, store)
    doc = _json(
        capsys,
        [
            "triage",
            "--store",
            str(store),
            "--failing",
            "failing",
            "--comparator",
            "comparator",
            "--json",
        ],
    )
    assert doc["origin_stage"] == "lowering"
    assert doc["manifest_stage"] == "execution"
    assert doc["mechanism"] == "fusion_memory_burst"


def test_unknown_run_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = incident_store(tmp_path)
    assert main(["triage", "--store", str(store), "--failing", "nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'nope'" in err[0] and "not in the store" in err[0]


def test_an_unknown_fixed_metadata_run_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = incident_store(tmp_path)
    args = ["triage", "--store", str(store), "--failing", "failing", "--comparator", "comparator"]
    assert main([*args, "--fixed", "nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        len(err) == 1 and "'nope'" in err[0] and "fixed-metadata run is not in the store" in err[0]
    )


def test_incident_gets_the_result(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from workbench.incident.incident import create_incident, load_incident

    store = incident_store(tmp_path)
    inc = create_incident(store, "p99 regression", "sev2", "tester")
    argv = ["triage", "--store", str(store), "--failing", "failing", "--comparator", "comparator"]
    assert main([*argv, "--incident", inc.id, "--actor", "tester"]) == 0
    capsys.readouterr()
    saved = load_incident(store, inc.id)
    assert saved.localization is not None and saved.localization.origin in STAGES
    assert saved.failing == "failing" and saved.comparator == "comparator"
    assert {c.query for c in saved.claims} >= {"stage_quantiles", "compile_phases"}


def test_candidates_and_lens_commands(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["triage", "--store", str(SAMPLE)]
    assert (
        main([*base, "--failing", "failing", "--candidates", "--suspect", "compiler_version"]) == 0
    )
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:2] == ["1", "comparator"] and "isolates the suspect" in lines[0]
    ranked = _json(capsys, [*base, "--failing", "failing", "--candidates", "--json"])
    assert ranked[0]["run_id"] == "comparator" and ranked[0]["eligible"]
    assert ranked[-1]["run_id"] == "fixed-metadata"
    lens = _json(
        capsys, [*base, "--failing", "comparator", "--lens", "failing,candidate-rollback", "--json"]
    )
    assert [r["zone"] for r in lens] == ["baseline", "saturation", "tuning candidate"]
    assert main([*base, "--failing", "comparator", "--lens", "../x"]) == 2


def test_torch_text_report_reads_in_order(
    torch_store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["triage", "--store", str(torch_store), "--failing", "static", "--comparator", "dynamic"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    heads = [
        h
        for h in (
            "WARNINGS",
            "VERDICT",
            "TAIL BY STAGE",
            "WARM-UP",
            "RECOMPILES",
            "PROOF",
            "RETUNING",
        )
        if h in out
    ]
    assert heads == [
        "WARNINGS",
        "VERDICT",
        "TAIL BY STAGE",
        "WARM-UP",
        "RECOMPILES",
        "PROOF",
        "RETUNING",
    ]
    assert [out.index(h) for h in heads] == sorted(out.index(h) for h in heads)
    assert "origin lowering" in out and "mechanism recompile" in out
    assert "mark x dim 0 dynamic" in out
    assert max(len(line) for line in out.splitlines()) <= 110


@pytest.mark.parametrize("damaged", ["failing", "comparator"])
def test_a_damaged_events_file_in_either_lane_is_a_one_line_error(
    tmp_path: Path, damaged: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # The failing run loads on the calling thread, the comparator on the worker: an error in
    # either ends the triage (the worker never waits for a primary metric that cannot come).
    from workbench.store import layout

    store = incident_store(tmp_path)
    path = layout.partition_dir(store, "events", damaged) / layout.PART_FILE
    data = bytearray(path.read_bytes())
    data[len(data) // 5 : len(data) // 2] = b"\xff" * (len(data) // 2 - len(data) // 5)
    path.write_bytes(data)  # the footer is whole: the damage shows when the pages are read
    argv = ["triage", "--store", str(store), "--failing", "failing", "--comparator", "comparator"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"run_id={damaged}" in err[0] and "part-0.parquet" in err[0]
    assert path.read_bytes() == data


def test_a_truncated_store_file_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from workbench.store import layout

    store = incident_store(tmp_path)
    path = layout.partition_dir(store, "requests", "tiny") / layout.PART_FILE
    path.write_bytes(path.read_bytes()[:100])
    assert main(["runs", "--store", str(store)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "run_id=tiny" in err[0] and "cannot read the store" in err[0]


def test_the_practical_threshold_is_the_users_and_the_verdict_says_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = incident_store(tmp_path)
    base = ["triage", "--store", str(store), "--failing", "failing", "--comparator", "comparator"]
    doc = _json(capsys, [*base, "--json"])
    v = doc["verdict"]
    assert v["outcome"] == "regression" and doc["triggered"] is True
    assert v["base_rerun"]["failing"]["reproduced"] == 1.0
    assert 0.0 <= v["origin_agreement"] <= 1.0 and v["stability"] <= v["origin_agreement"]
    assert 0.0 <= doc["confidence"] <= 1.0 and "calibrated on" in v["confidence_method"]
    strict = _json(capsys, [*base, "--min-gap", "50", "--json"])["verdict"]
    assert strict["outcome"] == "no regression" and "practical threshold" in strict["reason"]
    # Every verdict says whether the queue re-run gave back each run's tail, and by how much.
    assert strict["base_rerun"]["comparator"]["rel_error_p99"] is not None
    assert main([*base, "--min-gap", "50"]) == 0
    text = capsys.readouterr().out
    assert "NO REGRESSION: " in text and "threshold" in text and "base queue re-run" in text
