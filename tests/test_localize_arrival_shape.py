"""Burstier arrivals at the same rate (requeue.burstier): a change of the arrival process that
two draws of one traffic do not make, so the trigger's traffic check must not call it noise."""

from __future__ import annotations

import numpy as np

from accel.localize.requeue import burstier


def arrivals(rng: np.random.Generator, n: int, cv: float) -> np.ndarray:
    shape = 1.0 / (cv * cv)
    return np.cumsum(rng.gamma(shape, 1000.0 / shape, n))  # mean gap 1 ms


def test_bursts_three_times_as_variable_are_told_at_the_same_rate() -> None:
    rng = np.random.default_rng(1)
    told = 0
    for _ in range(40):
        a, b = arrivals(rng, 200, 3.0), arrivals(rng, 200, 1.0)
        told += burstier(a, b, 0.002)
    assert told >= 36


def test_two_draws_of_one_poisson_traffic_are_rarely_told_apart() -> None:
    rng = np.random.default_rng(2)
    told = sum(
        burstier(arrivals(rng, 200, 1.0), arrivals(rng, 200, 1.0), 0.002) for _ in range(200)
    )
    assert told <= 3  # a percentile bootstrap at 0.2%: about 1% of A/A pairs at n = 60


def test_the_smoother_run_is_not_burstier_and_tiny_runs_are_never() -> None:
    rng = np.random.default_rng(3)
    a, b = arrivals(rng, 200, 1.0), arrivals(rng, 200, 3.0)
    assert not burstier(a, b, 0.002) and burstier(b, a, 0.002)
    assert not burstier(arrivals(rng, 6, 3.0), arrivals(rng, 6, 1.0), 0.002)
