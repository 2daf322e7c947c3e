"""The queue re-run: a run's observed queue (arrivals, batches, holds) and its latency when
the service stages take other times."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from accel.ops import F64, I64, RequestArrays
from accel.queueing import batched_waits
from accel.stages import STAGE_CODE

INGRESS = STAGE_CODE["ingress"]


def batch_heads(req: RequestArrays) -> I64:
    """Index of one request per batch (batch-level stages are identical within a batch)."""
    if req.batch_id is None or not np.any(req.batch_id >= 0):
        return np.arange(req.size, dtype=np.int64)
    bid = np.asarray(req.batch_id, dtype=np.int64)
    solo = np.flatnonzero(bid < 0)
    _, first = np.unique(bid[bid >= 0], return_index=True)
    heads = np.flatnonzero(bid >= 0)[first]
    return np.sort(np.concatenate((heads, solo))).astype(np.int64)


def batch_ids(req: RequestArrays) -> I64:
    if req.batch_id is None:
        return np.arange(req.size, dtype=np.int64)
    bid = np.asarray(req.batch_id, dtype=np.int64).copy()
    solo = bid < 0
    bid[solo] = bid.max(initial=-1) + 1 + np.arange(int(solo.sum()))
    return bid


# --- the queue, re-run ------------------------------------------------------------------------


@dataclass(frozen=True)
class QueueState:
    """What re-running a run's queue needs: arrivals, batches and the batcher's observed holds."""

    arrival: F64
    batch: I64
    hold: F64  # per request: how long its batch was held after its last member arrived
    work: F64  # observed ingress time that is not waiting (0 when start times are known)


def observed_queue(req: RequestArrays) -> QueueState:
    """The observed queue: per batch, the hold = start - max(last arrival, server free)."""
    arrival = np.asarray(req.arrival_us, dtype=np.float64)
    start = np.asarray(req.start_us, dtype=np.float64)
    stage = np.nan_to_num(np.asarray(req.stage_us, dtype=np.float64), nan=0.0)
    known = np.isfinite(start)
    wait = np.where(known, start - arrival, stage[:, INGRESS])
    work = np.maximum(stage[:, INGRESS] - wait, 0.0)
    batch = batch_ids(req)
    _, job = np.unique(batch, return_inverse=True)
    job = job.ravel()
    nj = int(job.max()) + 1 if job.size else 0
    last = np.full(nj, -np.inf)
    np.maximum.at(last, job, arrival)
    jstart = np.full(nj, np.inf)
    np.minimum.at(jstart, job, np.where(known, start, arrival + wait))
    service = np.zeros(nj)
    np.maximum.at(service, job, work + stage[:, 1:].sum(axis=1))
    order = np.argsort(jstart, kind="stable")
    prev_end = np.full(nj, -np.inf)
    ends = jstart[order] + service[order]
    prev_end[order[1:]] = np.maximum.accumulate(ends)[:-1]
    hold = np.maximum(jstart - np.maximum(last, prev_end), 0.0)
    return QueueState(arrival, batch, np.asarray(hold[job], dtype=np.float64), work)


def requeue(
    qu: QueueState, stage_us: F64, batch: I64 | None = None, hold: F64 | None = None
) -> F64:
    """Latency when the run's service stages take `stage_us` (the queue re-run)."""
    st = np.nan_to_num(stage_us, nan=0.0)
    service = qu.work + st[:, 1:].sum(axis=1)
    b = qu.batch if batch is None else batch
    h = qu.hold if hold is None else hold
    wait = batched_waits(qu.arrival + h, service, b)
    return np.asarray(wait + h + service, dtype=np.float64)
