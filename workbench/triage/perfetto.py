"""An A/B trace for Perfetto UI: the failing and the comparator run as two adjacent processes in
Chrome Trace Event JSON, the tail request and its twin starting at the same ts, with the verdict
and its findings on an incident track (perfetto_findings.py) and queue-depth counters.

Each request is a `user_annotation` slice (what our Kineto importer takes for a request) from
arrival to end, packed onto lanes so that no two slices of a thread overlap; its children are
its exclusive stage times laid out in pipeline order (their sizes, not the order the events ran
in). Nothing here is guessed: every number comes from the store's requests table or the triage.
"""

from __future__ import annotations

import heapq
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import duckdb
import numpy as np
import pyarrow as pa

from accel.stages import OTHER, STAGES
from workbench.errors import WorkbenchError
from workbench.store import db
from workbench.triage.perfetto_findings import incident_events
from workbench.triage.triage import TriageResult
from workbench.triage.triage_claims import jsonable
from workbench.triage.twins import PickedRequest, twin_pair

F64 = np.ndarray[Any, np.dtype[np.float64]]
TAIL_Q: Final[float] = 0.99  # the drill-down's "p99 request" (request_screen.DrillTarget.q)
# Requests per run written at most: those nearest in arrival to the tail request (or its twin).
# ~1 KB of JSON each, so a run's share stays near 50 MB, which Perfetto UI loads in a tab.
MAX_REQUESTS: Final[int] = 50_000
INCIDENT_PID, FAILING_PID, COMPARATOR_PID = 1, 2, 3
REQUEST_CAT: Final[str] = "user_annotation"  # workbench/store/attribution/rules/default.toml
STAGE_CAT: Final[str] = "stage"  # not an annotation category: never a request when read back
COUNTER: Final[str] = "queue depth"
STAGE_LAYOUT: Final[str] = (
    "each request's children are its exclusive stage times (ingress, lowering, scheduling, "
    "execution, assembly, other) laid out in pipeline order: their sizes, not when they ran"
)


@dataclass(frozen=True)
class Tail:
    """The request a run is aligned on: the failing run's p99 request or its comparator twin."""

    run_id: str
    request_id: str
    shape_key: str | None
    latency_us: float
    arrival_us: float
    n_requests: int  # how many requests its quantile was taken over
    note: str = ""  # why this request (the comparator has no request of the tail's shape)


@dataclass(frozen=True)
class RunRequests:
    """One run's requests in arrival order, as numpy arrays (what run_requests.sql returns)."""

    request_id: list[str]
    shape_key: list[str | None]
    arrival: F64
    start: F64
    latency: F64
    stages: F64  # (n, 6): STAGES then other, exclusive us
    batch_id: list[int | None]
    batch_size: list[int | None]

    @property
    def n(self) -> int:
        return len(self.request_id)

    def take(self, idx: np.ndarray[Any, np.dtype[np.intp]]) -> RunRequests:
        pick = idx.tolist()
        return RunRequests(
            request_id=[self.request_id[i] for i in pick],
            shape_key=[self.shape_key[i] for i in pick],
            arrival=self.arrival[idx],
            start=self.start[idx],
            latency=self.latency[idx],
            stages=self.stages[idx],
            batch_id=[self.batch_id[i] for i in pick],
            batch_size=[self.batch_size[i] for i in pick],
        )


def _tail(p: PickedRequest, note: str = "") -> Tail:
    if not math.isfinite(p.arrival_us):
        raise WorkbenchError(repr(p.request_id), f"request of run {p.run_id!r} has no arrival time")
    return Tail(
        run_id=p.run_id,
        request_id=p.request_id,
        shape_key=p.shape_key,
        latency_us=p.latency_us,
        arrival_us=p.arrival_us,
        n_requests=p.n_requests,
        note=note,
    )


def tail_pair(con: duckdb.DuckDBPyConnection, failing: str, comparator: str) -> tuple[Tail, Tail]:
    """The failing run's p99 request by latency and its twin (workbench.triage.twins): the pair
    the app's drill-down (`o`) opens."""
    tail, twin, note = twin_pair(con, failing, comparator, q=TAIL_Q)
    if tail is None:
        raise WorkbenchError(repr(failing), "failing run has no requests to export")
    if twin is None:
        raise WorkbenchError(repr(comparator), "comparator run has no requests to export")
    return _tail(tail), _tail(twin, note)


def _floats(t: pa.Table, name: str) -> F64:
    return np.asarray(t.column(name).to_numpy(zero_copy_only=False), dtype=np.float64)


