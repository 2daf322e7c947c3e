"""Outside trace formats through the `workbench.importers` entry-point group.

A fake installed distribution (a .dist-info folder with entry_points.txt on PYTHONPATH)
registers a toy text format; the real CLI lists it and ingests a file of it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow.parquet as pq

TOY_MODULE = '''
"""A toy trace format: '#toy-trace' then 'category|name|ts_us|dur_us|tid|correlation' lines."""
from pathlib import Path

from workbench.store.importers import Decoded, Opened
from workbench.store.columns.spans import event_columns
from workbench.store.run_row import file_sha


class ToyFormat:
    name = "toy-trace"
    summary = "in-house toy traces (test plugin)"

    def recognise(self, path, head):
        return head.startswith(b"#toy-trace")

    def open(self, path, progress, cancel):
        return Opened(file_sha(path), path.stat().st_size, lambda: self._decode(path))

    def _decode(self, path):
        rows = [line.split("|") for line in path.read_text().splitlines()[1:] if line.strip()]
        cols, args = event_columns(
            [r[0] for r in rows], [r[1] for r in rows],
            [float(r[2]) for r in rows], [float(r[3]) for r in rows],
            [1 if r[0] in ("user_annotation", "cuda_runtime") else 0 for r in rows],
            [int(r[4]) for r in rows],
            [int(r[5]) if r[5] else None for r in rows],
        )
        return Decoded(cols, args, {"hardware": "Toy NPU"}, "toy-trace")
'''

TOY_TRACE = """#toy-trace
user_annotation|request#0|0|100|1|
cuda_runtime|cudaLaunchKernel|10|5|1|1
kernel|toy_gemm|20|60|7|1
user_annotation|request#1|200|150|1|
cuda_runtime|cudaLaunchKernel|210|5|1|2
kernel|toy_gemm|220|110|7|2
"""


def _site(tmp_path: Path, entry: str) -> Path:
    site = tmp_path / "site"
    (site / "toy_trace_format-1.0.dist-info").mkdir(parents=True)
    (site / "toy_trace_format.py").write_text(textwrap.dedent(TOY_MODULE))
    info = site / "toy_trace_format-1.0.dist-info"
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-trace-format\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[workbench.importers]\n{entry}\n")
    return site


def _cli(site: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(site)}
    return subprocess.run(
        [sys.executable, "-m", "workbench", *argv],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip


def test_plugin_format_is_listed_and_ingested(tmp_path: Path) -> None:
    site = _site(tmp_path, "toy = toy_trace_format:ToyFormat")
    help_text = _cli(site, "ingest", "--help").stdout
    assert "toy-trace" in help_text and "in-house toy traces (test plugin) (plugin)" in help_text
    assert "nsys-sqlite" in help_text and "kineto-json" in help_text
    trace = tmp_path / "run.toy"
    trace.write_text(TOY_TRACE)
    store = tmp_path / "store"
    proc = _cli(site, "ingest", str(trace), "--store", str(store), "--run-id", "toy")
    assert proc.returncode == 0, proc.stderr
    assert "(toy-trace," in proc.stdout
    run = pq.read_table(store / "runs" / "toy.parquet").to_pylist()[0]
    assert (run["source_format"], run["hardware"]) == ("toy-trace", "Toy NPU")
    reqs = pq.read_table(store / "requests" / "run_id=toy" / "part-0.parquet").to_pylist()
    assert [(r["name"], r["latency_us"]) for r in reqs] == [
        ("request#0", 100.0),
        ("request#1", 150.0),
    ]
    events = pq.read_table(store / "events" / "run_id=toy" / "part-0.parquet").to_pylist()
    kernels = [e for e in events if e["category"] == "kernel"]
    # Each kernel joined to its launch by correlation, and so to the launch's request.
    assert [e["request_id"] for e in kernels] == ["r0000", "r0001"]
    assert all(events[e["parent_id"]]["name"] == "cudaLaunchKernel" for e in kernels)
    # Without the plugin the same file is no known format: a one-line error.
    bare = _cli(tmp_path / "empty", "ingest", str(trace), "--store", str(tmp_path / "s2"))
    assert bare.returncode == 2 and len(bare.stderr.strip().splitlines()) == 1


def test_broken_plugin_is_reported_not_fatal(tmp_path: Path) -> None:
    site = _site(tmp_path, "broken = no_such_module:Format")
    help_text = _cli(site, "ingest", "--help").stdout
    assert "importer 'broken' (no_such_module:Format) failed to load" in help_text
    store = tmp_path / "store"
    nsys = Path(__file__).resolve().parent / "fixtures" / "nsys" / "current_schema.sqlite"
    assert _cli(site, "ingest", str(nsys), "--store", str(store)).returncode == 0
