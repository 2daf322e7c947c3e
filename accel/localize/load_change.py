"""The tail gap a change of load makes: the comparator's own service replayed through its queue
at the failing run's arrival rate and at its own, on the same drawn jobs and traffic.

Where the failing run's requests arrive significantly faster, the observed gap mixes two draws
of a queue's trajectory, which at a few hundred requests swing p95/p99 by tens of percent (the
queue bootstrap's interval says so), and the intervals rarely clear zero. With the service held
to the comparator's and the traffic drawn once per replay (common random numbers), what is
left is the load's effect, and its spread is the sampling spread of the service, of the traffic
and of the rate ratio itself (each replay draws both runs' inter-arrival gaps with replacement).
It is a model (queue_bootstrap.py's renewal replay, the comparator's batches as formed at its
own rate): read only where the base re-run reproduces both tails.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from accel.localize.equal_traffic import EqualTraffic, replayed_gaps
from accel.localize.queue_bootstrap import replay_count, replayed_quantiles
from accel.localize.requeue import QueueState, arrival_gaps
from accel.ops import F64


def rate_ratios(failing: QueueState, comparator: QueueState, replays: int, seed: int) -> F64:
    """(replays,): the comparator's mean inter-arrival gap over the failing run's, each from
    both runs' gaps drawn with replacement: the failing run's arrival rate over the
    comparator's, with its sampling spread."""
    gf, gc = arrival_gaps(failing.arrival), arrival_gaps(comparator.arrival)
    if gf.size < 2 or gc.size < 2:
        return np.full(replays, np.nan)
    rng = np.random.default_rng(seed)
    mf = np.array([gf[rng.integers(0, gf.size, gf.size)].mean() for _ in range(replays)])
    mc = np.array([gc[rng.integers(0, gc.size, gc.size)].mean() for _ in range(replays)])
    return np.asarray(mc / mf, dtype=np.float64)


def load_gaps(
    failing: QueueState,
    comparator: QueueState,
    qs: Sequence[float],
    names: Sequence[str],
    n_boot: int,
    seed: int,
    alpha: float,
) -> tuple[EqualTraffic, float]:
    """The comparator's replayed quantiles at the failing run's arrival rate minus at its own
    (the same jobs and gap quantiles in both), with (1 - alpha) percentile intervals over the
    replays; and the median rate ratio (failing over comparator)."""
    replays = replay_count(failing, comparator, n_boot)
    ratio = rate_ratios(failing, comparator, replays, seed)
    u = np.random.default_rng(seed + 1).random((replays, max(comparator.n_jobs, 1)))
    faster = replayed_quantiles(
        comparator, qs, replays, np.random.default_rng(seed + 2), u, 1.0 / ratio
    )
    own = replayed_quantiles(comparator, qs, replays, np.random.default_rng(seed + 2), u)
    return replayed_gaps(faster - own, names, alpha, replays), float(np.nanmedian(ratio))
