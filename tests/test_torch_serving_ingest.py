"""The real torch.compile serving fixtures through ingest: requests, compile spans, and the
compiles table joined to events by compile id in plain duckdb (no workbench code on the read)."""

from __future__ import annotations

import gzip
import itertools
import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import duckdb
import pytest

from workbench.store.importers.compile_log.compile_log import read_compile_log
from workbench.store.ingest import ingest

FIXTURES = Path(__file__).parent / "fixtures" / "torch"
RUNS = {
    "failing": "serving_static_failing",
    "comparator": "serving_dynamic_comparator",
}
REQUEST = r"^request#\d+$"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("torch_store") / "store"
    for run_id, stem in RUNS.items():
        ingest(
            root,
            FIXTURES / f"{stem}.pt.trace.json.gz",
            run_id=run_id,
            compile_log=FIXTURES / f"{stem}.torch_trace",
            request_pattern=REQUEST,
        )
    return root


@cache
def annotations(stem: str) -> dict[str, dict[str, Any]]:
    """request#i -> its Kineto span, read with the standard library."""
    with gzip.open(FIXTURES / f"{stem}.pt.trace.json.gz", "rt", encoding="utf-8") as fh:
        events = json.load(fh)["traceEvents"]
    return {e["name"]: e for e in events if e.get("ph") == "X" and re.match(REQUEST, e["name"])}


def plain(store: Path) -> duckdb.DuckDBPyConnection:
    """duckdb over the store's Parquet files as any reader would open them."""
    con = duckdb.connect()
    for table in ("events", "requests", "compiles"):
        con.sql(
            "SELECT * FROM read_parquet($glob, hive_partitioning = true)",
            params={"glob": str(store / table / "*" / "*.parquet")},
        ).create_view(table)
    return con


def rows(con: duckdb.DuckDBPyConnection, sql: str, **params: Any) -> list[dict[str, Any]]:
    rel = con.execute(sql, params)
    names = [d[0] for d in rel.description]
    return [dict(zip(names, r, strict=True)) for r in rel.fetchall()]


def test_one_request_per_request_annotation(store: Path) -> None:
    con = plain(store)
    for run_id, stem in RUNS.items():
        got = rows(
            con,
            "SELECT name, latency_us FROM requests WHERE run_id = $run ORDER BY start_us",
            run=run_id,
        )
        spans = annotations(stem)
        assert len(got) == len(spans) == 80
        assert [r["name"] for r in got] == [f"request#{i}" for i in range(80)]
        for r in got:
            assert r["latency_us"] == pytest.approx(spans[r["name"]]["dur"], abs=0.01)


def test_each_compilation_is_one_outermost_lowering_span(store: Path) -> None:
    con = plain(store)
    for run_id, stem in RUNS.items():
        logged = read_compile_log(FIXTURES / f"{stem}.torch_trace").column("compile_id")
        flagged = rows(
            con,
            "SELECT name, stage, compile_id, tid, ts_us, dur_us FROM events "
            "WHERE run_id = $run AND recompile ORDER BY ts_us",
            run=run_id,
        )
        assert sorted(f["compile_id"] for f in flagged) == sorted(logged.to_pylist())
        assert {f["stage"] for f in flagged} == {"lowering"}
        assert {f["name"] for f in flagged} == {"dynamo"}
        # Outermost only: no flagged span nests in or overlaps another on its thread.
        for a, b in itertools.pairwise(flagged):
            assert a["tid"] != b["tid"] or a["ts_us"] + a["dur_us"] <= b["ts_us"]
        nested = rows(
            con,
            "SELECT count(*) AS n FROM events i JOIN events o ON i.run_id = o.run_id "
            "AND i.tid = o.tid AND i.event_id <> o.event_id AND o.recompile "
            "AND i.ts_us >= o.ts_us AND i.ts_us + i.dur_us <= o.ts_us + o.dur_us "
            "WHERE o.run_id = $run AND i.compile_id = o.compile_id",
            run=run_id,
        )
        # The spans inside a compilation carry its id too (the join key for its phases).
        assert nested[0]["n"] > 0
        # Guard checks on every call but the first (empty cache) are not compilations.
        lookups = rows(
            con,
            "SELECT count(*) AS n, count(*) FILTER (WHERE recompile) AS flagged FROM events "
            "WHERE run_id = $run AND name = 'TorchDynamo Cache Lookup'",
            run=run_id,
        )
        assert lookups[0]["n"] == 3 + 80 - 1 and lookups[0]["flagged"] == 0


def test_compiles_join_events_by_compile_id(store: Path) -> None:
    con = plain(store)
    joined = rows(
        con,
        "SELECT c.run_id, c.compile_id, c.start_us, c.duration_us, c.fail_reason, "
        "e.ts_us, e.dur_us, e.request_id "
        "FROM compiles c JOIN events e ON e.run_id = c.run_id AND e.compile_id = c.compile_id "
        "WHERE e.recompile ORDER BY c.run_id, c.start_us",
    )
    per_run = {r: [j for j in joined if j["run_id"] == r] for r in RUNS}
    assert len(per_run["failing"]) == 9 and len(per_run["comparator"]) == 2
    for j in joined:
        # Both on the run's clock: the log's timing sits inside the profiler's dynamo span.
        assert j["ts_us"] <= j["start_us"] <= j["ts_us"] + 1000.0
        assert j["start_us"] + j["duration_us"] <= j["ts_us"] + j["dur_us"]
    failing = per_run["failing"]
    # Three compiles at warm-up (outside any request), five recompiles inside requests,
    # then the refused one at the recompile limit.
    assert [j["request_id"] is None for j in failing] == [True] * 3 + [False] * 6
    assert [j["fail_reason"] is not None for j in failing] == [False] * 8 + [True]
    assert all(j["request_id"] is None for j in per_run["comparator"])


def test_recompiling_requests_carry_their_compile_time_as_lowering(store: Path) -> None:
    con = plain(store)
    got = rows(
        con,
        "SELECT r.name, r.lowering_us, sum(c.duration_us) AS compile_us "
        "FROM requests r JOIN events e ON e.run_id = r.run_id AND e.request_id = r.request_id "
        "JOIN compiles c ON c.run_id = e.run_id AND c.compile_id = e.compile_id "
        "WHERE r.run_id = 'failing' AND e.recompile GROUP BY r.name, r.lowering_us "
        "ORDER BY min(r.start_us)",
    )
    assert [g["name"] for g in got] == [f"request#{i}" for i in (36, 37, 41, 43, 44, 45)]
    for g in got:
        assert g["lowering_us"] >= g["compile_us"]
    tail = rows(
        con,
        "SELECT run_id, quantile_cont(latency_us, 0.95) AS p95 FROM requests GROUP BY run_id",
    )
    p95 = {t["run_id"]: t["p95"] for t in tail}
    # Recompiles put whole seconds into the failing run's tail; the comparator stays sub-10 ms.
    assert p95["failing"] > 1e6 and p95["comparator"] < 1e4
