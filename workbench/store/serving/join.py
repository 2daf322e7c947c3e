"""Per-request serving records joined to a trace's engine steps (SERVING_SPEC, issue 35).

`join(records, steps, base_us) -> Joined`: the records on the trace clock and which engine steps
each request was a member of. Methods: "request_id" (the steps' `llm.seq#rid` members name the
records), "time" (steps without members: a request is taken as a member of the steps whose
detokenize span emitted its tokens), "records" (no steps: times shifted so the first arrival is
0). Epoch-clock records go onto the trace clock by `base_us`, the epoch time in microseconds of
the trace's stored ts 0; relative-clock records are aligned so the first arrival falls at the
first step's start, with a warning.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Final

import numpy as np
import numpy.typing as npt

from workbench.store.serving.engine_trace import EngineSteps
from workbench.store.serving.records import ServingRecord, ServingRecords

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]

METHODS: Final[tuple[str, ...]] = ("request_id", "time", "records")
# How far a record's token time may sit from the detokenize span that emitted it: the loop's
# clock and the profiler's agree to a few microseconds, not exactly.
EMIT_TOLERANCE_US: Final[float] = 100.0


@dataclass
class Joined:
    """Records on the trace clock, the steps, and the membership (record index, step index),
    sorted by record then step start; `matched` records were found in the steps."""

    records: ServingRecords
    steps: EngineSteps | None
    method: str  # one of METHODS
    matched: int
    warnings: list[str] = field(default_factory=list)
    member_record: I64 = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    member_step: I64 = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    unmatched_records: int = 0  # records not in any step
    unmatched_ids: int = 0  # request ids in the steps without a record


def _shift(recs: ServingRecords, by: float) -> ServingRecords:
    def one(r: ServingRecord) -> ServingRecord:
        return dataclasses.replace(
            r,
            arrival_us=r.arrival_us + by,
            end_us=r.end_us + by,
            token_us=[t + by for t in r.token_us],
        )

    return dataclasses.replace(recs, records=[one(r) for r in recs.records])


def _first_arrival(recs: ServingRecords) -> float:
    return min((r.arrival_us for r in recs.records), default=0.0)


def _overlaps(recs: ServingRecords, steps: EngineSteps) -> bool:
    lo = _first_arrival(recs)
    hi = max((r.end_us for r in recs.records), default=lo)
    return lo <= float(steps.end.max()) and hi >= float(steps.start.min())


def emitting_step(steps: EngineSteps, t: F64) -> I64:
    """Index of the step whose detokenize span holds each time, or the nearest one within
    EMIT_TOLERANCE_US of it (the last starting before it, or the next), else -1."""
    has = np.flatnonzero(np.isfinite(steps.detok_start))
    if has.size == 0 or t.size == 0:
        return np.full(t.size, -1, dtype=np.int64)
    ds, de = steps.detok_start[has], steps.detok_end[has]
    j = np.searchsorted(ds, t, side="right").astype(np.int64) - 1
    best = np.full(t.size, -1, dtype=np.int64)
    dist = np.full(t.size, np.inf)
    for cand in (j, j + 1):
        valid = (cand >= 0) & (cand < has.size)
        c = np.clip(cand, 0, has.size - 1)
        d = np.where(valid, np.maximum(0.0, np.maximum(ds[c] - t, t - de[c])), np.inf)
        better = d < dist
        best[better], dist[better] = has[c][better], d[better]
    return np.where(dist <= EMIT_TOLERANCE_US, best, -1)


def _by_id(recs: ServingRecords, steps: EngineSteps) -> tuple[I64, I64, int, int]:
    index = {r.request_id: i for i, r in enumerate(recs.records)}
    rec = np.asarray(
        [index.get(rid, -1) for rid in steps.member_request.tolist()], dtype=np.int64
    ).reshape(-1)
    ok = rec >= 0
    ids = set(steps.member_request.tolist())
    unknown = len(ids - index.keys())
    # A request named twice in one step is one membership.
    pairs = np.unique(np.stack([rec[ok], steps.member_step[ok]]), axis=1)
    return pairs[0], pairs[1], int(np.unique(pairs[0]).size), unknown


def _by_time(recs: ServingRecords, steps: EngineSteps) -> tuple[I64, I64]:
    owner = np.asarray(
        [i for i, r in enumerate(recs.records) for _ in r.token_us], dtype=np.int64
    ).reshape(-1)
    t = np.asarray([x for r in recs.records for x in r.token_us], dtype=np.float64).reshape(-1)
    j = emitting_step(steps, t)
    pairs = np.unique(np.stack([owner[j >= 0], j[j >= 0]]), axis=1)
    return pairs[0].astype(np.int64), pairs[1].astype(np.int64)


def join(records: ServingRecords, steps: EngineSteps | None, base_us: float) -> Joined:
    """The records joined to the engine steps (see the module docstring for the methods)."""
    warnings: list[str] = []
    n = len(records.records)
    if steps is None or steps.n == 0:
        shifted = _shift(records, -_first_arrival(records))
        return Joined(shifted, None, "records", 0, warnings, unmatched_records=n)
    # A trace states no base time as 0.0 (importers.protocol.Decoded).
    if records.clock == "epoch" and math.isfinite(base_us) and base_us > 0:
        shifted = _shift(records, -base_us)
        if not _overlaps(shifted, steps):
            warnings.append(
                "the records' times do not overlap the engine steps' on the trace clock "
                f"(trace base {base_us:.0f} us since the epoch): the clocks may disagree"
            )
    else:
        first = _first_arrival(records)
        at = float(steps.start[0])
        why = "a relative clock" if records.clock != "epoch" else "an epoch clock, no trace base"
        warnings.append(
            f"records are on {why}: aligned so the first arrival falls at the first engine "
            f"step's start ({at:.0f} us on the trace clock)"
        )
        shifted = _shift(records, at - first)
    if steps.member_step.size:
        rec, step, matched, unknown = _by_id(shifted, steps)
        method = "request_id"
        if matched < n:
            warnings.append(f"{matched} of {n} records matched engine steps by request id")
        if unknown:
            warnings.append(f"{unknown} request ids in the engine steps have no record")
    else:
        rec, step = _by_time(shifted, steps)
        method, unknown = "time", 0
        matched = int(np.unique(rec).size)
        warnings.append(
            "the engine steps name no members (no llm.seq spans): joined by time, a request "
            f"taken as a member of the steps that emitted its tokens ({matched} of {n} records)"
        )
    order = np.lexsort((steps.start[step], rec))
    return Joined(
        shifted,
        steps,
        method,
        matched,
        warnings,
        member_record=rec[order],
        member_step=step[order],
        unmatched_records=n - matched,
        unmatched_ids=unknown,
    )
