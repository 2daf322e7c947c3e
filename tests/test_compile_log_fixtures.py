"""read_compile_log on real torch 2.13 TORCH_TRACE logs, checked against the Kineto trace of the
same process (tests/fixtures/torch, made by make_torch_fixtures.py)."""

from __future__ import annotations

import gzip
import json
import re
import shutil
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from workbench.errors import WorkbenchError
from workbench.store.importers.compile_log.compile_log import read_compile_log
from workbench.store.schema import COMPILES_FILE

FIXTURES = Path(__file__).parent / "fixtures" / "torch"
FAILING = "serving_static_failing"
COMPARATOR = "serving_dynamic_comparator"
RERUN = "serving_static_rerun"
LOG_NAME = "dedicated_log_torch_trace.log.gz"


def log_dir(stem: str) -> Path:
    return FIXTURES / f"{stem}.torch_trace"


@cache
def rows(stem: str) -> list[dict[str, Any]]:
    return read_compile_log(log_dir(stem)).to_pylist()


@cache
def kineto(stem: str) -> dict[str, Any]:
    with gzip.open(FIXTURES / f"{stem}.pt.trace.json.gz", "rt", encoding="utf-8") as fh:
        data: dict[str, Any] = json.load(fh)
    return data


def spans(stem: str) -> list[dict[str, Any]]:
    return [e for e in kineto(stem)["traceEvents"] if e.get("ph") == "X"]


def marker_ids(stem: str, prefix: str) -> set[str]:
    """Compile ids of dynamo_timed markers like 'dynamo_data: compile_id=0/3'."""
    pat = re.compile(rf"^{re.escape(prefix)}_data: (?:.*, )?compile_id=(\S+)$")
    return {m.group(1) for e in spans(stem) if (m := pat.match(e["name"]))}


def region_ids(stem: str) -> set[str]:
    prefix = "Torch-Compiled Region: "
    return {e["name"][len(prefix) :] for e in spans(stem) if e["name"].startswith(prefix)}


def to_trace_us(stem: str, epoch_us: float) -> float:
    return epoch_us - kineto(stem)["baseTimeNanoseconds"] / 1000.0


def test_schema_and_one_row_per_compilation_seen_in_kineto() -> None:
    for stem in (FAILING, COMPARATOR, RERUN):
        table = read_compile_log(log_dir(stem))
        assert table.schema == COMPILES_FILE
        ids = table.column("compile_id").to_pylist()
        assert len(ids) == len(set(ids))
        # Every Dynamo entry into a frame (compiled or refused) leaves a 'dynamo' span.
        assert set(ids) == marker_ids(stem, "dynamo"), stem


def test_failing_run_recompiles_until_the_limit_then_falls_back() -> None:
    r = rows(FAILING)
    assert [x["compile_id"] for x in r] == [f"0/{i}" for i in range(9)]
    compiled = [x for x in r if x["fail_reason"] is None]
    failed = [x for x in r if x["fail_reason"] is not None]
    # recompile_limit = 8 in the generator: 8 graphs, the 9th attempt is refused.
    assert len(compiled) == 8 and [x["compile_id"] for x in failed] == ["0/8"]
    assert {x["compile_id"] for x in compiled} == marker_ids(FAILING, "backend_compile")
    assert {x["compile_id"] for x in compiled} == region_ids(FAILING)
    assert "recompile limit" in failed[0]["fail_reason"].lower()
    assert failed[0]["fail_reason"].startswith("Unsupported: Dynamo recompile limit exceeded")
    assert failed[0]["guard_count"] is None and failed[0]["graph_op_count"] is None
    assert failed[0]["aot_us"] is None and failed[0]["cache_hit"] is None


