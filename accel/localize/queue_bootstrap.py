"""Queue bootstrap: tail quantiles of a run replayed through its own queue with resampled
jobs and inter-arrival gaps.

Two runs of one service draw different traffic, and near saturation the queue's whole
trajectory (how many busy periods, how long) moves p95/p99 by more than a block resample of
one run shows: its blocks are at most a tenth of the run, a busy period can be longer, and
every resample keeps the observed trajectory's number of them. Here each replay draws the
run's jobs (service as observed, members with their offsets and arrival leads, the batcher's
hold) and its gaps between job anchors independently, with replacement, and runs the queue
re-run's recurrence on them (requeue.py: one server in closed form, or `slots` at once), so
the spread of the replayed quantiles holds the queue-trajectory variance. It is a model
(renewal arrivals, jobs independent of the queue they meet): use it only where the base re-run
reproduces the observed tail.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import numpy as np

from accel.localize.requeue import QueueState
from accel.ops import F64, I64
from accel.stats import joint_percentile_intervals

# Replays are run this many at once: bounds the (rows x jobs) working arrays.
_ROWS: Final[int] = 16
# A compute budget: replays x requests per run at most this (a 10k-request run gets 100
# replays, a 400-request one all it asks for), but never fewer than _MIN_REPLAYS.
_BUDGET: Final[int] = 1_000_000
_MIN_REPLAYS: Final[int] = 100


def queue_reaches(qu: QueueState, q: float) -> bool:
    """Whether more than a 1 - q share of the requests waited for the server or for batch-mates
    served before them: only then can the queue's trajectory move the q quantile. (A closed
    loop, each request sent when the last returned, never queues: its renewal replay would
    invent a queue.)"""
    if qu.arrival.size == 0:
        return False
    wait = qu.queue_us + qu.mates_us
    # (rounding: waits are differences of times read from the trace)
    tol = 1e-6 * max(float(np.median(qu.service)), 1.0)
    return bool(np.mean(wait > tol) > 1.0 - q)


def _job_tables(qu: QueueState) -> tuple[F64, F64, F64, I64, F64]:
    """Per job: anchor gap to the previous job, hold, length; members grouped by job (an index
    into the flat `base` array) and each member's latency beyond its job's wait."""
    nj = qu.n_jobs
    gaps = np.diff(qu.anchor, prepend=qu.anchor[:1]) if nj else np.zeros(0)
    length = np.zeros(nj)
    np.maximum.at(length, qu.job, qu.offset)
    order = np.argsort(qu.job, kind="stable")
    # latency = (start - anchor) + offset + (anchor - arrival): the job's wait plus a part
    # that travels with the member.
    base = qu.offset + (qu.anchor[qu.job] - qu.arrival)
    first = np.searchsorted(qu.job[order], np.arange(nj + 1))
    return gaps[1:] if nj > 1 else np.zeros(1), qu.job_hold, length, first, base[order]


def _waits_one_server(anchor: F64, hold: F64, length: F64) -> F64:
    """(rows, jobs): start - anchor of each job on one server: start_k = max(anchor_k +
    ready_k, start_{k-1} + length_{k-1} + overlap_k), in closed form (a running maximum over
    prefix sums, as in the Lindley recursion)."""
    ready = np.maximum(hold, 0.0)
    c = np.empty_like(length)  # in place from here: these are (rows x jobs) arrays
    c[:, 0] = 0.0
    np.add(length[:, :-1], hold[:, 1:] - ready[:, 1:], out=c[:, 1:])
    np.cumsum(c, axis=1, out=c)
    t = anchor + ready
    t -= c
    np.maximum.accumulate(t, axis=1, out=t)
    t += c
    t -= anchor
    return t


def _waits_slots(anchor: F64, hold: F64, length: F64, slots: int) -> F64:
    """(rows, jobs): start - anchor of each job on `slots` servers taking jobs in order
    (start = max(anchor + ready, earliest free slot + overlap)); one step per job, every
    replay at once."""
    rows, nj = anchor.shape
    ready, overlap = np.maximum(hold, 0.0), np.minimum(hold, 0.0)
    free = np.full((rows, slots), -np.inf)
    wait = np.empty((rows, nj))
    r = np.arange(rows)
    for k in range(nj):
        slot = np.argmin(free, axis=1)
        start = np.maximum(anchor[:, k] + ready[:, k], free[r, slot] + overlap[:, k])
        free[r, slot] = start + length[:, k]
        wait[:, k] = start - anchor[:, k]
    return wait


def _row_quantiles(values: F64, counts: I64, qs: Sequence[float]) -> F64:
    """(rows, len(qs)): type-7 quantiles of rows of different lengths, laid end to end."""
    rows = counts.size
    lead = np.concatenate(([0], np.cumsum(counts)[:-1]))
    h = (counts[:, None] - 1) * np.asarray(qs, dtype=np.float64)[None, :]
    lo = np.floor(h).astype(np.int64)
    hi = np.minimum(lo + 1, counts[:, None] - 1)
    # One partition for every row: each row's values shifted into a range of its own, so the
    # k-th smallest overall is the row's own order statistic; only the ones read are placed.
    vmin = float(values.min())
    span = float(values.max()) - vmin + 1.0
    row = np.repeat(np.arange(rows), counts)
    key = values - vmin + row * span
    at_lo, at_hi = lead[:, None] + lo, lead[:, None] + hi
    part = np.partition(key, np.unique(np.concatenate((at_lo.ravel(), at_hi.ravel()))))
    back = np.arange(rows)[:, None] * span - vmin
    a, b = part[at_lo] - back, part[at_hi] - back
    return np.asarray(a + (h - lo) * (b - a), dtype=np.float64)


def replayed_quantiles(
    qu: QueueState,
    qs: Sequence[float],
    n_boot: int,
    rng: np.random.Generator,
    gap_u: F64 | None = None,
    gap_scale: F64 | None = None,
) -> F64:
    """(n_boot, len(qs)): the quantiles qs of the latencies of n_boot replays of the run, each
    with as many jobs as the run, drawn with replacement, and as many anchor gaps, drawn
    independently with replacement (or at the quantiles gap_u (n_boot, >= jobs) of the run's
    gaps: replays of two runs given one gap_u meet the same traffic, up to its distribution),
    each replay's gaps times its gap_scale (n_boot,) when given: the traffic at another rate."""
    nj = qu.n_jobs
    if nj < 2:
        return np.full((n_boot, len(qs)), np.nan)
    gaps, hold, length, first, base = _job_tables(qu)
    size = np.diff(first)
    single = bool(np.all(size == 1))
    out = np.empty((n_boot, len(qs)))
    draws = []
    ranked = np.sort(gaps) if gap_u is not None else gaps
    for s in range(0, n_boot, _ROWS):
        rows = min(_ROWS, n_boot - s)
        jobs = rng.integers(0, nj, size=(rows, nj))
        if gap_u is None:
            pick = rng.integers(0, gaps.size, size=(rows, nj))
        else:
            pick = np.minimum(
                (gap_u[s : s + rows, :nj] * gaps.size).astype(np.int64), gaps.size - 1
            )
        step = ranked[pick]
        if gap_scale is not None:
            step *= gap_scale[s : s + rows, None]
        step[:, 0] = 0.0
        draws.append((jobs, np.cumsum(step, axis=1)))
    if qu.slots > 1:
        # The slot loop steps through the jobs in Python: once for every replay at once (the
        # budget in queue_gap_intervals bounds replays x jobs).
        every = np.concatenate([j for j, _ in draws])
        waits = _waits_slots(
            np.concatenate([a for _, a in draws]), hold[every], length[every], qu.slots
        )
    for k, (jobs, anchor) in enumerate(draws):
        s, rows = k * _ROWS, jobs.shape[0]
        if qu.slots > 1:
            wait = waits[s : s + rows]
        else:
            wait = _waits_one_server(anchor, hold[jobs], length[jobs])
        if single:  # a request per job: rows of equal length
            lat = wait + base[jobs]
            out[s : s + rows] = np.quantile(lat, qs, axis=1, method="linear").T
            continue
        # Every member of every drawn job: its job's replayed wait plus what travels with it.
        counts = size[jobs]
        flat = jobs.ravel()
        n_members = counts.ravel()
        pos = np.repeat(first[flat] - (np.cumsum(n_members) - n_members), n_members)
        lat = np.repeat(wait.ravel(), n_members) + base[pos + np.arange(pos.size)]
        out[s : s + rows] = _row_quantiles(lat, counts.sum(axis=1), qs)
    return out


def replay_count(failing: QueueState, comparator: QueueState, n_boot: int) -> int:
    """Replays of a pair within the budget: n_boot, fewer for long runs (_BUDGET)."""
    n = max(failing.arrival.size, comparator.arrival.size, 1)
    return min(n_boot, max(_MIN_REPLAYS, _BUDGET // n))


def queue_gap_intervals(
    failing: QueueState,
    comparator: QueueState,
    gaps: Sequence[float],
    qs: Sequence[float],
    n_boot: int,
    seed: int,
    alpha: float,
) -> list[tuple[float, float]]:
    """Per q: an interval of the observed quantile gap (all together at 1 - alpha) from the
    spread of the replayed gaps (failing replay minus comparator replay), centred on the
    observed gap: the replays' own level is a model's, their spread is what is read."""
    rng = np.random.default_rng(seed)
    replays = replay_count(failing, comparator, n_boot)
    d = replayed_quantiles(failing, qs, replays, rng) - replayed_quantiles(
        comparator, qs, replays, rng
    )
    out = []
    for g, (lo, mid, hi) in zip(gaps, joint_percentile_intervals(d, alpha), strict=True):
        out.append((float(g + lo - mid), float(g + hi - mid)))
    return out
