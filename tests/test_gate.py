"""`workbench gate`: exit 0 pass / 1 regression / 3 inconclusive / 2 error on the bundled sample
store, the recorded real fault pairs and the torch A/A pair; a cross-hardware pair is
inconclusive naming its hardware row; the verdict is triage's own; JUnit XML validates against
the schema CI systems read (tests/fixtures/junit/junit.xsd) and reads back with junitparser;
errors are one line, exit 2, and leave the store as it was."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import xmlschema
from junitparser import Error, Failure, JUnitXml, Skipped

from ingest_helpers import one_line_error, run_workbench, store_hash
from test_baselines import BUCKET, s3  # noqa: F401 (the moto S3 server fixture)
from triage_stores import RunSpec, incident_store, write_run
from workbench.cli.main import bundled_sample
from workbench.store.ingest import ingest

ROOT = Path(__file__).resolve().parents[1]
XSD = xmlschema.XMLSchema(ROOT / "tests" / "fixtures" / "junit" / "junit.xsd")
REAL = ROOT / "tests" / "fixtures" / "real_pairs"
TORCH = ROOT / "tests" / "fixtures" / "torch"
ROWS = ["hardware", "driver", "compiler_runtime", "workload_shape", "steady_state"]


def _cli(args: list[str]) -> subprocess.CompletedProcess[str]:
    return run_workbench(args, env={"USER": "ci"}, timeout=600)


def _gate(store: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return _cli(["gate", "--store", str(store), *args])


def _json(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc


def _junit(xml: str) -> JUnitXml:
    """The report, checked against the schema, read back as CI systems read it."""
    XSD.validate(xml)
    return JUnitXml.fromstring(xml.encode("utf-8"))


def _cases(report: JUnitXml) -> dict[str, list[Any]]:
    (suite,) = list(report)
    assert suite.name == "workbench gate"
    return {case.name: list(case.result) for case in suite}


def _row(doc: dict[str, Any], row_id: str) -> dict[str, Any]:
    row: dict[str, Any] = next(r for r in doc["gate"]["comparability"] if r["id"] == row_id)
    return row


def _one_line_error(proc: subprocess.CompletedProcess[str]) -> str:
    return one_line_error(proc)


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> Path:
    store = tmp_path_factory.mktemp("gate") / "sample"
    shutil.copytree(bundled_sample(), store)
    got = _cli(["baseline", "tag", "main", "comparator", "--store", str(store)])
    assert got.returncode == 0, got.stderr
    return store


def test_a_regression_exits_1_with_triage_verdict_numbers_and_proof(sample: Path) -> None:
    before = store_hash(sample)
    got = _gate(sample, "--candidate", "failing", "--against", "baseline:main", "--suspect",
                "compiler_version", "--format", "json")  # fmt: skip
    assert got.returncode == 1, got.stderr
    doc = _json(got)
    g = doc["gate"]
    assert (g["outcome"], g["exit_code"]) == ("regression", 1)
    assert g["baseline"]["name"] == "main" and g["comparator"] == "comparator"
    assert [r["id"] for r in g["comparability"]] == ROWS
    assert all(r["passed"] for r in g["comparability"])
    software = _row(doc, "compiler_runtime")
    assert software["facts"]["compiler_version"] == {
        "candidate": "2.5.0", "baseline": "2.4.0", "differs": True, "change_under_test": True
    }  # fmt: skip
    # The verdict, numbers and proof are triage's: its own JSON document, byte for byte.
    triage = _cli(["triage", "--store", str(sample), "--failing", "failing", "--against",
                   "baseline:main", "--suspect", "compiler_version", "--json"])  # fmt: skip
    assert triage.returncode == 0, triage.stderr
    assert doc["triage"] == json.loads(triage.stdout)
    assert g["verdict"]["outcome"] == doc["triage"]["verdict"]["outcome"] == "regression"
    assert g["message"] == f"REGRESSION: {doc['triage']['verdict']['reason']}"
    assert doc["triage"]["mechanism"] == "fusion_memory_burst"
    assert store_hash(sample) == before


def test_the_fix_candidate_passes_and_the_synthetic_one_is_inconclusive(
    sample: Path, tmp_path: Path
) -> None:
    before = store_hash(sample)
    report = tmp_path / "rollback.xml"
    ok = _gate(sample, "--candidate", "candidate-rollback", "--against", "baseline:main",
               "--suspect", "compiler_version", "--junit", str(report))  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.startswith(
        "GATE  PASS (exit 0)  candidate candidate-rollback vs baseline main"
    )
    assert "PASS: no regression: intervals include zero" in ok.stdout
    assert "TRIAGE  candidate-rollback (failing) vs comparator" in ok.stdout  # triage's report
    cases = _cases(_junit(report.read_text(encoding="utf-8")))
    assert len(cases) == 6 and all(result == [] for result in cases.values())

    synthetic = _gate(sample, "--candidate", "candidate-synthetic", "--against", "baseline:main",
                      "--suspect", "compiler_version", "--format", "junit")  # fmt: skip
    assert synthetic.returncode == 3, synthetic.stderr
    report_3 = _junit(synthetic.stdout)
    cases = _cases(report_3)
    (shape,) = cases["comparability: workload shape"]
    assert isinstance(shape, Failure) and "79.6% of its requests use sizes outside" in shape.message
    (verdict,) = cases["verdict: candidate-synthetic vs baseline main (run comparator)"]
    assert isinstance(verdict, Skipped)
    assert verdict.message.startswith("INCONCLUSIVE: not comparable: workload shape")
    (suite,) = list(report_3)
    assert (suite.tests, suite.failures, suite.errors, suite.skipped) == (6, 1, 0, 1)
    assert store_hash(sample) == before


def test_an_undeclared_compiler_change_is_inconclusive_and_says_how_to_declare_it(
    sample: Path,
) -> None:
    got = _gate(sample, "--candidate", "failing", "--against", "baseline:main", "--format", "json")
    assert got.returncode == 3, got.stderr
    doc = _json(got)
    row = _row(doc, "compiler_runtime")
    assert not row["passed"]
    assert "compiler_version 2.4.0 -> 2.5.0" in row["detail"]
    assert "pass --suspect compiler_version" in row["detail"]
    # Whatever triage says (a regression here), a failed row is never a pass nor a regression.
    assert doc["triage"]["verdict"]["outcome"] == "regression"
    assert doc["gate"]["outcome"] == "inconclusive"
    assert doc["gate"]["message"].startswith(
        "INCONCLUSIVE: not comparable: compiler/runtime versions"
    )


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The recorded fault pairs and the torch A/A pair, ingested as tests/test_real_fault_pairs.py
    and tests/test_verdict_real_pairs.py do."""
    root = tmp_path_factory.mktemp("gate_real") / "store"
    manifest = json.loads((REAL / "manifest.json").read_text())
    for pair in manifest["pairs"]:
        for role in ("failing", "comparator"):
            stem = f"{pair['pair_id']}.{role}"
            ingest(root, REAL / f"{stem}.pt.trace.json.gz", run_id=stem,
                   compile_log=REAL / f"{stem}.torch_trace")  # fmt: skip
    for stem in ("aa_first", "aa_second"):
        ingest(root, TORCH / f"{stem}.pt.trace.json.gz", run_id=stem,
               compile_log=TORCH / f"{stem}.torch_trace")  # fmt: skip
    return root


