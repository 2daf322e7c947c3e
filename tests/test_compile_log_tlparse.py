"""TORCH_TRACE logs at tlparse depth: failures, cache outcomes, restarts, graph breaks, ranks.

The three logs are tlparse's own test inputs (shared/traces/torch_trace); a test per log
checks the compile rows against what the log's records say.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from workbench.store.importers.compile_log.compile_log import load_compile_log

GRAPH_BREAK_LOG = (
    Path(__file__).resolve().parent / "fixtures" / "torch" / "graph_break_failing.torch_trace"
)


def _rows(path: Path) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = load_compile_log(path).table.to_pylist()
    return rows


def test_simple_log(shared_traces: Path) -> None:
    (row,) = _rows(shared_traces / "torch_trace" / "simple.log")
    assert row["compile_id"] == "0/0" and row["fail_reason"] is None
    # fx_graph_cache_miss artifact; AOTAutograd only hashed (no hit/miss artifact).
    assert (row["fx_graph_cache"], row["aot_autograd_cache"], row["cache_hit"]) == (
        "miss", None, False,
    )  # fmt: skip
    assert (row["restarts"], row["graph_breaks"], row["graph_break_reasons"]) == (0, 0, None)
    assert (row["guard_count"], row["graph_op_count"]) == (49, 3)
    # Exclusive phases add up to the Dynamo cumulative time (1,659,332 us).
    phases = sum(row[k] for k in ("dynamo_us", "aot_us", "inductor_us", "codegen_us"))  # type: ignore[misc]
    assert phases == pytest.approx(1659332)


def test_compilation_failure_log(shared_traces: Path) -> None:
    (row,) = _rows(shared_traces / "torch_trace" / "comp_failure.log")
    assert row["fail_reason"] == (
        "BackendCompilerFailed: backend='broken_backend' raised:\nRuntimeError: broken backend"
    )
    assert row["cache_hit"] is None and row["fx_graph_cache"] is None
    assert row["restarts"] == 0 and row["graph_breaks"] == 0


def test_cache_hit_miss_log(shared_traces: Path) -> None:
    rows = _rows(shared_traces / "torch_trace" / "cache_hit_miss.log")
    # Three test runs, each compiling the flex-attention wrapper (0/0, no Inductor) and fn (1/0):
    # FX graph cache miss, then hit (same fn), then miss (fn2); AOTAutograd cache bypassed.
    assert [r["compile_id"] for r in rows] == ["0/0", "1/0"] * 3
    assert [r["fx_graph_cache"] for r in rows] == [None, "miss", None, "hit", None, "miss"]
    assert [r["aot_autograd_cache"] for r in rows] == [None, "bypass"] * 3
    assert [r["cache_hit"] for r in rows] == [None, False, None, True, None, False]
    assert all(r["fail_reason"] is None and r["graph_breaks"] == 0 for r in rows)


def test_graph_break_and_restart_log() -> None:
    """Our torch 2.13 serving log: `.item()` breaks the graph; Dynamo restarts the analysis."""
    if not GRAPH_BREAK_LOG.exists():
        pytest.fail(f"fixture missing: {GRAPH_BREAK_LOG}")
    rows = _rows(GRAPH_BREAK_LOG)
    broken = [r for r in rows if r["graph_breaks"]]
    assert broken, rows
    first = broken[0]
    reasons = json.loads(str(first["graph_break_reasons"]))
    assert reasons[0]["reason"].startswith("Unsupported Tensor.item() call")
    assert reasons[0]["file"].endswith("make_graph_break_fixtures.py")
    assert ".item()" in reasons[0]["code"] and "capture_scalar_outputs" in reasons[0]["hint"]
    assert first["restarts"] == len(json.loads(str(first["restart_reasons"]))) >= 1


def test_ranks_that_compiled_other_graphs_are_flagged(shared_traces: Path, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    src = shared_traces / "torch_trace"
    shutil.copy(src / "simple.log", logs / "dedicated_log_torch_trace_rank_0_a.log")
    shutil.copy(src / "simple.log", logs / "dedicated_log_torch_trace_rank_1_b.log")
    with gzip.open(logs / "dedicated_log_torch_trace_rank_2_c.log.gz", "wb") as fh:
        fh.write((src / "comp_failure.log").read_bytes())
    log = load_compile_log(logs, rank=1)
    assert [r["rank"] for r in log.table.to_pylist()] == [1]
    assert len(log.warnings) == 1 and "ranks 2 compiled other graphs than rank 0" in log.warnings[0]
    (logs / "dedicated_log_torch_trace_rank_2_c.log.gz").unlink()
    assert load_compile_log(logs, rank=0).warnings == ()
