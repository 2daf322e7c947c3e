"""The queue and batch re-run: jobs, holds and waits as the trace shows them, and the latency
of every request when its service stages take other times.

A request's service is its stages after ingress (plus `other`); it ends at arrival + latency,
so its service interval is [end - service, end]. Requests whose service intervals overlap are
one job (members of a batch served together, or batched continuously); intervals that only
touch are jobs of their own, one after another (members of a batch served in turn). Each job
is ready when its anchor arrived (its latest member arrival before its start; with batch ids,
the latest arrival of its members' batches) and starts when the server is free, plus the
batcher's hold (start - max(anchor, previous job's end)). The re-run replays that recurrence
with new service times, so saved service moves later jobs up (queue) and later members of a
batch (batch-mates), while holds and arrivals stay as observed. On the observed service the
re-run gives back the observed latencies: `reproduction` states by how much it does.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, replace
from typing import Final

import numpy as np

from accel.ops import F64, I64, RequestArrays
from accel.stages import STAGE_CODE, STAGES
from accel.stats import mann_whitney_u, quantile

INGRESS = STAGE_CODE["ingress"]
OTHER = len(STAGES)  # stage_us's column of time no stage accounts for
REPRO_QS: Final[tuple[float, ...]] = (0.5, 0.95, 0.99)
REPRO_QNAMES: Final[tuple[str, ...]] = ("p50", "p95", "p99")
# The base re-run must give back each observed quantile within this relative error before any
# counterfactual computed through it is trusted.
REPRO_TOLERANCE: Final[float] = 0.05


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
    """Batch id per request; requests without one get fresh ids past every batch id."""
    if req.batch_id is None:
        return np.arange(req.size, dtype=np.int64)
    bid = np.asarray(req.batch_id, dtype=np.int64).copy()
    solo = bid < 0
    bid[solo] = bid.max(initial=-1) + 1 + np.arange(int(solo.sum()))
    return bid


def service_of(stage_us: F64) -> F64:
    """Per request: service time, the stages after ingress plus `other` (NaN as 0)."""
    return _service(_clean(stage_us))


def _clean(stage_us: F64) -> F64:
    return np.nan_to_num(np.asarray(stage_us, dtype=np.float64), nan=0.0)


def _service(st: F64) -> F64:
    """service_of on stage times already cleaned of NaN."""
    return np.asarray(np.maximum(st[:, INGRESS + 1 :].sum(axis=1), 0.0), dtype=np.float64)


@dataclass(frozen=True)
class QueueState:
    """A run's observed queue: jobs in service order and each request's place in them."""

    arrival: F64  # per request
    service: F64  # per request: observed service
    job: I64  # per request: its job, numbered in service order
    offset: F64  # per request: end - its job's start (own service + wait for mates inside)
    anchor: F64  # per job: when it was ready to form (latest relevant arrival)
    slots: int  # jobs the server runs at once (1: one after another)
    job_hold: F64  # per job: start - max(anchor, previous job's end); < 0: pipelined start
    hold: F64  # per request: its job's hold
    formation_us: F64  # per request: wait for batch-mates to arrive and the batcher's hold
    queue_us: F64  # per request: wait for the server, busy with earlier jobs
    mates_us: F64  # per request: wait for batch-mates served before it

    @property
    def n_jobs(self) -> int:
        return int(self.anchor.size)


def observed_queue(req: RequestArrays) -> QueueState:
    """Jobs, anchors, holds and the wait decomposition of a run, from its requests."""
    arrival = np.nan_to_num(np.asarray(req.arrival_us, dtype=np.float64), nan=0.0)
    latency = np.maximum(np.nan_to_num(np.asarray(req.latency_us, dtype=np.float64), nan=0.0), 0)
    n = arrival.size
    st = _clean(req.stage_us)
    service = np.minimum(_service(st), latency)
    end = arrival + latency
    begin = end - service
    order = np.lexsort((end, begin))
    # Requests whose service begins at the same instant (up to rounding) are one job: a batch
    # served side by side. Others are jobs of their own, which may overlap
    # earlier ones: a pipelined start (a batch begins while the last one's results are copied
    # out), or slots served at once (continuous batching; see `slots`).
    new = np.ones(n, dtype=bool)
    if n:
        b = begin[order]
        new[1:] = b[1:] - b[:-1] > 1e-9 * np.abs(b[1:]) + 1e-6
    job_sorted = np.cumsum(new) - 1
    job = np.empty(n, dtype=np.int64)
    job[order] = job_sorted
    nj = int(job_sorted[-1]) + 1 if n else 0
    jstart = np.full(nj, np.inf)
    np.minimum.at(jstart, job, begin)
    jend = np.full(nj, -np.inf)
    np.maximum.at(jend, job, end)
    # Anchor: the latest arrival, among the job's members (their whole batch when batch ids are
    # known), that came before the job started.
    bid = batch_ids(req)
    _, binv = np.unique(bid, return_inverse=True)
    binv = binv.ravel()
    last_in_batch = np.full(int(binv.max()) + 1 if n else 0, -np.inf)
    np.maximum.at(last_in_batch, binv, arrival)
    cand = np.where(req.batch_id is not None, last_in_batch[binv], arrival)
    # (a rounding tolerance: start = end - service is computed, arrivals are read)
    tol = 1e-9 * float(np.abs(end).max(initial=1.0))
    cand = np.where(cand <= jstart[job] + tol, cand, arrival)
    anchor = np.full(nj, -np.inf)
    np.maximum.at(anchor, job, np.where(arrival <= jstart[job] + tol, cand, -np.inf))
    anchor = np.where(np.isfinite(anchor), np.minimum(anchor, jstart), jstart)
    # (profsim, 3 slots, 3340 jobs near saturation: one job saw 4 in flight, which made a
    # server at 93% load a light one at 72% and its queue bootstrap far too narrow)
    # Slots are read off the time the stages account for: a request's unattributed time (its
    # own thread's overhead, a response written after the worker is released) overlaps the next
    # request's service on a one-worker server, and counting that as a second slot made queue
    # waits "holds" that no counterfactual removes (a recorded recompile storm: 4 slots read).
    attributed = np.clip(service - np.maximum(st[:, OTHER], 0.0), 0.0, service)
    busy_end = np.full(nj, -np.inf)  # >= jstart: its earliest member begins there
    np.maximum.at(busy_end, job, begin + attributed)
    slots = _slots(jstart, busy_end, int(np.count_nonzero(jstart - anchor > tol)))
    free_at = _free_times(jstart, jend, slots)
    prev_end = free_at
    job_hold = jstart - np.maximum(anchor, prev_end)
    offset = end - jstart[job]
    # The wait split: before its batch's first job starts, queue while the server is busy with
    # earlier jobs, then formation (batch-mates arriving, the batcher's hold); mates: the rest
    # (batch-mates served first, inside the job or in earlier jobs of the same batch).
    first_start = np.full(binv.max() + 1 if n else 0, np.inf)
    np.minimum.at(first_start, binv, jstart[job])
    b_start = first_start[binv]
    first_job = np.searchsorted(jstart, b_start)  # jobs are numbered in start order
    b_prev = prev_end[np.minimum(first_job, max(nj - 1, 0))]
    queue = np.maximum(np.minimum(b_prev, b_start) - arrival, 0.0)
    formation = np.maximum(b_start - np.maximum(b_prev, arrival), 0.0)
    mates = np.maximum(latency - service - formation - queue, 0.0)
    return QueueState(
        arrival=arrival,
        service=service,
        job=job,
        offset=offset,
        anchor=anchor,
        slots=slots,
        job_hold=job_hold,
        hold=np.asarray(job_hold[job], dtype=np.float64),
        formation_us=np.asarray(formation, dtype=np.float64),
        queue_us=np.asarray(queue, dtype=np.float64),
        mates_us=mates,
    )


def _slots(jstart: F64, jend: F64, waited: int) -> int:
    """Jobs in flight at once, read a tenth of a job's length after its start (a pipelined
    predecessor finishing just then does not count). Where jobs waited (`waited` of them) the
    capacity bound: the most that at least 1% of jobs (and two) see, so one overlap does not
    add a slot; where none did, every overlap counts, or a re-run would invent a queue."""
    if jstart.size < 2:
        return 1
    t = jstart + 0.1 * (jend - jstart)
    started = np.searchsorted(np.sort(jstart), t, side="right")
    ended = np.searchsorted(np.sort(jend), t, side="right")
    seen = np.sort(started - ended)[::-1]  # concurrency per job, most first
    need = max(2, math.ceil(0.01 * seen.size))
    # (waited counts jobs, so past this check there are at least `need` of them)
    return int(max(1, seen[0] if waited < need else seen[need - 1]))


def _free_times(jstart: F64, jend: F64, slots: int) -> F64:
    """Per job (in start order): when a slot became free for it, on the observed schedule."""
    if slots == 1:
        # The job before: the re-run's one-server recurrence starts each job after the previous
        # one, so holds read against the same end give back the observed schedule exactly (with
        # the latest end so far, a short job ending inside a long one's tail did not).
        out = np.full(jstart.size, -np.inf)
        out[1:] = jend[:-1]
        return out
    return _run_slots(
        np.full(jstart.size, -np.inf),
        np.zeros(jstart.size),
        jend - jstart,
        slots,
        observed_end=jend,
    )[1]


def _run_slots(
    anchor: F64, hold: F64, length: F64, slots: int, observed_end: F64 | None = None
) -> tuple[F64, F64]:
    """(end, free) per job of a server with `slots` slots taking jobs in order: each starts at
    max(anchor, earliest free slot) + hold; with observed_end, slots free at the observed ends
    (to read the free times of the observed schedule)."""
    heap = [-math.inf] * slots
    end = np.empty(length.size)
    free = np.empty(length.size)
    for k in range(length.size):
        f = heapq.heappop(heap)
        free[k] = f
        e = max(anchor[k], f) + hold[k] + length[k]
        end[k] = e
        heapq.heappush(heap, float(observed_end[k]) if observed_end is not None else e)
    return end, free


def requeue(qu: QueueState, stage_us: F64) -> F64:
    """Latency per request when the run's service stages take `stage_us` (the queue re-run).

    A member's end moves by its own change of service; a job lasts until its last member
    ends; job k ends at max(anchor_k, end_{k-1}) + hold_k + length_k, in closed form by
    prefix sums (G_k = sum of hold + length up to k): end_k = G_k + max_{j<=k}(anchor_j -
    G_{j-1})."""
    new_service = service_of(stage_us)
    offset = np.maximum(qu.offset + (new_service - qu.service), new_service)
    nj = qu.n_jobs
    if nj == 0:
        return np.zeros(0, dtype=np.float64)
    length = np.zeros(nj)
    np.maximum.at(length, qu.job, offset)
    if qu.slots >= nj:
        # A slot for every job (unqueued): none waits for another.
        jstart = qu.anchor + qu.job_hold
        return np.asarray(jstart[qu.job] + offset - qu.arrival, dtype=np.float64)
    if qu.slots > 1:
        # Several jobs at once (continuous batching): one step per job, a heap of slots.
        jend = _run_slots(qu.anchor, qu.job_hold, length, qu.slots)[0]
        jstart = jend - length
        return np.asarray(jstart[qu.job] + offset - qu.arrival, dtype=np.float64)
    g = qu.job_hold + length
    big_g = np.cumsum(g)
    prev_g = np.concatenate(([0.0], big_g[:-1]))
    jend = big_g + np.maximum.accumulate(qu.anchor - prev_g)
    jstart = jend - length
    return np.asarray(jstart[qu.job] + offset - qu.arrival, dtype=np.float64)


def queue_free(qu: QueueState, formation: bool = True) -> F64:
    """Per request: its latency minus its waits for a server busy with other requests (its
    service and, unless `formation` is False, its batch's formation remain)."""
    # Batch-mates served first are left out with the queue: their share is a request's place
    # in its batch, which swings from run to run as the queue does.
    if not formation:
        return np.asarray(qu.service, dtype=np.float64)
    return np.asarray(qu.service + qu.formation_us, dtype=np.float64)


def unqueued(qu: QueueState, formation: bool = True) -> QueueState:
    """The run with a server free for every request: each starts once its batch has formed (or
    at once, without `formation`), so requeue gives its queue_free latency under any service.
    The observed waits (hold, formation, queue, mates) are kept as they were."""
    n = qu.arrival.size
    return replace(
        qu,
        job=np.arange(n, dtype=np.int64),
        offset=qu.service.copy(),
        anchor=qu.arrival + qu.formation_us if formation else qu.arrival.copy(),
        slots=max(n, 1),
        job_hold=np.zeros(n),
    )


@dataclass(frozen=True)
class Reproduction:
    """How well the base re-run (observed service through the queue model) gives back the
    observed latency quantiles; counterfactuals are trusted only when `reproduced`."""

    observed_us: dict[str, float]
    rerun_us: dict[str, float]
    rel_error: dict[str, float]  # |rerun - observed| / observed per quantile name
    tolerance: float
    reproduced: bool

    @property
    def worst(self) -> float:
        return max(self.rel_error.values()) if self.rel_error else float("nan")


def reproduction(
    qu: QueueState, req: RequestArrays, tolerance: float = REPRO_TOLERANCE
) -> Reproduction:
    """Re-run the queue on the observed stages and compare p50/p95/p99 with the observed."""
    observed = np.asarray(req.latency_us, dtype=np.float64)
    rerun = requeue(qu, np.asarray(req.stage_us, dtype=np.float64))
    ok = np.isfinite(observed)
    o = np.atleast_1d(quantile(observed[ok], REPRO_QS)) if ok.any() else np.full(3, np.nan)
    r = np.atleast_1d(quantile(rerun[ok], REPRO_QS)) if ok.any() else np.full(3, np.nan)
    obs_d, re_d, err = {}, {}, {}
    for k, name in enumerate(REPRO_QNAMES):
        obs_d[name], re_d[name] = float(o[k]), float(r[k])
        err[name] = abs(float(r[k]) - float(o[k])) / float(o[k]) if o[k] > 0 else float("nan")
    good = all(np.isfinite(v) and v <= tolerance for v in err.values())
    return Reproduction(obs_d, re_d, err, tolerance, bool(good))


def stretched(qu: QueueState, factor: float) -> QueueState:
    """The same queue with its arrivals (and job anchors) spread `factor` times further apart
    in time around the first arrival: the load the run would see at 1/factor its arrival rate,
    holds and service unchanged."""
    if qu.arrival.size == 0:
        return qu
    t0 = float(qu.arrival.min())
    return replace(
        qu,
        arrival=t0 + (qu.arrival - t0) * factor,
        anchor=t0 + (qu.anchor - t0) * factor,
    )


def arrival_rate(arrival: F64) -> float:
    """Requests per us over the span of the arrivals."""
    a = np.asarray(arrival, dtype=np.float64)
    a = a[np.isfinite(a)]
    span = float(a.max() - a.min()) if a.size > 1 else 0.0
    return (a.size - 1) / span if span > 0 else float("nan")


def arrival_gaps(arrival: F64) -> F64:
    """A run's gaps between consecutive arrivals, in time order."""
    return np.asarray(np.diff(np.sort(np.asarray(arrival, dtype=np.float64))), dtype=np.float64)


_RESAMPLE_CELLS: Final[int] = 1 << 21  # gap draws held at once by _resampled_cv (16 MB)


def burstier(a: F64, b: F64, alpha: float, n_boot: int = 400, seed: int = 5) -> bool:
    """Whether run a's arrivals are significantly burstier than b's: the coefficient of
    variation of its gaps larger, by a bootstrap of the log ratio (gaps resampled in each run;
    one-sided at alpha). The rates may agree while the bursts grew. False with under 8 gaps."""
    ga, gb = arrival_gaps(a), arrival_gaps(b)
    if ga.size < 8 or gb.size < 8 or not (ga.mean() > 0 and gb.mean() > 0):
        return False
    rng = np.random.default_rng(seed)
    cv_a, cv_b = _resampled_cv(ga, n_boot, rng), _resampled_cv(gb, n_boot, rng)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.log(cv_a) - np.log(cv_b)
    below = float(np.mean(~(ratio > 0)))
    return below < alpha


def _resampled_cv(gaps: F64, n_boot: int, rng: np.random.Generator) -> F64:
    """The gaps' coefficient of variation on n_boot resamples, drawn a block of rows at a time
    (the same draws as one (n_boot, n) array, without holding it: 320 MB at 100k requests)."""
    rows = max(1, _RESAMPLE_CELLS // max(gaps.size, 1))
    out = np.empty(n_boot)
    for lo in range(0, n_boot, rows):
        r = gaps[rng.integers(0, gaps.size, (min(rows, n_boot - lo), gaps.size))]
        with np.errstate(divide="ignore", invalid="ignore"):
            out[lo : lo + r.shape[0]] = r.std(axis=1) / r.mean(axis=1)
    return out


def same_arrival_rate(a: F64, b: F64, alpha: float) -> bool:
    """Whether two runs' inter-arrival gaps do not differ (Mann-Whitney, two-sided, at alpha):
    the same traffic as far as the runs can tell; False with fewer than two gaps in either."""
    ga, gb = arrival_gaps(a), arrival_gaps(b)
    if ga.size < 2 or gb.size < 2:
        return False
    return not mann_whitney_u(ga, gb)[1] < alpha


def with_arrivals(qu: QueueState, other_arrival: F64) -> QueueState:
    """The same queue fed by another run's traffic: the k-th arrival (in time order) moves to
    the other run's arrival at the same rank (scaled in count when the runs differ in size),
    job anchors with it; service and holds stay."""
    a = qu.arrival
    if a.size < 2 or other_arrival.size < 2:
        return qu
    order = np.argsort(a, kind="stable")
    other = np.sort(np.asarray(other_arrival, dtype=np.float64))
    rank = np.linspace(0.0, other.size - 1.0, a.size)
    new_sorted = np.interp(rank, np.arange(other.size), other)
    new_sorted = new_sorted - new_sorted[0] + a[order[0]]
    arrival = np.empty(a.size)
    arrival[order] = new_sorted
    anchor = np.interp(qu.anchor, a[order], new_sorted)
    return replace(qu, arrival=arrival, anchor=anchor)
