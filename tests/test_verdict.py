"""One verdict per candidate (verdict.py): REFUSED before FAIL before INCONCLUSIVE before PASS,
"better" neutral, under 50 samples never a pass, and throughput as a rate with its n."""

from __future__ import annotations

import msgspec
import numpy as np
import pytest

from accel import stats
from tests.test_judge_cases import samples
from workbench.incident.guardrails import RunSamples, default_guardrails, measure
from workbench.incident.incident import Guardrail, ReplayCheck, Validation
from workbench.incident.judge import judge, judge_cell
from workbench.incident.verdict import candidate_verdict, cell_verdict

P99 = Guardrail(metric="e2e_p99", label="p99", direction="increase", tolerance=0.05, critical=True)


def validation_of(base: RunSamples, cand: RunSamples, rails: list[Guardrail]) -> Validation:
    result = judge(rails, base, cand)
    return Validation(
        candidate=cand.run_id,
        baseline=base.run_id,
        baseline_role="comparator",
        guardrails=rails,
        cells=result.cells,
        score=result.score or 0.0,
        verdict=result.verdict,
        reasons=result.reasons,
        validated_at="2026-01-01T00:00:00+00:00",
        validated_by="t",
        confidence_level=0.95,
        pass_threshold=0.95,
        marginal_threshold=0.95,
    )


def check(candidate: str, passed: bool, psi: float = 0.02, unseen: float = 0.0) -> ReplayCheck:
    return ReplayCheck(
        reference="failing",
        candidate=candidate,
        psi=psi,
        psi_threshold=0.25,
        unseen_share=unseen,
        unseen_threshold=0.05,
        n_reference=600,
        n_candidate=600,
        n_shapes=10,
        passed=passed,
        reason="shapes differ" if not passed else "ok",
    )


def test_better_is_neutral_and_passes() -> None:
    base, cand = samples("base", seed=1, tail_factor=1.6), samples("cand", seed=2)
    v = validation_of(base, cand, [P99])
    cv = candidate_verdict(v, check("cand", True))
    assert v.cells[0].classification == "Low"
    assert cv.cells[0].outcome == "better" and "the good direction" in cv.cells[0].why
    assert cv.verdict == "PASS" and cv.headline == "PASS: 1/1 guardrails pass (score 1.00)"


def test_worse_fails_naming_the_guardrail() -> None:
    base, cand = samples("base", seed=1), samples("cand", seed=2, tail_factor=1.6)
    cv = candidate_verdict(validation_of(base, cand, [P99]), check("cand", True))
    assert cv.verdict == "FAIL" and cv.cells[0].outcome == "fail"
    assert cv.headline.startswith("FAIL: critical guardrail p99 failed: higher by")


@pytest.mark.parametrize("n_small", [12, 49])
def test_under_50_samples_is_inconclusive_even_when_worse(n_small: int) -> None:
    base = samples("base", n=n_small, seed=1)
    cand = samples("cand", n=600, seed=2, tail_factor=3.0)
    v = validation_of(base, cand, [P99])
    cv = candidate_verdict(v, check("cand", True))
    assert cv.verdict == "INCONCLUSIVE" and cv.score is None
    assert cv.cells[0].outcome == "too few samples"
    assert cv.cells[0].why.startswith(f"only {n_small} samples in the baseline (< 50): cannot pass")
    # 50 on each side is enough: the same shift fails.
    v50 = validation_of(samples("base", n=50, seed=1), cand, [P99])
    assert candidate_verdict(v50, check("cand", True)).verdict == "FAIL"


def test_refused_wins_and_names_psi_and_unseen_share() -> None:
    base = samples("base", seed=1)
    v = validation_of(base, samples("cand", seed=2), default_guardrails("lowering", True))
    assert candidate_verdict(v, check("cand", True)).verdict == "PASS"
    cv = candidate_verdict(v, check("cand", False, psi=11.374, unseen=0.796))
    assert cv.verdict == "REFUSED" and (cv.psi, cv.unseen_share) == (11.374, 0.796)
    assert "PSI 11.374 (limit 0.25), unseen shapes 79.6% (limit 5%)" in cv.headline
    assert cv.headline.startswith("REFUSED: cand not measured on production-like shapes")
    # Refused even when a guardrail also fails: the guardrails say nothing about production.
    bad = validation_of(base, samples("cand", seed=2, tail_factor=1.6), [P99])
    assert candidate_verdict(bad, check("cand", False, psi=0.4)).verdict == "REFUSED"


def test_unchecked_or_stale_shapes_cannot_pass() -> None:
    v = validation_of(samples("base", seed=1), samples("cand", seed=2), [P99])
    assert candidate_verdict(v, None).verdict == "INCONCLUSIVE"
    assert candidate_verdict(v, check("another-run", True)).verdict == "INCONCLUSIVE"


def test_a_record_saved_before_the_rule_is_judged_by_it() -> None:
    """An old record said "Pass" with shapes not ok: the verdict now reads REFUSED."""
    v = validation_of(samples("base", seed=1), samples("cand", seed=2), [P99])
    old = msgspec.structs.replace(v, verdict="Pass")
    assert candidate_verdict(old, check("cand", False, psi=0.3)).verdict == "REFUSED"


def test_nodata_cell_says_why() -> None:
    base, empty = samples("base", seed=1), samples("cand", n=0, seed=2)
    cell = judge_cell(P99, measure(P99, base), measure(P99, empty))
    cv = cell_verdict(cell)
    assert cv.outcome == "too few samples" and cv.why == "no p99 samples in the candidate"


def test_throughput_is_a_rate_over_every_completed_request() -> None:
    g = next(g for g in default_guardrails(None, False) if g.metric == "throughput")
    base = samples("base", n=240, seed=1)
    m = measure(g, base)
    assert m.n == 240 and m.exposure_s > 0
    assert m.value() == pytest.approx(240 / ((base.end_us.max() - base.arrival_us.min()) / 1e6))
    # A candidate serving the same requests in twice the time has half the throughput: it fails.
    slow = samples("slow", n=240, seed=2)
    slow = RunSamples(
        **{**slow.__dict__, "arrival_us": slow.arrival_us * 2, "end_us": slow.end_us * 2}
    )
    cell = judge_cell(g, m, measure(g, slow))
    assert cell.classification == "Low" and not cell.passed and cell.n_candidate == 240
    assert cell_verdict(cell).outcome == "fail"


def test_rate_diff_ci_widens_with_dispersion() -> None:
    d, lo, hi = stats.rate_diff_ci(400, 2.0, 400, 2.0)
    assert d == 0 and lo < 0 < hi
    _, lo8, hi8 = stats.rate_diff_ci(400, 2.0, 400, 2.0, dispersion1=8.0, dispersion2=8.0)
    assert hi8 - lo8 == pytest.approx(np.sqrt(8) * (hi - lo))
    assert stats.dispersion_index([5, 5, 5, 5]) == 1.0  # never below Poisson
    assert stats.dispersion_index([0, 16, 0, 16]) == pytest.approx((4 * 8**2 / 3) / 8)  # s²/mean
