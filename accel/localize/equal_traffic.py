"""The tail gap at equal traffic: both runs' service replayed through the queue on the same
arrivals, so that the draw of traffic, which near saturation moves p95/p99 of a few hundred
requests by tens of percent, falls out of the comparison.

Each replay draws both runs' jobs independently, with replacement (the sampling spread of each
service), and one sequence of arrival gaps for both, at the same quantiles of each run's own
gaps (common random numbers: the same traffic, up to its distribution, which must not differ).
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
from accel.stats import joint_percentile_intervals


@dataclass(frozen=True)
class EqualTraffic:
    """Per quantile name: a replayed gap (at equal traffic, or of a change of load) and its
    interval."""

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
    per replay; (1 - alpha) percentile intervals over the replays."""
    replays = replay_count(failing, comparator, n_boot)
    rng = np.random.default_rng(seed)
    gap_u = rng.random((replays, max(failing.n_jobs, comparator.n_jobs, 1)))
    d = replayed_quantiles(failing, qs, replays, rng, gap_u) - replayed_quantiles(
        comparator, qs, replays, rng, gap_u
    )
    return replayed_gaps(d, names, alpha, replays)


def replayed_gaps(d: F64, names: Sequence[str], alpha: float, replays: int) -> EqualTraffic:
    """Per quantile name (a column of d, the replays' differences): the median difference and
    its percentile interval, the intervals holding together at 1 - alpha."""
    gap: dict[str, float] = {}
    ci: dict[str, tuple[float, float]] = {}
    joint = joint_percentile_intervals(d, alpha)
    for j, name in enumerate(names):
        lo, mid, hi = joint[j]
        gap[name], ci[name] = float(mid), (float(lo), float(hi))
    return EqualTraffic(gap, ci, replays)