@pytest.mark.parametrize("pair", ["bursty_arrivals", "break_print", "recompile_storm"])
def test_real_fault_pairs_exit_1(real: Path, pair: str) -> None:
    before = store_hash(real)
    pid = f"fixture-{pair}"
    got = _gate(real, "--candidate", f"{pid}.failing", "--comparator", f"{pid}.comparator",
                "--format", "json")  # fmt: skip
    assert got.returncode == 1, got.stderr + got.stdout[-2000:]
    doc = _json(got)
    assert doc["gate"]["outcome"] == "regression"
    # Traces that record no device, model or request shapes: unknown on both runs is no
    # difference (as for locked tags), and the rows say so rather than guess.
    assert (
        "not compared: neither run records request shapes" in _row(doc, "workload_shape")["detail"]
    )
    assert "hardware not recorded" in _row(doc, "hardware")["detail"]
    assert store_hash(real) == before


def test_real_aa_pair_passes_and_a_named_baseline_works_on_it(real: Path, tmp_path: Path) -> None:
    store = tmp_path / "aa"
    shutil.copytree(real, store)
    assert _cli(["baseline", "tag", "aa", "aa_first", "--store", str(store)]).returncode == 0
    got = _gate(store, "--candidate", "aa_second", "--against", "baseline:aa", "--format", "junit")
    assert got.returncode == 0, got.stderr
    cases = _cases(_junit(got.stdout))
    assert all(result == [] for result in cases.values())
    assert "verdict: aa_second vs baseline aa (run aa_first)" in cases


