"""Serving traces: one request per annotation, compilations in `lowering`, compile log joined."""

from __future__ import annotations

import gzip
import json
import re
import threading
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest

from ingest_helpers import HANDMADE, TORCH, load_events
from workbench.errors import WorkbenchError
from workbench.store.ingest import ingest
from workbench.store.progress import ImportCancelled, IngestProgress

STAGE_COLS = ["ingress_us", "lowering_us", "scheduling_us", "execution_us", "assembly_us"]


def _rows(store: Path, table: str, run_id: str) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = pq.read_table(
        store / table / f"run_id={run_id}" / "part-0.parquet"
    ).to_pylist()
    return rows


def test_handmade_stage_times_by_hand(tmp_path: Path) -> None:
    store = tmp_path / "store"
    report = ingest(store, HANDMADE, run_id="hand")
    assert report.requests == 2 and report.request_unit == "annotation"
    reqs = {r["name"]: r for r in _rows(store, "requests", "hand")}
    r0, r1 = reqs["request#0"], reqs["request#1"]
    # Worked out from the fixture (see tests/fixtures/serving/README.md):
    # ingress = preprocess 1000-1100 (beats the copy_ inside); lowering = cache lookup + the
    # compilation 1100-1620 plus the compiled region's gaps 10+40+50; execution = mm + relu;
    # assembly = the B/E postprocess 1900-1960; other = 1620-1650 and 1960-2000.
    assert (r0["start_us"], r0["latency_us"]) == (0.0, 1000.0)
    assert [r0[c] for c in STAGE_COLS] == [100.0, 620.0, 0.0, 150.0, 60.0]
    assert r0["other_us"] == 70.0
    # request#1: region gaps 10+90 lowering; mm 100 + an op of a thread without requests 20.
    assert [r1[c] for c in STAGE_COLS] == [0.0, 100.0, 0.0, 120.0, 0.0]
    assert r1["other_us"] == 80.0
    assert r0["shape_key"] == "[[4,16],[4,16]]"


def test_handmade_events_links_and_phases(tmp_path: Path) -> None:
    store = tmp_path / "store"
    report = ingest(store, HANDMADE, run_id="hand")
    assert report.read_by_phase == {
        "M": 2, "X": 18, "s": 1, "f": 1, "B": 1, "E": 2, "C": 1, "i": 1, "P": 1
    }  # fmt: skip
    assert report.kept_by_phase == {"X": 18, "B/E": 1, "C": 1, "i": 1}
    assert report.skipped_by_phase == {"M": 2, "s": 1, "f": 1, "E": 1, "P": 1}
    assert any("E events without a matching B" in w for w in report.warnings)
    ev = {(e["name"], e["ts_us"]): e for e in _rows(store, "events", "hand")}
    launch = ev[("cudaLaunchKernel", 700.0)]
    kernel = ev[("gemm_kernel", 710.0)]
    assert kernel["parent_id"] == launch["event_id"]  # linked by the ac2g flow alone
    assert kernel["request_id"] == launch["request_id"] == "r0000"
    assert kernel["stage"] == "execution"
    assert ev[("aten::empty", 1500.0)]["request_id"] is None  # between requests: background
    assert ev[("aten::add", 2220.0)]["request_id"] == "r0001"  # other thread, by time
    post = ev[("postprocess", 900.0)]
    assert (post["dur_us"], post["stage"]) == (60.0, "assembly")
    # Compilation: only the outermost span is flagged; its nest carries the compile id.
    flagged = [e for e in ev.values() if e["recompile"]]
    assert [(e["name"], e["compile_id"], e["stage"]) for e in flagged] == [
        ("dynamo", "0/1", "lowering")
    ]
    assert ev[("entire_frame_compile", 125.0)]["compile_id"] == "0/1"
    assert ev[("entire_frame_compile", 125.0)]["recompile"] is False
    assert ev[("aten::mm", 200.0)]["parent_id"] == ev[("entire_frame_compile", 125.0)]["event_id"]
    run = pq.read_table(store / "runs" / "hand.parquet").to_pylist()[0]
    assert (run["hardware"], run["device_count"], run["rank"], run["world_size"]) == (
        "Test GPU 1", 1, 1, 2
    )  # fmt: skip
    assert run["driver_version"] is None and run["thermal_state"] is None