def test_recompile_reasons_name_an_earlier_compilation() -> None:
    for stem in (FAILING, COMPARATOR):
        r = rows(stem)
        assert r[0]["recompile_reason"] is None
        for x in r[1:]:
            reason = x["recompile_reason"]
            assert reason and "size mismatch" in reason, (stem, x)
            frame, earlier = re.match(r"^(\d+)/(\d+): ", reason).groups()  # type: ignore[union-attr]
            own = int(x["compile_id"].split("/")[1])
            assert frame == "0" and int(earlier) < own


def test_requests_after_the_refused_compile_run_eager_on_new_shapes() -> None:
    refused = next(x for x in rows(FAILING) if x["fail_reason"] is not None)
    limit_ts = to_trace_us(FAILING, refused["start_us"])
    ev = spans(FAILING)
    regions = [e for e in ev if e["name"].startswith("Torch-Compiled Region: ")]
    requests = [e for e in ev if re.fullmatch(r"request#\d+", e["name"])]
    assert len(requests) == 80
    eager = [
        r for r in requests if not any(r["ts"] <= g["ts"] < r["ts"] + r["dur"] for g in regions)
    ]
    assert eager, "no request fell back to eager"
    assert all(r["ts"] + r["dur"] >= limit_ts for r in eager)
    # The comparator (dynamic=True) never leaves compiled code.
    cmp_regions = [e for e in spans(COMPARATOR) if e["name"].startswith("Torch-Compiled Region")]
    cmp_requests = [e for e in spans(COMPARATOR) if re.fullmatch(r"request#\d+", e["name"])]
    assert all(
        any(r["ts"] <= g["ts"] < r["ts"] + r["dur"] for g in cmp_regions) for r in cmp_requests
    )


def test_start_times_align_with_the_kineto_dynamo_spans() -> None:
    for stem in (FAILING, RERUN):
        ev = sorted(spans(stem), key=lambda e: e["ts"])
        markers = {
            m.group(1): e
            for e in ev
            if (m := re.match(r"^dynamo_data: compile_id=(\S+)$", e["name"]))
        }
        outer = {
            cid: next(
                p for p in ev if p["name"] == "dynamo" and p["ts"] <= mk["ts"] <= p["ts"] + p["dur"]
            )
            for cid, mk in markers.items()
        }
        for x in rows(stem):
            span = outer[x["compile_id"]]
            start = to_trace_us(stem, x["start_us"])
            assert span["ts"] <= start <= start + x["duration_us"] <= span["ts"] + span["dur"]


def test_phases_are_exclusive_and_sum_to_the_duration() -> None:
    for stem in (FAILING, COMPARATOR, RERUN):
        for x in rows(stem):
            phases = [x[k] for k in ("dynamo_us", "aot_us", "inductor_us", "codegen_us")]
            known = [p for p in phases if p is not None]
            assert all(p >= 0 for p in known)
            assert sum(known) == pytest.approx(x["duration_us"], abs=1.0)
    # Fresh Inductor compiles spend most of their time in C++ codegen on CPU.
    assert all(x["codegen_us"] > x["dynamo_us"] for x in rows(FAILING) if x["codegen_us"])


def test_cache_hit_separates_cold_compiles_from_the_warm_cache_rerun() -> None:
    cold = {x["compile_id"]: x for x in rows(FAILING) if x["fail_reason"] is None}
    warm = {x["compile_id"]: x for x in rows(RERUN) if x["fail_reason"] is None}
    assert cold.keys() == warm.keys()
    assert all(x["cache_hit"] is False for x in cold.values())
    assert all(x["cache_hit"] is True for x in warm.values())
    # A cache hit skips Inductor codegen altogether.
    assert all(x["codegen_us"] is None for x in warm.values())
    faster = sum(warm[c]["duration_us"] < cold[c]["duration_us"] for c in cold)
    assert faster == len(cold)


def test_guard_and_op_counts_come_from_the_log() -> None:
    for x in rows(FAILING)[:8]:
        assert x["guard_count"] > 0 and x["graph_op_count"] > 0
    # dynamic=True traces a larger graph (symbolic size arithmetic) than the static one.
    assert rows(COMPARATOR)[1]["graph_op_count"] > rows(FAILING)[1]["graph_op_count"]


