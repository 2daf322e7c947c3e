"""Incident lifecycle (DESIGN §7): the statuses in order and the gate in front of each one.

A gate returns the list of missing pieces; an empty list means the status may be entered.
Gates are cumulative: entering a status requires the gates of every earlier status too.
"""

from __future__ import annotations

from typing import Final

import msgspec

from accel.stages import MECHANISMS, STAGES
from workbench.errors import WorkbenchError
from workbench.incident.incident import STATUSES, Incident, TimelineEntry, now_iso
from workbench.incident.owners import roles_involved
from workbench.incident.verdict import PASS, incident_verdict

STATUS_INDEX: Final[dict[str, int]] = {s: i for i, s in enumerate(STATUSES)}


def _paired(inc: Incident) -> list[str]:
    missing = []
    if not inc.failing:
        missing.append("a failing run")
    if not inc.comparator:
        missing.append("a comparator run")
    if inc.failing and inc.failing == inc.comparator:
        missing.append("a comparator different from the failing run")
    return missing


def _localized(inc: Incident) -> list[str]:
    loc = inc.localization
    if loc is None:
        return ["a localization (run `workbench triage ... --incident ID`)"]
    missing = []
    if loc.origin not in STAGES:
        missing.append(f"an origin stage (got {loc.origin!r})")
    if loc.manifest not in STAGES:
        missing.append(f"a manifest stage (got {loc.manifest!r})")
    return missing


def _classified(inc: Incident) -> list[str]:
    missing = []
    mech = inc.localization.mechanism if inc.localization else None
    if mech not in MECHANISMS:
        missing.append(f"a mechanism from {', '.join(MECHANISMS)} (got {mech!r})")
    elif mech == "unknown":
        # Triage named the stage but found no events that witness a mechanism.
        missing.append("a witnessed mechanism (the localization says 'unknown')")
    if not inc.claims:
        missing.append("a claim with its proving artifact (query, parameters, numbers)")
    for i, claim in enumerate(inc.claims, start=1):
        if not claim.has_artifact():
            missing.append(
                f"the proving artifact (query and numbers) of claim {i} {claim.text[:60]!r}"
            )
    return missing


def _assigned(inc: Incident) -> list[str]:
    have = {o.role for o in inc.owners}
    return [f"an owner for the {role}" for role in roles_involved(inc) if role not in have]


def _validating(inc: Incident) -> list[str]:
    missing = []
    if not inc.candidate:
        missing.append("a candidate run")
    if inc.validation is None:
        missing.append("a validation (run `workbench validate --incident ID --candidate RUN`)")
    return missing


def _closed(inc: Incident) -> list[str]:
    missing = []
    verdict = incident_verdict(inc)
    if verdict is not None and verdict.verdict != PASS:
        missing.append(
            f"a PASS verdict (the validation of {verdict.candidate} says {verdict.headline})"
        )
    if inc.replay_check is None:
        missing.append("a production-like shape check of the candidate")
    if not inc.rollback_criteria:
        missing.append("rollback criteria")
    return missing


_GATES = {
    "paired": _paired,
    "localized": _localized,
    "classified": _classified,
    "assigned": _assigned,
    "validating": _validating,
    "closed": _closed,
}


def missing_for(inc: Incident, status: str) -> list[str]:
    """Everything that keeps `inc` from entering `status` (cumulative over earlier gates)."""
    if status not in STATUS_INDEX:
        raise WorkbenchError(repr(status), f"unknown status (one of {', '.join(STATUSES)})")
    missing: list[str] = []
    for s in STATUSES[1 : STATUS_INDEX[status] + 1]:
        missing.extend(_GATES[s](inc))
    return missing


def next_status(inc: Incident) -> str | None:
    i = STATUS_INDEX[inc.status]
    return STATUSES[i + 1] if i + 1 < len(STATUSES) else None


def enter(inc: Incident, status: str, actor: str, note: str = "") -> Incident:
    """inc in `status`, with a timeline entry; raises naming every missing piece."""
    missing = missing_for(inc, status)
    if missing:
        raise WorkbenchError(inc.id, f"cannot enter {status!r}: missing {'; '.join(missing)}")
    return _with_status(inc, status, actor, status, note)


def fall_back(inc: Incident, status: str, actor: str, note: str) -> Incident:
    """Move back to `status` (new evidence invalidates later stages); no-op if not later."""
    if STATUS_INDEX[inc.status] <= STATUS_INDEX[status]:
        return inc
    return _with_status(inc, status, actor, f"back to {status}", note)


def advance_while_ready(inc: Incident, actor: str, limit: str) -> Incident:
    """Enter following statuses up to `limit` while their gates pass."""
    while True:
        nxt = next_status(inc)
        if nxt is None or STATUS_INDEX[nxt] > STATUS_INDEX[limit] or missing_for(inc, nxt):
            return inc
        inc = _with_status(inc, nxt, actor, nxt, "")


def _with_status(inc: Incident, status: str, actor: str, event: str, note: str) -> Incident:
    entry = TimelineEntry(
        at=now_iso(),
        actor=actor,
        event=event,
        status_from=inc.status,
        status_to=status,
        note=note,
    )
    return msgspec.structs.replace(inc, status=status, timeline=[*inc.timeline, entry])


def note(inc: Incident, actor: str, event: str, text: str = "") -> Incident:
    """A timeline entry without a status change."""
    entry = TimelineEntry(at=now_iso(), actor=actor, event=event, note=text)
    return msgspec.structs.replace(inc, timeline=[*inc.timeline, entry])
