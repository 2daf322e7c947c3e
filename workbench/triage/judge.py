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

Classification, with [lo, hi] the interval of d and `allowed` = tolerance x |baseline value|
(at least the guardrail's min_effect):
  High    lo > 0 and d > allowed    significantly higher, by more than the tolerance
  Low     hi < 0 and d < -allowed   significantly lower, by more than the tolerance
  Pass    otherwise                 the interval covers 0, or the change is within tolerance
  Nodata  either side has no sample
Requiring both significance and a material change keeps noise and harmless but significant
shifts from failing a candidate. A cell fails when its class is on the guardrail's bad side
(High for "increase", Low for "decrease", either for "both").

Score = passing cells / cells with data. Verdict: Fail when a critical cell fails, when no cell
has data, or when score < marginal_threshold; Marginal when score < pass_threshold or a critical
guardrail has no data; Pass otherwise. Fewer than MIN_SAMPLES on a side adds a warning.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

import msgspec

from accel import stats
from workbench.triage.guardrails import Measurement, RunSamples, allowed_change, measure
from workbench.triage.incident import Cell, Guardrail

MIN_SAMPLES: Final[int] = 50
PASS_THRESHOLD: Final[float] = 0.95
MARGINAL_THRESHOLD: Final[float] = 0.75
CONFIDENCE: Final[float] = 0.95
N_BOOT: Final[int] = 2000
SEED: Final[int] = 0


@dataclass(frozen=True)
class JudgeResult:
    cells: list[Cell]
    score: float
    verdict: str  # Pass | Marginal | Fail
    reasons: list[str]


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _fails(classification: str, direction: str) -> bool:
    if classification == "High":
        return direction in ("increase", "both")
    if classification == "Low":
        return direction in ("decrease", "both")
    return False


def _fmt(x: float, unit: str) -> str:
    if unit == "share":
        return f"{100 * x:.2f}%"
    return f"{x:,.4g} {'µs' if unit == 'us' else unit}"


def judge_cell(g: Guardrail, baseline: Measurement, candidate: Measurement) -> Cell:
    """Compare one guardrail's candidate measurement against the baseline's."""
    alpha = 1 - CONFIDENCE
    nb, nc = baseline.n, candidate.n
    unit = baseline.unit
    is_rate = baseline.sample is None
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
    if is_rate:
        d, lo, hi = stats.proportion_diff_ci(
            candidate.successes, candidate.trials, baseline.successes, baseline.trials, alpha
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
    ci = f"[{_fmt(lo, unit)}, {_fmt(hi, unit)}]"
    if lo > 0 and d > allowed:
        cls = "High"
        why = f"higher by {_fmt(d, unit)}, CI {ci} above 0, beyond the tolerated {_fmt(allowed, unit)}"
    elif hi < 0 and d < -allowed:
        cls = "Low"
        why = f"lower by {_fmt(-d, unit)}, CI {ci} below 0, beyond the tolerated {_fmt(allowed, unit)}"
    elif lo <= 0 <= hi:
        cls = "Pass"
        why = f"change {_fmt(d, unit)}, CI {ci} covers 0"
    else:
        cls = "Pass"
        why = f"change {_fmt(d, unit)}, CI {ci}, within the tolerated {_fmt(allowed, unit)}"
    failed = _fails(cls, g.direction)
    if cls != "Pass" and not failed:
        why += " (the good direction)"
    return msgspec.structs.replace(
        nodata,
        classification=cls,
        passed=not failed,
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
    )


def verdict_of(cells: list[Cell]) -> tuple[float, str, list[str]]:
    """(score, verdict, reasons) from judged cells, by the rules in the module docstring."""
    with_data = [c for c in cells if c.classification != "Nodata"]
    passing = [c for c in with_data if c.passed]
    score = len(passing) / len(with_data) if with_data else 0.0
    reasons = [f"critical {c.label}: {c.reason}" for c in with_data if c.critical and not c.passed]
    if not with_data:
        return score, "Fail", ["no guardrail had data on both sides"]
    if reasons:
        return score, "Fail", reasons
    summary = f"{len(passing)}/{len(with_data)} guardrails pass (score {score:.2f})"
    if score < MARGINAL_THRESHOLD:
        return score, "Fail", [f"{summary} < {MARGINAL_THRESHOLD}"]
    nodata_critical = [
        f"critical {c.label} has no data"
        for c in cells
        if c.critical and c.classification == "Nodata"
    ]
    if score < PASS_THRESHOLD or nodata_critical:
        failing = [f"{c.label}: {c.reason}" for c in with_data if not c.passed]
        return score, "Marginal", [summary, *failing, *nodata_critical]
    return score, "Pass", [summary]


def judge(guardrails: list[Guardrail], baseline: RunSamples, candidate: RunSamples) -> JudgeResult:
    """Judge every guardrail of candidate against baseline."""
    cells = [judge_cell(g, measure(g, baseline), measure(g, candidate)) for g in guardrails]
    score, verdict, reasons = verdict_of(cells)
    return JudgeResult(cells=cells, score=score, verdict=verdict, reasons=reasons)
