"""Canary-style validation judge (DESIGN §7): one cell per guardrail, a score and a verdict.

Statistics (all from accel.stats, none computed here):
- Quantile metrics (end-to-end p95/p99, a stage's p99, throughput as the median over time windows,
  quality's p05): d = quantile(candidate) - quantile(baseline) with a percentile-bootstrap
  (1 - alpha) interval from `bootstrap_quantile_diff` (fixed seed, so app and CLI agree). The
  location shift of the whole distribution is reported beside it: the Hodges-Lehmann estimate
  with its Moses interval (`hodges_lehmann_ci`) and the Mann-Whitney two-sided p.
- Rates (share of requests with a fallback op / a recompile): d = share(candidate) -
  share(baseline) with Newcombe's hybrid score interval (`proportion_diff_ci`), which combines
  the two Wilson intervals in quadrature and keeps its coverage near nominal for small shares.

- Throughput: completed requests per second of the run's span, d = rate(candidate) -
  rate(baseline) with a quasi-Poisson Wald interval (`rate_diff_ci`) whose dispersion comes from
  the counts per time window, so batches completing together widen it.

Classification, with [lo, hi] the interval of d and `allowed` = tolerance x |baseline value|
(at least the guardrail's min_effect):
  High       lo > 0 and d > allowed    significantly higher, by more than the tolerance
  Low        hi < 0 and d < -allowed   significantly lower, by more than the tolerance
  Pass       otherwise, when [lo, hi] lies inside the tolerance on the bad side: equivalent
             (two one-sided tests, verdict.equivalent)
  Undecided  otherwise: the interval holds both no change and a breach of the tolerance
  Nodata     either side has no sample
Failing needs both significance and a material change, so noise and harmless but significant
shifts do not fail a candidate; passing needs equivalence, so a run too short to exclude a breach
does not pass one. A cell fails when its class is on the guardrail's bad side (High for
"increase", Low for "decrease", either for "both") and both sides have MIN_SAMPLES; with fewer
it cannot pass either. The verdict is verdict.py's, the one place that decides it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

import msgspec

from accel import stats
from workbench.incident.guardrails import Measurement, RunSamples, allowed_change, measure
from workbench.incident.incident import Cell, Guardrail
from workbench.incident.verdict import (
    MIN_SAMPLES,
    UNDECIDED,
    bad_side,
    equivalent,
    fmt_change,
    guardrail_verdict,
    undecided_why,
)

CONFIDENCE: Final[float] = 0.95
N_BOOT: Final[int] = 2000
SEED: Final[int] = 0


@dataclass(frozen=True)
class JudgeResult:
    cells: list[Cell]
    score: float | None  # passing share of the guardrails with enough samples
    verdict: str  # PASS | FAIL | INCONCLUSIVE (verdict.guardrail_verdict)
    reasons: list[str]


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def judge_cell(g: Guardrail, baseline: Measurement, candidate: Measurement) -> Cell:
    """Compare one guardrail's candidate measurement against the baseline's."""
    alpha = 1 - CONFIDENCE
    nb, nc = baseline.n, candidate.n
    unit = baseline.unit
    is_share = baseline.sample is None and baseline.exposure_s <= 0
    is_rate = baseline.sample is None and not is_share
    nodata = Cell(
        metric=g.metric if g.stage is None else f"{g.metric}:{g.stage}",
        label=g.label,
        classification="Nodata",
        passed=False,
        critical=g.critical,
        direction=g.direction,
        tolerance=g.tolerance,
        unit=unit,
        statistic=(
            "difference of shares, Newcombe hybrid score interval"
            if is_share
            else "difference of rates, quasi-Poisson Wald interval"
            if is_rate
            else f"difference of q{baseline.quantile:g}, percentile bootstrap"
        ),
        baseline_value=_finite(baseline.value()) if nb else None,
        candidate_value=_finite(candidate.value()) if nc else None,
        diff=None,
        ci_low=None,
        ci_high=None,
        n_baseline=nb,
        n_candidate=nc,
        reason=f"no {g.label} samples in the {'baseline' if nb == 0 else 'candidate'}",
    )
    if nb == 0 or nc == 0:
        return nodata
    warnings = []
    if min(nb, nc) < MIN_SAMPLES:
        warnings.append(
            f"only {min(nb, nc)} samples on one side (< {MIN_SAMPLES}): the interval is unreliable"
        )
    shift = shift_lo = shift_hi = p_value = None
    if is_share:
        d, lo, hi = stats.proportion_diff_ci(
            candidate.successes, candidate.trials, baseline.successes, baseline.trials, alpha
        )
    elif is_rate:
        d, lo, hi = stats.rate_diff_ci(
            candidate.successes,
            candidate.exposure_s,
            baseline.successes,
            baseline.exposure_s,
            alpha,
            candidate.dispersion,
            baseline.dispersion,
        )
    else:
        assert baseline.sample is not None and candidate.sample is not None
        q = baseline.quantile
        d, lo, hi = stats.bootstrap_quantile_diff(
            candidate.sample, baseline.sample, q, n_boot=N_BOOT, seed=SEED, alpha=alpha
        )
        if q >= 0.99 and min(nb, nc) < 100:
            warnings.append("p99 of fewer than 100 samples is the sample maximum")
        hl, hl_lo, hl_hi = stats.hodges_lehmann_ci(candidate.sample, baseline.sample, alpha)
        shift, shift_lo, shift_hi = _finite(hl), _finite(hl_lo), _finite(hl_hi)
        p_value = _finite(stats.mann_whitney_u(candidate.sample, baseline.sample)[1])
    base_v, cand_v = baseline.value(), candidate.value()
    allowed = allowed_change(g, base_v)
    ci = f"[{fmt_change(lo, unit)}, {fmt_change(hi, unit)}]"
    if lo > 0 and d > allowed:
        cls = "High"
        why = f"higher by {fmt_change(d, unit)}, CI {ci} above 0, beyond the tolerated {fmt_change(allowed, unit)}"
    elif hi < 0 and d < -allowed:
        cls = "Low"
        why = f"lower by {fmt_change(-d, unit)}, CI {ci} below 0, beyond the tolerated {fmt_change(allowed, unit)}"
    elif equivalent(g.direction, lo, hi, allowed):
        cls = "Pass"
        why = (
            f"change {fmt_change(d, unit)}, CI {ci} inside the tolerated "
            f"{fmt_change(allowed, unit)}: equivalent"
        )
    else:
        cls = UNDECIDED
        why = ""  # written below, from the finished cell
    failed = bad_side(cls, g.direction)
    if cls in ("High", "Low") and not failed:
        why += " (the good direction)"
    cell = msgspec.structs.replace(
        nodata,
        classification=cls,
        passed=not failed and cls != UNDECIDED and min(nb, nc) >= MIN_SAMPLES,
        baseline_value=_finite(base_v),
        candidate_value=_finite(cand_v),
        diff=_finite(d),
        ci_low=_finite(lo),
        ci_high=_finite(hi),
        reason=why,
        warnings=warnings,
        shift=shift,
        shift_low=shift_lo,
        shift_high=shift_hi,
        p_value=p_value,
        allowed=_finite(allowed),
    )
    if cls == UNDECIDED:
        cell = msgspec.structs.replace(cell, reason=undecided_why(cell, allowed))
    return cell


def judge(guardrails: list[Guardrail], baseline: RunSamples, candidate: RunSamples) -> JudgeResult:
    """Judge every guardrail of candidate against baseline."""
    cells = [judge_cell(g, measure(g, baseline), measure(g, candidate)) for g in guardrails]
    score, verdict, reasons = guardrail_verdict(cells, guardrails)
    return JudgeResult(cells=cells, score=score, verdict=verdict, reasons=reasons)
