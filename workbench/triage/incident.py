"""The incident record (DESIGN §7): its types and its atomic, version-checked persistence.

Every save writes a temporary file, fsyncs it, and renames it over the record while holding an
flock on a per-incident lock file; the on-disk version must equal the version the caller loaded,
so a second writer gets a conflict error instead of silently overwriting the first.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import msgspec

from workbench.errors import WorkbenchError, describe_os_error
from workbench.store import objstore
from workbench.store.atomic import write_atomic
from workbench.store.layout import ID_RE, check_id, incidents_dir

INCIDENT_SCHEMA_VERSION: Final[int] = 1
SEVERITIES: Final[tuple[str, ...]] = ("sev1", "sev2", "sev3", "sev4")
# Fields that change on every save; auditing them would only repeat the version counter.
_TMP_RE: Final[re.Pattern[str]] = re.compile(r"^[0-9a-f]{32}\.tmp$")
_UNAUDITED: Final[frozenset[str]] = frozenset({"version", "updated_at", "audit", "timeline"})


class Claim(msgspec.Struct, kw_only=True, frozen=True):
    """A statement and the artifact that proves it: the query, its parameters and its numbers."""

    text: str
    query: str = ""
    parameters: dict[str, Any] = {}
    numbers: dict[str, Any] = {}

    def has_artifact(self) -> bool:
        return bool(self.query.strip()) and bool(self.numbers)


class Localization(msgspec.Struct, kw_only=True, frozen=True):
    """Where the plan diverged (origin), where the time shows (manifest), and why (mechanism)."""

    origin: str
    manifest: str
    mechanism: str | None = None
    secondary_mechanism: str | None = None
    confidence: float | None = None
    explained_share: float | None = None
    evidence_refs: list[str] = []
    source: str = "triage"


class Owner(msgspec.Struct, kw_only=True, frozen=True):
    role: str
    person: str
    assumed_at: str
    artifact: str
    assigned_by: str


class Action(msgspec.Struct, kw_only=True, frozen=True):
    id: int
    text: str
    owner: str
    due: str  # ISO date
    status: str = "open"  # open | done | dropped
    created_at: str = ""
    kind: str = "follow-up"  # follow-up | artifact (a role's closure artifact)


class Guardrail(msgspec.Struct, kw_only=True, frozen=True):
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


class Cell(msgspec.Struct, kw_only=True, frozen=True):
    """The judge's result for one guardrail; `reason` says why in one sentence."""

    metric: str
    label: str
    classification: str  # Pass | High | Low | Nodata
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


class Validation(msgspec.Struct, kw_only=True, frozen=True):
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


class ReplayCheck(msgspec.Struct, kw_only=True, frozen=True):
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


class RollbackCriterion(msgspec.Struct, kw_only=True, frozen=True):
    """An explicit threshold that, once crossed after rollout, triggers a rollback."""

    metric: str
    label: str
    op: str  # ">" or "<"
    threshold: float
    unit: str
    window_requests: int
    source: str  # "guardrail" or "manual"


class TimelineEntry(msgspec.Struct, kw_only=True, frozen=True):
    at: str
    actor: str
    event: str
    status_from: str | None = None
    status_to: str | None = None
    note: str = ""


class AuditEntry(msgspec.Struct, kw_only=True, frozen=True):
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


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def check_incident_id(incident_id: str) -> str:
    return check_id(incident_id, "incident")


def incident_path(store: Path, incident_id: str) -> Path:
    return incidents_dir(store) / f"{check_incident_id(incident_id)}.json"


def _lock_path(store: Path, incident_id: str) -> Path:
    return incidents_dir(store) / f".{check_incident_id(incident_id)}.lock"


