"""The incident record's types (DESIGN §7) and its JSON document: encoded, decoded and checked.

Decoding never trusts the file: wrong types, JSON null or an out-of-range number where a number
belongs, an unknown status or severity, and unknown fields inside nested objects are each one
problem naming its place (`$.rollback_criteria[0].threshold`) that `workbench incident repair`
can act on. Unknown top-level fields are kept and written back, never dropped.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Final

import msgspec

INCIDENT_SCHEMA_VERSION: Final[int] = 1
SEVERITIES: Final[tuple[str, ...]] = ("sev1", "sev2", "sev3", "sev4")
# The lifecycle's statuses in order (lifecycle.py holds the gates between them).
STATUSES: Final[tuple[str, ...]] = (
    "declared",
    "paired",
    "localized",
    "classified",
    "assigned",
    "validating",
    "closed",
)


class Claim(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """A statement and the artifact that proves it: the query, its parameters and its numbers."""

    text: str
    query: str = ""
    parameters: dict[str, Any] = {}
    numbers: dict[str, Any] = {}

    def has_artifact(self) -> bool:
        return bool(self.query.strip()) and bool(self.numbers)


class Localization(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """Where the plan diverged (origin), where the time shows (manifest), and why (mechanism)."""

    origin: str
    manifest: str
    mechanism: str | None = None
    secondary_mechanism: str | None = None
    confidence: float | None = None
    explained_share: float | None = None
    evidence_refs: list[str] = []
    source: str = "triage"


class Owner(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    role: str
    person: str
    assumed_at: str
    artifact: str
    assigned_by: str


class Action(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    id: int
    text: str
    owner: str
    due: str  # ISO date
    status: str = "open"  # open | done | dropped
    created_at: str = ""
    kind: str = "follow-up"  # follow-up | artifact (a role's closure artifact)


class Guardrail(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """One validation metric: which way is bad, how much change is tolerated, whether it is fatal."""

    metric: (
        str  # e2e_p95 | e2e_p99 | stage_p99 | throughput | fallback_rate | recompile_rate | quality
    )
    label: str
    direction: str  # "increase" (higher is worse) | "decrease" (lower is worse) | "both"
    tolerance: float  # relative to the baseline value
    critical: bool
    stage: str | None = None
    min_effect: float = 0.0  # absolute floor of the tolerated change (rates near zero)


class Cell(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """The judge's result for one guardrail; `reason` says why in one sentence."""

    metric: str
    label: str
    classification: str  # Pass | High | Low | Undecided | Nodata
    passed: bool
    critical: bool
    direction: str
    tolerance: float
    unit: str
    statistic: str
    baseline_value: float | None
    candidate_value: float | None
    diff: float | None
    ci_low: float | None
    ci_high: float | None
    n_baseline: int
    n_candidate: int
    reason: str
    warnings: list[str] = []
    # Location shift of the whole distribution (Hodges-Lehmann, Moses CI, Mann-Whitney p).
    shift: float | None = None
    shift_low: float | None = None
    shift_high: float | None = None
    p_value: float | None = None
    # The change tolerated on the bad side (tolerance x |baseline|, at least min_effect); None in
    # a record written before equivalence was judged (verdict.py then takes it from the guardrail).
    allowed: float | None = None