@pytest.fixture(scope="module")
def hardware(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """triage_stores' incident store with the failing run on H200 (the comparator on H100), a
    fault-free run on H200, one on H100 whose hardware tag is hostile text, a throttled box, and
    a cross-hardware run of 3 requests, too few for triage."""
    store = incident_store(tmp_path_factory.mktemp("gate_hw") / "store", hardware_mismatch=True)
    write_run(store, RunSpec("h200-plain", seed=7, drift_share=0.3, start_offset_s=7200,
                             meta={"hardware": "H200-SXM"}))  # fmt: skip
    hostile = "H100-SXM\x1b[31m <b>&amp;</b> ]]> \u202e"
    write_run(store, RunSpec("hostile-hw", seed=8, drift_share=0.3, start_offset_s=7300,
                             meta={"hardware": hostile}))  # fmt: skip
    write_run(store, RunSpec("h200-tiny", n_requests=3, seed=9, start_offset_s=7400,
                             meta={"hardware": "H200-SXM"}))  # fmt: skip
    return store


@pytest.mark.parametrize("candidate", ["failing", "h200-plain"])
def test_cross_hardware_is_inconclusive_naming_the_hardware_row(
    hardware: Path, candidate: str, tmp_path: Path
) -> None:
    before = store_hash(hardware)
    report = tmp_path / "gate.xml"
    got = _gate(hardware, "--candidate", candidate, "--comparator", "comparator", "--format",
                "json", "--junit", str(report))  # fmt: skip
    assert got.returncode == 3, got.stderr
    doc = _json(got)
    row = _row(doc, "hardware")
    assert not row["passed"] and "hardware H100-SXM -> H200-SXM" in row["detail"]
    assert [r["id"] for r in doc["gate"]["comparability"] if not r["passed"]] == ["hardware"]
    assert doc["gate"]["message"].startswith("INCONCLUSIVE: not comparable: hardware (")
    cases = _cases(_junit(report.read_text(encoding="utf-8")))
    (failure,) = cases["comparability: hardware"]
    assert isinstance(failure, Failure) and "H100-SXM -> H200-SXM" in failure.message
    assert isinstance(cases[f"verdict: {candidate} vs run comparator"][0], Skipped)
    text = _gate(hardware, "--candidate", candidate, "--comparator", "comparator").stdout
    assert (
        "  FAIL  hardware: differs (baseline -> candidate): hardware H100-SXM -> H200-SXM" in text
    )
    assert store_hash(hardware) == before


def test_too_few_requests_across_hardware_is_inconclusive_not_an_error(hardware: Path) -> None:
    got = _gate(hardware, "--candidate", "h200-tiny", "--comparator", "comparator", "--format",
                "junit")  # fmt: skip
    assert got.returncode == 3, got.stderr
    cases = _cases(_junit(got.stdout))
    assert isinstance(cases["comparability: hardware"][0], Failure)
    (verdict,) = cases["verdict: h200-tiny vs run comparator"]
    assert isinstance(verdict, Skipped) and "triage refused: 'h200-tiny' vs 'comparator'" in (
        verdict.message
    )


def test_a_throttled_box_fails_the_steady_state_row(hardware: Path) -> None:
    got = _gate(hardware, "--candidate", "hot-box", "--comparator", "comparator", "--format",
                "json")  # fmt: skip
    assert got.returncode == 3, got.stderr
    row = _row(_json(got), "steady_state")
    assert not row["passed"] and "thermal_state nominal -> throttled" in row["detail"]


def test_hostile_tag_text_gives_a_valid_report_and_escaped_text(
    hardware: Path, tmp_path: Path
) -> None:
    report = tmp_path / "hostile.xml"
    got = _gate(hardware, "--candidate", "hostile-hw", "--comparator", "comparator", "--junit",
                str(report))  # fmt: skip
    assert got.returncode == 3, got.stderr
    assert "\x1b" not in got.stdout and "\u202e" not in got.stdout
    assert "\\x1b[31m" in got.stdout
    xml = report.read_text(encoding="utf-8")
    assert "\x1b" not in xml and "\u202e" not in xml
    (failure,) = _cases(_junit(xml))["comparability: hardware"]
    assert "<b>&amp;</b> ]]>" in failure.message and "\\x1b[31m" in failure.message


def test_errors_exit_2_in_one_line_and_leave_the_store_as_it_was(
    sample: Path, tmp_path: Path
) -> None:
    before = store_hash(sample)
    base = ["--candidate", "failing", "--against", "baseline:main"]
    cases = [
        (
            ["--candidate", "nope", "--against", "baseline:main"],
            "candidate run is not in the store",
        ),
        (["--candidate", "failing", "--against", "baseline:nope"], "no such baseline"),
        (["--candidate", "failing", "--against", "main"], "expected baseline:NAME"),
        (["--candidate", "failing", "--comparator", "failing"], "the candidate run itself"),
        (["--candidate", "../x", "--comparator", "comparator"], "invalid run id"),
        ([*base, "--slo", "ttft=5ms"], "applies to e2e only"),
        ([*base, "--slo", "p99"], "expected ttft or itl or tpot or e2e, or e2e=LATENCY"),
        ([*base, "--slo", "e2e=0ms"], "positive, finite latency"),
        ([*base, "--slo", "e2e=1e999s"], "positive, finite latency"),
        ([*base, "--tolerance", "nan"], "--tolerance 'nan'"),
        ([*base, "--tolerance", "-0.1"], "--tolerance '-0.1'"),
        ([*base, "--suspect", "hardware"], "must be equal for a gate"),
        ([*base, "--hardware", "abacus"], "abacus"),
        ([*base, "--junit", str(sample / "gate.xml")], "is inside the store"),
        ([*base, "--junit", str(tmp_path / "no" / "gate.xml")], "does not exist"),
        (["--candidate", "failing"], "one of the arguments --against --comparator is required"),
    ]
    for args, problem in cases:
        line = _one_line_error(_gate(sample, *args))
        assert problem in line, (args, line)
    line = _one_line_error(_cli(["gate", "--store", str(tmp_path / "none"), *base]))
    assert "store directory does not exist" in line
    assert not (tmp_path / "none").exists()
    assert store_hash(sample) == before


def test_an_error_is_in_the_junit_report_and_the_json_too(sample: Path, tmp_path: Path) -> None:
    report = tmp_path / "gate.xml"
    got = _gate(sample, "--candidate", "nope", "--against", "baseline:main", "--junit",
                str(report), "--format", "json")  # fmt: skip
    line = _one_line_error(got)
    assert _json(got)["gate"] == {"outcome": "error", "exit_code": 2, "message": line[11:]}
    (suite,) = list(_junit(report.read_text(encoding="utf-8")))
    (case,) = list(suite)
    (error,) = list(case.result)
    assert isinstance(error, Error) and "candidate run is not in the store" in error.message
    # An existing report is replaced only with --force.
    again = _gate(sample, "--candidate", "nope", "--against", "baseline:main", "--junit",
                  str(report))  # fmt: skip
    assert "exists; add --force" in _one_line_error(again)


def test_the_schema_rejects_what_ci_systems_reject() -> None:
    """The validation above can fail: the schema refuses reports a CI reader would misread."""
    from workbench.triage.junit import Case, report

    good = report(
        [Case("a", "k"), Case("b", "k", "failure", "m", "regression", "text", 1.5)],
        properties={"candidate": "c"},
        system_out="out",
        seconds=2.0,
    )
    XSD.validate(good)
    bad = [
        good.replace(' tests="2"', "", 2),  # testsuite without its count
        good.replace('time="1.500"', 'time="1.5e0"'),  # an exponent
        good.replace('time="1.500"', 'time="1.5000"'),  # four decimals
        good.replace('type="regression"', ""),  # a failure without its type
        good.replace("</failure>", '</failure><skipped message="x" />'),  # two outcomes
        good.replace('errors="0" time', 'errors="0" skipped="0" time', 1),  # testsuites@skipped
        good.replace("<system-out>", "<stdout>").replace("</system-out>", "</stdout>"),
    ]
    for xml in bad:
        assert xml != good
        with pytest.raises(xmlschema.XMLSchemaValidationError):
            XSD.validate(xml)


def test_junit_escapes_what_xml_cannot_hold() -> None:
    from workbench.triage.junit import Case, report

    hostile = "a\x00b\x1b[31mc\ud800d\ufffe<&>\"']]>\nnext"
    xml = report(
        [Case(hostile, hostile, "failure", hostile, hostile, hostile)],
        properties={hostile: hostile},
        system_out=hostile,
        seconds=0.0,
    )
    xml.encode("utf-8")  # no lone surrogate left
    (suite,) = list(_junit(xml))
    (case,) = list(suite)
    (failure,) = list(case.result)
    assert case.name == failure.message == "a\\x00b\\x1b[31mc\\ud800d\\ufffe<&>\"']]>\\nnext"
    assert failure.text == "a\\x00b\\x1b[31mc\\ud800d\\ufffe<&>\"']]>\nnext"


def test_gate_on_a_bucket_store(s3: dict[str, str], tmp_path: Path) -> None:  # noqa: F811
    """The sample store in a bucket (moto on 127.0.0.1): a baseline tagged from one machine,
    the gate run from another, the same verdict as on disk."""
    url = f"s3://{BUCKET}/gate-sample"
    env = {**s3, "USER": "ci"}

    def cli(home: str, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "workbench", *args],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env={**os.environ, **env, "WORKBENCH_HOME": str(tmp_path / home)},
            timeout=600,
        )

    assert cli("a", "ingest", str(bundled_sample()), "--store", url).returncode == 0
    assert cli("a", "baseline", "tag", "main", "comparator", "--store", url).returncode == 0
    got = cli("b", "gate", "--store", url, "--candidate", "failing", "--against",
              "baseline:main", "--suspect", "compiler_version", "--format", "json")  # fmt: skip
    assert got.returncode == 1, got.stderr
    doc = _json(got)
    assert doc["gate"]["baseline"]["tagged_by"] == "ci"
    assert doc["triage"]["mechanism"] == "fusion_memory_burst"
    gone = cli("b", "gate", "--store", url, "--candidate", "failing", "--against", "baseline:x")
    assert "no such baseline" in _one_line_error(gone)


