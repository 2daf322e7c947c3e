"""The two real Kineto traces: counts per category, runs row, launch links, stage invariant."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from ingest_helpers import MI250, RANK0, load_events
from workbench.store.ingest import ingest

KEPT = {"X", "i", "I", "C"}
STAGES = ["ingress_us", "lowering_us", "scheduling_us", "execution_us", "assembly_us"]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    s = tmp_path_factory.mktemp("real") / "store"
    ingest(s, RANK0, run_id="rank0")
    ingest(s, MI250, run_id="mi250")
    return s


def _table(store: Path, name: str, run_id: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = pq.read_table(
        store / name / f"run_id={run_id}" / "part-0.parquet"
    ).to_pylist()
    return rows


@pytest.mark.parametrize(("run_id", "path"), [("rank0", RANK0), ("mi250", MI250)])
def test_event_counts_per_category(store: Path, run_id: str, path: Path) -> None:
    raw = load_events(path)
    expected = Counter(e.get("cat") for e in raw if e.get("ph") in KEPT)
    got = Counter(e["category"] for e in _table(store, "events", run_id))
    assert got == expected
    assert sum(expected.values()) > 100


@pytest.mark.parametrize(("run_id", "path"), [("rank0", RANK0), ("mi250", MI250)])
def test_launch_links_cpu_to_gpu(store: Path, run_id: str, path: Path) -> None:
    raw = load_events(path)
    runtime_corr = {
        e["args"]["correlation"]
        for e in raw
        if e.get("ph") == "X" and e.get("cat") == "cuda_runtime" and "correlation" in e["args"]
    }
    kernels = [e for e in raw if e.get("ph") == "X" and e.get("cat") == "kernel"]
    expect_linked = sum(e["args"]["correlation"] in runtime_corr for e in kernels)
    assert expect_linked > 0
    events = _table(store, "events", run_id)
    by_id = {e["event_id"]: e for e in events}
    linked = 0
    for k in (e for e in events if e["category"] == "kernel"):
        if k["parent_id"] is None:
            continue
        launch = by_id[k["parent_id"]]
        assert launch["category"] == "cuda_runtime"
        assert launch["correlation"] == k["correlation"]
        assert launch["name"] in {
            "cudaLaunchKernel",
            "hipLaunchKernel",
            "hipExtModuleLaunchKernel",
            "cudaGraphLaunch",
            "cudaLaunchKernelExC",
            "cuLaunchKernel",
        }
        assert k["request_id"] == launch["request_id"]
        linked += 1
    assert linked == expect_linked


def test_runs_row_of_a100_trace(store: Path) -> None:
    run = pq.read_table(store / "runs" / "rank0.parquet").to_pylist()[0]
    assert run["hardware"] == "NVIDIA A100-SXM4-80GB"
    assert (run["rank"], run["world_size"], run["device_count"]) == (0, 16, 8)
    assert run["source_format"] == "kineto-json" and len(run["source_sha256"]) == 64
    # Not in the trace, so not guessed.
    assert run["driver_version"] is None and run["model"] is None and run["compiler"] is None
    mi = pq.read_table(store / "runs" / "mi250.parquet").to_pylist()[0]
    assert mi["hardware"] == "AMD Radeon Graphics" and mi["rank"] is None


@pytest.mark.parametrize(("run_id", "path", "steps"), [("rank0", RANK0, 5), ("mi250", MI250, 2)])
def test_steps_are_requests_and_invariant_holds(
    store: Path, run_id: str, path: Path, steps: int
) -> None:
    reqs = _table(store, "requests", run_id)
    raw = load_events(path)
    step_durs = sorted(
        float(e["dur"])
        for e in raw
        if e.get("ph") == "X"
        and e.get("cat") == "user_annotation"
        and e["name"].startswith("ProfilerStep#")
    )
    assert len(reqs) == steps
    assert sorted(r["latency_us"] for r in reqs) == pytest.approx(step_durs, abs=1e-3)
    for r in reqs:
        parts = [r[c] for c in STAGES] + [r["other_us"]]
        assert min(parts) >= 0.0
        assert sum(parts) == pytest.approx(r["latency_us"], rel=1e-9, abs=1e-6)
    assert sum(r["execution_us"] for r in reqs) > 0


def test_events_inside_steps_belong_to_them(store: Path) -> None:
    events = _table(store, "events", "rank0")
    reqs = {r["request_id"]: r for r in _table(store, "requests", "rank0")}
    for e in events:
        rid = e["request_id"]
        if rid is None or e["category"] in {"kernel", "gpu_memcpy", "gpu_memset"}:
            continue
        r = reqs[rid]
        assert r["start_us"] <= e["ts_us"] < r["end_us"]


@pytest.mark.parametrize(("run_id", "path"), [("rank0", RANK0), ("mi250", MI250)])
def test_arg_columns_match_the_json(store: Path, run_id: str, path: Path) -> None:
    kept = [e for e in load_events(path) if e.get("ph") in KEPT]
    events = _table(store, "events", run_id)
    assert len(events) == len(kept)
    # Rows are in file order, so row i is the i-th kept event of the file.
    for raw, row in zip(kept, events, strict=True):
        args = raw.get("args")
        assert (json.loads(row["args"]) if row["args"] is not None else None) == args
        args = args or {}
        assert row["correlation"] == args.get("correlation")
        stream = args.get("stream")
        assert row["stream"] == (stream if isinstance(stream, int) else None)
        dims = args.get("Input Dims")
        assert row["shape"] == (None if dims is None else json.dumps(dims, separators=(",", ":")))
        if raw.get("cat") == "gpu_memcpy":
            assert row["bytes"] == args.get("bytes")
        assert row["dur_us"] == pytest.approx(float(raw.get("dur", 0.0)))
