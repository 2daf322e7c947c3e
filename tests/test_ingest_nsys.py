"""Nsight Systems SQLite exports: the real 2022 export, a synthetic current-schema one, errors."""

from __future__ import annotations

import json
import re
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


def _events_by_key(decoded: Any) -> Counter[tuple[Any, ...]]:
    cols, args = decoded.cols, decoded.args
    names = cols.name.to_pylist()
    cats = cols.category.to_pylist()
    text = args.text.to_pylist()
    return Counter(
        (cats[i], names[i], float(cols.ts[i]), float(cols.dur[i]), int(cols.pid[i]),
         int(cols.tid[i]), int(args.correlation[i]), bool(args.correlation_valid[i]), text[i])
        for i in range(cols.n)
    )  # fmt: skip


@pytest.mark.parametrize("parts", [1, 3])
def test_shares_read_the_same_rows(monkeypatch: pytest.MonkeyPatch, parts: int) -> None:
    """The parallel read splits each table by rowid modulo: any split gives the same events."""
    from workbench.store.importers.nsys import nsys_arrow
    from workbench.store.importers.nsys.nsys_sqlite import read_nsys

    base = _events_by_key(read_nsys(CURRENT))
    monkeypatch.setattr(nsys_arrow, "PARTS", parts)
    assert _events_by_key(read_nsys(CURRENT)) == base
    # 6 requests: a kernel, two copies and a sync each, their 4 API calls, and an NVTX range
    assert sum(base.values()) == 6 * (1 + 2 + 1 + 4 + 1)


def test_kernel_args_are_json_launch_configuration() -> None:
    from workbench.store.importers.nsys.nsys_sqlite import read_nsys

    decoded = read_nsys(CURRENT)
    cats = decoded.cols.category.to_pylist()
    text = decoded.args.text.to_pylist()
    kernel_args = [json.loads(t) for c, t in zip(cats, text, strict=True) if c == "kernel"]
    assert len(kernel_args) == 6
    assert kernel_args[0] == {
        "grid": [132, 1, 1], "block": [128, 1, 1], "registers per thread": 128,
        "shared memory": 0,
    }  # fmt: skip
    assert all(t is None for c, t in zip(cats, text, strict=True) if c == "cuda_runtime")


def test_nvtx_text_that_is_not_utf8_is_replaced(tmp_path: Path) -> None:
    path = tmp_path / "latin1.sqlite"
    shutil.copy(CURRENT, path)
    with sqlite3.connect(path) as conn:
        # 'caf\xe9' (Latin-1) stored as TEXT, as a careless producer might.
        conn.execute(
            "UPDATE NVTX_EVENTS SET text = CAST(x'636166e9' AS TEXT) WHERE text IS NOT NULL"
        )
    store = tmp_path / "s"
    ingest(store, path, run_id="l1")
    names = sorted({r["name"] for r in _rows(store, "requests", "l1")})
    assert names == ["caf\ufffd", "request"]


def test_text_in_an_integer_column_is_a_one_line_error(tmp_path: Path) -> None:
    store = tmp_path / "s"
    ingest(store, CURRENT, run_id="cur")
    path = tmp_path / "typed.sqlite"
    shutil.copy(CURRENT, path)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 'soon' WHERE rowid = 2")
    _cli_fails(path, store, "not a readable Nsight Systems export")


def test_missing_column_names_it(tmp_path: Path) -> None:
    store = tmp_path / "s"
    ingest(store, CURRENT, run_id="cur")
    path = tmp_path / "old.sqlite"
    shutil.copy(CURRENT, path)
    with sqlite3.connect(path) as conn:
        conn.execute("ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL DROP COLUMN gridX")
    _cli_fails(path, store, "CUPTI_ACTIVITY_KIND_KERNEL lacks gridX: unknown export schema")


@pytest.mark.parametrize(
    "path", sorted((ROOT / "queries").glob("nsys_*.sql")), ids=lambda p: p.stem
)
def test_nsys_query_has_header_and_named_parameters(path: Path) -> None:
    from workbench.store.query_files import param_order

    text = path.read_text()
    head = "\n".join(line for line in text.splitlines() if line.startswith("--"))
    for part in ("purpose:", "parameters:", "columns:"):
        assert part in head, f"{path.name} header lacks {part}"
    body = "\n".join(line for line in text.splitlines() if not line.startswith("--"))
    assert "?" not in body and not re.search(r"(?<![:\w]):[a-z]", body), path.name
    declared = set(re.findall(r"\$([a-z_]+)", head))
    assert set(param_order(path.stem)) == declared, path.name


def test_param_order_is_first_use_outside_comments_and_literals() -> None:
    from workbench.store import query_files

    assert query_files.param_order("nsys_kernels") == ("parts", "part")
    assert query_files.param_order("nsys_nvtx_ranges") == ("push_pop", "start_end")
    assert query_files.param_order("nsys_strings") == ()