def _decode(path: Path, data: bytes) -> Incident:
    try:
        inc = msgspec.json.decode(data, type=Incident)
    except msgspec.ValidationError as exc:  # a subclass of DecodeError: test it first
        raise WorkbenchError(str(path), f"incident record has the wrong schema: {exc}") from exc
    except msgspec.DecodeError as exc:
        raise WorkbenchError(str(path), f"malformed incident record: {exc}") from exc
    if inc.schema_version != INCIDENT_SCHEMA_VERSION:
        raise WorkbenchError(
            str(path),
            f"incident schema_version {inc.schema_version} is not supported "
            f"(this program reads {INCIDENT_SCHEMA_VERSION})",
        )
    if inc.id != path.stem:
        raise WorkbenchError(str(path), f"record holds incident {inc.id!r}, not {path.stem!r}")
    return inc


def load_incident(store: Path, incident_id: str) -> Incident:
    """The saved record of incident_id; a one-line error when missing or unreadable."""
    path = incident_path(store, incident_id)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise WorkbenchError(incident_id, f"no such incident in {store}") from None
    except OSError as exc:
        raise WorkbenchError(str(path), f"cannot read: {exc.strerror or exc}") from exc
    return _decode(path, data)


def list_incidents(store: Path) -> list[IncidentSummary]:
    """Every incident of the store, most recently updated first; unreadable records raise."""
    folder = incidents_dir(store)
    if not folder.is_dir():
        return []
    out = []
    today = datetime.now(UTC).date().isoformat()  # ISO dates compare as strings
    for path in folder.glob("*.json"):
        if path.name.startswith(".") or not ID_RE.fullmatch(path.stem):
            continue
        inc = _decode(path, path.read_bytes())
        out.append(
            IncidentSummary(
                id=inc.id,
                title=inc.title,
                severity=inc.severity,
                status=inc.status,
                updated_at=inc.updated_at,
                version=inc.version,
                failing=inc.failing,
                candidate=inc.candidate,
                verdict=inc.validation.verdict if inc.validation else None,
                overdue_actions=sum(1 for a in inc.actions if a.status == "open" and a.due < today),
            )
        )
    return sorted(out, key=lambda s: (s.updated_at, s.id), reverse=True)


def next_incident_id(store: Path, today: datetime | None = None) -> str:
    """INC-YYYYMMDD-NN, the next free number of the day."""
    day = (today or datetime.now(UTC)).strftime("%Y%m%d")
    prefix = f"INC-{day}-"
    folder = incidents_dir(store)
    taken = (
        [p.stem[len(prefix) :] for p in folder.glob(f"{prefix}*.json")] if folder.is_dir() else []
    )
    numbers = [int(t) for t in taken if t.isdigit()]
    return f"{prefix}{max(numbers, default=0) + 1:02d}"


@contextmanager
def _locked(store: Path, incident_id: str) -> Iterator[None]:
    lock = _lock_path(store, incident_id)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _on_disk_version(path: Path) -> int | None:
    if not path.exists():
        return None
    return _decode(path, path.read_bytes()).version