def test_file_directory_and_plain_text_give_the_same_table(tmp_path: Path) -> None:
    gz = log_dir(FAILING) / LOG_NAME
    plain = tmp_path / "dedicated_log_torch_trace_abc.log"
    with gzip.open(gz, "rb") as src, open(plain, "wb") as dst:
        shutil.copyfileobj(src, dst)
    expected = read_compile_log(log_dir(FAILING))
    assert read_compile_log(gz).equals(expected)
    assert read_compile_log(plain).equals(expected)
    assert read_compile_log(tmp_path).equals(expected)


def test_directory_with_several_ranks_needs_a_rank(tmp_path: Path) -> None:
    shutil.copy(log_dir(FAILING) / LOG_NAME, tmp_path / "dedicated_log_torch_trace_rank_0_x.log.gz")
    shutil.copy(
        log_dir(COMPARATOR) / LOG_NAME, tmp_path / "dedicated_log_torch_trace_rank_1_y.log.gz"
    )
    with pytest.raises(WorkbenchError, match=r"ranks 0, 1"):
        read_compile_log(tmp_path)
    assert read_compile_log(tmp_path, rank=1).num_rows == len(rows(COMPARATOR))
    assert read_compile_log(tmp_path, rank=0).num_rows == len(rows(FAILING))
    with pytest.raises(WorkbenchError, match=r"rank 2"):
        read_compile_log(tmp_path, rank=2)


def _rewrite_metrics(tmp_path: Path, edit: Any) -> Path:
    """The failing log with every compilation_metrics record passed through edit(dict)."""
    out = tmp_path / "edited.log"
    with gzip.open(log_dir(FAILING) / LOG_NAME, "rt", encoding="utf-8") as fh:
        lines = fh.read().split("\n")
    for i, line in enumerate(lines):
        if '{"compilation_metrics"' in line:
            head, _, body = line.partition("] ")
            record = json.loads(body)
            record["compilation_metrics"] = edit(record["compilation_metrics"])
            lines[i] = f"{head}] {json.dumps(record)}"
    out.write_text("\n".join(lines), encoding="utf-8")
    return out


def test_older_torch_keys_and_the_recompile_reasons_artifact(tmp_path: Path) -> None:
    """Without the microsecond keys and recompile_reason (torch < 2.6) the same figures result,
    from the seconds timers and the separate recompile_reasons artifact."""
    new_keys = re.compile(r"_us$|^recompile_reason$")

    def older(m: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in m.items() if not new_keys.search(k)}

    old = read_compile_log(_rewrite_metrics(tmp_path, older)).to_pylist()
    new = rows(FAILING)
    assert [x["compile_id"] for x in old] == [x["compile_id"] for x in new]
    for a, b in zip(old, new, strict=True):
        assert a["recompile_reason"] == b["recompile_reason"]
        for key in ("start_us", "duration_us", "dynamo_us", "aot_us", "inductor_us"):
            if b[key] is None:
                assert a[key] is None
            else:
                assert a[key] == pytest.approx(b[key], abs=2.0), key


def test_runtime_records_are_not_compilations(tmp_path: Path) -> None:
    def runtime_for_first(m: dict[str, Any]) -> dict[str, Any]:
        return {**m, "is_runtime": m["compile_id"] == "0/0"}

    ids = read_compile_log(_rewrite_metrics(tmp_path, runtime_for_first)).column("compile_id")
    assert ids.to_pylist() == [f"0/{i}" for i in range(1, 9)]


def test_a_rank_does_not_exclude_an_unranked_log() -> None:
    """A Kineto trace may name its rank while the TORCH_TRACE file (no process group) does not."""
    assert read_compile_log(log_dir(FAILING), rank=0).num_rows == len(rows(FAILING))
