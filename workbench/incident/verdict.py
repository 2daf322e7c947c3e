"""One verdict per candidate (DESIGN §7), the same in the app, the CLI and the export.

  REFUSED       the candidate was measured on shapes production does not send (PSI of its shape
                mix against the failing run, share of requests on unseen shapes): its guardrails
                say nothing about production, whatever they show
  FAIL          a guardrail judged on enough samples failed: a critical one, or enough of them to
                put the score (passing share) under PASS_THRESHOLD; the reasons name them
  INCONCLUSIVE  nothing failed, but a guardrail has under MIN_SAMPLES samples on a side (or none),
                or its interval covers both no change and a breach of its tolerance (undecided),
                or the shapes were not checked: too little data cannot pass (Kayenta's NoData,
                Argo Rollouts' Inconclusive)
  PASS          everything else: every guardrail shown equivalent

A guardrail passes by equivalence, two one-sided tests against the baseline: its printed
(1 - alpha) interval of the change lies inside the tolerance on its bad side, which is TOST at
alpha / 2 a side. An interval that covers 0 proves nothing by itself: it may be wide enough to
hold a breach, and then the guardrail is undecided, with the requests a side that would decide.
Precedence is that order. A guardrail that moved the good way ("Low" latency) is neutral, not a
failure. Everything here is derived from the record's cells and replay check, so a record written
before these rules is judged by them too.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from workbench.incident.guardrails import allowed_change
from workbench.incident.incident import Cell, Guardrail, Incident, ReplayCheck, Validation

MIN_SAMPLES: Final[int] = 50
PASS_THRESHOLD: Final[float] = 0.95

PASS: Final[str] = "PASS"
FAIL: Final[str] = "FAIL"
REFUSED: Final[str] = "REFUSED"
INCONCLUSIVE: Final[str] = "INCONCLUSIVE"
VERDICTS: Final[tuple[str, ...]] = (PASS, FAIL, REFUSED, INCONCLUSIVE)

# Per-guardrail outcomes: "better" (moved the good way) counts as passing and is shown neutral;
# "undecided" (the interval holds both no change and a breach) cannot pass and does not fail.
OUTCOMES: Final[tuple[str, ...]] = ("pass", "better", "fail", "undecided", "too few samples")
UNDECIDED: Final[str] = "Undecided"  # the judge's classification of an undecided guardrail
_NOT_JUDGED: Final[tuple[str, ...]] = ("undecided", "too few samples")


@dataclass(frozen=True)
class CellVerdict:
    """One guardrail's outcome and why, in one sentence."""

    label: str
    metric: str
    critical: bool
    outcome: str  # one of OUTCOMES
    why: str


@dataclass(frozen=True)
class CandidateVerdict:
    """The verdict on one candidate: headline first, then every reason and every cell."""

    candidate: str
    verdict: str  # one of VERDICTS
    headline: str  # "REFUSED: ..." in one line
    reasons: list[str]
    score: float | None  # passing share of the guardrails with enough samples
    cells: list[CellVerdict]
    psi: float | None = None
    unseen_share: float | None = None


def bad_side(classification: str, direction: str) -> bool:
    """Is a High / Low classification on the guardrail's bad side?"""
    if classification == "High":
        return direction in ("increase", "both")
    if classification == "Low":
        return direction in ("decrease", "both")
    return False


def equivalent(direction: str, lo: float, hi: float, allowed: float) -> bool:
    """TOST: does the interval [lo, hi] of the change lie inside the tolerance on the bad side?"""
    if direction in ("increase", "both") and hi > allowed:
        return False
    return not (direction in ("decrease", "both") and lo < -allowed)


