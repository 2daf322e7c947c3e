"""The incident track of the Perfetto A/B trace (perfetto.py): the verdict with its origin and
manifest stage, and each finding as a slice whose args carry effect, interval and n.

Findings are the triage's own figures, tail first: the p99 and p95 latency gaps (the intervals
the trigger decided on), each stage's p99 own-time difference, and each stage's residual shift
(Hodges-Lehmann, failing - comparator) where the replay tested it. A stage's slices sit where
that stage lies in the tail request's stage layout, so Perfetto shows them over it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Final

from accel.stages import OTHER, STAGES
from workbench.errors import WorkbenchError
from workbench.triage.evidence import Interval, StageRow
from workbench.triage.triage import TriageResult

INCIDENT_CAT: Final[str] = "incident"  # not an annotation category: never a request read back
VERDICT_TID, GAP_TID, OWN_TID, SHIFT_TID = 1, 2, 3, 4
THREADS: Final[dict[int, str]] = {
    VERDICT_TID: "verdict: origin and manifest",
    GAP_TID: "findings: tail latency gap",
    OWN_TID: "findings: stage own time (p99)",
    SHIFT_TID: "findings: residual shift (model)",
}
ORDER: Final[tuple[str, ...]] = (*STAGES, OTHER)


@dataclass(frozen=True)
class Finding:
    """One figure of the triage: an effect with its interval and the n it rests on."""

    name: str
    stage: str | None  # None: end to end
    effect: float
    lo: float
    hi: float
    n_failing: int
    n_comparator: int
    quantile: str
    source: str
    text: str
    extra: dict[str, Any]

    def args(self) -> dict[str, Any]:
        excludes = (self.lo > 0 or self.hi < 0) if _finite(self.lo, self.hi) else None
        return {
            "effect": self.effect,
            "interval": [self.lo, self.hi],
            "n": {"failing": self.n_failing, "comparator": self.n_comparator},
            "unit": "us",
            "quantile": self.quantile,
            "stage": self.stage or "end to end",
            "interval_excludes_zero": excludes,
            "source": self.source,
            "text": self.text,
            **self.extra,
        }


def _finite(*xs: float) -> bool:
    return all(isinstance(x, float | int) and math.isfinite(x) for x in xs)


def _us(x: float) -> str:
    return f"{x:+.0f}" if _finite(x) else "n/a"


def _says(what: str, value: float, lo: float, hi: float, n_f: int, n_c: int) -> str:
    return f"{what} {_us(value)} us (95% CI {_us(lo)}..{_us(hi)}), n={n_f}/{n_c}"


def _row(d: Interval) -> tuple[float, float, float]:
    return d.value, d.lo, d.hi


def _gap(name: str, q: str, gap: Interval, latency: StageRow) -> Finding:
    return Finding(
        name=name,
        stage=None,
        effect=gap.value,
        lo=gap.lo,
        hi=gap.hi,
        n_failing=latency.n_failing,
        n_comparator=latency.n_comparator,
        quantile=q,
        source="trigger: bootstrap interval of the quantile gap (triage verdict)",
        text=_says(
            f"{q} latency gap", gap.value, gap.lo, gap.hi, latency.n_failing, latency.n_comparator
        ),
        extra={},
    )


def gap_findings(result: TriageResult) -> list[Finding]:
    """The p99 and p95 latency gaps (tail first) with their n."""
    latency = result.stages[0]
    return [
        _gap("finding: p99 latency gap", "p99", result.p99_gap, latency),
        _gap("finding: p95 latency gap", "p95", result.p95_gap, latency),
    ]


def own_time_findings(result: TriageResult) -> list[Finding]:
    """Each stage's (and other's) p99 own-time difference, failing - comparator."""
    out = []
    for row in result.stages:
        d = row.diff.get("p99")
        if row.stage not in ORDER or d is None:
            continue
        out.append(
            Finding(
                name=f"finding: {row.stage} p99 own time",
                stage=row.stage,
                effect=d.value,
                lo=d.lo,
                hi=d.hi,
                n_failing=row.n_failing,
                n_comparator=row.n_comparator,
                quantile="p99",
                source="stage_quantiles (percentile bootstrap of the difference)",
                text=_says(f"{row.stage} p99 own time", *_row(d), row.n_failing, row.n_comparator),
                extra={},
            )
        )
    return out


def shift_findings(result: TriageResult) -> list[Finding]:
    """Each replayed stage's residual shift (observed - predicted, failing vs comparator)."""
    out = []
    for row in result.replay.get("rows") or []:
        shift, sid = row.get("residual_shift"), row.get("id")
        if not isinstance(shift, dict) or sid not in ORDER:
            continue
        f, c = row.get("failing") or {}, row.get("comparator") or {}
        hl, lo, hi = (float(shift.get(k, math.nan)) for k in ("hl_us", "hl_lo_us", "hl_hi_us"))
        p = shift.get("p_value")
        n_f, n_c = int(f.get("n", 0)), int(c.get("n", 0))
        out.append(
            Finding(
                name=f"finding: {sid} residual shift",
                stage=str(sid),
                effect=hl,
                lo=lo,
                hi=hi,
                n_failing=n_f,
                n_comparator=n_c,
                quantile="location (Hodges-Lehmann)",
                source="replay: residual shift (Mann-Whitney, Hodges-Lehmann)",
                text=_says(f"{sid} unexplained shift", hl, lo, hi, n_f, n_c),
                extra={"p_value": p},
            )
        )
    return out


