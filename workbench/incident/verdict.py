"""One verdict per candidate (DESIGN §7), the same in the app, the CLI and the export.

  REFUSED       the candidate was measured on shapes production does not send (PSI of its shape
                mix against the failing run, share of requests on unseen shapes): its guardrails
                say nothing about production, whatever they show
  FAIL          a guardrail judged on enough samples failed: a critical one, or enough of them to
                put the score (passing share) under PASS_THRESHOLD; the reasons name them
  INCONCLUSIVE  nothing failed, but a guardrail has under MIN_SAMPLES samples on a side (or none),
                or the shapes were not checked: too little data cannot pass (Kayenta's NoData,
                Argo Rollouts' Inconclusive)
  PASS          everything else

Precedence is that order. A guardrail that moved the good way ("Low" latency) is neutral, not a
failure. Everything here is derived from the record's cells and replay check, so a record written
before this rule is judged by it too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from workbench.incident.incident import Cell, Incident, ReplayCheck, Validation

MIN_SAMPLES: Final[int] = 50
PASS_THRESHOLD: Final[float] = 0.95

PASS: Final[str] = "PASS"
FAIL: Final[str] = "FAIL"
REFUSED: Final[str] = "REFUSED"
INCONCLUSIVE: Final[str] = "INCONCLUSIVE"
VERDICTS: Final[tuple[str, ...]] = (PASS, FAIL, REFUSED, INCONCLUSIVE)

# Per-guardrail outcomes: "better" (moved the good way) counts as passing and is shown neutral.
OUTCOMES: Final[tuple[str, ...]] = ("pass", "better", "fail", "too few samples")


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


def cell_verdict(cell: Cell) -> CellVerdict:
    """The outcome of one judged guardrail: pass, better, fail or too few samples."""
    n = min(cell.n_baseline, cell.n_candidate)
    extra = "".join(f"; {w}" for w in cell.warnings if f"< {MIN_SAMPLES}" not in w)
    if cell.classification == "Nodata":
        return CellVerdict(cell.label, cell.metric, cell.critical, "too few samples", cell.reason)
    if n < MIN_SAMPLES:
        side = "baseline" if cell.n_baseline < cell.n_candidate else "candidate"
        why = f"only {n} samples in the {side} (< {MIN_SAMPLES}): cannot pass; {cell.reason}"
        return CellVerdict(cell.label, cell.metric, cell.critical, "too few samples", why + extra)
    if bad_side(cell.classification, cell.direction):
        outcome = "fail"
    elif cell.classification == "Pass":
        outcome = "pass"
    else:
        outcome = "better"
    return CellVerdict(cell.label, cell.metric, cell.critical, outcome, cell.reason + extra)


def guardrail_verdict(cells: Sequence[Cell]) -> tuple[float | None, str, list[str]]:
    """(score, verdict, reasons) of the guardrails alone: FAIL, INCONCLUSIVE or PASS."""
    judged = [cell_verdict(c) for c in cells]
    enough = [v for v in judged if v.outcome != "too few samples"]
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
    few = [f"{v.label}: {v.why}" for v in judged if v.outcome == "too few samples"]
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
    cells = [cell_verdict(c) for c in validation.cells]
    score, verdict, reasons = guardrail_verdict(validation.cells)
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