def deciding_n(
    direction: str, d: float, lo: float, hi: float, allowed: float, n: int
) -> int | None:
    """Requests a side that would decide an undecided guardrail if the change and the spread per
    request stay as measured (the interval narrows as 1/sqrt(n)): enough for the interval to
    clear the tolerance, or, with the change past it, to clear 0. None when no n decides."""
    ratios = []
    if direction in ("increase", "both") and hi > allowed:
        if d < allowed:
            ratios.append((hi - d) / (allowed - d))
        elif d > 0:
            ratios.append((d - lo) / d)
    if direction in ("decrease", "both") and lo < -allowed:
        if d > -allowed:
            ratios.append((d - lo) / (d + allowed))
        elif d < 0:
            ratios.append((hi - d) / -d)
    if not ratios or not all(math.isfinite(r) for r in ratios):
        return None
    return max(n, math.ceil(n * max(ratios) ** 2))


def fmt_change(x: float, unit: str) -> str:
    """A guardrail's value or change in its unit, as the cells' reasons print it."""
    if unit == "share":
        return f"{100 * x:.2f}%"
    return f"{x:,.4g} {'µs' if unit == 'us' else unit}"


def undecided_why(cell: Cell, allowed: float) -> str:
    """Why a guardrail is undecided, with the sample size that would decide, in one clause."""
    assert cell.diff is not None and cell.ci_low is not None and cell.ci_high is not None
    n = min(cell.n_baseline, cell.n_candidate)
    need = deciding_n(cell.direction, cell.diff, cell.ci_low, cell.ci_high, allowed, n)
    ci = f"[{fmt_change(cell.ci_low, cell.unit)}, {fmt_change(cell.ci_high, cell.unit)}]"
    decide = (
        f"about {need:,} requests a side (now {cell.n_baseline:,} / {cell.n_candidate:,}) would "
        "decide if the change stays as measured"
        if need is not None
        else "no sample size decides a zero tolerance"
    )
    return (
        f"undecided: change {fmt_change(cell.diff, cell.unit)}, CI {ci} holds both no change and "
        f"a breach of the tolerated {fmt_change(allowed, cell.unit)}, so equivalence is not "
        f"shown; {decide}"
    )


def _allowed(cell: Cell, guardrail: Guardrail | None) -> float | None:
    if cell.allowed is not None:
        return cell.allowed
    if cell.baseline_value is None:
        return None
    if guardrail is not None:
        return allowed_change(guardrail, cell.baseline_value)
    return cell.tolerance * abs(cell.baseline_value)


def _is_undecided(cell: Cell, allowed: float | None) -> bool:
    if cell.classification == UNDECIDED:
        return True
    if cell.classification != "Pass" or allowed is None:
        return False
    if cell.ci_low is None or cell.ci_high is None:
        return False
    return not equivalent(cell.direction, cell.ci_low, cell.ci_high, allowed)


def cell_verdict(cell: Cell, guardrail: Guardrail | None = None) -> CellVerdict:
    """The outcome of one judged guardrail: pass, better, fail, undecided or too few samples
    (`guardrail` gives a record written before cells kept their tolerated change its min_effect)."""
    n = min(cell.n_baseline, cell.n_candidate)
    extra = "".join(f"; {w}" for w in cell.warnings if f"< {MIN_SAMPLES}" not in w)
    if cell.classification == "Nodata":
        return CellVerdict(cell.label, cell.metric, cell.critical, "too few samples", cell.reason)
    if n < MIN_SAMPLES:
        side = "baseline" if cell.n_baseline < cell.n_candidate else "candidate"
        why = f"only {n} samples in the {side} (< {MIN_SAMPLES}): cannot pass; {cell.reason}"
        return CellVerdict(cell.label, cell.metric, cell.critical, "too few samples", why + extra)
    allowed = _allowed(cell, guardrail)
    if bad_side(cell.classification, cell.direction):
        outcome = "fail"
    elif _is_undecided(cell, allowed):
        why = cell.reason
        if cell.classification != UNDECIDED:  # a record judged before equivalence was required
            assert allowed is not None
            why = undecided_why(cell, allowed)
        return CellVerdict(cell.label, cell.metric, cell.critical, "undecided", why + extra)
    elif cell.classification == "Pass":
        outcome = "pass"
    else:
        outcome = "better"
    return CellVerdict(cell.label, cell.metric, cell.critical, outcome, cell.reason + extra)