class Validation(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    candidate: str
    baseline: str
    baseline_role: str
    guardrails: list[Guardrail]
    cells: list[Cell]
    score: float
    verdict: str  # Pass | Marginal | Fail
    reasons: list[str]
    validated_at: str
    validated_by: str
    confidence_level: float
    pass_threshold: float
    marginal_threshold: float


class ReplayCheck(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """Is the candidate measured on production-like shapes? PSI of its shape mix vs the failing run."""

    reference: str
    candidate: str
    psi: float | None
    psi_threshold: float
    unseen_share: float | None
    unseen_threshold: float
    n_reference: int
    n_candidate: int
    n_shapes: int
    passed: bool
    reason: str
    top_shapes: list[dict[str, Any]] = []


class RollbackCriterion(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """An explicit threshold that, once crossed after rollout, triggers a rollback."""

    metric: str
    label: str
    op: str  # ">" or "<"
    threshold: float
    unit: str
    window_requests: int
    source: str  # "guardrail" or "manual"
    # Half-width of the metric's 95% interval over one watch window of the baseline: a trigger
    # closer to the baseline than this would fire on noise. None when not measured (manual).
    noise: float | None = None


class TimelineEntry(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    at: str
    actor: str
    event: str
    status_from: str | None = None
    status_to: str | None = None
    note: str = ""


class AuditEntry(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    at: str
    actor: str
    field: str
    old: str  # compact JSON
    new: str


class Incident(msgspec.Struct, kw_only=True, frozen=True):
    schema_version: int = INCIDENT_SCHEMA_VERSION
    id: str
    title: str
    severity: str
    status: str = "declared"
    created_at: str
    updated_at: str
    created_by: str
    version: int = 0
    failing: str | None = None
    comparator: str | None = None
    fixed_metadata: str | None = None
    # The locked tag allowed to differ in the pairing (the change the regression followed);
    # records written before it existed decode as None.
    suspect: str | None = None
    candidate: str | None = None
    locked_tags: dict[str, dict[str, str | None]] = {}  # run id -> field -> value
    locked_keys: list[str] = []  # the fields a fair comparison must hold equal
    pair_warnings: list[str] = []
    localization: Localization | None = None
    claims: list[Claim] = []
    triage: dict[str, Any] = {}
    owners: list[Owner] = []
    actions: list[Action] = []
    validation: Validation | None = None
    validation_history: list[Validation] = []
    rollback_criteria: list[RollbackCriterion] = []
    replay_check: ReplayCheck | None = None
    timeline: list[TimelineEntry] = []
    audit: list[AuditEntry] = []
    # Top-level fields this program does not know (added by hand or by a newer version): kept
    # as they were and written back beside the known ones, never inside this key.
    unknown_fields: dict[str, Any] = {}


KNOWN_FIELDS: Final[frozenset[str]] = frozenset(Incident.__struct_fields__) - {"unknown_fields"}


class IncidentSummary(msgspec.Struct, kw_only=True, frozen=True):
    """One line of `incident list`."""

    id: str
    title: str
    severity: str
    status: str
    updated_at: str
    version: int
    failing: str | None
    candidate: str | None
    verdict: str | None
    overdue_actions: int


@dataclass(frozen=True)
class RecordProblem(Exception):
    """Why a record's JSON is not a valid incident: `where` is a JSON path ($ = the record)."""

    where: str
    problem: str
    repairable: bool = True

    def __str__(self) -> str:
        return f"{self.problem} at {self.where}" if self.where != "$" else self.problem


_MSGSPEC_PATH = re.compile(r"^(.*?)(?: - at `(\$[^`]*)`)?$", re.DOTALL)


# Integers the record holds (versions, ids, counts) fit a signed 64-bit integer.
_INT_LIMIT: Final[int] = 2**63 - 1


def _out_of_range(value: Any, where: str) -> str | None:
    """The path of the first number out of range: a float that is not finite (1e999 in the
    JSON decodes to inf) or an integer past int64."""
    if isinstance(value, float) and not math.isfinite(value):
        return where
    if isinstance(value, int) and abs(value) > _INT_LIMIT:
        return where
    if isinstance(value, dict):
        for k, v in value.items():
            found = _out_of_range(v, f"{where}.{k}")
            if found:
                return found
    if isinstance(value, list):
        for i, v in enumerate(value):
            found = _out_of_range(v, f"{where}[{i}]")
            if found:
                return found
    return None


def parse_record(data: bytes) -> dict[str, Any]:
    """The record's JSON object, untyped; RecordProblem (not repairable) if it is not one."""
    try:
        raw = msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        raise RecordProblem("$", f"not valid JSON ({exc})", repairable=False) from None
    if not isinstance(raw, dict):
        raise RecordProblem("$", "not a JSON object", repairable=False)
    return raw


def raw_version(raw: dict[str, Any]) -> int:
    """The version a parsed record claims, read leniently (0 when it is not a sane integer):
    what a save compares against, even for a record that does not decode."""
    v = raw.get("version")
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= _INT_LIMIT else 0


def record_from_raw(raw: dict[str, Any]) -> Incident:
    """The typed record of a parsed JSON object; RecordProblem naming the first bad place."""
    known = {k: v for k, v in raw.items() if k in KNOWN_FIELDS}
    unknown = {k: v for k, v in raw.items() if k not in KNOWN_FIELDS}
    try:
        inc = msgspec.convert(known, Incident)
    except msgspec.ValidationError as exc:
        m = _MSGSPEC_PATH.match(str(exc))
        problem, where = (m.group(1), m.group(2) or "$") if m else (str(exc), "$")
        raise RecordProblem(where, problem) from None
    bad = _out_of_range(known, "$")
    if bad:
        raise RecordProblem(bad, "a number out of range")
    if inc.schema_version != INCIDENT_SCHEMA_VERSION:
        raise RecordProblem(
            "$.schema_version",
            f"schema_version {inc.schema_version} is not supported "
            f"(this program reads {INCIDENT_SCHEMA_VERSION})",
            repairable=False,
        )
    if inc.status not in STATUSES:
        raise RecordProblem("$.status", f"unknown status {inc.status!r}")
    if inc.severity not in SEVERITIES:
        raise RecordProblem("$.severity", f"unknown severity {inc.severity!r}")
    return msgspec.structs.replace(inc, unknown_fields=unknown) if unknown else inc


def record_to_builtins(inc: Incident) -> dict[str, Any]:
    """The record as the JSON object saved: unknown top-level fields beside the known ones."""
    doc: dict[str, Any] = msgspec.to_builtins(inc)
    extra = doc.pop("unknown_fields", {})
    return {**doc, **{k: v for k, v in extra.items() if k not in doc}}


def encode_record(inc: Incident) -> bytes:
    """The record's JSON document, indented as saved."""
    return msgspec.json.format(msgspec.json.encode(record_to_builtins(inc)), indent=2)
