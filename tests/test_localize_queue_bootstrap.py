"""accel.localize.queue_bootstrap: replays of a run through its own queue, on single-server
queues whose run-to-run spread is known by drawing them again."""

from __future__ import annotations

import numpy as np

from accel.localize.queue_bootstrap import (
    _waits_one_server,
    _waits_slots,
    queue_reaches,
    replayed_quantiles,
)
from accel.localize.requeue import observed_queue, reproduction
from accel.localize.trigger import TriggerPolicy, decide
from accel.ops import RequestArrays
from accel.queueing import lindley_waits_sorted
from localize_pieces import requests

MEAN_SERVICE = 100.0 * np.exp(0.5**2 / 2)  # lognormal(log 100, 0.5)
PAIRS = 20


def _run(n: int, load: float, seed: int, slower: float = 1.0) -> RequestArrays:
    """One FIFO server, Poisson arrivals at `load` of the unslowed service."""
    rng = np.random.default_rng(seed)
    service = rng.lognormal(np.log(100.0), 0.5, n) * slower
    arrival = np.cumsum(rng.exponential(MEAN_SERVICE / load, n))
    return requests(arrival, lindley_waits_sorted(arrival, service) + service, service)


def _z(gap: float, ci: tuple[float, float]) -> float:
    """The gap in units of the interval's implied standard error."""
    return gap / ((ci[1] - ci[0]) / 3.92)


def _pairs(load: float, slower: float) -> tuple[list[float], list[float], int, int]:
    """Over PAIRS pairs of 300 requests: p95 z under the block and the widened interval, and
    how often each trigger fires."""
    zb, zq, fb, fq = [], [], 0, 0
    for k in range(PAIRS):
        f, c = _run(300, load, 1000 + 2 * k, slower), _run(300, load, 1001 + 2 * k)
        queues = (observed_queue(f), observed_queue(c))
        assert all(reproduction(q, r).reproduced for q, r in zip(queues, (f, c), strict=True))
        block = decide(f.latency_us, c.latency_us, TriggerPolicy(), n_boot=200, seed=0)
        both = decide(
            f.latency_us, c.latency_us, TriggerPolicy(), n_boot=200, seed=0, queues=queues
        )
        gap = block.gaps.gap["p95"]
        zb.append(_z(gap, block.gaps.ci["p95"]))
        zq.append(_z(gap, both.gaps.queue_ci["p95"]))
        lo, hi = both.gaps.ci["p95"]
        assert lo <= block.gaps.ci["p95"][0] and hi >= block.gaps.ci["p95"][1]  # the union
        fb, fq = fb + block.regression, fq + both.regression
    return zb, zq, fb, fq


def _rms(z: list[float]) -> float:
    return float(np.sqrt(np.mean(np.square(z))))


def test_same_service_twice_near_saturation_is_within_the_queue_interval() -> None:
    # Two draws of one queue differ by the queue's trajectory: the block interval of one run
    # is too narrow for that (z spread well above 1), the queue bootstrap's is not.
    zb, zq, fb, fq = _pairs(0.85, 1.0)
    assert _rms(zb) > 1.8
    assert 0.6 < _rms(zq) < 1.3
    assert fq <= 2 < fb


def test_a_slower_service_still_fires() -> None:
    _, _, _, fq = _pairs(0.6, 1.25)
    assert fq >= PAIRS // 3


def test_a_closed_loop_never_reaches_the_tail_and_an_open_queue_does() -> None:
    rng = np.random.default_rng(3)
    service = rng.lognormal(np.log(100.0), 0.5, 300)
    # Each request sent when the last returned, after a think time: nobody waits.
    arrival = np.cumsum(np.concatenate(([0.0], service[:-1])) + rng.exponential(20.0, 300))
    closed = requests(arrival, service, service)
    assert not queue_reaches(observed_queue(closed), 0.99)
    assert queue_reaches(observed_queue(_run(300, 0.6, 5)), 0.99)


def test_one_slot_replays_agree_with_the_one_server_closed_form() -> None:
    rng = np.random.default_rng(9)
    anchor = np.cumsum(rng.exponential(100.0, (4, 200)), axis=1)
    hold = rng.normal(0.0, 20.0, (4, 200))  # < 0: a pipelined start, > 0: a batcher's hold
    length = rng.exponential(90.0, (4, 200))
    np.testing.assert_allclose(
        _waits_slots(anchor, hold, length, 1), _waits_one_server(anchor, hold, length)
    )


def test_replays_of_an_idle_server_are_its_own_latencies_resampled() -> None:
    # Arrivals far apart: nobody waits, so every replay's quantiles are of resampled services.
    service = np.random.default_rng(4).lognormal(np.log(100.0), 0.5, 400)
    arrival = np.arange(400) * 10_000.0
    q = observed_queue(requests(arrival, service, service))
    rq = replayed_quantiles(q, (0.95,), 300, np.random.default_rng(0))
    assert rq.shape == (300, 1)
    assert np.all(rq >= service.min()) and np.all(rq <= service.max())
    assert abs(float(np.median(rq)) - float(np.quantile(service, 0.95))) < 0.1 * float(
        np.quantile(service, 0.95)
    )
