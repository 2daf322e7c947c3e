"""accel.localize.equal_traffic: the tail gap with both services replayed on one traffic, on
single-server queues near saturation (test_localize_queue_bootstrap's runs) and a profsim pair
whose observed intervals cannot tell."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from test_localize_profsim_regressions import HW, _runs
from test_localize_queue_bootstrap import PAIRS, _run

from accel.localize import localize
from accel.localize.equal_traffic import equal_traffic_gaps
from accel.localize.gaps import QNAMES, QS
from accel.localize.queue_bootstrap import replayed_quantiles
from accel.localize.requeue import observed_queue, same_arrival_rate
from accel.localize.trigger import TriggerPolicy, decide


def _fires(load: float, slower: float, policy: TriggerPolicy) -> tuple[int, int]:
    """Over PAIRS pairs of 300 requests: regressions, and those read at equal traffic."""
    fired = at_equal = 0
    for k in range(PAIRS):
        f, c = _run(300, load, 1000 + 2 * k, slower), _run(300, load, 1001 + 2 * k)
        queues = (observed_queue(f), observed_queue(c))
        t = decide(f.latency_us, c.latency_us, policy, n_boot=200, seed=0, queues=queues)
        fired, at_equal = fired + t.regression, at_equal + t.at_equal_traffic
    return fired, at_equal


def test_same_service_twice_gives_no_alarm_at_equal_traffic() -> None:
    fired, at_equal = _fires(0.85, 1.0, TriggerPolicy())
    assert at_equal == 0 and fired <= 2


def test_equal_traffic_finds_slower_services_the_observed_gaps_miss() -> None:
    # 15% slower service at load 0.85: two draws of the traffic hide it in some pairs.
    without, _ = _fires(0.85, 1.15, TriggerPolicy(equal_traffic=False, service_tail=False))
    with_, at_equal = _fires(0.85, 1.15, TriggerPolicy(service_tail=False))
    assert at_equal >= 2 and with_ == without + at_equal


def test_common_traffic_replays_one_queue_the_same_way() -> None:
    qu = observed_queue(_run(300, 0.85, 7))
    u = np.random.default_rng(0).random((40, qu.n_jobs))
    a = replayed_quantiles(qu, QS, 40, np.random.default_rng(1), u)
    b = replayed_quantiles(qu, QS, 40, np.random.default_rng(1), u)
    assert np.array_equal(a, b)
    # One queue against itself on common traffic and common jobs: no gap at all.
    et = equal_traffic_gaps(qu, qu, QS, QNAMES, 100, 3, 0.05)
    assert et.replays == 100 and all(np.isfinite(et.gap[q]) for q in QNAMES)


def test_different_arrival_rates_are_not_read_at_equal_traffic() -> None:
    f, c = _run(300, 0.85, 11), _run(300, 0.5, 12)
    queues = (observed_queue(f), observed_queue(c))
    assert not same_arrival_rate(queues[0].arrival, queues[1].arrival, 0.05)
    t = decide(f.latency_us, c.latency_us, TriggerPolicy(), n_boot=200, seed=0, queues=queues)
    assert t.equal_traffic is None and not t.at_equal_traffic


def test_a_fallback_hidden_by_traffic_is_found_at_equal_traffic(tmp_path: Path) -> None:
    # profsim: a mapping fallback whose observed p95/p99 intervals include zero (the runs drew
    # different traffic); at equal traffic the gap clears zero, and the origin is the truth's.
    f, c, pair = _runs(tmp_path, "mapping_fallback", 2, "store", "serial")
    loc = localize(f, c, HW)
    assert loc.p95_gap_ci[0] <= 0 and loc.p99_gap_ci[0] <= 0
    assert loc.outcome == "regression" and "at equal traffic" in loc.outcome_reason
    et = loc.equal_traffic
    assert et["fired"]["value"] == 1.0
    assert any(et[q]["lo"] > 0 and et[q]["value"] > loc.threshold_us[q] for q in QNAMES)
    # The verdict prints the interval it fired on.
    assert f"CI {et['p95']['lo']:+.0f}..{et['p95']['hi']:+.0f}" in loc.outcome_reason
    assert (loc.origin_stage, loc.mechanism) == (pair.truth.origin_stage, pair.truth.mechanism)
    off = localize(f, c, HW, TriggerPolicy(equal_traffic=False, service_tail=False))
    assert off.outcome != "regression" and off.equal_traffic == {}


def test_the_triage_prints_the_intervals_it_fired_on(tmp_path: Path, capsys: Any) -> None:
    from workbench.cli.main import main
    from workbench.tui.localize_text import verdict_text

    _runs(tmp_path, "mapping_fallback", 2, "store", "serial")
    argv = ["triage", "--store", str(tmp_path / "store"), "--failing", "failing"]
    argv += ["--comparator", "comparator"]
    assert main([*argv, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    eq = doc["verdict"]["equal_traffic"]
    assert doc["verdict"]["outcome"] == "regression" and eq["fired"]["value"] == 1.0
    assert main(argv) == 0
    text = capsys.readouterr().out
    line = next(x for x in text.splitlines() if "at equal traffic (the verdict's reading)" in x)
    assert f"{eq['p99']['lo'] / 1e3:+.2f}" in line and "97.5% CI" in line
    loc = SimpleNamespace(
        origin="lowering", manifest="execution", mechanism="mapping_fallback",
        secondary_mechanism="", explained_share=0.5, confidence=0.9,
    )  # fmt: skip
    shown = verdict_text(loc, doc).plain
    assert "rests on the gaps at equal traffic" in shown and "97.5% CI" in shown


def test_the_closure_summary_shows_the_intervals_it_fired_on(tmp_path: Path, capsys: Any) -> None:
    # The observed intervals include zero: without the rows at equal traffic the exported
    # summary would print a regression beside intervals that do not show one.
    from test_export_summary import check_schema

    from workbench.cli.main import main

    _runs(tmp_path, "mapping_fallback", 2, "store", "serial")
    store = ["--store", str(tmp_path / "store")]
    assert main(["incident", "new", *store, "--title", "t", "--id", "INC-eq"]) == 0
    capsys.readouterr()
    argv = ["triage", *store, "--failing", "failing", "--comparator", "comparator"]
    assert main([*argv, "--incident", "INC-eq", "--json"]) == 0
    eq = json.loads(capsys.readouterr().out)["verdict"]["equal_traffic"]
    assert eq["fired"]["value"] == 1.0
    assert main(["export", *store, "--incident", "INC-eq", "--format", "json", "-o", "-"]) == 0
    doc = json.loads(capsys.readouterr().out)
    check_schema(doc)
    rows = {(r["metric"], r["quantile"]): r for r in doc["impact"]["rows"]}
    for q in QNAMES:
        observed, row = rows["end-to-end", q], rows["end-to-end at equal traffic", q]
        assert observed["ci_low_us"] <= 0 <= observed["ci_high_us"]
        assert (row["delta_us"], row["ci_low_us"], row["ci_high_us"]) == pytest.approx(
            (eq[q]["value"], eq[q]["lo"], eq[q]["hi"])
        )
        assert row["row_confidence_level"] == 0.975
    assert rows["end-to-end at equal traffic", "p95"]["ci_low_us"] > 0
    what = doc["brief"]["what_regressed"][0]
    assert "at equal traffic, the verdict's reading, p99" in what and "97.5% CI" in what
    assert main(["export", *store, "--incident", "INC-eq", "--format", "md", "-o", "-"]) == 0
    md = capsys.readouterr().out
    line = next(x for x in md.splitlines() if x.startswith("| end-to-end at equal traffic | p95"))
    assert "(97.5%)" in line and "end-to-end at equal traffic: triage: both services" in md