def test_request_pattern_overrides(tmp_path: Path) -> None:
    report = ingest(tmp_path / "s", HANDMADE, run_id="pat", request_pattern=r"^aten::mm$")
    assert report.request_unit == "pattern"
    reqs = _rows(tmp_path / "s", "requests", "pat")
    # The mm inside the compilation is nested in no other mm, so it is a request too.
    assert [r["latency_us"] for r in reqs] == [100.0, 100.0, 100.0]


def test_truncated_array_accepted_with_warning(tmp_path: Path) -> None:
    events = json.loads(HANDMADE.read_text())["traceEvents"]
    text = json.dumps(events)
    cut = text[: text.index('"name": "request#1"') - 30]  # inside the event before request#1
    src = tmp_path / "cut.json"
    src.write_text(cut)
    report = ingest(tmp_path / "s", src)
    assert any("cut off" in w for w in report.warnings)
    complete = json.loads(cut[: cut.rindex("}, {") + 1] + "]")
    assert report.events_read == len(complete)


def test_gzip_detected_by_magic_not_name(tmp_path: Path) -> None:
    src = tmp_path / "plain_name.json"
    src.write_bytes(gzip.compress(HANDMADE.read_bytes()))
    assert ingest(tmp_path / "s", src).requests == 2


def test_progress_and_cancel(tmp_path: Path) -> None:
    seen: list[IngestProgress] = []
    ingest(tmp_path / "s", HANDMADE, run_id="p", progress=seen.append)
    phases = [p.phase for p in seen]
    assert phases[0] == "read" and "write" in phases and seen[-1].events == 21
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(ImportCancelled):
        ingest(tmp_path / "s2", HANDMADE, cancel=cancel)
    assert not (tmp_path / "s2").exists()


def _annotations(path: Path) -> list[str]:
    return [
        e["name"]
        for e in load_events(path)
        if e.get("ph") == "X"
        and e.get("cat") == "user_annotation"
        and re.fullmatch(r"(request|warmup)#\d+", e["name"])
    ]


@pytest.mark.parametrize(
    "stem", ["serving_static_failing", "serving_dynamic_comparator", "serving_static_rerun"]
)
def test_torch_serving_one_request_per_annotation(tmp_path: Path, stem: str) -> None:
    path = TORCH / f"{stem}.pt.trace.json.gz"
    store = tmp_path / "store"
    report = ingest(store, path, compile_log=TORCH / f"{stem}.torch_trace")
    names = _annotations(path)
    assert report.request_unit == "annotation"
    assert sorted(r["name"] for r in _rows(store, "requests", stem)) == sorted(names)
    for r in _rows(store, "requests", stem):
        total = sum(r[c] for c in STAGE_COLS) + r["other_us"]
        assert total == pytest.approx(r["latency_us"], rel=1e-9, abs=1e-6)
        assert min(r[c] for c in [*STAGE_COLS, "other_us"]) >= 0.0


