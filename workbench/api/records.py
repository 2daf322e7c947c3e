"""The facade's typed records: a comparison's verdict and one request's stage times in a pair."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from accel.stages import OTHER, STAGES

if TYPE_CHECKING:
    import polars as pl

# The per-request times every request row carries: end-to-end, then the five stages and the
# remainder, which sum to it (DESIGN §2).
REQUEST_TIMES: tuple[str, ...] = ("latency", *STAGES, OTHER)


@dataclass(frozen=True, slots=True)
class Gap:
    """A failing - comparator difference in us with its interval (None where not finite)."""

    value: float | None
    lo: float | None
    hi: float | None

    @classmethod
    def of(cls, doc: dict[str, Any] | None) -> Gap:
        d = doc or {}
        return cls(_num(d.get("value")), _num(d.get("lo")), _num(d.get("hi")))


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the triage decided about the pair, with the tail gaps and the n it rests on."""

    failing: str
    comparator: str
    hardware: str
    outcome: str  # "regression" | "no regression" | "inconclusive", as the trigger says
    reason: str
    triggered: bool
    origin_stage: str | None
    manifest_stage: str | None
    mechanism: str
    secondary_mechanism: str | None
    confidence: float | None
    origin_probability: float | None  # the calibrated confidence, only when it triggered
    explained_share: float | None
    explained_share_method: str
    p95_gap_us: Gap
    p99_gap_us: Gap
    threshold_us: dict[str, float]
    threshold_basis: str
    decided_by: str | None
    n_failing: int
    n_comparator: int
    warnings: tuple[str, ...]
    comparator_reasons: tuple[str, ...]

    @classmethod
    def of(cls, doc: dict[str, Any]) -> Verdict:
        """From TriageResult.to_json() (the `workbench triage --json` document)."""
        v: dict[str, Any] = doc.get("verdict") or {}
        latency = (doc.get("stages") or [{}])[0]
        return cls(
            failing=str(doc["failing"]),
            comparator=str(doc["comparator"]),
            hardware=str(doc["hardware"]),
            outcome=str(v.get("outcome") or ""),
            reason=str(v.get("reason") or ""),
            triggered=bool(doc["triggered"]),
            origin_stage=doc.get("origin_stage"),
            manifest_stage=doc.get("manifest_stage"),
            mechanism=str(doc["mechanism"]),
            secondary_mechanism=doc.get("secondary_mechanism"),
            confidence=_num(doc.get("confidence")),
            origin_probability=_num(doc.get("origin_probability")),
            explained_share=_num(doc.get("explained_share")),
            explained_share_method=str(doc.get("explained_share_method") or ""),
            p95_gap_us=Gap.of(doc.get("p95_gap_us")),
            p99_gap_us=Gap.of(doc.get("p99_gap_us")),
            threshold_us={
                str(k): float(x) for k, x in (v.get("threshold_us") or {}).items() if x is not None
            },
            threshold_basis=str(v.get("threshold_basis") or ""),
            decided_by=v.get("decided_by"),
            n_failing=int(latency.get("n_failing") or 0),
            n_comparator=int(latency.get("n_comparator") or 0),
            warnings=tuple(str(w) for w in doc.get("warnings") or ()),
            comparator_reasons=tuple(str(r) for r in doc.get("comparator_reasons") or ()),
        )


@dataclass(frozen=True, slots=True)
class RequestStages:
    """One request of one run: its latency and exclusive stage times (us), where its latency
    ranks in the run (`quantile`, over `n_requests`), and its trace events."""

    run_id: str
    request_id: str
    shape_key: str | None
    batch_id: int | None
    batch_size: int | None
    arrival_us: float | None
    times_us: dict[str, float | None]  # REQUEST_TIMES -> us
    quantile: float | None
    n_requests: int
    events: pl.DataFrame = field(compare=False, repr=False)  # queries/request_events.sql

    @property
    def latency_us(self) -> float | None:
        return self.times_us["latency"]

    @property
    def n_events(self) -> int:
        return self.events.height


@dataclass(frozen=True, slots=True)
class RequestPair:
    """A failing run's request beside the comparator's request of the same shape bucket at the
    same latency quantile (the app's drill-down rule); `note` says when the rule fell back."""

    failing: RequestStages
    comparator: RequestStages | None
    note: str = ""

    @property
    def stages(self) -> pl.DataFrame:
        """One row per time (latency, the five stages, other): failing, comparator, delta."""
        import polars as pl

        f = self.failing.times_us
        c = self.comparator.times_us if self.comparator else dict.fromkeys(REQUEST_TIMES)
        rows = [
            {
                "stage": k,
                "failing_us": f[k],
                "comparator_us": c[k],
                "delta_us": _delta(f[k], c[k]),
            }
            for k in REQUEST_TIMES
        ]
        schema = {
            "stage": pl.String,
            "failing_us": pl.Float64,
            "comparator_us": pl.Float64,
            "delta_us": pl.Float64,
        }
        return pl.DataFrame(rows, schema=schema)


def _delta(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def _num(x: object) -> float | None:
    """A JSON number as float; None (the document's NaN) stays None."""
    if x is None or isinstance(x, bool) or not isinstance(x, int | float):
        return None
    return float(x)
