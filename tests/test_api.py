"""The Python API (workbench.open -> Workspace -> Comparison) on the sample store: the same
numbers the CLI prints, errors as its one lines, and nothing written unless asked."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import workbench
from accel.stages import STAGES
from ingest_helpers import HANDMADE, assert_same_run, run_tables, run_workbench, store_hash
from moto_s3 import moto_s3
from workbench.api import Comparison, RequestPair, Verdict, Workspace
from workbench.cli.main import bundled_sample, main
from workbench.errors import WorkbenchError

ROOT = Path(__file__).resolve().parents[1]
PAIR = ("failing", "comparator")


def _copy(dest: Path) -> Path:
    shutil.copytree(bundled_sample(), dest, ignore=shutil.ignore_patterns("incidents"))
    return dest


def _cli(*argv: str, home: Path) -> subprocess.CompletedProcess[str]:
    """The real command in its own process."""
    return run_workbench(list(argv), home=home)


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A copy of the sample store and its hash before the API touched it."""
    store = _copy(tmp_path_factory.mktemp("api") / "store")
    return store, store_hash(store)


@pytest.fixture(scope="module")
def ws(sample: tuple[Path, dict[str, str]]) -> Workspace:
    return workbench.open(sample[0])


@pytest.fixture(scope="module")
def cmp(ws: Workspace) -> Comparison:
    return ws.compare(*PAIR)


