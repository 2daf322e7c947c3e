"""The trigger's service-tail reading (latency minus queue, batch and ingress waits): on
single-server queues near saturation, a profsim pair whose observed and equal-traffic intervals
cannot tell, and what the triage, the app and the closure summary print of it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from localize_pieces import requests
from test_localize_equal_traffic import check_exported_reading, check_printed_reading
from test_localize_profsim_regressions import HW, _runs
from test_localize_queue_bootstrap import PAIRS, _run

from accel.localize import localize
from accel.localize.gaps import QNAMES
from accel.localize.requeue import observed_queue
from accel.localize.trigger import TriggerPolicy, decide
from accel.ops import RequestArrays
from accel.queueing import lindley_waits_sorted

# profsim, h100, one request served at a time: +4.4x post-processing (assembly). At 400
# requests the p95/p99 intervals, observed and at equal traffic, include zero.
ASSEMBLY = ("assembly", 510026, "store", "serial")


def _fires(slower: float, policy: TriggerPolicy) -> tuple[int, int]:
    """Over PAIRS pairs of 300 requests at load 0.85: regressions, and those read in the
    service tail."""
    fired = at_service = 0
    for k in range(PAIRS):
        f, c = _run(300, 0.85, 1000 + 2 * k, slower), _run(300, 0.85, 1001 + 2 * k)
        queues = (observed_queue(f), observed_queue(c))
        t = decide(f.latency_us, c.latency_us, policy, n_boot=200, seed=0, queues=queues)
        fired, at_service = fired + t.regression, at_service + t.at_service_tail
    return fired, at_service


def test_same_service_twice_gives_no_alarm_in_the_service_tail() -> None:
    fired, at_service = _fires(1.0, TriggerPolicy())
    assert at_service == 0 and fired == _fires(1.0, TriggerPolicy(service_tail=False))[0]


def test_the_service_tail_finds_a_slower_service_the_other_readings_miss() -> None:
    without, _ = _fires(1.15, TriggerPolicy(service_tail=False))
    with_, at_service = _fires(1.15, TriggerPolicy())
    assert at_service >= 1 and with_ == without + at_service


def _served(service: np.ndarray, arrival: np.ndarray) -> RequestArrays:
    return requests(arrival, lindley_waits_sorted(arrival, service) + service, service)


@pytest.mark.parametrize("halves", [(1.25, 1.25), (1.0, 1.5)])
def test_the_comparator_check_reads_its_own_service(halves: tuple[float, float]) -> None:
    # One traffic, the same latencies given for both runs (no observed gap), equal traffic
    # off: only the service tail can fire. The failing service is 1.7x; the comparator's is
    # 1.25x throughout, or 1x then 1.5x, whose halves differ by more than the failing run
    # differs from it: a service gap it cannot stand behind.
    rng = np.random.default_rng(0)
    n = 1000
    base = rng.lognormal(np.log(100.0), 0.5, (2, n))
    arrival = np.cumsum(rng.exponential(100.0 * np.exp(0.125) / 0.5, n))
    c = _served(base[0] * np.where(np.arange(n) < n // 2, *halves), arrival)
    f = _served(base[1] * 1.7, arrival)
    lc = np.asarray(c.latency_us)
    queues = (observed_queue(f), observed_queue(c))
    t = decide(lc, lc, TriggerPolicy(equal_traffic=False), n_boot=200, seed=0, queues=queues)
    assert t.service_tail is not None and t.equal_traffic is None
    if halves[0] == halves[1]:
        assert t.regression and t.at_service_tail
        assert "in the service tail (the observed intervals do not confirm it" in t.reason
    else:
        assert t.outcome == "inconclusive" and "comparator is not stable" in t.reason


def test_a_slower_assembly_hidden_by_the_queue_is_found_in_the_service_tail(
    tmp_path: Path,
) -> None:
    f, c, pair = _runs(tmp_path, *ASSEMBLY)
    loc = localize(f, c, HW)
    assert loc.p95_gap_ci[0] <= 0 and loc.p99_gap_ci[0] <= 0
    eq, st = loc.equal_traffic, loc.service_tail
    assert eq["fired"]["value"] == 0.0 and all(eq[q]["lo"] <= 0 for q in QNAMES)
    assert loc.outcome == "regression" and "in the service tail" in loc.outcome_reason
    assert st["fired"]["value"] == 1.0
    assert any(st[q]["lo"] > 0 and st[q]["value"] > loc.threshold_us[q] for q in QNAMES)
    # The verdict prints the interval it fired on.
    assert f"CI {st['p95']['lo']:+.0f}..{st['p95']['hi']:+.0f}" in loc.outcome_reason
    assert (loc.origin_stage, loc.mechanism) == (pair.truth.origin_stage, pair.truth.mechanism)
    off = localize(f, c, HW, TriggerPolicy(service_tail=False))
    assert off.outcome == "inconclusive" and off.service_tail == {}


def test_the_triage_and_the_app_print_the_service_tail(tmp_path: Path, capsys: Any) -> None:
    _runs(tmp_path, *ASSEMBLY)
    doc = check_printed_reading(tmp_path / "store", capsys, "service_tail", "in the service tail")
    assert (doc["origin_stage"], doc["mechanism"]) == ("assembly", "assembly")


def test_the_closure_summary_shows_the_service_tail(tmp_path: Path, capsys: Any) -> None:
    # Without these rows the summary would print a regression beside intervals that do not
    # show one.
    _runs(tmp_path, *ASSEMBLY)
    md = check_exported_reading(tmp_path / "store", capsys, "service_tail", "service tail",
                                "in the service tail")  # fmt: skip
    assert "service tail: triage: block bootstrap of each request's latency minus" in md
