"""The tail gap at equal traffic: both runs' service replayed through the queue on the same
arrivals, so that the draw of traffic, which near saturation moves p95/p99 of a few hundred
requests by tens of percent, falls out of the comparison.

Each replay resamples both runs' jobs with replacement (the sampling spread of each service)
and, where the server runs one job at a time, meets them at common ranks of their lengths
(common random numbers: which jobs a replay happens to draw, long or short, is the same luck
for both; with jobs in flight together a job's length depends on its neighbours, and the
draws stay independent), on one sequence of arrival gaps: both runs' gaps pooled when every
job is one request ready when it arrived (one traffic), else the same quantiles of each run's
own job gaps (the same traffic up to its distribution, which must not differ).
The gap is the median replayed difference, its interval the replays' percentiles. It is a model
(queue_bootstrap.py's renewal replay): read only where the base re-run reproduces both tails
and the arrival rates do not differ (requeue.same_arrival_rate).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from accel.localize.queue_bootstrap import replay_count, replayed_quantiles
from accel.localize.requeue import QueueState
from accel.ops import F64


@dataclass(frozen=True)
class EqualTraffic:
    """Per quantile name: the replayed gap at equal traffic and its interval."""

    gap: dict[str, float]
    ci: dict[str, tuple[float, float]]
    replays: int


def equal_traffic_gaps(
    failing: QueueState,
    comparator: QueueState,
    qs: Sequence[float],
    names: Sequence[str],
    n_boot: int,
    seed: int,
    alpha: float,
) -> EqualTraffic:
    """The failing run's replayed quantiles minus the comparator's, both on one drawn traffic
    (and common job ranks, one job at a time) per replay; (1 - alpha) percentile intervals."""
    replays = replay_count(failing, comparator, n_boot)
    rng = np.random.default_rng(seed)
    width = max(failing.n_jobs, comparator.n_jobs, 1)
    gap_u = rng.random((replays, width))
    job_u: F64 | None = rng.random((replays, width))
    if max(failing.slots, comparator.slots) > 1:
        # Jobs in flight together (continuous batching) stretch each other: a job's length
        # carries the traffic its run drew, and common ranks would sharpen an interval around
        # that (A/A pairs fired). Drawn independently there, as before.
        job_u = None
    traffic = None
    if _own_arrivals(failing) and _own_arrivals(comparator):
        traffic = np.concatenate([np.diff(failing.anchor), np.diff(comparator.anchor)])
    d = replayed_quantiles(failing, qs, replays, rng, gap_u, job_u, traffic) - replayed_quantiles(
        comparator, qs, replays, rng, gap_u, job_u, traffic
    )
    gap: dict[str, float] = {}
    ci: dict[str, tuple[float, float]] = {}
    for j, name in enumerate(names):
        col: F64 = d[:, j][np.isfinite(d[:, j])]
        if col.size < 2:
            gap[name], ci[name] = float("nan"), (float("nan"), float("nan"))
            continue
        lo, mid, hi = np.quantile(col, [alpha / 2, 0.5, 1 - alpha / 2])
        gap[name], ci[name] = float(mid), (float(lo), float(hi))
    return EqualTraffic(gap, ci, replays)


def _own_arrivals(qu: QueueState) -> bool:
    """Whether every job is one request, ready when it arrived: its anchor gaps are then the
    request traffic itself (a batcher's anchors wait for batch-mates, and bunch)."""
    return qu.n_jobs == qu.arrival.size and bool(np.allclose(qu.anchor[qu.job], qu.arrival))
