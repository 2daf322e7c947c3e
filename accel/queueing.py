"""FIFO single-server queue by the Lindley recursion in closed form (DESIGN §5).

W_0 = 0, W_n = max(0, W_{n-1} + S_{n-1} - (A_n - A_{n-1})). With U_n the cumulative sum of
X_k = S_{k-1} - (A_k - A_{k-1}) (U_0 = 0) the recursion unrolls to W_n = U_n - min_{k<=n} U_k,
i.e. a cumulative sum and a running minimum: O(n) vector operations, no Python loop.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from accel.grouping import dense_ids
from accel.ops import F64, I64


@dataclass(frozen=True)
class Schedule:
    """Per job, in input order: queue wait, service start and departure (all microseconds)."""

    wait_us: F64
    start_us: F64
    departure_us: F64


def lindley_waits_sorted(arrival_us: ArrayLike, service_us: ArrayLike) -> F64:
    """Waits of jobs already in arrival order (non-decreasing arrivals), closed form."""
    a = np.asarray(arrival_us, dtype=np.float64)
    s = np.asarray(service_us, dtype=np.float64)
    if a.shape != s.shape or a.ndim != 1:
        raise ValueError(
            f"arrival and service must be 1-d of equal length, got {a.shape}, {s.shape}"
        )
    if a.size == 0:
        return np.zeros(0, dtype=np.float64)
    x = np.empty(a.size, dtype=np.float64)
    x[0] = 0.0
    x[1:] = s[:-1] - np.diff(a)
    u = np.cumsum(x)
    return np.asarray(u - np.minimum.accumulate(u), dtype=np.float64)


def fifo_schedule(arrival_us: ArrayLike, service_us: ArrayLike) -> Schedule:
    """Single-server FIFO schedule for jobs in any order (ties keep input order).

    Jobs with unknown (NaN) arrival do not queue: wait 0, start = departure - service = NaN.
    Unknown service counts as 0 for the jobs behind it.
    """
    a = np.asarray(arrival_us, dtype=np.float64)
    s = np.nan_to_num(np.asarray(service_us, dtype=np.float64), nan=0.0)
    known = np.flatnonzero(~np.isnan(a))
    order = known[np.argsort(a[known], kind="stable")]
    wait = np.zeros(a.size, dtype=np.float64)
    wait[order] = lindley_waits_sorted(a[order], s[order])
    start = a + wait
    return Schedule(wait_us=wait, start_us=start, departure_us=start + s)


def batched_waits(arrival_us: ArrayLike, service_us: ArrayLike, batch_id: I64 | None = None) -> F64:
    """Queue wait per request when requests of one batch are served together as one job.

    A batch job arrives when its last member arrives and takes as long as its slowest member
    (members run side by side), so a batch's service grows with its size through its members.
    Requests with batch id < 0 (or no batch ids) are jobs of their own. A member's wait is the
    job's start minus its own arrival: early members also wait for the batch to fill. Jobs
    arriving together are served in the order of their first member in the input.
    """
    a = np.asarray(arrival_us, dtype=np.float64)
    s = np.nan_to_num(np.asarray(service_us, dtype=np.float64), nan=0.0)
    if batch_id is None or not np.any(batch_id >= 0):
        return fifo_schedule(a, s).wait_us
    bid = np.asarray(batch_id, dtype=np.int64)
    # Job key: batch id for batched requests, a fresh id past every batch id for the others.
    solo = bid < 0
    key = bid.copy()
    key[solo] = bid.max() + 1 + np.arange(int(solo.sum()))
    job, n_jobs = dense_ids(key)  # a bincount table where the ids are dense, a sort otherwise
    # Number jobs by their first member's position so that ties in arrival keep input order.
    first = np.full(n_jobs, a.size, dtype=np.int64)
    np.minimum.at(first, job, np.arange(a.size, dtype=np.int64))
    relabel = np.empty(n_jobs, dtype=np.int64)
    relabel[np.argsort(first, kind="stable")] = np.arange(n_jobs, dtype=np.int64)
    job = relabel[job]
    job_arrival = np.full(n_jobs, -np.inf)
    np.maximum.at(job_arrival, job, np.where(np.isnan(a), -np.inf, a))
    job_arrival[np.isneginf(job_arrival)] = np.nan
    job_service = np.zeros(n_jobs, dtype=np.float64)
    np.maximum.at(job_service, job, s)
    sched = fifo_schedule(job_arrival, job_service)
    wait = sched.start_us[job] - a
    return np.asarray(np.where(np.isnan(wait), 0.0, wait), dtype=np.float64)
