"""The validation judge on known cases (DESIGN §7): Pass, High with its CI, warnings, Nodata, and
the guardrail verdict (verdict.guardrail_verdict): PASS, FAIL, INCONCLUSIVE."""

from __future__ import annotations

import numpy as np
import pytest

from accel.stages import STAGES
from workbench.incident.guardrails import RunSamples, default_guardrails, measure
from workbench.incident.incident import Guardrail
from workbench.incident.judge import judge, judge_cell
from workbench.incident.verdict import MIN_SAMPLES, guardrail_verdict


def samples(
    run_id: str,
    n: int = 6000,  # long enough that draws of one distribution are shown equivalent
    seed: int = 0,
    tail_factor: float = 1.0,
    quality: float | None = 0.97,
    fallback_share: float = 0.0,
    shapes: tuple[str, ...] = ("a", "b"),
) -> RunSamples:
    """Lognormal latencies; tail_factor stretches the slowest 5% (a p99 shift, median intact)."""
    rng = np.random.default_rng(seed)
    stage = {s: rng.lognormal(np.log(100.0), 0.3, n) for s in STAGES}
    lat = sum(stage.values())
    cut = np.quantile(lat, 0.95) if n else 0.0
    lat = np.where(lat > cut, cut + (lat - cut) * tail_factor + (tail_factor - 1) * cut, lat)
    arrival = np.arange(n) * 1000.0
    return RunSamples(
        run_id=run_id,
        latency_us=lat,
        stage_us=stage,
        quality=np.full(n, np.nan) if quality is None else rng.normal(quality, 0.003, n),
        arrival_us=arrival,
        end_us=arrival + lat,
        fallback_ops=(rng.random(n) < fallback_share).astype(np.int64),
        recompile_ops=np.zeros(n, dtype=np.int64),
        shape_key=[shapes[i % len(shapes)] for i in range(n)],
    )


def cell_of(result, metric):  # type: ignore[no-untyped-def]
    return next(c for c in result.cells if c.metric.split(":")[0] == metric)


def test_identical_samples_pass() -> None:
    base = samples("base", seed=1)
    rails = default_guardrails("lowering", with_quality=True)
    result = judge(rails, base, base)
    assert [c.classification for c in result.cells] == ["Pass"] * len(rails)
    assert all(c.passed for c in result.cells)
    assert result.verdict == "PASS" and result.score == 1.0
    e2e = cell_of(result, "e2e_p99")
    assert e2e.diff == 0.0 and e2e.ci_low is not None and e2e.ci_low <= 0 <= (e2e.ci_high or 0)


def test_independent_draws_of_one_distribution_pass() -> None:
    rails = default_guardrails("execution", with_quality=True)
    result = judge(rails, samples("base", seed=1), samples("cand", seed=2))
    assert result.verdict == "PASS", result.reasons


def test_p99_shift_beyond_tolerance_is_high_with_ci() -> None:
    base, cand = samples("base", seed=1), samples("cand", seed=2, tail_factor=1.6)
    result = judge(default_guardrails("execution", with_quality=True), base, cand)
    p99 = cell_of(result, "e2e_p99")
    assert p99.classification == "High" and not p99.passed
    assert p99.ci_low is not None and p99.ci_high is not None and p99.diff is not None
    assert 0 < p99.ci_low <= p99.diff <= p99.ci_high
    assert p99.diff > p99.tolerance * (p99.baseline_value or 0)
    assert "CI" in p99.reason and "tolerated" in p99.reason
    # e2e p99 is critical: its failure fails the whole validation.
    assert result.verdict == "FAIL"
    assert any("end-to-end p99" in r for r in result.reasons)


def test_shift_within_tolerance_passes() -> None:
    base, cand = samples("base", seed=1), samples("cand", seed=1, tail_factor=1.02)
    g = Guardrail(
        metric="e2e_p99", label="p99", direction="increase", tolerance=0.10, critical=True
    )
    cell = judge_cell(g, measure(g, base), measure(g, cand))
    assert cell.classification == "Pass" and cell.passed
    assert cell.diff is not None and cell.diff > 0


def test_improvement_is_low_and_passes() -> None:
    base, cand = samples("base", seed=1, tail_factor=1.6), samples("cand", seed=2)
    g = Guardrail(
        metric="e2e_p99", label="p99", direction="increase", tolerance=0.05, critical=True
    )
    cell = judge_cell(g, measure(g, base), measure(g, cand))
    assert cell.classification == "Low" and cell.passed
    assert cell.ci_high is not None and cell.ci_high < 0


