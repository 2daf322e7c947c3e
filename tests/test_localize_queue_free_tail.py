"""The trigger's queue-free reading (latency minus the waits for a busy server): on
single-server queues near saturation, a profsim pair whose observed and equal-traffic intervals
cannot tell, and what the triage, the app and the closure summary print of it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from accel.localize import localize, trigger
from accel.localize.equal_traffic import EqualTraffic
from accel.localize.gaps import QNAMES, QS, at_q
from accel.localize.requeue import arrival_rate, observed_queue, queue_free
from accel.localize.trigger import TriggerPolicy, decide, tail_gaps, thresholds
from accel.ops import RequestArrays
from accel.profiles import get_profile
from accel.queueing import lindley_waits_sorted
from accel.stats import hodges_lehmann_ci
from localize_pieces import requests
from test_localize_equal_traffic import check_exported_reading, check_printed_reading
from test_localize_profsim_regressions import HW, _runs
from test_localize_queue_bootstrap import PAIRS, _run

# profsim, h100, one request served at a time: +4.4x post-processing (assembly). At 400
# requests the p95/p99 intervals, observed and at equal traffic, include zero.
ASSEMBLY = ("assembly", 510026, "store", "serial")


def _fires(slower: float, policy: TriggerPolicy) -> tuple[int, int]:
    """Over PAIRS pairs of 300 requests at load 0.85: regressions, and those read in the
    queue-free tail."""
    fired = at_queue_free = 0
    for k in range(PAIRS):
        f, c = _run(300, 0.85, 1000 + 2 * k, slower), _run(300, 0.85, 1001 + 2 * k)
        queues = (observed_queue(f), observed_queue(c))
        t = decide(f.latency_us, c.latency_us, policy, n_boot=200, seed=0, queues=queues)
        fired, at_queue_free = fired + t.regression, at_queue_free + t.at_queue_free_tail
    return fired, at_queue_free


# With the queue-free tail read too, equal traffic shares the further readings' error rate
# with it (trigger.further_alpha): its intervals widen, so it may fire on fewer pairs.


def test_same_service_twice_gives_no_alarm_in_the_queue_free_tail() -> None:
    fired, at_queue_free = _fires(1.0, TriggerPolicy())
    assert at_queue_free == 0 and fired <= _fires(1.0, TriggerPolicy(queue_free_tail=False))[0]


def test_the_queue_free_tail_finds_a_slower_service_the_other_readings_miss() -> None:
    without, _ = _fires(1.2, TriggerPolicy(queue_free_tail=False))
    with_, at_queue_free = _fires(1.2, TriggerPolicy())
    assert at_queue_free >= 1 and with_ >= without


def _served(service: np.ndarray, arrival: np.ndarray) -> RequestArrays:
    return requests(arrival, lindley_waits_sorted(arrival, service) + service, service)


@pytest.mark.parametrize("halves", [(1.25, 1.25), (1.0, 1.5)])
def test_the_comparator_check_reads_its_own_queue_free_latencies(
    halves: tuple[float, float],
) -> None:
    # One traffic, the same latencies given for both runs (no observed gap), equal traffic
    # off: only the queue-free tail can fire. The failing service is 1.7x; the comparator's is
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
    assert t.queue_free_tail is not None and t.equal_traffic is None
    if halves[0] == halves[1]:
        assert t.regression and t.at_queue_free_tail
        assert "in the queue-free tail (the observed intervals do not confirm it" in t.reason
    else:
        assert t.outcome == "inconclusive" and "comparator is not stable" in t.reason


def test_a_queue_free_gap_the_queue_gives_back_at_equal_traffic_is_not_a_regression(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The trigger's give-back branch: the queue-free tail passes the rule, but replayed on one
    # traffic, queue included, the failing service comes out faster (a longer hold that fills
    # batches and shortens the queue). No generator of ours makes such a batcher, so the
    # equal-traffic replay of a 1.7x slower service is turned into its mirror image.
    rng = np.random.default_rng(0)
    n = 1000
    base = rng.lognormal(np.log(100.0), 0.5, (2, n))
    arrival = np.cumsum(rng.exponential(100.0 * np.exp(0.125) / 0.5, n))
    c = _served(base[0] * 1.25, arrival)
    f = _served(base[1] * 1.7, arrival)
    lc = np.asarray(c.latency_us)
    queues = (observed_queue(f), observed_queue(c))
    assert decide(lc, lc, TriggerPolicy(), n_boot=200, seed=0, queues=queues).regression
    real = trigger.equal_traffic_gaps

    def mirrored(*args: Any) -> EqualTraffic:
        e = real(*args)
        ci = {q: (-hi, -lo) for q, (lo, hi) in e.ci.items()}
        return EqualTraffic({q: -g for q, g in e.gap.items()}, ci, e.replays)

    monkeypatch.setattr(trigger, "equal_traffic_gaps", mirrored)
    t = decide(lc, lc, TriggerPolicy(), n_boot=200, seed=0, queues=queues)
    assert t.equal_traffic is not None and t.queue_free_tail is not None
    assert all(t.equal_traffic.ci[q][1] < 0 for q in QNAMES)
    assert t.outcome == "inconclusive" and not t.at_queue_free_tail
    assert "at equal traffic the queue gives it back" in t.reason
    # The interval it would have fired on is printed beside the reason it did not.
    assert any(t.queue_free_tail.ci[q][0] > 0 for q in QNAMES)


def test_a_slower_assembly_hidden_by_the_queue_is_found_in_the_queue_free_tail(
    tmp_path: Path,
) -> None:
    f, c, pair = _runs(tmp_path, *ASSEMBLY)
    loc = localize(f, c, HW)
    assert loc.p95_gap_ci[0] <= 0 and loc.p99_gap_ci[0] <= 0
    eq, st = loc.equal_traffic, loc.queue_free_tail
    assert eq["fired"]["value"] == 0.0 and all(eq[q]["lo"] <= 0 for q in QNAMES)
    assert loc.outcome == "regression" and "in the queue-free tail" in loc.outcome_reason
    assert st["fired"]["value"] == 1.0
    assert any(st[q]["lo"] > 0 and st[q]["value"] > st["threshold_us"][q] for q in QNAMES)
    # The verdict prints the interval it fired on.
    assert f"CI {st['p95']['lo']:+.0f}..{st['p95']['hi']:+.0f}" in loc.outcome_reason
    assert (loc.origin_stage, loc.mechanism) == (pair.truth.origin_stage, pair.truth.mechanism)
    off = localize(f, c, HW, TriggerPolicy(queue_free_tail=False))
    assert off.outcome == "inconclusive" and off.queue_free_tail == {}


TPU = get_profile("tpu-v5e")


def test_a_slower_admission_hidden_by_the_queue_is_found_in_the_queue_free_tail(
    tmp_path: Path,
) -> None:
    # profsim, tpu-v5e, continuous batching: requests join the running batch only every ~4.4
    # steps (batch_policy). At 400 requests the observed and equal-traffic intervals include
    # zero, and the service alone did not move: the wait for admission (batch formation) did.
    f, c, pair = _runs(tmp_path, "batch_policy", 604026, "store", "continuous", hw=TPU)
    loc = localize(f, c, TPU)
    assert loc.p95_gap_ci[0] <= 0 and loc.p99_gap_ci[0] <= 0
    assert loc.equal_traffic["fired"]["value"] == 0.0
    assert loc.outcome == "regression" and "in the queue-free tail" in loc.outcome_reason
    assert (loc.origin_stage, loc.mechanism) == (pair.truth.origin_stage, pair.truth.mechanism)
    fq, cq = observed_queue(f.requests), observed_queue(c.requests)
    for q, name in zip(QS, QNAMES, strict=True):
        assert at_q(fq.service, q) - at_q(cq.service, q) < loc.queue_free_tail["threshold_us"][name]
        assert loc.queue_free_tail[name]["lo"] > loc.queue_free_tail["threshold_us"][name]


def test_one_service_twice_near_saturation_reads_one_capacity(tmp_path: Path) -> None:
    # profsim A/A (one service twice), tpu-v5e, continuous batching, 2870 requests a run. The
    # failing run's jobs read as 4 slots to the comparator's 3 while one overlap counted as a
    # slot: its requests seemed held before they started (batch formation p50 1.2 ms to 7 us)
    # and its queue-free tail passed the rule, which only the queue giving it back at equal
    # traffic stopped. Both now read 3 slots and the queue-free tail shows no gap.
    f, c, _ = _runs(tmp_path, "none", 673297, "store", "continuous", 2870, TPU)
    assert observed_queue(f.requests).slots == observed_queue(c.requests).slots == 3
    loc = localize(f, c, TPU)
    qf = loc.queue_free_tail
    assert all(qf[q]["lo"] < 0 < qf[q]["hi"] for q in QNAMES)
    assert loc.outcome != "regression" and qf["fired"]["value"] == 0.0
    assert "the queue gives it back" not in loc.outcome_reason


def test_the_triage_and_the_app_print_the_queue_free_tail(tmp_path: Path, capsys: Any) -> None:
    _runs(tmp_path, *ASSEMBLY)
    doc = check_printed_reading(
        tmp_path / "store", capsys, "queue_free_tail", "in the queue-free tail"
    )
    assert (doc["origin_stage"], doc["mechanism"]) == ("assembly", "assembly")
    assert doc["explained_share_method"].endswith(
        "of the queue-free tail's gap, re-run without the queue"
    )


def test_the_closure_summary_shows_the_queue_free_tail(tmp_path: Path, capsys: Any) -> None:
    # Without these rows the summary would print a regression beside intervals that do not
    # show one.
    _runs(tmp_path, *ASSEMBLY)
    md = check_exported_reading(tmp_path / "store", capsys, "queue_free_tail", "queue-free tail",
                                "in the queue-free tail")  # fmt: skip
    assert "queue-free tail: triage: block bootstrap of each request's latency minus" in md


@pytest.mark.parametrize("layout", ["store", "events"])
def test_a_fault_the_queue_turned_around_is_localized_in_the_queue_free_tail(
    tmp_path: Path, layout: str
) -> None:
    # profsim, tpu-v5e, one request served at a time: a fusion that spills (+2.5x its memory
    # traffic). At 400 requests the comparator's queue happened to run longer, so the observed
    # gaps are below zero; the queue-free tail grew by more than 5% of the comparator's
    # queue-free quantile but less than 5% of its latency's. Weighed against the observed gaps,
    # no evidence explained anything and the manifest stage (execution) was named; in the
    # events layout the ingress residual (its queue re-run from events alone) was.
    f, c, pair = _runs(tmp_path, "fusion_memory_burst", 522864, layout, "serial", hw=TPU)
    loc = localize(f, c, TPU)
    qf = loc.queue_free_tail
    assert loc.p95_gap_us < 0 and loc.p99_gap_us < 0
    assert loc.outcome == "regression" and qf["fired"]["value"] == 1.0
    cq = observed_queue(c.requests)
    own = cq.service + cq.formation_us
    for q, name in zip(QS, QNAMES, strict=True):
        assert qf["threshold_us"][name] == pytest.approx(0.05 * at_q(own, q))
        assert qf["threshold_us"][name] < qf[name]["value"] < loc.threshold_us[name]
    weighed = next(c for c in loc.claims if c.method == "queue-free re-run (requeue.unqueued)")
    assert weighed.numbers["queue_free_p95_gap_us"] == qf["p95"]["value"]
    assert (loc.origin_stage, loc.mechanism) == (pair.truth.origin_stage, pair.truth.mechanism)


def test_in_the_queue_free_tail_ingress_is_tested_on_its_batchs_formation(tmp_path: Path) -> None:
    # profsim, tpu-v5e, continuous batching, batch_policy: found in the queue-free tail. There
    # the ingress evidence is the shift of each request's batch formation (the queue is not in
    # the reading, so neither is the ingress residual of the queue re-run).
    f, c, pair = _runs(tmp_path, "batch_policy", 627783, "store", "continuous", hw=TPU)
    loc = localize(f, c, TPU)
    assert loc.queue_free_tail["fired"]["value"] == 1.0 and loc.decided_by == "residual"
    assert (loc.origin_stage, loc.mechanism) == (pair.truth.origin_stage, pair.truth.mechanism)
    claim = next(c for c in loc.claims if c.text.startswith("ingress (its batch's formation"))
    fq, cq = observed_queue(f.requests), observed_queue(c.requests)
    assert claim.numbers["hl_us"] == pytest.approx(
        hodges_lehmann_ci(fq.formation_us, cq.formation_us)[0]
    )


@pytest.mark.parametrize("layout", ["store", "events"])
def test_a_slower_service_at_a_lighter_load_is_found_in_its_service_tail(
    tmp_path: Path, layout: str
) -> None:
    # profsim, tpu-v5e, one request served at a time: a quarter of the layer barriers stall
    # for twice the layer's time. The failing run drew 0.84x the comparator's traffic, so
    # neither equal traffic nor the queue-free tail with formation was read: inconclusive,
    # the observed intervals including zero. Read on the service alone, it fires.
    f, c, pair = _runs(tmp_path, "barrier_stall", 533787, layout, "serial", hw=TPU)
    loc = localize(f, c, TPU)
    qf = loc.queue_free_tail
    assert loc.p95_gap_ci[0] <= 0 and loc.p99_gap_ci[0] <= 0 and loc.equal_traffic == {}
    assert arrival_rate(f.requests.arrival_us) < arrival_rate(c.requests.arrival_us)
    assert loc.outcome == "regression"
    assert qf["fired"] == {"value": 1.0, "with_formation": 0.0, "level": 0.975}
    assert "its batch's formation set aside: the failing run got less traffic" in loc.outcome_reason
    assert "(5% of the comparator's service quantile)" in loc.outcome_reason
    cq = observed_queue(c.requests)
    for q, name in zip(QS, QNAMES, strict=True):
        assert qf["threshold_us"][name] == pytest.approx(0.05 * at_q(cq.service, q))
    assert (loc.origin_stage, loc.mechanism) == (pair.truth.origin_stage, pair.truth.mechanism)


def test_a_lighter_load_alone_is_not_a_regression_of_the_queue_free_tail(tmp_path: Path) -> None:
    # profsim, h100, one request served at a time, the runs of a 1.4x load increase given the
    # other way round: the failing run got less traffic and the same service. Its batches
    # waited longer for their mates (queue-free p99 with formation clear of zero and past the
    # threshold); the service alone did not move.
    c, f, _ = _runs(tmp_path, "queueing", 504030, "store", "serial")
    fq, cq = observed_queue(f.requests), observed_queue(c.requests)
    order_f, order_c = np.argsort(fq.arrival), np.argsort(cq.arrival)
    with_formation = tail_gaps(
        queue_free(fq)[order_f], queue_free(cq)[order_c], 200, 53, alpha=0.025
    )
    limit, _ = thresholds(queue_free(cq)[order_c], TriggerPolicy())
    # the trigger's rule: past the threshold, its interval clear of zero
    assert with_formation.gap["p99"] > limit["p99"] and with_formation.ci["p99"][0] > 0
    loc = localize(f, c, HW)
    # The one further reading of a pair with less traffic: at 1 - alpha/2.
    assert loc.queue_free_tail["fired"] == {"value": 0.0, "with_formation": 0.0, "level": 0.975}
    assert loc.outcome == "no regression"


def test_the_closure_summary_says_when_the_queue_free_tail_is_the_service_alone(
    tmp_path: Path, capsys: Any
) -> None:
    _runs(tmp_path, "barrier_stall", 533787, "store", "serial", hw=TPU)
    md = check_exported_reading(tmp_path / "store", capsys, "queue_free_tail", "queue-free tail",
                                "in the queue-free tail")  # fmt: skip
    assert "queue-free tail: triage: block bootstrap of each request's service, its latency" in md
