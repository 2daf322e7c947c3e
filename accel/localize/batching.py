"""The ingress swap: the failing run's latency under its own batching policy and under the
comparator's, both through one simulated batcher fitted to the failing run."""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import Final

import numpy as np

from accel.grouping import run_starts
from accel.localize.requeue import REPRO_QS, QueueState, batch_heads, batch_ids
from accel.ops import F64, I64, OpArrays, RequestArrays
from accel.stats import quantile

# The simulated batcher must give back each run's observed p50/p95/p99 within this relative
# error before its policy swap is used: it is a model of its own, apart from the queue re-run.
SIM_TOLERANCE: Final[float] = 0.25


def policy(q: QueueState, req: RequestArrays) -> tuple[int, float]:
    """A run's batching policy as observed: its largest batch and its longest usual hold."""
    cap = int(np.max(req.batch_size)) if req.size else 1
    return max(cap, 1), float(np.quantile(q.hold, 0.95)) if q.hold.size else 0.0


def cap_binding(req: RequestArrays) -> bool:
    """Whether the run's largest batch size was a limit it hit: a batch of that size left
    while more requests were waiting. A cap never hit is only a lower bound (a lightly loaded
    run never fills big batches), so a smaller observed batch is no policy difference."""
    starts = np.asarray(req.start_us, dtype=np.float64)
    arrivals = np.asarray(req.arrival_us, dtype=np.float64)
    if not req.size or not (np.isfinite(starts).all() and np.isfinite(arrivals).all()):
        return False  # without start times the waits are unknown: nothing shows a limit
    bid = batch_ids(req)
    _, inv, size = np.unique(bid, return_inverse=True, return_counts=True)
    start = np.full(size.size, np.inf)
    np.minimum.at(start, inv.ravel(), starts)
    order = np.argsort(start, kind="stable")
    served_before = np.concatenate(([0], np.cumsum(size[order])[:-1]))
    arrived = np.searchsorted(np.sort(arrivals), start[order], side="right")
    waiting = arrived - served_before  # at each batch's start, in start order
    cap = int(size.max())
    full = size[order] == cap
    return bool(np.any(waiting[full] > cap))


def _swapped_cap(f_cap: int, c_cap: int, f_binding: bool, c_binding: bool) -> int:
    """The comparator's batch cap where the runs show it differs, else the failing run's."""
    if (c_cap < f_cap and c_binding) or (c_cap > f_cap and f_binding):
        return c_cap
    return f_cap


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


def _fitted(fr: RequestArrays, fq: QueueState, ops: OpArrays) -> tuple[F64, F64, float, float]:
    """The failing run's batcher inputs: (own work, other time, fixed, per_work)."""
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
    work = _own_work(work_b / size, size, batch_ids(fr), fq.arrival)
    return work, stage[:, 5], max(fixed, 0.0), max(per_work, 0.0)


@dataclass(frozen=True)
class IngressSwap:
    """The batch-policy swap and whether the simulated batcher can be trusted with it."""

    own: F64  # failing's latency, simulated under its own policy
    swapped: F64  # ... and under the comparator's
    error: float  # worst relative error of the simulation's p50/p95/p99, both runs

    @property
    def usable(self) -> bool:
        return self.error <= SIM_TOLERANCE


def _sim_error(simulated: F64, req: RequestArrays) -> float:
    sim = np.asarray(quantile(simulated, list(REPRO_QS)), dtype=np.float64)
    obs = np.asarray(quantile(req.latency_us, list(REPRO_QS)), dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.abs(sim / obs - 1.0)
    return float(np.nanmax(np.where(obs > 0, rel, np.inf))) if rel.size else math.inf


def ingress_swap(
    fr: RequestArrays,
    cr: RequestArrays,
    queues: tuple[QueueState, QueueState],
    ops: tuple[OpArrays, OpArrays],
) -> IngressSwap:
    """Failing's latency simulated under its own batching policy and under the comparator's
    (one batcher fitted to the failing run), with how far the simulation is from each run as
    observed (the comparator simulated under its own policy too)."""
    fq, cq = queues
    f_pol, c_pol = policy(fq, fr), policy(cq, cr)
    work, other, fixed, per_work = _fitted(fr, fq, ops[0])
    own = _simulate_batcher(fq.arrival, work, other, fixed, per_work, *f_pol)
    error = _sim_error(own, fr)
    if error <= SIM_TOLERANCE:  # the comparator's own simulation only when this one holds
        c_work, c_other, c_fixed, c_per_work = _fitted(cr, cq, ops[1])
        own_c = _simulate_batcher(cq.arrival, c_work, c_other, c_fixed, c_per_work, *c_pol)
        error = max(error, _sim_error(own_c, cr))
    if error > SIM_TOLERANCE:
        return IngressSwap(own, own, error)  # not used: no swapped run is made
    cap = _swapped_cap(f_pol[0], c_pol[0], cap_binding(fr), cap_binding(cr))
    swapped = _simulate_batcher(fq.arrival, work, other, fixed, per_work, cap, c_pol[1])
    return IngressSwap(own, swapped, error)
