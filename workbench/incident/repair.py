"""`workbench incident repair`: make an unreadable record loadable again, losing nothing.

Each problem the decoder names (a null where a number belongs, a non-finite number, an unknown
status, an unknown field inside an object) is fixed at the smallest enclosing piece: a list
element (one rollback criterion, one action) is taken out, an optional section (validation,
replay check) is cleared, a nested unknown field is taken out. Every piece taken out is kept in
the audit log (old value, new null), and the status falls back to the furthest lifecycle status
whose gates still pass, with a timeline entry saying why.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Final

import msgspec

from workbench.errors import WorkbenchError
from workbench.incident import lifecycle
from workbench.incident.incident import (
    AuditEntry,
    Incident,
    TimelineEntry,
    incident_path,
    now_iso,
    read_record_bytes,
    save_incident,
)
from workbench.incident.incident_record import (
    STATUSES,
    RecordProblem,
    parse_record,
    raw_version,
    record_from_raw,
)

_SEGMENT: Final[re.Pattern[str]] = re.compile(r"\.([^.\[\]]+)|\[(\d+)\]")
_UNKNOWN_FIELD: Final[re.Pattern[str]] = re.compile(r"unknown field `([^`]*)`")
# Many problems can be repaired one by one; a record with more is better restored by hand.
_MAX_FIXES: Final[int] = 10_000


def _segments(where: str) -> list[str | int]:
    return [
        m.group(1) if m.group(1) is not None else int(m.group(2)) for m in _SEGMENT.finditer(where)
    ]


def _defaults() -> dict[str, Any]:
    """Top-level fields that may be reset (they have a default); required ones may not."""
    out: dict[str, Any] = {}
    for f in msgspec.structs.fields(Incident):
        if f.default is not msgspec.NODEFAULT:
            out[f.encode_name] = f.default
        elif f.default_factory is not msgspec.NODEFAULT:
            out[f.encode_name] = f.default_factory()
    return out


def _take_out(raw: dict[str, Any], exc: RecordProblem) -> tuple[str, Any]:
    """Remove the smallest piece of `raw` that holds the problem; (its path, its old value)."""
    segs = _segments(exc.where)
    unknown = _UNKNOWN_FIELD.search(exc.problem)
    if unknown and segs:
        parent: Any = raw
        for s in segs:
            parent = parent[s]
        if isinstance(parent, dict) and unknown.group(1) in parent:
            where = f"{exc.where}.{unknown.group(1)}"
            return where, parent.pop(unknown.group(1))
    if not segs or not isinstance(segs[0], str):
        raise RecordProblem(exc.where, exc.problem, repairable=False)
    top = segs[0]
    defaults = _defaults()
    if top not in defaults or top == "status":
        raise RecordProblem(exc.where, f"{exc.problem} (a required field)", repairable=False)
    value = raw.get(top)
    if isinstance(value, list) and len(segs) > 1 and isinstance(segs[1], int):
        return f"$.{top}[{segs[1]}]", value.pop(segs[1])
    raw[top] = defaults[top]
    return f"$.{top}", value


def repair_incident(store: Path, incident_id: str, actor: str) -> tuple[Incident, list[str]]:
    """Repair the record of incident_id and save it; (the record, what was changed). An empty
    list: the record was readable and nothing was saved."""
    path = incident_path(store, incident_id)
    try:
        raw = parse_record(read_record_bytes(path))
    except FileNotFoundError:
        raise WorkbenchError(incident_id, f"no such incident in {store}") from None
    except RecordProblem as exc:
        raise WorkbenchError(
            str(path), f"cannot repair: {exc}; restore it or fix it by hand"
        ) from None
    on_disk = raw_version(raw)
    taken: list[tuple[str, Any]] = []
    old_status = raw.get("status")
    for _ in range(_MAX_FIXES):
        try:
            inc = record_from_raw(raw)
            break
        except RecordProblem as exc:
            if not exc.repairable:
                raise WorkbenchError(str(path), f"cannot repair: {exc}; fix it by hand") from None
            if exc.where == "$.status":
                raw["status"] = STATUSES[0]  # set below from the timeline and the gates
                continue
            try:
                taken.append(_take_out(raw, exc))
            except RecordProblem as fatal:
                raise WorkbenchError(str(path), f"cannot repair: {fatal}; fix it by hand") from None
    else:
        raise WorkbenchError(str(path), "cannot repair: too many problems; restore it")
    if inc.id != path.stem:
        raise WorkbenchError(str(path), f"holds incident {inc.id!r}; rename the file")
    # An unknown status is replaced by the last one the timeline recorded, never a guess further.
    recorded = [e.status_to for e in inc.timeline if e.status_to in STATUSES]
    known = old_status if old_status in STATUSES else (recorded[-1] if recorded else STATUSES[0])
    start = STATUSES.index(known)
    status = next(s for s in reversed(STATUSES[: start + 1]) if not lifecycle.missing_for(inc, s))
    if not taken and status == old_status:
        return inc, []
    at = now_iso()
    audit = [
        AuditEntry(at=at, actor=actor, field=where, old=_compact(old), new="null")
        for where, old in taken
    ]
    changes = [f"took out {where} (kept in the audit log)" for where, _ in taken]
    if status != old_status:
        audit.append(
            AuditEntry(
                at=at, actor=actor, field="$.status", old=_compact(old_status), new=_compact(status)
            )
        )
        changes.append(f"status {old_status!r} -> {status!r} (the furthest its gates allow)")
    entry = TimelineEntry(
        at=at,
        actor=actor,
        event="repaired",
        status_from=old_status if isinstance(old_status, str) else None,
        status_to=status,
        note="; ".join(changes),
    )
    repaired = msgspec.structs.replace(
        inc,
        status=status,
        version=on_disk,
        audit=[*inc.audit, *audit],
        timeline=[*inc.timeline, entry],
    )
    base = msgspec.structs.replace(repaired, audit=inc.audit, timeline=inc.timeline)
    return save_incident(store, repaired, base, actor), changes


def _compact(value: Any) -> str:
    return msgspec.json.encode(value).decode()
