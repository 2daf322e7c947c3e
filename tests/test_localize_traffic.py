"""accel.localize.traffic: a tail gap that two draws of the same traffic explain is no change."""

from __future__ import annotations

import numpy as np

from accel.localize.traffic import traffic_noise
from accel.localize.trigger import TriggerPolicy, decide
from accel.ops import RunArrays
from accel.queueing import fifo_schedule
from localize_pieces import ops, requests

NO_OPS = ops(np.zeros(0), np.zeros(0), np.zeros(0), np.zeros(0), [])


def _run(seed: int, slower: float = 1.0) -> RunArrays:
    rng = np.random.default_rng(seed)
    arrival = np.cumsum(rng.exponential(100.0, 400))
    service = rng.uniform(50.0, 110.0, 400) * slower  # ~80% busy: long queues
    latency = fifo_schedule(arrival, service).wait_us + service
    return RunArrays(f"r{seed}", NO_OPS, requests(arrival, latency, service))


def test_a_gap_of_the_traffic_alone_is_named_and_a_slower_service_is_not() -> None:
    comparator = _run(0)
    lc = comparator.requests.latency_us
    fired = []
    for seed in range(1, 40):
        f = _run(seed)
        t = decide(f.requests.latency_us, lc, TriggerPolicy(), n_boot=200, seed=0)
        if t.regression:
            fired.append((f, t))
    assert fired  # same service, other arrivals: some draws still look like regressions
    explained = [bool(traffic_noise(f, comparator, t, 0.002)) for f, t in fired]
    assert sum(explained) >= 0.8 * len(explained)
    assert "the gap is the traffic" in traffic_noise(*fired[explained.index(True)][:1],
                                                     comparator, fired[explained.index(True)][1], 0.002)  # fmt: skip
    slow = _run(1, slower=1.25)
    t = decide(slow.requests.latency_us, lc, TriggerPolicy(), n_boot=200, seed=0)
    assert t.regression and traffic_noise(slow, comparator, t, 0.002) == ""