def _compact(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def _element_keys(items: list[Any]) -> list[str] | None:
    """Stable keys of list elements (id, role or metric) so edits diff element by element."""
    if not items or not all(isinstance(x, dict) for x in items):
        return None
    for name in ("id", "role", "metric"):
        keys = [str(x.get(name)) for x in items]
        if all(name in x for x in items) and len(set(keys)) == len(keys):
            return keys
    return None


def audit_diff(old: Incident | None, new: Incident, actor: str, at: str) -> list[AuditEntry]:
    """One entry per changed field; objects and keyed lists are compared element by element."""
    before: dict[str, Any] = msgspec.to_builtins(old) if old is not None else {}
    after: dict[str, Any] = msgspec.to_builtins(new)
    entries: list[AuditEntry] = []

    def walk(path: str, a: Any, b: Any) -> None:
        if a == b:
            return
        if isinstance(a, dict) and isinstance(b, dict):
            for key in sorted(set(a) | set(b)):
                walk(f"{path}.{key}", a.get(key), b.get(key))
            return
        if isinstance(a, list) and isinstance(b, list):
            ka, kb = _element_keys(a), _element_keys(b)
            if ka is not None and kb is not None:
                da, db = dict(zip(ka, a, strict=True)), dict(zip(kb, b, strict=True))
                for key in [*ka, *(k for k in kb if k not in da)]:
                    walk(f"{path}[{key}]", da.get(key), db.get(key))
                return
        entries.append(AuditEntry(at=at, actor=actor, field=path, old=_compact(a), new=_compact(b)))

    for key in after:
        if key not in _UNAUDITED:
            walk(key, before.get(key), after[key])
    return entries


def save_incident(store: Path, updated: Incident, base: Incident | None, actor: str) -> Incident:
    """Save `updated`, derived from `base` (None for a new record); return the saved record.

    Raises a conflict WorkbenchError when the record on disk is no longer `base`'s version.
    """
    path = incident_path(store, updated.id)
    at = now_iso()
    expected = base.version if base is not None else None
    saved = msgspec.structs.replace(
        updated,
        version=(expected or 0) + 1,
        updated_at=at,
        audit=[*updated.audit, *audit_diff(base, updated, actor, at)],
    )
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with _locked(store, updated.id):
            found = _on_disk_version(path)
            if found != expected:
                if expected is None:
                    raise WorkbenchError(updated.id, "conflict: an incident with this id exists")
                if found is None:
                    raise WorkbenchError(updated.id, "conflict: the incident record was removed")
                raise WorkbenchError(
                    updated.id,
                    f"conflict: version {found} was saved by someone else since you loaded "
                    f"version {expected}; reload and apply your change again",
                )
            # Under the lock no other save is in flight: temporary files are a killed save's.
            for stale in path.parent.glob(f".{updated.id}.*.tmp"):
                if _TMP_RE.fullmatch(stale.name[len(updated.id) + 2 :]):  # not "<id>.x"'s
                    stale.unlink(missing_ok=True)
            data = msgspec.json.format(msgspec.json.encode(saved), indent=2)
            # A bucket store's record goes to the bucket first, by a conditional PUT.
            objstore.publish_record(store, path.name, data, is_new=expected is None)
            write_atomic(path, lambda fh: fh.write(data))
    except OSError as exc:
        raise WorkbenchError(
            str(path), f"cannot save incident: {describe_os_error(exc, 'incident folder')}"
        ) from exc
    return saved


def modify(
    store: Path,
    incident_id: str,
    actor: str,
    change: Callable[[Incident], Incident],
    expected_version: int | None = None,
) -> Incident:
    """Load, apply `change`, save. With expected_version, refuse if the record moved past it."""
    base = load_incident(store, incident_id)
    if expected_version is not None and base.version != expected_version:
        raise WorkbenchError(
            incident_id,
            f"conflict: the record is at version {base.version}, you edited version "
            f"{expected_version}; reload and apply your change again",
        )
    return save_incident(store, change(base), base, actor)


def create_incident(
    store: Path,
    title: str,
    severity: str,
    actor: str,
    incident_id: str | None = None,
) -> Incident:
    """Declare a new incident and save it (version 1)."""
    if not store.is_dir():
        raise WorkbenchError(str(store), "store directory does not exist")
    if not title.strip():
        raise WorkbenchError("incident", "a title is required")
    if severity not in SEVERITIES:
        raise WorkbenchError(repr(severity), f"unknown severity (one of {', '.join(SEVERITIES)})")
    iid = check_incident_id(incident_id) if incident_id is not None else next_incident_id(store)
    at = now_iso()
    inc = Incident(
        id=iid,
        title=title.strip(),
        severity=severity,
        created_at=at,
        updated_at=at,
        created_by=actor,
        timeline=[TimelineEntry(at=at, actor=actor, event="declared", status_to="declared")],
    )
    return save_incident(store, inc, None, actor)