def test_fewer_than_50_samples_cannot_pass() -> None:
    base, cand = samples("base", n=30, seed=1), samples("cand", n=400, seed=2)
    result = judge(default_guardrails("lowering", with_quality=False), base, cand)
    p95 = cell_of(result, "e2e_p95")
    assert p95.n_baseline == 30 and p95.n_candidate == 400
    assert any(f"< {MIN_SAMPLES}" in w for w in p95.warnings)
    # Every guardrail has 30 samples in the baseline: none can pass, none fails: INCONCLUSIVE.
    assert not p95.passed and p95.classification in ("Pass", "Undecided")
    assert result.verdict == "INCONCLUSIVE" and result.score is None
    assert any("only 30 samples in the baseline (< 50): cannot pass" in r for r in result.reasons)
    big = judge(default_guardrails("lowering", False), samples("b", seed=1), samples("c", seed=2))
    assert not cell_of(big, "e2e_p95").warnings


def test_no_data_is_nodata() -> None:
    base = samples("base", seed=1)
    empty = samples("cand", n=0, seed=2)
    result = judge(default_guardrails("lowering", with_quality=True), base, empty)
    assert {c.classification for c in result.cells} == {"Nodata"}
    assert all("no " in c.reason and "candidate" in c.reason for c in result.cells)
    assert result.verdict == "INCONCLUSIVE" and result.score is None
    assert all("no " in r and "samples in the candidate" in r for r in result.reasons)


def test_missing_quality_is_nodata_and_holds_back_pass() -> None:
    base = samples("base", seed=1)
    cand = samples("cand", seed=2, quality=None)
    result = judge(default_guardrails("lowering", with_quality=True), base, cand)
    q = cell_of(result, "quality")
    assert q.classification == "Nodata" and q.diff is None
    # Every cell with data passes, but a guardrail without data keeps it from PASS.
    assert result.score == 1.0 and result.verdict == "INCONCLUSIVE"
    assert result.reasons == ["quality p05: no quality p05 samples in the candidate"]


def test_critical_failure_forces_fail_despite_high_score() -> None:
    base, cand = samples("base", seed=1), samples("cand", seed=2, tail_factor=1.6)
    rails = [
        Guardrail(
            metric="e2e_p99", label="p99", direction="increase", tolerance=0.05, critical=True
        )
    ] + [
        Guardrail(
            metric="stage_p99",
            label=f"{s} p99",
            direction="increase",
            tolerance=0.1,
            critical=False,
            stage=s,
        )
        for s in STAGES
    ] * 4
    result = judge(rails, base, cand)
    assert result.score >= 0.95  # 20 of 21 pass
    assert result.verdict == "FAIL"
    assert result.reasons[0].startswith("critical guardrail p99 failed: higher by")
    # The same failure on a non-critical guardrail fails by the score: 10/11 < 0.95.
    soft = [
        Guardrail(
            metric="e2e_p99", label="p99", direction="increase", tolerance=0.05, critical=False
        ),
        *rails[1:],
    ]
    soft_result = judge(soft[:11], base, cand)
    assert soft_result.verdict == "FAIL", soft_result.reasons
    assert soft_result.reasons[0] == "10/11 guardrails pass (score 0.91 < 0.95)"
    assert soft_result.reasons[1].startswith("p99 failed: higher by")
    # ... and among 21 guardrails (score 20/21 >= 0.95) the verdict passes.
    assert judge(soft, base, cand).verdict == "PASS"


def test_fallback_rate_increase_is_high() -> None:
    base = samples("base", n=800, seed=1, fallback_share=0.01)
    cand = samples("cand", n=800, seed=2, fallback_share=0.12)
    g = next(g for g in default_guardrails("lowering", False) if g.metric == "fallback_rate")
    cell = judge_cell(g, measure(g, base), measure(g, cand))
    assert cell.classification == "High" and not cell.passed
    assert cell.ci_low is not None and cell.ci_low > 0


def test_verdict_thresholds() -> None:
    base, cand = samples("base", seed=1), samples("cand", seed=2, tail_factor=1.6)
    bad = Guardrail(
        metric="e2e_p99", label="p99", direction="increase", tolerance=0.05, critical=False
    )
    ok = Guardrail(
        metric="e2e_p95", label="p95", direction="decrease", tolerance=0.05, critical=False
    )
    bad_cell = judge_cell(bad, measure(bad, base), measure(bad, cand))
    ok_cell = judge_cell(ok, measure(ok, base), measure(ok, base))
    assert guardrail_verdict([bad_cell, ok_cell])[:2] == (0.5, "FAIL")
    assert guardrail_verdict([bad_cell, *[ok_cell] * 19])[:2] == (0.95, "PASS")
    assert guardrail_verdict([ok_cell] * 3)[:2] == (1.0, "PASS")
    assert guardrail_verdict([])[1] == "INCONCLUSIVE"


@pytest.mark.parametrize("direction", ["increase", "both"])
def test_direction_decides_what_fails(direction: str) -> None:
    base, cand = samples("base", seed=1, tail_factor=1.6), samples("cand", seed=2)
    g = Guardrail(
        metric="e2e_p99", label="p99", direction=direction, tolerance=0.05, critical=False
    )
    cell = judge_cell(g, measure(g, base), measure(g, cand))
    assert cell.classification == "Low"
    assert cell.passed is (direction == "increase")