def _with_guardrails(validation: Validation) -> list[tuple[Cell, Guardrail | None]]:
    """Each cell with the guardrail it judged (the judge writes them in the same order)."""
    gs: list[Guardrail | None] = list(validation.guardrails)
    if len(gs) != len(validation.cells):
        gs = [None] * len(validation.cells)
    return list(zip(validation.cells, gs, strict=True))


def guardrail_verdict(
    cells: Sequence[Cell], guardrails: Sequence[Guardrail | None] | None = None
) -> tuple[float | None, str, list[str]]:
    """(score, verdict, reasons) of the guardrails alone: FAIL, INCONCLUSIVE or PASS; the score is
    the passing share of the guardrails judged (enough samples, and not undecided)."""
    gs = list(guardrails) if guardrails is not None else [None] * len(cells)
    return _verdict_of([cell_verdict(c, g) for c, g in zip(cells, gs, strict=True)])


def _verdict_of(judged: Sequence[CellVerdict]) -> tuple[float | None, str, list[str]]:
    enough = [v for v in judged if v.outcome not in _NOT_JUDGED]
    failed = [v for v in enough if v.outcome == "fail"]
    score = (len(enough) - len(failed)) / len(enough) if enough else None
    critical = [f"critical guardrail {v.label} failed: {v.why}" for v in failed if v.critical]
    if critical:
        return score, FAIL, critical
    if score is not None and score < PASS_THRESHOLD:
        return (
            score,
            FAIL,
            [
                f"{len(enough) - len(failed)}/{len(enough)} guardrails pass (score {score:.2f} "
                f"< {PASS_THRESHOLD})",
                *(f"{v.label} failed: {v.why}" for v in failed),
            ],
        )
    few = [f"{v.label}: {v.why}" for v in judged if v.outcome in _NOT_JUDGED]
    if not judged:
        return score, INCONCLUSIVE, ["no guardrails were judged"]
    if few:
        return score, INCONCLUSIVE, few
    assert score is not None
    return score, PASS, [f"{len(enough)}/{len(enough)} guardrails pass (score {score:.2f})"]


def _refusal(check: ReplayCheck) -> str:
    psi = "unknown" if check.psi is None else f"{check.psi:.3f}"
    unseen = "unknown" if check.unseen_share is None else f"{100 * check.unseen_share:.1f}%"
    return (
        f"not measured on production-like shapes against {check.reference}: PSI {psi} "
        f"(limit {check.psi_threshold}), unseen shapes {unseen} "
        f"(limit {100 * check.unseen_threshold:.0f}%)"
    )


def candidate_verdict(validation: Validation, check: ReplayCheck | None) -> CandidateVerdict:
    """The one verdict on validation.candidate, given the shape check of the same candidate."""
    cells = [cell_verdict(c, g) for c, g in _with_guardrails(validation)]
    score, verdict, reasons = _verdict_of(cells)
    psi = unseen = None
    if check is not None and check.candidate == validation.candidate:
        psi, unseen = check.psi, check.unseen_share
        if not check.passed:
            reasons = [_refusal(check), check.reason, *(f"guardrails: {r}" for r in reasons)]
            verdict = REFUSED
    elif verdict == PASS:
        verdict, reasons = INCONCLUSIVE, ["production-like shapes were not checked", *reasons]
    head = reasons[0] if reasons else ""
    return CandidateVerdict(
        candidate=validation.candidate,
        verdict=verdict,
        headline=f"{verdict}: {validation.candidate} {head}"
        if verdict == REFUSED
        else f"{verdict}: {head}",
        reasons=reasons,
        score=score,
        cells=cells,
        psi=psi,
        unseen_share=unseen,
    )


def incident_verdict(inc: Incident) -> CandidateVerdict | None:
    """The verdict on the incident's current candidate; None before any validation."""
    if inc.validation is None:
        return None
    return candidate_verdict(inc.validation, inc.replay_check)