def test_torch_recompiles_flagged_and_joined_to_compile_log(tmp_path: Path) -> None:
    stem = "serving_static_failing"
    path = TORCH / f"{stem}.pt.trace.json.gz"
    store = tmp_path / "store"
    report = ingest(store, path, compile_log=TORCH / f"{stem}.torch_trace")
    # Independently: the outermost Dynamo span of each compilation is a cpu_op named "dynamo".
    dynamo = [e for e in load_events(path) if e.get("ph") == "X" and e["name"] == "dynamo"]
    assert report.compilations == len(dynamo) == 9
    con = duckdb.connect()
    ev = str(store / "events" / "*" / "*.parquet")
    co = str(store / "compiles" / "*" / "*.parquet")
    flagged = con.execute(
        "SELECT e.name, e.stage, e.compile_id, e.dur_us, c.compile_id AS logged, c.duration_us,"
        " c.start_us - e.ts_us "
        "FROM read_parquet($ev, hive_partitioning = true) e "
        "LEFT JOIN read_parquet($co, hive_partitioning = true) c "
        "ON c.compile_id = e.compile_id AND c.run_id = e.run_id "
        "WHERE e.recompile ORDER BY e.ts_us",
        {"ev": ev, "co": co},
    ).fetchall()
    assert [f[2] for f in flagged] == [f"0/{i}" for i in range(9)]
    assert {f[0] for f in flagged} == {"dynamo"} and {f[1] for f in flagged} == {"lowering"}
    assert all(f[4] == f[2] for f in flagged)  # every compilation found in the log
    for f in flagged[:8]:  # the log times the same compilation (the 9th failed fast)
        assert f[5] == pytest.approx(f[3], rel=0.01)
    # Both on the run's clock: the log's epoch times were shifted to the trace's run start.
    assert all(abs(f[6]) < 1000.0 for f in flagged)
    # The requests that compiled carry that time in lowering.
    lowering = con.execute(
        "SELECT r.request_id, r.lowering_us, e.dur_us FROM read_parquet($ev, hive_partitioning"
        " = true) e JOIN read_parquet($rq, hive_partitioning = true) r USING (run_id, request_id)"
        " WHERE e.recompile",
        {"ev": ev, "rq": str(store / "requests" / "*" / "*.parquet")},
    ).fetchall()
    assert len(lowering) == 9
    assert all(low >= dur - 1e-6 for _, low, dur in lowering)


def test_compile_log_error_leaves_store(tmp_path: Path) -> None:
    bad = tmp_path / "log"
    bad.write_text("not a log\n")
    with pytest.raises(WorkbenchError):
        ingest(tmp_path / "s", HANDMADE, compile_log=bad)
    assert not (tmp_path / "s").exists()


def _requests_without_region(path: Path) -> set[str]:
    """Independently: request annotations with no compiled region inside (ran eagerly)."""
    xs = [e for e in load_events(path) if e.get("ph") == "X" and e.get("tid") is not None]
    reqs = [e for e in xs if re.fullmatch(r"(request|warmup)#\d+", e["name"])]
    regions = [e for e in xs if e["name"].startswith("Torch-Compiled Region: ")]
    out = set()
    for r in reqs:
        lo, hi = r["ts"], r["ts"] + r["dur"]
        if not any(lo <= g["ts"] and g["ts"] + g["dur"] <= hi for g in regions):
            out.add(r["name"])
    return out


@pytest.mark.parametrize(("stem", "n_eager"), [("serving_static_failing", 23),
                                               ("serving_dynamic_comparator", 0)])  # fmt: skip
def test_eager_fallback_marked(tmp_path: Path, stem: str, n_eager: int) -> None:
    path = TORCH / f"{stem}.pt.trace.json.gz"
    store = tmp_path / "s"
    ingest(store, path, run_id="f")
    con = duckdb.connect()
    rows = con.execute(
        "SELECT r.name, bool_or(e.fallback) FROM read_parquet($e) e "
        "JOIN read_parquet($r) r USING (request_id) GROUP BY r.name",
        {"e": str(store / "events" / "run_id=f" / "*.parquet"),
         "r": str(store / "requests" / "run_id=f" / "*.parquet")},
    ).fetchall()  # fmt: skip
    eager = {name for name, fb in rows if fb}
    assert eager == _requests_without_region(path)
    assert len(eager) == n_eager


def test_reimport_with_compile_log_unchanged(tmp_path: Path) -> None:
    stem = "serving_static_rerun"
    path, log = TORCH / f"{stem}.pt.trace.json.gz", TORCH / f"{stem}.torch_trace"
    store = tmp_path / "s"
    assert ingest(store, path, compile_log=log).compiles_logged > 0
    assert ingest(store, path, compile_log=log).status == "unchanged"
    with pytest.raises(WorkbenchError, match="different content or options"):
        ingest(store, path)  # same trace without its log: other options, same run id