def stage_at(placed: dict[str, Any], stage: str) -> tuple[float, float]:
    """(ts, dur) of `stage` in a placed request's stage layout; an empty stage is a point
    where it would begin."""
    spans = {name: (ts, dur) for name, ts, dur in placed["stages"]}
    at = float(placed["ts"])
    for s in ORDER:
        if s in spans:
            if s == stage:
                return spans[s]
            at = spans[s][0] + spans[s][1]
        elif s == stage:
            return at, 0.0
    raise WorkbenchError(repr(stage), "not a pipeline stage")


def _slice(tid: int, name: str, ts: float, dur: float, args: dict[str, Any]) -> dict[str, Any]:
    return {"ph": "X", "cat": INCIDENT_CAT, "name": name, "tid": tid, "ts": ts, "dur": dur} | {
        "args": args
    }


def _verdict_args(result: TriageResult) -> dict[str, Any]:
    v = result.verdict
    return {
        "outcome": v.get("outcome"),
        "reason": v.get("reason"),
        "triggered": result.triggered,
        "origin": result.origin_stage,
        "manifest": result.manifest_stage,
        "mechanism": result.mechanism,
        "secondary_mechanism": result.secondary_mechanism,
        "confidence": result.confidence,
        "decided_by": v.get("decided_by"),
        "explained_share": result.explained_share,
        "explained_share_method": result.explained_share_method,
        "hardware": result.hardware,
        "warnings": list(result.warnings),
        "claims": [{"text": c.text, "query": c.query} for c in result.claims],
    }


def _stage_marks(result: TriageResult, own: dict[str, Finding]) -> list[tuple[str, str, Any]]:
    """(slice name, stage, args) of the origin and the manifest stage (one slice when equal)."""
    origin, manifest = result.origin_stage, result.manifest_stage
    marks: list[tuple[str, str, Any]] = []
    for role, stage in (("origin", origin), ("manifest", manifest)):
        if stage is None or (role == "manifest" and stage == origin):
            continue
        label = "origin+manifest" if role == "origin" and stage == manifest else role
        base = own[stage].args() if stage in own else {"stage": stage}
        args: dict[str, Any] = {**base, "role": label, "mechanism": result.mechanism}
        if role == "origin":
            args["explained_share"] = result.explained_share_by_stage.get(stage, {})
            args["explained_share_method"] = result.explained_share_method
            args["confidence"] = result.confidence
        marks.append((f"{label}: {stage}", stage, args))
    return marks


def incident_events(
    pid: int, result: TriageResult, tail: dict[str, Any], twin: dict[str, Any]
) -> list[dict[str, Any]]:
    """The incident process's slices: over the aligned window of the tail and its twin, the
    verdict (origin and manifest inside it, over the tail's stages) and the findings."""
    if not tail or not twin:
        raise WorkbenchError("perfetto trace", "the tail request or its twin was not placed")
    ts, dur = float(tail["ts"]), max(float(tail["dur"]), float(twin["dur"]))
    meta = [
        {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}}
        for tid, name in THREADS.items()
    ]
    outcome = str(result.verdict.get("outcome") or ("regression" if result.triggered else "none"))
    out = [_slice(VERDICT_TID, f"verdict: {outcome}", ts, dur, _verdict_args(result))]
    own = {f.stage: f for f in own_time_findings(result) if f.stage is not None}
    for name, stage, args in _stage_marks(result, own):
        at, d = stage_at(tail, stage)
        out.append(_slice(VERDICT_TID, name, at, d, args))
    # Tail first: the p99 gap holds the p95 gap (same window), as the trigger reads them.
    out += [_slice(GAP_TID, f.name, ts, dur, f.args()) for f in gap_findings(result)]
    for tid, found in ((OWN_TID, list(own.values())), (SHIFT_TID, shift_findings(result))):
        for f in found:
            at, d = stage_at(tail, f.stage or "")
            out.append(_slice(tid, f.name, at, d, f.args()))
    return meta + [{**e, "pid": pid} for e in out]