def run_requests(con: duckdb.DuckDBPyConnection, run_id: str) -> tuple[RunRequests, int]:
    """The run's requests with a finite arrival and a finite latency >= 0, and how many were
    left out for lacking them."""
    t = db.query(con, "run_requests", {"run_id": run_id, "skip_requests": []})
    arrival, start, latency = (_floats(t, c) for c in ("arrival_us", "start_us", "latency_us"))
    stages = np.column_stack([_floats(t, f"{s}_us") for s in (*STAGES, OTHER)])
    ok = np.isfinite(arrival) & np.isfinite(latency) & (latency >= 0)
    start = np.where(np.isfinite(start), start, arrival)
    reqs = RunRequests(
        request_id=[str(v) for v in t.column("request_id").to_pylist()],
        shape_key=t.column("shape_key").to_pylist(),
        arrival=arrival,
        start=start,
        latency=latency,
        stages=np.where(np.isfinite(stages) & (stages > 0), stages, 0.0),
        batch_id=t.column("batch_id").to_pylist(),
        batch_size=t.column("batch_size").to_pylist(),
    )
    kept = np.flatnonzero(ok)
    return (reqs if kept.size == reqs.n else reqs.take(kept)), int(reqs.n - kept.size)


def _window(reqs: RunRequests, around_us: float) -> RunRequests:
    """At most MAX_REQUESTS requests: those nearest in arrival to `around_us`."""
    if reqs.n <= MAX_REQUESTS:
        return reqs
    near = np.argsort(np.abs(reqs.arrival - around_us), kind="stable")[:MAX_REQUESTS]
    return reqs.take(np.sort(near))


def lanes(begin: F64, end: F64) -> list[int]:
    """A lane per interval (in begin order) such that the intervals of a lane never meet: the
    lowest lane whose last interval ended strictly before. (A slice that only touches the one
    before it, or has no length, would read back as nested in it: one request fewer.)"""
    free: list[int] = []  # lanes whose last interval has ended
    busy: list[tuple[float, int]] = []  # (end, lane)
    out: list[int] = []
    for b, e in zip(begin.tolist(), end.tolist(), strict=True):
        while busy and busy[0][0] < b:
            heapq.heappush(free, heapq.heappop(busy)[1])
        lane = heapq.heappop(free) if free else len(busy)
        heapq.heappush(busy, (e, lane))
        out.append(lane)
    return out


def stage_spans(ts: float, stages: F64, end: float) -> list[tuple[str, float, float]]:
    """(stage, ts, dur) of a request's non-empty exclusive stage times in pipeline order from
    `ts`, each clamped to end by `end` (float sums must not poke out of the request)."""
    out: list[tuple[str, float, float]] = []
    at = ts
    for name, d in zip((*STAGES, OTHER), stages.tolist(), strict=True):
        if d <= 0:
            continue
        stop = min(at + d, end)
        if stop > at:
            out.append((name, at, stop - at))
        at = stop
    return out


def _meta(pid: int, name: str, sort_index: int, labels: str) -> list[dict[str, Any]]:
    return [
        {"ph": "M", "name": "process_name", "pid": pid, "args": {"name": name}},
        {"ph": "M", "name": "process_sort_index", "pid": pid, "args": {"sort_index": sort_index}},
        {"ph": "M", "name": "process_labels", "pid": pid, "args": {"labels": labels}},
    ]


