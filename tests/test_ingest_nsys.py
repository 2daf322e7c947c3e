"""Nsight Systems SQLite exports: the real 2022 export, a synthetic current-schema one, errors."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from ingest_helpers import ROOT, store_hash

from workbench.store.ingest import ingest

CURRENT = ROOT / "tests" / "fixtures" / "nsys" / "current_schema.sqlite"
STAGES = ["ingress_us", "lowering_us", "scheduling_us", "execution_us", "assembly_us", "other_us"]


def _rows(store: Path, table: str, run_id: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = pq.read_table(
        store / table / f"run_id={run_id}" / "part-0.parquet"
    ).to_pylist()
    return rows


def _run(store: Path, run_id: str) -> dict[str, Any]:
    row: dict[str, Any] = pq.read_table(store / "runs" / f"{run_id}.parquet").to_pylist()[0]
    return row


def _invariant(requests: list[dict[str, Any]]) -> None:
    for r in requests:
        parts = [r[s] for s in STAGES]
        assert min(parts) >= 0, r
        assert sum(parts) == pytest.approx(r["latency_us"], rel=1e-9, abs=1e-6), r


def _launches(events: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Each kernel's launching call (events.parent_id), checked to be one runtime row."""
    by_id = {e["event_id"]: e for e in events}
    out = {}
    for k in (e for e in events if e["category"] == "kernel"):
        parent = by_id[k["parent_id"]]
        same_corr = [
            e for e in events
            if e["category"] in ("cuda_runtime", "cuda_driver")
            and e["correlation"] == k["correlation"]
        ]  # fmt: skip
        assert same_corr == [parent], k
        out[k["event_id"]] = parent
    return out


def test_saxpy_2022_schema(shared_traces: Path, tmp_path: Path) -> None:
    store = tmp_path / "s"
    report = ingest(store, shared_traces / "nsys" / "saxpy_a100.sqlite", run_id="saxpy")
    run = _run(store, "saxpy")
    assert run["source_format"] == "nsys-sqlite"
    assert run["hardware"] == "NVIDIA A100-SXM4-40GB" and run["device_count"] == 1
    assert run["driver_version"] == "525.105.17" and run["runtime"] == "cuda"
    assert (run["device_sm_count"], run["device_memory_bandwidth_gbs"]) == (108, 1555.2)
    assert run["device_memory_gb"] == 42.3 and run["tags"] == []
    events = _rows(store, "events", "saxpy")
    cats = Counter(e["category"] for e in events)
    # 95 runtime rows, 38 of them nested versioned copies (cudaLaunchKernel_v7000 ...).
    assert cats["kernel"] == 5 and cats["gpu_memcpy"] == 15
    assert cats["cuda_runtime"] + cats["cuda_driver"] == 95 - 38
    assert not any(e["name"].endswith("_v7000") for e in events)
    launches = _launches(events)
    assert len(launches) == 5
    assert {p["name"] for p in launches.values()} == {"cudaLaunchKernel"}
    # 24 NVTX rows: 22 closed ranges (5 'saxpy' push/pop + 17 MPI calls), a domain, a thread name.
    nvtx = [e for e in events if e["category"] == "user_annotation"]
    assert len(nvtx) == 22
    assert Counter(e["name"] for e in nvtx)["saxpy"] == 5
    requests = _rows(store, "requests", "saxpy")
    assert [r["name"] for r in requests] == ["saxpy"] * 5 and report.request_unit == "annotation"
    _invariant(requests)
    # Each request owns its launch and the kernel it launched.
    for k, launch in launches.items():
        kernel = next(e for e in events if e["event_id"] == k)
        assert kernel["request_id"] == launch["request_id"] is not None
        assert kernel["device"] == 0 and kernel["stream"] == 7


def test_current_schema_fixture(tmp_path: Path) -> None:
    store = tmp_path / "s"
    ingest(store, CURRENT, run_id="cur")
    run = _run(store, "cur")
    assert run["hardware"] == "NVIDIA H100 80GB HBM3"
    assert (run["device_sm_count"], run["device_memory_bandwidth_gbs"]) == (132, 3352.3)
    events = _rows(store, "events", "cur")
    launches = _launches(events)
    # Both processes number correlation ids from 1; each kernel still has its own launch.
    assert len(launches) == 6
    assert Counter(p["name"] for p in launches.values()) == {
        "cudaLaunchKernel": 3,
        "cuLaunchKernel": 3,
    }
    assert {p["category"] for p in launches.values()} == {"cuda_runtime", "cuda_driver"}
    stage = {(e["category"], e["name"]): e["stage"] for e in events}
    assert stage[("gpu_memcpy", "Memcpy HtoD")] == "scheduling"
    assert stage[("gpu_memcpy", "Memcpy DtoH")] == "assembly"
    assert stage[("cuda_sync", "Sync: stream")] == "execution"
    requests = _rows(store, "requests", "cur")
    # push/pop ranges with inline text, start/end ranges named through textId
    assert sorted(r["name"] for r in requests) == ["request"] * 3 + [
        "request#0", "request#1", "request#2",
    ]  # fmt: skip
    _invariant(requests)
    assert all(r["assembly_us"] > 0 and r["scheduling_us"] > 0 for r in requests)


def _cli_fails(path: Path, store: Path, problem: str) -> None:
    before = store_hash(store)
    proc = subprocess.run(
        [sys.executable, "-m", "workbench", "ingest", str(path), "--store", str(store)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert str(path) in lines[0] and problem in lines[0], lines[0]
    assert store_hash(store) == before


def test_damaged_and_foreign_sqlite_are_one_line_errors(tmp_path: Path) -> None:
    store = tmp_path / "s"
    ingest(store, CURRENT, run_id="cur")
    data = CURRENT.read_bytes()
    cut = tmp_path / "cut.sqlite"
    cut.write_bytes(data[: len(data) // 3])
    _cli_fails(cut, store, "not a readable Nsight Systems export")
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE t (x INTEGER)")
    _cli_fails(other, store, "not an Nsight Systems export")
    mangled = tmp_path / "mangled.sqlite"
    shutil.copy(CURRENT, mangled)
    raw = bytearray(mangled.read_bytes())
    raw[100:4096] = b"\xff" * (4096 - 100)  # the schema page
    mangled.write_bytes(bytes(raw))
    _cli_fails(mangled, store, "Nsight Systems export")


def test_parquetdir_export_is_refused(tmp_path: Path) -> None:
    store = tmp_path / "s"
    ingest(store, CURRENT, run_id="cur")
    pq_dir = tmp_path / "report_pqtdir"
    pq_dir.mkdir()
    import pyarrow as pa

    pq.write_table(pa.table({"id": [0], "value": ["x"]}), pq_dir / "StringIds.parquet")
    _cli_fails(pq_dir, store, "export SQLite instead")
