"""The trigger's reading of a change of load: the comparator's own service replayed at the
failing run's arrival rate and at its own, on one FIFO server and on a profsim pair whose
failing run got 1.45x the traffic, and what the triage and the closure summary print of it;
and the verdict's load evidence, which tests the arrival rates themselves."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from accel.localize import localize
from accel.localize.gaps import QNAMES, QS
from accel.localize.load_change import load_gaps, rate_ratios
from accel.localize.queue_bootstrap import replayed_quantiles
from accel.localize.requeue import arrival_rate, observed_queue
from accel.localize.trigger import TriggerPolicy, decide
from accel.ops import RequestArrays
from accel.profiles import get_profile
from accel.queueing import lindley_waits_sorted
from accel.stats import mann_whitney_u
from localize_pieces import requests
from test_localize_equal_traffic import check_exported_reading, check_printed_reading
from test_localize_profsim_regressions import HW, _runs
from test_localize_queue_bootstrap import MEAN_SERVICE, PAIRS, _run

TPU = get_profile("tpu-v5e")
# profsim, tpu-v5e, one batch served at a time: the failing run's arrival rate is 1.45x the
# comparator's (queueing). At 400 requests the observed p95/p99 intervals include zero.
LOAD = ("queueing", 518864, "store", "serial")


def _at_rate(n: int, load: float, seed: int) -> RequestArrays:
    """One FIFO server with one fixed service draw, Poisson arrivals at `load` of it."""
    service = np.random.default_rng(seed).lognormal(np.log(100.0), 0.5, n)
    arrival = np.cumsum(np.random.default_rng(seed + 1).exponential(MEAN_SERVICE / load, n))
    return requests(arrival, lindley_waits_sorted(arrival, service) + service, service)


def test_a_unit_gap_scale_is_the_replay_itself() -> None:
    qu = observed_queue(_run(300, 0.8, 3))
    u = np.random.default_rng(1).random((40, qu.n_jobs))
    plain = replayed_quantiles(qu, QS, 40, np.random.default_rng(2), u)
    scaled = replayed_quantiles(qu, QS, 40, np.random.default_rng(2), u, np.ones(40))
    np.testing.assert_array_equal(plain, scaled)


def test_the_gap_grows_with_the_load_and_is_nil_at_the_same_rate() -> None:
    c = observed_queue(_at_rate(400, 0.5, 7))
    same, ratio = load_gaps(c, c, QS, QNAMES, 200, 0, 0.05)
    assert ratio == pytest.approx(1.0, abs=0.02)
    assert all(same.ci[q][0] < 0 < same.ci[q][1] for q in QNAMES)
    last = 0.0
    # from 1.3x the rate: at 1.2x, 400 requests cannot confirm p95 and p99 together
    for load in (0.65, 0.7, 0.8):
        f = observed_queue(_at_rate(400, load, 7))
        gaps, ratio = load_gaps(f, c, QS, QNAMES, 200, 0, 0.05)
        assert ratio == pytest.approx(load / 0.5, rel=0.1)
        assert gaps.ci["p95"][0] > 0 and gaps.gap["p95"] > last
        last = gaps.gap["p95"]


def test_the_rate_ratio_carries_its_sampling_spread() -> None:
    f = observed_queue(_at_rate(400, 0.75, 11))
    c = observed_queue(_at_rate(400, 0.5, 12))
    r = rate_ratios(f, c, 400, 0)
    point = arrival_rate(f.arrival) / arrival_rate(c.arrival)
    lo, hi = np.quantile(r, [0.025, 0.975])
    # two means of 400 exponential gaps: about 7% each, 10% for the ratio
    assert lo < point < hi and 0.1 < (hi - lo) / point < 0.3


def test_same_traffic_twice_gives_no_alarm_at_the_failing_runs_load() -> None:
    # Two draws of one traffic can differ in rate by chance (here once in PAIRS pairs, by 1.25x,
    # and its reading passes the rule): the comparator's halves differ as much, and no
    # regression is declared that the trigger without the reading would not declare.
    read = 0
    for k in range(PAIRS):
        f, c = _run(300, 0.85, 1000 + 2 * k), _run(300, 0.85, 1001 + 2 * k)
        queues = (observed_queue(f), observed_queue(c))
        lf, lc = f.latency_us, c.latency_us
        t = decide(lf, lc, TriggerPolicy(), n_boot=200, seed=0, queues=queues)
        off = decide(lf, lc, TriggerPolicy(load_change=False), n_boot=200, seed=0, queues=queues)
        assert t.regression == off.regression and not (t.regression and t.at_load_change)
        read += t.load_change is not None
    assert read >= 1


@pytest.mark.parametrize("layout", ["store", "events"])
def test_a_load_increase_the_queue_hides_is_found_at_the_failing_runs_load(
    tmp_path: Path, layout: str
) -> None:
    f, c, pair = _runs(tmp_path, LOAD[0], LOAD[1], layout, LOAD[3], hw=TPU)
    off = localize(f, c, TPU, TriggerPolicy(load_change=False))
    assert off.outcome == "inconclusive" and off.load_change == {}
    loc = localize(f, c, TPU)
    assert loc.p95_gap_ci[0] <= 0 <= loc.p95_gap_ci[1]
    lg = loc.load_change
    assert loc.outcome == "regression" and lg["fired"]["value"] == 1.0
    assert "regressed with the load" in loc.outcome_reason
    assert lg["fired"]["rate_ratio"] == pytest.approx(pair.truth.magnitude["load_scale"], rel=0.15)
    # it fired where the observed gap and the load's both pass the threshold, the load's
    # interval clear of zero; the reason prints that interval
    assert lg["p95"]["lo"] > 0 and loc.p95_gap_us > loc.threshold_us["p95"]
    assert f"CI {lg['p95']['lo']:+.0f}..{lg['p95']['hi']:+.0f}" in loc.outcome_reason
    assert (loc.origin_stage, loc.mechanism) == (pair.truth.origin_stage, pair.truth.mechanism)


def test_a_comparator_with_more_traffic_is_not_read_as_a_load_increase(tmp_path: Path) -> None:
    f, c, _ = _runs(tmp_path, *LOAD, hw=TPU)
    back = localize(c, f, TPU)
    assert back.load_change == {} and back.outcome != "regression"


def test_the_triage_and_the_closure_summary_print_the_load_reading(
    tmp_path: Path, capsys: Any
) -> None:
    _runs(tmp_path, *LOAD, hw=TPU)
    store = tmp_path / "store"
    words = "at the failing run's load"
    doc = check_printed_reading(store, capsys, "load_change", words)
    # The one further reading of a pair with more traffic: at 1 - alpha/2.
    assert doc["verdict"]["load_change"]["fired"]["level"] == 0.975
    assert (doc["origin_stage"], doc["mechanism"]) == ("ingress", "queueing")
    md = check_exported_reading(store, capsys, "load_change", "end-to-end " + words, words)
    assert "triage: the comparator's service replayed through the queue at the failing" in md


def test_the_load_evidence_names_ingress_where_the_rates_differ_more_than_the_gaps_ranks(
    tmp_path: Path,
) -> None:
    # profsim, h100, continuous batching, 1.41x the traffic: the observed gaps fire. Re-run at
    # the comparator's rate, the failing run loses 85% of its p95 gap, but a rank test of the
    # inter-arrival gaps gives p 0.010, short of the verdict's 0.002: the manifest stage
    # (execution) was named. The rates' own test passes.
    f, c, pair = _runs(tmp_path, "queueing", 611949, "store", "continuous", hw=HW)
    gf = np.diff(np.sort(f.requests.arrival_us))
    gc = np.diff(np.sort(c.requests.arrival_us))
    assert mann_whitney_u(gf, gc)[1] > 0.002
    loc = localize(f, c, HW)
    assert loc.outcome == "regression" and loc.load_change == {}
    assert loc.decided_by == "direct"
    assert (loc.origin_stage, loc.mechanism) == (pair.truth.origin_stage, pair.truth.mechanism)
