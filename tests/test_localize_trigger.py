"""accel.localize.trigger: outcomes and reasons on latencies with known answers."""

from __future__ import annotations

import math

import numpy as np

from accel.block_bootstrap import block_bootstrap_quantile_diff, block_length
from accel.localize.trigger import (
    INCONCLUSIVE,
    NO_REGRESSION,
    REGRESSION,
    TriggerPolicy,
    decide,
    gap_outcome,
    thresholds,
)
from accel.stats import bootstrap_quantile_diff

RNG = np.random.default_rng(11)


def _lat(n: int, scale: float = 1.0, seed: int = 0, sigma: float = 0.3) -> np.ndarray:
    return np.random.default_rng(seed).lognormal(np.log(10_000.0), sigma, n) * scale


def test_a_clear_small_sample_regression_is_declared_with_intervals_in_its_reason() -> None:
    # 60 requests per run, every request 20% slower (the size of the real torch pair).
    lf, lc = _lat(60, 1.2, 1, sigma=0.08), _lat(60, 1.0, 2, sigma=0.08)
    t = decide(lf, lc, TriggerPolicy(), n_boot=400, seed=0)
    assert t.outcome == REGRESSION and t.regression
    for q in t.fired:
        lo, hi = t.gaps.ci[q]
        assert lo > 0 and t.gaps.gap[q] > t.threshold_us[q]
        assert f"{lo:+.0f}..{hi:+.0f}" in t.reason  # the interval printed is the one used


def test_same_service_twice_is_not_a_regression() -> None:
    alarms = sum(
        decide(
            _lat(400, 1.0, s), _lat(400, 1.0, 100 + s), TriggerPolicy(), n_boot=300, seed=s
        ).regression
        for s in range(40)
    )
    assert alarms <= 3  # <= 7.5% on 40 A/A pairs (5% expected at most)


def test_a_significant_gap_below_the_practical_threshold_is_no_regression() -> None:
    lf, lc = _lat(20_000, 1.02, 3), _lat(20_000, 1.0, 4)  # +2%, tight intervals
    t = decide(lf, lc, TriggerPolicy(min_rel_gap=0.05), n_boot=200, seed=0)
    assert t.outcome == NO_REGRESSION
    assert t.gaps.ci["p95"][0] > 0 and "below the practical threshold" in t.reason
    loose = decide(lf, lc, TriggerPolicy(min_rel_gap=0.01), n_boot=200, seed=0)
    assert loose.outcome == REGRESSION


def test_slo_threshold_applies_when_larger() -> None:
    lc = _lat(500)
    by_q, basis = thresholds(lc, TriggerPolicy(sla_us=1e6, slo_share=0.02))
    assert by_q == {"p95": 2e4, "p99": 2e4} and "SLO" in basis
    small, basis = thresholds(lc, TriggerPolicy(sla_us=10.0))
    assert small["p95"] == 0.05 * float(np.quantile(lc, 0.95)) and "SLO" not in basis


def test_too_few_requests_and_known_confounders_are_inconclusive() -> None:
    few = decide(_lat(12, 2.0), _lat(12), TriggerPolicy(), n_boot=100, seed=0)
    assert few.outcome == INCONCLUSIVE and "too few requests" in few.reason
    ctx = decide(
        _lat(300, 2.0), _lat(300), TriggerPolicy(), n_boot=100, seed=0, context=("hw differs",)
    )
    assert ctx.outcome == INCONCLUSIVE and ctx.reason == "hw differs"


def test_a_comparator_that_differs_from_itself_is_no_baseline() -> None:
    # The comparator's second half is 40% slower: as far from its first half as the failing
    # run is from the whole comparator.
    lc = np.concatenate((_lat(300, 1.0, 5), _lat(300, 1.4, 6)))
    lf = _lat(600, 1.7, 7)
    t = decide(lf, lc, TriggerPolicy(), n_boot=300, seed=0)
    assert t.outcome == INCONCLUSIVE and "comparator is not stable" in t.reason
    assert t.comparator_halves["p95_gap_us"] > 0
    unchecked = decide(lf, lc, TriggerPolicy(check_comparator=False), n_boot=300, seed=0)
    assert unchecked.outcome == REGRESSION


def test_block_bootstrap_widens_intervals_for_runs_of_slow_requests() -> None:
    # AR(1) latencies (a queue's slow periods): the iid bootstrap is too narrow.
    n = 2000
    e = RNG.normal(0, 1, n)
    x = np.empty(n)
    x[0] = e[0]
    for i in range(1, n):
        x[i] = 0.95 * x[i - 1] + e[i]
    a = np.exp(x / 4) * 1000
    b = np.exp(np.roll(x, 1000) / 4) * 1000
    assert block_length(a) > 5 and block_length(RNG.normal(size=n)) == 1
    _, lo_b, hi_b = block_bootstrap_quantile_diff(a, b, 0.95, n_boot=300)
    _, lo_i, hi_i = bootstrap_quantile_diff(a, b, 0.95, n_boot=300)
    assert hi_b - lo_b > 1.5 * (hi_i - lo_i)


def test_a_gap_past_the_threshold_with_an_interval_through_zero_is_inconclusive() -> None:
    # 40 requests a run, every request 15% slower, wide spread: the estimate says regression,
    # the interval cannot confirm it. Not "no regression": the pair is too small to tell.
    lf, lc = _lat(40, 1.15, 13, sigma=0.5), _lat(40, 1.0, 23, sigma=0.5)
    t = decide(lf, lc, TriggerPolicy(), n_boot=400, seed=0)
    assert t.outcome == INCONCLUSIVE and not t.regression and not t.fired
    unsure = [q for q in ("p95", "p99") if t.gaps.gap[q] > t.threshold_us[q]]
    assert unsure and all(t.gaps.ci[q][0] <= 0 for q in unsure)
    lo, hi = t.gaps.ci[unsure[0]]
    assert "too few requests to tell" in t.reason and f"{lo:+.0f}..{hi:+.0f}" in t.reason
    # The requests it asks for confirm the same 15% slowdown in most draws (it aims at 4 in 5).
    need = int(t.reason.split("about ")[1].split(" requests")[0])
    assert need > 40 and t.requests_needed == need  # the same number, for tools to read
    confirmed = sum(
        decide(
            _lat(need, 1.15, 30 + s, sigma=0.5), _lat(need, 1.0, 40 + s, sigma=0.5),
            TriggerPolicy(), n_boot=400, seed=0,
        ).regression
        for s in range(6)
    )  # fmt: skip
    assert confirmed >= 4


def test_one_rule_for_a_tail_gap_in_pairs_and_fleets() -> None:
    from workbench.triage.evidence import Interval
    from workbench.triage.fleet import _verdict

    assert gap_outcome(120.0, 10.0, 100.0) == REGRESSION
    assert gap_outcome(120.0, -10.0, 100.0) == INCONCLUSIVE  # past the threshold, not shown
    assert gap_outcome(80.0, 10.0, 100.0) == NO_REGRESSION  # shown, too small to matter
    assert gap_outcome(math.nan, 10.0, 100.0) == NO_REGRESSION
    # The fleet's pooled p99 (threshold 5% of the comparator's p99) reads the same way.
    for value, lo, want in ((120.0, 10.0, REGRESSION), (120.0, -10.0, INCONCLUSIVE),
                            (30.0, -10.0, NO_REGRESSION)):  # fmt: skip
        assert _verdict(Interval(value, lo, value + 50.0), 2000.0, 500, 500) == want
    assert _verdict(Interval(500.0, 400.0, 600.0), 2000.0, 99, 500) == INCONCLUSIVE  # n < 100
