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

from accel.localize import localize
from accel.localize.equal_traffic import equal_traffic_gaps
from accel.localize.gaps import QNAMES, QS
from accel.localize.queue_bootstrap import replayed_quantiles
from accel.localize.requeue import observed_queue, same_arrival_rate
from accel.localize.trigger import TriggerPolicy, decide
from test_localize_profsim_regressions import HW, _runs
from test_localize_queue_bootstrap import PAIRS, _run


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
    without, _ = _fires(0.85, 1.15, TriggerPolicy(equal_traffic=False, queue_free_tail=False))
    with_, at_equal = _fires(0.85, 1.15, TriggerPolicy(queue_free_tail=False))
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
    off = localize(
        f, c, HW, TriggerPolicy(equal_traffic=False, queue_free_tail=False, tail_exceedance=False)
    )
    assert off.outcome != "regression" and off.equal_traffic == {}


def check_printed_reading(store: Path, capsys: Any, key: str, words: str) -> dict[str, Any]:
    """Triage the store's pair: a regression on the verdict's `key` reading, whose interval
    and level the CLI report and the app's verdict text print under `words`; returns the triage
    JSON."""
    from accel.stats import level_text
    from workbench.cli.main import main
    from workbench.tui.localize_text import verdict_text

    argv = ["triage", "--store", str(store), "--failing", "failing", "--comparator", "comparator"]
    assert main([*argv, "--json"]) == 0
    doc: dict[str, Any] = json.loads(capsys.readouterr().out)
    read = doc["verdict"][key]
    assert doc["verdict"]["outcome"] == "regression" and read["fired"]["value"] == 1.0
    assert main(argv) == 0
    text = capsys.readouterr().out
    line = next(x for x in text.splitlines() if f"{words} (the verdict's reading)" in x)
    level = f"{level_text(read['fired']['level'])} CI"
    assert all(f"{read[q]['lo'] / 1e3:+.2f}" in line for q in QNAMES) and level in line
    loc = SimpleNamespace(
        origin=doc["origin_stage"], manifest=doc["manifest_stage"], mechanism=doc["mechanism"],
        secondary_mechanism="", explained_share=0.5, confidence=0.9,
    )  # fmt: skip
    shown = verdict_text(loc, doc).plain
    assert f"rests on the gaps {words}" in shown and level in shown
    return doc


def test_the_triage_prints_the_intervals_it_fired_on(tmp_path: Path, capsys: Any) -> None:
    _runs(tmp_path, "mapping_fallback", 2, "store", "serial")
    doc = check_printed_reading(tmp_path / "store", capsys, "equal_traffic", "at equal traffic")
    # Equal traffic and the queue-free tail could both be read: each at 1 - alpha/4.
    assert doc["verdict"]["equal_traffic"]["fired"]["level"] == 0.9875
    assert "(98.75% CI" in doc["verdict"]["reason"]


def check_exported_reading(store: Path, capsys: Any, key: str, metric: str, words: str) -> str:
    """Triage the store's pair into a new incident and export it: the impact rows `metric` carry
    the verdict's `key` reading (fired, at its level) where the observed intervals include zero,
    and the brief names it in `words`; returns the exported Markdown."""
    from accel.stats import level_text
    from test_export_summary import check_schema
    from workbench.cli.main import main
    from workbench.triage.readings import READINGS

    at = ["--store", str(store)]
    assert main(["incident", "new", *at, "--title", "t", "--id", "INC-r"]) == 0
    capsys.readouterr()
    argv = ["triage", *at, "--failing", "failing", "--comparator", "comparator"]
    assert main([*argv, "--incident", "INC-r", "--json"]) == 0
    read = json.loads(capsys.readouterr().out)["verdict"][key]
    assert read["fired"]["value"] == 1.0
    assert main(["export", *at, "--incident", "INC-r", "--format", "json", "-o", "-"]) == 0
    doc = json.loads(capsys.readouterr().out)
    check_schema(doc)
    rows = {(r["metric"], r["quantile"]): r for r in doc["impact"]["rows"]}
    # one reading fired, and only its rows are there
    assert {m for m, _ in rows} & {m for _, m, _, _ in READINGS} == {metric}
    for q in QNAMES:
        observed, row = rows["end-to-end", q], rows[metric, q]
        assert observed["ci_low_us"] <= 0 <= observed["ci_high_us"]
        assert (row["delta_us"], row["ci_low_us"], row["ci_high_us"]) == pytest.approx(
            (read[q]["value"], read[q]["lo"], read[q]["hi"])
        )
        assert row["row_confidence_level"] == read["fired"]["level"]
    assert rows[metric, "p95"]["ci_low_us"] > 0
    what = doc["brief"]["what_regressed"][0]
    level = level_text(read["fired"]["level"])
    assert f"{words}, the verdict's reading, p99" in what and f"{level} CI" in what
    assert main(["export", *at, "--incident", "INC-r", "--format", "md", "-o", "-"]) == 0
    md = capsys.readouterr().out
    line = next(x for x in md.splitlines() if x.startswith(f"| {metric} | p95"))
    assert f"({level})" in line
    return str(md)


def test_the_closure_summary_shows_the_intervals_it_fired_on(tmp_path: Path, capsys: Any) -> None:
    # The observed intervals include zero: without the rows at equal traffic the exported
    # summary would print a regression beside intervals that do not show one.
    _runs(tmp_path, "mapping_fallback", 2, "store", "serial")
    metric = "end-to-end at equal traffic"
    md = check_exported_reading(tmp_path / "store", capsys, "equal_traffic", metric,
                                "at equal traffic")  # fmt: skip
    assert "end-to-end at equal traffic: triage: both services" in md
