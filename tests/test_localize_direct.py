"""accel.localize.direct: unmodelled time per kind and per-core imbalance, compared directly."""

from __future__ import annotations

import numpy as np
import pytest

from accel.localize.direct import IMBALANCE, compare, imbalance_us, kind_names, kind_times
from accel.stages import STAGE_CODE
from localize_pieces import ops

EXEC = STAGE_CODE["execution"]


def _sharded(n_req: int, slow_core: int | None, factor: float, extra: float, seed: int):
    """Per request, 2 layers x 2 op names x 4 cores of sharded ops, then a barrier per layer;
    one core `factor` times slower and `extra` us later on every op (slope and intercept)."""
    rng = np.random.default_rng(seed)
    req, stage, t, core, name = [], [], [], [], []
    for r in range(n_req):
        for layer in range(2):
            for op in ("mm", "act"):
                for c in range(4):
                    d = rng.uniform(90, 110)
                    if c == slow_core:
                        d = d * factor + extra
                    req.append(r), stage.append(EXEC), t.append(d), core.append(c)
                    name.append(f"L{layer}.{op}")
            req.append(r), stage.append(EXEC), t.append(rng.uniform(5, 8)), core.append(-1)
            name.append(f"L{layer}.barrier")
    flops = np.where(np.array(core) >= 0, 1e9, np.nan)
    return ops(np.array(req), np.array(stage), np.array(t), np.array(core), name, flops=flops)


@pytest.mark.parametrize(("factor", "extra"), [(1.3, 0.0), (1.0, 30.0)])
def test_a_slower_core_shows_as_imbalance_whether_slope_or_intercept(
    factor: float, extra: float
) -> None:
    n = 50
    even = _sharded(n, None, 1.0, 0.0, 1)
    slow = _sharded(n, 2, factor, extra, 2)
    code_e, code_s, _ = kind_names(even, slow)
    imb_e, imb_s = imbalance_us(even, code_e, n), imbalance_us(slow, code_s, n)
    # Per op kind (2 per request, each layer's op folded into its kind), the slow core's excess
    # over the mean: 3/4 of its extra time on the kind's 2 ops (less the even run's noise).
    expect = 2 * 2 * 0.75 * (100 * (factor - 1) + extra)
    assert np.median(imb_s - imb_e) == pytest.approx(expect, rel=0.3)
    assert np.all(imb_e < 0.5 * expect)


def test_barriers_of_every_layer_are_one_kind_and_a_stall_in_the_tail_is_found() -> None:
    n = 200
    base = _sharded(n, None, 1.0, 0.0, 3)
    stalled = _sharded(n, None, 1.0, 0.0, 4)
    barrier = np.array(["barrier" in s for s in stalled.name])
    hit = barrier & np.isin(stalled.req, np.arange(0, n, 10))  # 10% of requests stall
    stalled.observed_us[hit] += 2000.0
    code_b, code_s, vocab = kind_names(stalled, base)
    kt_s, kt_b = kind_times(stalled, code_b, vocab, n), kind_times(base, code_s, vocab, n)
    assert "execution:L#.barrier" in kt_s.us and IMBALANCE in kt_s.us
    assert not any(k.startswith("execution:L#.mm") for k in kt_s.us)  # modelled: has flops
    lat_s = np.bincount(stalled.req, stalled.observed_us, n)
    lat_b = np.bincount(base.req, base.observed_us, n)
    gap = float(np.quantile(lat_s, 0.95) - np.quantile(lat_b, 0.95))
    by = {d.kind: d for d in compare(kt_s, kt_b, lat_s, lat_b, gap)}
    d = by["execution:L#.barrier"]
    # Only 10% of requests stall: the rank test of the whole misses it, the tail does not.
    assert d.stage == "execution" and d.tail_share > 0.8 and d.p_value > 0.01
    assert d.tail_excess == pytest.approx(0.10, abs=0.04) and d.tail_excess_lo > 0
    assert d.grew(0.002)
    assert d.failing_p95_us > 10 * d.comparator_p95_us
    # The counterfactual gives stalled requests the comparator's barrier time back.
    assert np.all(d.saved_us[np.arange(0, n, 10)] > 1900) and d.saved_us.max() < 4100
    assert abs(by[IMBALANCE].tail_share) < 0.1


def test_a_load_surge_is_found_by_re_running_at_the_comparators_arrival_rate() -> None:
    from accel.localize.confidence import decide
    from accel.localize.direct import load_candidate
    from accel.localize.requeue import observed_queue, requeue
    from accel.queueing import fifo_schedule
    from localize_pieces import requests

    def run(gap: float, seed: int):  # type: ignore[no-untyped-def]
        rng = np.random.default_rng(seed)
        arrival = np.cumsum(rng.exponential(gap, 800))
        service = rng.uniform(60.0, 100.0, 800)
        latency = fifo_schedule(arrival, service).wait_us + service
        return requests(arrival, latency, service)

    fr, cr = run(100.0, 1), run(160.0, 2)  # the same service, 60% more load
    fq = observed_queue(fr)
    base = requeue(fq, fr.stage_us)
    cand = load_candidate(fr, cr, fq, fr.stage_us, base, True, 0.002, 0.3)
    assert cand is not None and cand.eligible and cand.stage == "ingress"
    own = np.zeros((800, 5))
    d = decide([cand], fr.latency_us, cr.latency_us, own, own)
    assert d.origin == "ingress" and d.decided_by == "direct" and d.shares[0] > 0.5
    # The lighter run against the heavier one: no load evidence.
    assert (
        load_candidate(cr, fr, observed_queue(cr), cr.stage_us, cr.latency_us, True, 0.002, 0.3)
        is None
    )


def test_the_load_evidence_tests_the_rates_and_widens_for_bursty_arrivals() -> None:
    from accel.localize.direct import load_candidate
    from accel.localize.requeue import observed_queue, requeue
    from accel.queueing import fifo_schedule
    from accel.stats import gap_dispersion
    from localize_pieces import requests

    def run(mean_gap: float, burst: float, seed: int):  # type: ignore[no-untyped-def]
        # gaps of mean `mean_gap`: exponential (burst 1), or a mix of short and long ones whose
        # squared coefficient of variation is about `burst`
        rng = np.random.default_rng(seed)
        # two-phase hyperexponential with balanced means
        p = 0.5 * (1.0 + np.sqrt((burst - 1.0) / (burst + 1.0)))
        first = rng.random(800) < p
        scale = np.where(first, mean_gap / (2.0 * p), mean_gap / (2.0 * (1.0 - p)))
        arrival = np.cumsum(rng.exponential(1.0, 800) * scale)
        service = rng.uniform(30.0, 50.0, 800)
        return requests(arrival, fifo_schedule(arrival, service).wait_us + service, service)

    for burst, eligible in ((1.0, True), (6.0, False)):
        fr, cr = run(100.0, burst, 1), run(125.0, burst, 2)  # 25% more arrivals
        gaps = np.diff(np.sort(fr.arrival_us))
        assert gap_dispersion(gaps) == pytest.approx(burst, rel=0.35, abs=0.15)
        fq = observed_queue(fr)
        cand = load_candidate(fr, cr, fq, fr.stage_us, requeue(fq, fr.stage_us), True, 0.002, 0.3)
        assert cand is not None and cand.eligible == eligible
