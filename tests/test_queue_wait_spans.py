"""A request's annotated wait for the server moves its service start to where the wait ends
(rules' queue_wait).

The real-pair fixtures' requests each hold a `queue_wait` span (the recorder's FIFO ticket and
worker semaphore): the importer's start_us must be exactly where that span ends,
read here straight from the trace JSON; a trace without such spans keeps start = arrival.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import duckdb
import pytest

from workbench.store.ingest import ingest

ROOT = Path(__file__).resolve().parents[1]
PAIRS = ROOT / "tests" / "fixtures" / "real_pairs"
TORCH = ROOT / "tests" / "fixtures" / "torch"


def _requests(store: Path, prefix: str = "") -> list[tuple[float, float, float]]:
    glob = str(store / "requests" / "*" / "*.parquet")
    con = duckdb.connect()
    try:
        rows = con.execute(
            "SELECT arrival_us, start_us, latency_us FROM read_parquet(?) "
            "WHERE starts_with(name, ?) ORDER BY arrival_us",
            [glob, prefix],
        ).fetchall()
    finally:
        con.close()
    return [(float(a), float(s), float(lat)) for a, s, lat in rows]


def _annotated_waits(trace: Path) -> list[float]:
    """Where each request's queue_wait ends, from the request's start, in request order."""
    events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    spans = [e for e in events if e.get("ph") == "X" and e.get("cat") == "user_annotation"]
    reqs = sorted((e for e in spans if e["name"].startswith("request#")), key=lambda e: e["ts"])
    waits = [e for e in spans if e["name"] == "queue_wait"]
    out = []
    for r in reqs:
        lo, hi = r["ts"], r["ts"] + r["dur"]
        inside = [w for w in waits if w["tid"] == r["tid"] and lo <= w["ts"] < hi]
        assert len(inside) == 1, r["name"]
        out.append(float(inside[0]["ts"] + inside[0]["dur"] - lo))
    return out


def test_the_service_starts_when_the_annotated_wait_ends(tmp_path: Path) -> None:
    trace = PAIRS / "fixture-bursty_arrivals.failing.pt.trace.json.gz"
    store = tmp_path / "store"
    ingest(store, trace, run_id="bursty")
    rows = _requests(store, "request#")  # the warm-up calls are requests that never wait
    waits = _annotated_waits(trace)
    assert len(rows) == len(waits) > 100
    got = [s - a for a, s, _ in rows]
    assert got == pytest.approx(waits, abs=1e-3)
    # Bursty arrivals at one worker: most requests wait, and no wait outlasts its request.
    assert sum(w > 1000 for w in got) > len(got) // 2
    assert all(0 <= s - a <= lat for a, s, lat in rows)


def test_a_trace_without_wait_spans_starts_requests_at_arrival(tmp_path: Path) -> None:
    store = tmp_path / "store"
    ingest(store, TORCH / "aa_first.pt.trace.json.gz", run_id="aa")
    rows = _requests(store)
    assert rows and all(s == a for a, s, _ in rows)