def test_import_workbench_stays_light_and_open_is_the_facade() -> None:
    code = (
        "import sys, workbench\n"
        "heavy = [m for m in ('polars', 'duckdb', 'numpy', 'workbench.api') if m in sys.modules]\n"
        "print(heavy)\n"
        "import workbench.api\n"
        "print(workbench.open is workbench.api.open, 'open' in dir(workbench))\n"
        # The CLI and the app wrap their triage in the API: frames load only when asked for.
        "print('polars' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout.split("\n")
    assert out[0] == "[]"
    assert out[1] == "True True"
    assert out[2] == "False"
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        workbench.nope  # noqa: B018


def test_the_sample_incident_is_named(cmp: Comparison) -> None:
    v = cmp.verdict
    assert isinstance(v, Verdict)
    assert (v.outcome, v.triggered) == ("regression", True)
    assert (v.origin_stage, v.manifest_stage, v.mechanism) == (
        "lowering",
        "execution",
        "fusion_memory_burst",
    )
    assert (v.n_failing, v.n_comparator) == (240, 6000)
    assert any("compiler_version" in w for w in v.warnings)
    assert "lowering -> manifest execution" in repr(cmp)


@pytest.mark.parametrize(
    ("argv", "kwargs"),
    [([], {}), (["--min-gap", "0.5", "--slo-share", "0.1"], {"min_gap": 0.5, "slo_share": 0.1})],
    ids=["defaults", "thresholds"],
)
def test_to_json_and_text_are_what_the_cli_prints(
    sample: tuple[Path, dict[str, str]],
    ws: Workspace,
    cmp: Comparison,
    tmp_path: Path,
    argv: list[str],
    kwargs: dict[str, Any],
) -> None:
    store = str(sample[0])
    base = ["triage", "--store", store, "--failing", PAIR[0], "--comparator", PAIR[1], *argv]
    got = cmp if not kwargs else ws.compare(*PAIR, **kwargs)
    as_json = _cli(*base, "--json", home=tmp_path)
    assert as_json.returncode == 0, as_json.stderr
    assert got.to_json() == json.loads(as_json.stdout)
    as_text = _cli(*base, home=tmp_path)
    assert as_text.returncode == 0, as_text.stderr
    assert got.text() == as_text.stdout
    if kwargs:
        assert got.verdict.threshold_basis.startswith("50% of the comparator's quantile")
        assert got.to_json() != cmp.to_json()


def test_slo_is_the_trigger_policys(ws: Workspace) -> None:
    """An SLO of 1 s with a 2% share puts the practical threshold at 20 ms on both quantiles,
    past the sample's 1.7 ms p99 gap: no regression, and the verdict says why."""
    v = ws.compare(*PAIR, slo_us=1e6).verdict
    assert v.threshold_us == {"p95": pytest.approx(20_000.0), "p99": pytest.approx(20_000.0)}
    assert "SLO 1000000 us" in v.threshold_basis
    assert not v.triggered and v.outcome != "regression"
    assert v.p99_gap_us.hi is not None and v.p99_gap_us.hi < 20_000.0


def test_verdict_and_frames_hold_the_documents_numbers(cmp: Comparison) -> None:
    doc = cmp.to_json()
    v = cmp.verdict
    assert v.confidence == doc["confidence"] and v.explained_share == doc["explained_share"]
    assert (v.p99_gap_us.value, v.p99_gap_us.lo, v.p99_gap_us.hi) == tuple(
        doc["p99_gap_us"][k] for k in ("value", "lo", "hi")
    )
    assert v.reason == doc["verdict"]["reason"] and v.decided_by == doc["verdict"]["decided_by"]

    stages = cmp.stages
    assert stages.height == 3 * len(doc["stages"]) == 3 * (2 + len(STAGES))
    assert stages["quantile"].to_list()[:3] == ["p99", "p95", "p50"]  # tail first
    for row in stages.iter_rows(named=True):
        s = next(x for x in doc["stages"] if x["id"] == row["stage"])
        q = row["quantile"]
        assert (row["n_failing"], row["n_comparator"]) == (s["n_failing"], s["n_comparator"])
        for side, key in (("failing", "failing"), ("comparator", "comparator"), ("gap", "diff")):
            iv = s[key][q]
            assert (row[f"{side}_us"], row[f"{side}_lo_us"], row[f"{side}_hi_us"]) == (
                iv["value"],
                iv["lo"],
                iv["hi"],
            )
    # The verdict never contradicts the intervals beside it: the latency row is its gap.
    lat99 = stages.filter((pl.col("stage") == "latency") & (pl.col("quantile") == "p99")).row(
        0, named=True
    )
    assert (lat99["gap_us"], lat99["gap_lo_us"], lat99["gap_hi_us"]) == (
        v.p99_gap_us.value,
        v.p99_gap_us.lo,
        v.p99_gap_us.hi,
    )

    assert cmp.tail_drivers.to_dicts() == doc["tail_drivers"]
    assert cmp.tail_drivers.equals(cmp.evidence("tail_drivers"))
    proof = cmp.proof
    assert proof.height == len(doc["claims"])
    for row, claim in zip(proof.iter_rows(named=True), doc["claims"], strict=True):
        assert (row["claim"], row["query"]) == (claim["text"], claim["query"])
        assert json.loads(row["parameters"]) == claim["parameters"]
        assert json.loads(row["numbers"]) == claim["numbers"]
        rows = doc["evidence_queries"].get(claim["query"], {}).get("rows")
        assert row["evidence_rows"] == rows
    assert proof.filter(pl.col("query") == "stage_quantiles")["evidence_rows"].to_list() == [
        cmp.evidence("stage_quantiles").height
    ]


def test_evidence_of_an_unknown_query_names_the_ones_there(cmp: Comparison) -> None:
    with pytest.raises(WorkbenchError) as err:
        cmp.evidence("nope")
    assert err.value.one_line().startswith("'nope': not an evidence query of this triage")
    assert "tail_drivers" in err.value.one_line()


def test_runs_is_the_runs_list(
    ws: Workspace, sample: tuple[Path, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["runs", "--store", str(sample[0]), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    runs = ws.runs
    assert runs.shape == (7, 24)
    assert runs.columns[:6] == ["run_id", "label", "n_requests", "p99_us", "p95_us", "p50_us"]
    for row, want in zip(runs.iter_rows(named=True), listed, strict=True):
        tags = {t["key"]: t["value"] for t in row.pop("tags")}
        assert tags == want.pop("tags")
        assert row.pop("imported_at").isoformat() == want.pop("imported_at")
        assert row == want


def test_an_empty_store_has_the_runs_columns(tmp_path: Path) -> None:
    runs = workbench.open(tmp_path).runs
    assert runs.height == 0
    assert runs.columns[:4] == ["run_id", "label", "n_requests", "p99_us"]
    assert runs.schema["tags"] == pl.List(pl.Struct({"key": pl.String, "value": pl.String}))


def test_request_is_the_apps_drill_down(
    cmp: Comparison, sample: tuple[Path, dict[str, str]]
) -> None:
    from workbench.tui.screens.request_screen import DrillTarget, drill

    pair = cmp.request()
    assert isinstance(pair, RequestPair)
    f, c = drill(sample[0], DrillTarget(*PAIR))
    assert f is not None and c is not None and pair.comparator is not None
    assert (pair.failing.request_id, pair.comparator.request_id) == (f.request_id, c.request_id)
    assert pair.failing.n_events == len(f.spans) and pair.comparator.n_events == len(c.spans)
    assert pair.note == c.note
    assert pair.failing.latency_us == f.latency_us
    assert pair.failing.quantile is not None and pair.failing.quantile >= 0.99
    # The five stages and `other` sum to the request's latency, in both runs (DESIGN §2).
    for side in (pair.failing, pair.comparator):
        t = side.times_us
        total = sum(t[s] or 0.0 for s in (*STAGES, "other"))
        assert t["latency"] is not None and math.isclose(total, t["latency"], rel_tol=1e-4)
    st = pair.stages
    assert st["stage"].to_list() == ["latency", *STAGES, "other"]
    d = st.row(0, named=True)
    assert d["delta_us"] == pytest.approx(d["failing_us"] - d["comparator_us"])
    # By id, the same request comes back with the same partner.
    again = cmp.request(pair.failing.request_id)
    assert again == pair


def test_request_refuses_unknown_ids_and_quantiles(cmp: Comparison) -> None:
    with pytest.raises(WorkbenchError, match="'r999999': request is not in run 'failing'"):
        cmp.request("r999999")
    with pytest.raises(WorkbenchError, match=r"^q: must be a number from 0 to 1"):
        cmp.request(q=1.5)
    with pytest.raises(WorkbenchError, match=r"^q: must be a finite number"):
        cmp.request(q=math.nan)


def test_computing_writes_nothing(
    sample: tuple[Path, dict[str, str]], ws: Workspace, cmp: Comparison
) -> None:
    store, before = sample
    again = workbench.open(store)
    _ = again.runs, cmp.verdict, cmp.stages, cmp.tail_drivers, cmp.proof, cmp.text()
    _ = cmp.request(), cmp.request(q=0.5), cmp.to_json(), cmp.evidence("shape_drift")
    fresh = again.compare(*PAIR)
    assert fresh.to_json() == cmp.to_json()
    assert store_hash(store) == before


def test_errors_are_the_clis_one_lines(
    ws: Workspace, sample: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    store = str(sample[0])
    cases = [
        (("nope",), ["--failing", "nope"]),
        (("failing", "nope"), ["--failing", "failing", "--comparator", "nope"]),
        (("failing", "failing"), ["--failing", "failing", "--comparator", "failing"]),
        (("../x",), ["--failing", "../x"]),
    ]
    for args, argv in cases:
        with pytest.raises(WorkbenchError) as err:
            ws.compare(*args)
        done = _cli("triage", "--store", store, *argv, home=tmp_path)
        assert done.returncode == 2
        assert done.stderr == f"workbench: {err.value.one_line()}\n"


def test_bad_stores_and_options_are_refused_naming_them(
    tmp_path: Path, ws: Workspace, sample: tuple[Path, dict[str, str]]
) -> None:
    missing = tmp_path / "no-store"
    with pytest.raises(WorkbenchError) as err:
        workbench.open(missing)
    assert err.value.one_line() == f"{missing}: store directory does not exist"
    (tmp_path / "file").write_text("x")
    with pytest.raises(WorkbenchError, match="store directory does not exist"):
        workbench.open(tmp_path / "file")
    with pytest.raises(WorkbenchError, match="a store is a directory path"):
        workbench.open(42)  # type: ignore[arg-type]
    bad: list[tuple[dict[str, Any], str]] = [
        ({"min_gap": math.nan}, r"^min_gap: must be a finite number"),
        ({"min_gap": -0.1}, r"^min_gap: must be a number from 0 to 1000"),
        ({"min_gap": 1e4}, r"^min_gap: must be a number from 0 to 1000"),
        ({"min_gap": "0.1"}, r"^min_gap: must be a number"),
        ({"slo_share": math.inf}, r"^slo_share: must be a finite number"),
        ({"slo_us": 0}, r"^slo_us: must be above 0"),
        ({"slo_us": -5.0}, r"^slo_us: must be a number >= 0"),
    ]
    for kwargs, message in bad:
        with pytest.raises(WorkbenchError, match=message):
            ws.compare(*PAIR, **kwargs)
    assert store_hash(sample[0]) == sample[1]


def test_ingest_is_the_clis_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    by_api, by_cli = tmp_path / "api", tmp_path / "cli"
    ws = workbench.open(_empty(by_api))
    reports = ws.ingest(HANDMADE, run_id="hand", label="handmade", tags={" owner ": " me "})
    assert [(r.status, r.run_ids) for r in reports] == [("imported", ["hand"])]
    argv = ["ingest", str(HANDMADE), "--store", str(_empty(by_cli)), "--run-id", "hand"]
    assert main([*argv, "--label", "handmade", "--tag", " owner = me "]) == 0
    assert_same_run(run_tables(by_api, "hand"), run_tables(by_cli, "hand"))
    runs = ws.runs
    assert runs["run_id"].to_list() == ["hand"]
    assert runs["tags"].to_list() == [[{"key": "owner", "value": "me"}]]
    # The same import again changes nothing, as the CLI says.
    before = store_hash(by_api)
    again = ws.ingest([HANDMADE], run_id="hand", label="handmade", tags={"owner": "me"})
    assert [r.status for r in again] == ["unchanged"]
    assert store_hash(by_api) == before


def _empty(store: Path) -> Path:
    store.mkdir()
    return store


def test_ingest_refusals_leave_the_store_as_it_was(tmp_path: Path) -> None:
    store = _copy(tmp_path / "store")
    before = store_hash(store)
    ws = workbench.open(store)
    missing = tmp_path / "missing.json"
    with pytest.raises(WorkbenchError) as err:
        ws.ingest(missing)
    assert str(missing) in err.value.one_line()
    broken = tmp_path / "broken.json"
    broken.write_text('{"traceEvents": [{"ph": "X", "name": ')
    with pytest.raises(WorkbenchError) as err:
        ws.ingest(broken)
    assert str(broken) in err.value.one_line()
    with pytest.raises(WorkbenchError, match=r"^run_id: can name only one file's run"):
        ws.ingest([HANDMADE, HANDMADE], run_id="two")
    with pytest.raises(WorkbenchError, match="a tag key cannot hold '='"):
        ws.ingest(HANDMADE, tags={"a=b": "c"})
    with pytest.raises(WorkbenchError, match="expected KEY=VALUE"):
        ws.ingest(HANDMADE, tags={"empty": " "})
    with pytest.raises(WorkbenchError, match=r"^paths: name at least one file"):
        ws.ingest([])
    assert store_hash(store) == before


def test_attach_writes_the_record_the_cli_writes(tmp_path: Path) -> None:
    from workbench.incident.incident import load_incident

    records = {}
    for how in ("cli", "api"):
        store = _copy(tmp_path / how)
        new = ["incident", "new", "--store", str(store), "--title", "p99", "--id", "INC-1"]
        assert main([*new, "--failing", PAIR[0], "--comparator", PAIR[1], "--actor", "a"]) == 0
        before = store_hash(store)
        if how == "cli":
            argv = ["triage", "--store", str(store), "--failing", PAIR[0]]
            assert main([*argv, "--comparator", PAIR[1], "--incident", "INC-1"]) == 0
        else:
            cmp = workbench.open(store).compare(*PAIR)
            assert store_hash(store) == before  # computing wrote nothing; attach will
            inc = cmp.attach("INC-1", "oncall")
            assert inc.status == "localized"
        after = store_hash(store)
        changed = {k for k in after.keys() | before.keys() if after.get(k) != before.get(k)}
        assert changed and all(k.startswith("incidents") for k in changed)
        records[how] = load_incident(store, "INC-1")
    assert records["api"].localization == records["cli"].localization
    assert records["api"].claims == records["cli"].claims
    assert records["api"].status == records["cli"].status == "localized"
    with pytest.raises(WorkbenchError, match=r"^actor: name who attaches"):
        workbench.open(tmp_path / "api").compare(*PAIR).attach("INC-1", " ")


def test_to_perfetto_writes_only_the_file_asked_for(
    cmp: Comparison, sample: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    out = tmp_path / "pair.perfetto-trace"
    assert cmp.to_perfetto(out) == out
    assert out.is_file() and out.stat().st_size > 0
    first = out.read_bytes()
    with pytest.raises(WorkbenchError):
        cmp.to_perfetto(out)  # a new file unless replace=True
    assert out.read_bytes() == first
    assert cmp.to_perfetto(str(out), replace=True) == out
    assert store_hash(sample[0]) == sample[1]


def test_a_bucket_store_opens_through_its_mirror(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ws.ingest on an s3:// store sends the run up (as `workbench ingest` does); another
    machine's open (a fresh mirror) sees it."""
    with moto_s3("wb-api"):
        monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path / "home-a"))
        url = "s3://wb-api/store"
        ws = workbench.open(url)
        assert ws.store != Path(url) and ws.runs.height == 0
        assert [r.status for r in ws.ingest(HANDMADE, run_id="hand")] == ["imported"]
        monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path / "home-b"))
        other = workbench.open(url)
        assert other.store != ws.store
        assert other.runs["run_id"].to_list() == ["hand"]
        assert_same_run(run_tables(other.store, "hand"), run_tables(ws.store, "hand"))


def test_request_stages_query_has_its_header() -> None:
    from test_queries_evidence import test_query_has_header_and_named_parameters_only as check

    check("request_stages")