def test_wide_interval_covering_zero_and_a_breach_is_inconclusive() -> None:
    # Two draws of one distribution at 120 requests: the p99 interval covers 0 and also a change
    # far beyond the 5% tolerance. Covering 0 proves nothing: the guardrail is undecided.
    g = Guardrail(
        metric="e2e_p99", label="p99", direction="increase", tolerance=0.05, critical=True
    )
    base, cand = samples("base", n=120, seed=1), samples("cand", n=120, seed=2)
    cell = judge_cell(g, measure(g, base), measure(g, cand))
    assert cell.ci_low is not None and cell.ci_high is not None and cell.allowed is not None
    assert cell.ci_low <= 0 <= cell.ci_high and cell.ci_high > cell.allowed
    assert cell.classification == "Undecided" and not cell.passed
    score, verdict, reasons = guardrail_verdict([cell], [g])
    assert verdict == "INCONCLUSIVE" and score is None
    assert "holds both no change and a breach of the tolerated" in reasons[0]
    need = int(reasons[0].split("about ")[1].split(" requests a side")[0].replace(",", ""))
    assert need > 120
    # The advised sample size decides the same comparison: equivalent, or a breach.
    big_b, big_c = samples("base", n=need, seed=1), samples("cand", n=need, seed=2)
    decided = judge_cell(g, measure(g, big_b), measure(g, big_c))
    assert decided.classification in ("Pass", "High"), decided.reason


def test_pass_needs_the_interval_inside_the_tolerance() -> None:
    # Two draws of one distribution: at 200 requests the interval still reaches past the 5%
    # tolerance; at 20,000 it lies inside and the guardrail passes by equivalence.
    g = Guardrail(
        metric="e2e_p99", label="p99", direction="increase", tolerance=0.05, critical=True
    )
    for n, expected in ((200, "Undecided"), (20_000, "Pass")):
        base, cand = samples("base", n=n, seed=1), samples("cand", n=n, seed=2)
        cell = judge_cell(g, measure(g, base), measure(g, cand))
        assert cell.classification == expected, (n, cell.reason)
        assert cell.ci_high is not None and cell.allowed is not None
        assert (cell.ci_high <= cell.allowed) is (expected == "Pass")


def test_a_record_judged_before_equivalence_is_judged_by_it() -> None:
    # An old record's "Pass" cell, without `allowed`: the verdict takes the tolerated change from
    # its guardrail (min_effect included) and finds the interval too wide to pass.
    import msgspec

    from workbench.incident.incident import Cell
    from workbench.incident.verdict import cell_verdict

    g = next(g for g in default_guardrails("lowering", False) if g.metric == "fallback_rate")
    old = {
        "metric": "fallback_rate", "label": g.label, "classification": "Pass", "passed": True,
        "critical": False, "direction": "increase", "tolerance": g.tolerance, "unit": "share",
        "statistic": "difference of shares", "baseline_value": 0.0, "candidate_value": 0.0,
        "diff": 0.0, "ci_low": -0.0158, "ci_high": 0.0158, "n_baseline": 240,
        "n_candidate": 240, "reason": "change 0.00%, CI [-1.58%, 1.58%] covers 0",
    }  # fmt: skip
    cell = msgspec.convert(old, Cell)
    assert cell.allowed is None
    v = cell_verdict(cell, g)
    assert v.outcome == "undecided"
    assert "tolerated 1.00%" in v.why and "requests a side (now 240 / 240)" in v.why
    assert guardrail_verdict([cell], [g])[1] == "INCONCLUSIVE"
    narrow = msgspec.structs.replace(cell, ci_low=-0.004, ci_high=0.004)
    assert cell_verdict(narrow, g).outcome == "pass"


@pytest.mark.parametrize(
    ("direction", "d", "lo", "hi", "allowed", "n", "need"),
    [
        ("increase", 0.0, -10.0, 10.0, 5.0, 100, 400),  # half-width 10 must become 5
        ("increase", 8.0, -2.0, 18.0, 5.0, 100, 157),  # past the tolerance: lo must clear 0
        ("decrease", 0.0, -10.0, 10.0, 5.0, 100, 400),
        ("both", 1.0, -10.0, 12.0, 5.0, 100, 757),  # the wider side decides
        ("increase", 0.0, -1.0, 1.0, 0.0, 100, None),  # a zero tolerance is never shown
    ],
)
def test_deciding_n(
    direction: str, d: float, lo: float, hi: float, allowed: float, n: int, need: int | None
) -> None:
    from workbench.incident.verdict import deciding_n

    assert deciding_n(direction, d, lo, hi, allowed, n) == need