def _run_events(
    pid: int, role: str, reqs: RunRequests, ts: F64, aligned: Tail, counters: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A run's request and stage slices on packed lanes, its counters; and where its aligned
    request went (ts, dur and stage spans: what the incident track annotates)."""
    end = ts + reqs.latency
    lane_of = lanes(ts, end)
    events: list[dict[str, Any]] = []
    for lane in range(max(lane_of, default=-1) + 1):
        events.append(
            {
                "ph": "M",
                "name": "thread_name",
                "pid": pid,
                "tid": lane + 1,
                "args": {"name": f"requests {lane + 1}"},
            }
        )
    placed: dict[str, Any] = {}
    for i, rid in enumerate(reqs.request_id):
        t0, t1, tid = float(ts[i]), float(end[i]), lane_of[i] + 1
        args: dict[str, Any] = {
            "request_id": rid,
            "shape_key": reqs.shape_key[i],
            "latency_us": float(reqs.latency[i]),
            "queue_wait_us": float(reqs.start[i] - reqs.arrival[i]),
            "batch_id": reqs.batch_id[i],
            "batch_size": reqs.batch_size[i],
        }
        spans = stage_spans(t0, reqs.stages[i], t1)
        if rid == aligned.request_id and reqs.arrival[i] == aligned.arrival_us and not placed:
            args["aligned"] = f"{role} p99 request" if role == "failing" else "twin of the tail"
            placed = {"ts": t0, "dur": t1 - t0, "stages": spans}
        name = f"request {rid}"
        events.append(
            {"ph": "X", "cat": REQUEST_CAT, "name": name, "pid": pid, "tid": tid, "ts": t0}
            | {"dur": t1 - t0, "args": args}
        )
        events.extend(
            {"ph": "X", "cat": STAGE_CAT, "name": s, "pid": pid, "tid": tid, "ts": a, "dur": d}
            for s, a, d in spans
        )
    return events + counters, placed


def queue_counters(
    pid: int, reqs: RunRequests, shift: float, lo: float, hi: float
) -> list[dict[str, Any]]:
    """Queue depth over time: requests arrived but not started ("waiting") and started but not
    ended ("in service"), at every change within [lo, hi] (shifted times)."""
    arrival, start = reqs.arrival + shift, reqs.start + shift
    end = reqs.arrival + reqs.latency + shift
    a, s, e = np.sort(arrival), np.sort(start), np.sort(end)
    times = np.unique(np.concatenate([a, s, e]))
    times = times[(times >= lo) & (times <= hi)]
    arrived = np.searchsorted(a, times, side="right")
    started = np.searchsorted(s, times, side="right")
    ended = np.searchsorted(e, times, side="right")
    waiting = np.maximum(arrived - started, 0).tolist()
    serving = np.maximum(started - ended, 0).tolist()
    return [
        {"ph": "C", "name": COUNTER, "pid": pid, "tid": 0, "ts": t}
        | {"args": {"waiting": w, "in service": v}}
        for t, w, v in zip(times.tolist(), waiting, serving, strict=True)
    ]


def comparison_trace(store: Path, result: TriageResult) -> dict[str, Any]:
    """The Chrome Trace Event document of the triage's pair (see the module docstring):
    JSON-safe (no NaN), ts in us from 0, the tail request and its twin at the same ts."""
    con = db.connect(store)
    try:
        tail, twin = tail_pair(con, result.failing, result.comparator)
        f_all, f_skipped = run_requests(con, result.failing)
        c_all, c_skipped = run_requests(con, result.comparator)
    finally:
        con.close()
    for run_id, reqs in ((result.failing, f_all), (result.comparator, c_all)):
        if reqs.n == 0:
            raise WorkbenchError(repr(run_id), "no request with a finite arrival and latency")
    f_reqs, c_reqs = _window(f_all, tail.arrival_us), _window(c_all, twin.arrival_us)
    # Both runs' times are offsets from their aligned request, placed at one anchor: the two
    # then start at exactly the same ts, and the earliest request of either run at >= 0.
    anchor = max(tail.arrival_us - float(f_reqs.arrival.min()), 0.0)
    anchor = max(anchor, twin.arrival_us - float(c_reqs.arrival.min()))
    shift_f, shift_c = anchor - tail.arrival_us, anchor - twin.arrival_us
    events: list[dict[str, Any]] = []
    placed: dict[str, dict[str, Any]] = {}
    runs = (
        ("failing", FAILING_PID, f_reqs, f_all, tail, shift_f),
        ("comparator", COMPARATOR_PID, c_reqs, c_all, twin, shift_c),
    )
    for sort_index, (role, pid, shown, every, aligned, shift) in enumerate(runs, 1):
        ts = np.maximum((shown.arrival - aligned.arrival_us) + anchor, 0.0)
        lo, hi = float(ts.min()), float((ts + shown.latency).max())
        counters = queue_counters(pid, every, shift, lo, hi)
        labels = f"aligned on request {aligned.request_id}; times shifted {shift:+.3f} us"
        events += _meta(pid, f"{role} {aligned.run_id}", sort_index, labels)
        run_events, placed[role] = _run_events(pid, role, shown, ts, aligned, counters)
        events += run_events
    events += _meta(
        INCIDENT_PID, f"triage {result.failing} vs {result.comparator}", 0, "verdict, findings"
    )
    events += incident_events(INCIDENT_PID, result, placed["failing"], placed["comparator"])
    other = {
        "generator": "incident workbench (workbench export --perfetto)",
        "failing": result.failing,
        "comparator": result.comparator,
        "hardware": result.hardware,
        "tail": _tail_doc(tail, shift_f),
        "twin": _tail_doc(twin, shift_c),
        "requests": {
            role: {"shown": shown.n, "in_run": every.n, "left_out_invalid": skipped}
            for role, shown, every, skipped in (
                ("failing", f_reqs, f_all, f_skipped),
                ("comparator", c_reqs, c_all, c_skipped),
            )
        },
        "max_requests_per_run": MAX_REQUESTS,
        "stage_layout": STAGE_LAYOUT,
        "time_unit": "us",
    }
    doc: dict[str, Any] = jsonable(
        {
            "traceEvents": events,
            "displayTimeUnit": "ms",
            # Kineto's header: HTA and our importer read the rank from it.
            "distributedInfo": {"rank": 0},
            "otherData": other,
        }
    )
    return doc


def _tail_doc(t: Tail, shift: float) -> dict[str, Any]:
    return {
        "run_id": t.run_id,
        "request_id": t.request_id,
        "shape_key": t.shape_key,
        "latency_us": t.latency_us,
        "quantile": TAIL_Q,
        "n_requests": t.n_requests,
        "time_shift_us": shift,
        "note": t.note,
    }


def trace_text(doc: dict[str, Any]) -> str:
    """The document as JSON text: NaN refused (comparison_trace writes none), every string
    escaped by the encoder (quotes, newlines, control characters, non-ASCII). The default
    separators: HTA finds a trace's rank with the pattern `"rank":\\s+\\d`."""
    try:
        return json.dumps(doc, allow_nan=False) + "\n"
    except ValueError as exc:  # pragma: no cover - jsonable() turned every NaN into null
        raise WorkbenchError("perfetto trace", f"not JSON-safe: {exc}") from exc
