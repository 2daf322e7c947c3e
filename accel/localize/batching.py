"""The ingress swap: the failing run's latency under its own batching policy and under the
comparator's, both through one simulated batcher fitted to the failing run."""

from __future__ import annotations

import bisect
import math

import numpy as np

from accel.cost import run_starts
from accel.localize.requeue import QueueState, batch_heads, batch_ids
from accel.ops import F64, I64, OpArrays, RequestArrays


def policy(q: QueueState, req: RequestArrays) -> tuple[int, float]:
    """A run's batching policy as observed: its largest batch and its longest usual hold."""
    cap = int(np.max(req.batch_size)) if req.size else 1
    return max(cap, 1), float(np.quantile(q.hold, 0.95)) if q.hold.size else 0.0


def _simulate_batcher(
    arrival: F64, work: F64, other: F64, fixed: float, per_work: float, cap: int, hold: float
) -> F64:
    """Latency per request under a batcher that dispatches when the server is free, taking
    what has arrived (up to `cap`), holding a batch up to `hold` us for it to fill.

    Batch service = fixed + per_work * batch work (size x largest member's work: padding).
    Sequential by nature (each dispatch depends on the last); one step per batch.
    """
    n = arrival.size
    order = np.argsort(arrival, kind="stable")
    # Python lists: the loop reads single values, which numpy scalars make several times slower.
    a, w = arrival[order].tolist(), work[order].tolist()
    done = np.empty(n)
    free = -math.inf
    i = 0
    while i < n:
        full_at = a[i + cap - 1] if i + cap - 1 < n else math.inf
        dispatch = max(free, min(full_at, a[i] + hold))
        j = max(min(i + cap, bisect.bisect_right(a, dispatch)), i + 1)
        end = dispatch + fixed + per_work * (j - i) * max(w[i:j])
        done[i:j] = end
        free, i = end, j
    lat = np.empty(n)
    lat[order] = done - arrival[order]
    return np.asarray(lat + other, dtype=np.float64)


def _own_work(padded: F64, size: F64, batch: I64, arrival: F64) -> F64:
    """Each request's own work, estimated: a batch is padded to its largest member, so one
    member (taken as the first) keeps the padded work and the others get the median work of
    requests served alone that fit under it (singletons show the unpadded distribution)."""
    alone = np.sort(padded[size <= 1])
    if not alone.size:
        return padded
    idx = np.searchsorted(alone, padded, side="right")
    cond = np.where(idx > 0, alone[np.maximum(idx - 1, 0) // 2], padded)
    order = np.lexsort((arrival, batch))
    first = np.zeros(batch.size, dtype=bool)
    first[order[run_starts(batch[order])]] = True
    return np.asarray(np.where(first | (size <= 1), padded, cond), dtype=np.float64)


def batch_swap(
    fr: RequestArrays, cr: RequestArrays, fq: QueueState, cq: QueueState, ops: OpArrays
) -> tuple[F64, F64]:
    """Failing's latency under its own batching and under the comparator's (same model)."""
    stage = np.nan_to_num(np.asarray(fr.stage_us, dtype=np.float64), nan=0.0)
    svc = stage[:, 1:5].sum(axis=1)
    size = np.maximum(np.asarray(fr.batch_size, dtype=np.float64), 1.0)
    work_b = np.bincount(ops.req, np.nan_to_num(ops.flops, nan=0.0), fr.size)
    # Service = fixed + per_work * batch work, fitted over the failing run's batches.
    heads = batch_heads(fr)
    if heads.size >= 3 and np.ptp(work_b[heads]) > 0:
        per_work, fixed = (float(v) for v in np.polyfit(work_b[heads], svc[heads], 1))
    else:
        per_work, fixed = 0.0, float(np.median(svc))
    per_work, fixed = max(per_work, 0.0), max(fixed, 0.0)
    work = _own_work(work_b / size, size, batch_ids(fr), fq.arrival)
    other = stage[:, 5]
    own = _simulate_batcher(fq.arrival, work, other, fixed, per_work, *policy(fq, fr))
    swapped = _simulate_batcher(fq.arrival, work, other, fixed, per_work, *policy(cq, cr))
    return own, swapped
