"""The incident record's persistence: atomic, version-checked saves and loads that never brick.

Every save writes a temporary file, fsyncs it, and renames it over the record while holding an
flock on a per-incident lock file; the on-disk version must equal the version the caller loaded,
so a second writer gets a conflict error instead of silently overwriting the first. A save that
would write a record this program cannot read back (a NaN saved as null) is refused instead.
The record's types live in incident_record.py and are re-exported here.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import msgspec

from workbench.errors import WorkbenchError, describe_os_error
from workbench.incident.incident_record import (
    INCIDENT_SCHEMA_VERSION as INCIDENT_SCHEMA_VERSION,
)
from workbench.incident.incident_record import SEVERITIES as SEVERITIES
from workbench.incident.incident_record import STATUSES as STATUSES
from workbench.incident.incident_record import Action as Action
from workbench.incident.incident_record import AuditEntry as AuditEntry
from workbench.incident.incident_record import Cell as Cell
from workbench.incident.incident_record import Claim as Claim
from workbench.incident.incident_record import Guardrail as Guardrail
from workbench.incident.incident_record import Incident as Incident
from workbench.incident.incident_record import IncidentSummary as IncidentSummary
from workbench.incident.incident_record import Localization as Localization
from workbench.incident.incident_record import Owner as Owner
from workbench.incident.incident_record import (
    RecordProblem,
    encode_record,
    parse_record,
    raw_version,
    record_from_raw,
)
from workbench.incident.incident_record import ReplayCheck as ReplayCheck
from workbench.incident.incident_record import RollbackCriterion as RollbackCriterion
from workbench.incident.incident_record import TimelineEntry as TimelineEntry
from workbench.incident.incident_record import Validation as Validation
from workbench.store.atomic import write_atomic
from workbench.store.layout import ID_RE, check_id, incidents_dir

_TMP_RE: Final[re.Pattern[str]] = re.compile(r"^[0-9a-f]{32}\.tmp$")
# Fields that change on every save; auditing them would only repeat the version counter.
_UNAUDITED: Final[frozenset[str]] = frozenset({"version", "updated_at", "audit", "timeline"})


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def check_incident_id(incident_id: str) -> str:
    return check_id(incident_id, "incident")


def incident_path(store: Path, incident_id: str) -> Path:
    return incidents_dir(store) / f"{check_incident_id(incident_id)}.json"


def _lock_path(store: Path, incident_id: str) -> Path:
    return incidents_dir(store) / f".{check_incident_id(incident_id)}.lock"


def read_record_bytes(path: Path) -> bytes:
    """The bytes of a record file: a regular file, not a symlink, FIFO or folder (whose read
    would follow a link out of the store, block forever or fail with a traceback)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if os.path.islink(path):
            raise WorkbenchError(
                str(path), "is a symbolic link, not an incident record; move it out of incidents/"
            ) from None
        raise WorkbenchError(str(path), f"cannot read: {exc.strerror or exc}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "a folder" if stat.S_ISDIR(mode) else "not a regular file"
            raise WorkbenchError(
                str(path), f"is {kind}, not an incident record; move it out of incidents/"
            )
        with os.fdopen(fd, "rb", closefd=False) as fh:
            return fh.read()
    except OSError as exc:
        raise WorkbenchError(str(path), f"cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def repair_hint(incident_id: str) -> str:
    return f"`workbench incident repair {incident_id}` fixes it"


def _decode(path: Path, data: bytes) -> Incident:
    """The record in `data`; one-line WorkbenchError saying why not and what repairs it."""
    try:
        inc = record_from_raw(parse_record(data))
    except RecordProblem as exc:
        how = repair_hint(path.stem) if exc.repairable else "restore it or fix it by hand"
        what = "malformed" if exc.where == "$" and not exc.repairable else "has the wrong schema"
        raise WorkbenchError(str(path), f"incident record {what}: {exc}; {how}") from None
    if inc.id != path.stem:
        raise WorkbenchError(
            str(path), f"record holds incident {inc.id!r}, not {path.stem!r}; rename the file"
        )
    return inc


def load_incident(store: Path, incident_id: str) -> Incident:
    """The saved record of incident_id; a one-line error when missing or unreadable."""
    path = incident_path(store, incident_id)
    try:
        data = read_record_bytes(path)
    except FileNotFoundError:
        raise WorkbenchError(incident_id, f"no such incident in {store}") from None
    return _decode(path, data)


def _summary(inc: Incident, today: str) -> IncidentSummary:
    return IncidentSummary(
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


@dataclass(frozen=True)
class Unreadable:
    """A file in incidents/ that is not a loadable record, and why (one line)."""

    path: str
    problem: str


def scan_incidents(store: Path) -> tuple[list[IncidentSummary], list[Unreadable]]:
    """Every readable incident (most recently updated first) and every unreadable record file."""
    folder = incidents_dir(store)
    if not folder.is_dir():
        return [], []
    out, bad = [], []
    today = datetime.now(UTC).date().isoformat()  # ISO dates compare as strings
    for path in sorted(folder.glob("*.json")):
        if path.name.startswith(".") or not ID_RE.fullmatch(path.stem):
            continue
        try:
            out.append(_summary(_decode(path, read_record_bytes(path)), today))
        except FileNotFoundError:  # removed since the listing
            continue
        except WorkbenchError as exc:
            bad.append(Unreadable(str(path), exc.one_line()))
    return sorted(out, key=lambda s: (s.updated_at, s.id), reverse=True), bad


def list_incidents(store: Path) -> list[IncidentSummary]:
    """Every readable incident of the store, most recently updated first."""
    return scan_incidents(store)[0]


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
    # O_NOFOLLOW: a symlink planted as the lock file must not make us create files elsewhere.
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _on_disk_version(path: Path) -> int | None:
    """The version of the record on disk (read leniently: a record being repaired may not
    decode), None when there is none."""
    try:
        raw = parse_record(read_record_bytes(path))
    except FileNotFoundError:
        return None
    except RecordProblem as exc:
        raise WorkbenchError(str(path), f"unreadable incident record: {exc}") from None
    return raw_version(raw)


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
    data = encode_record(saved)
    try:
        record_from_raw(parse_record(data))
    except RecordProblem as exc:  # e.g. a NaN that JSON can only hold as null
        raise WorkbenchError(updated.id, f"refusing to save: {exc}") from None
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
            # A bucket store's record goes to the bucket first, by a conditional PUT. Imported
            # here: it loads pyarrow, which reading a record (the app's resume) does not need.
            from workbench.store import objstore

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