def test_slo_and_tolerance_reach_triage_threshold(sample: Path) -> None:
    base = ["--candidate", "failing", "--against", "baseline:main", "--suspect",
            "compiler_version", "--format", "json"]  # fmt: skip
    # An SLO of 1 s: a gap must reach 2% of it (20 ms), which the +1.7 ms p99 gap does not.
    slo = _gate(sample, *base, "--slo", "e2e=1s")
    assert slo.returncode == 0, slo.stderr
    doc = _json(slo)
    assert doc["gate"]["slo"] == {"metric": "e2e", "sla_us": 1e6}
    assert doc["triage"]["verdict"]["threshold_us"]["p99"] == pytest.approx(20_000.0)
    assert "SLO 1000000 us" in doc["triage"]["verdict"]["threshold_basis"]
    # A tolerance of 300% of the baseline's quantile: no gap of this pair reaches it either.
    tol = _gate(sample, *base, "--tolerance", "3")
    assert tol.returncode == 0, tol.stderr
    doc = _json(tol)
    assert doc["gate"]["tolerance"] == 3.0
    assert doc["triage"]["verdict"]["threshold_basis"].startswith("300% of the comparator")


def test_every_locked_tag_is_in_one_comparability_row() -> None:
    from workbench.triage import gate
    from workbench.triage.pairing import LOCKED_TAGS

    groups = [gate.HARDWARE_TAGS, gate.DRIVER_TAGS, gate.SOFTWARE_TAGS, gate.STEADY_TAGS]
    flat = [tag for g in groups for tag in g]
    assert sorted(flat) == sorted(LOCKED_TAGS) and len(flat) == len(set(flat))
