"""The incident mutations the CLI and the app call: each loads, changes, gates and saves atomically.

All take (store, incident_id, ..., actor) and an optional expected_version (the version the
caller displayed); they return the new saved record and never print.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import msgspec

from accel.stages import MECHANISMS, STAGES
from workbench.errors import WorkbenchError
from workbench.incident import lifecycle
from workbench.incident.guardrails import check_criterion
from workbench.incident.incident import (
    SEVERITIES,
    Action,
    Claim,
    Incident,
    Localization,
    Owner,
    RollbackCriterion,
    create_incident,
    modify,
    now_iso,
)
from workbench.incident.numbers import whole
from workbench.incident.owners import ACTION_STATUSES, Roster, parse_due
from workbench.store import db
from workbench.triage.pairing import LOCKED_TAGS, pair_warnings

# Ten years: past that a due date is a typo (and a few million days overflow the calendar).
MAX_DUE_DAYS = 3650


def locked_tag_table(
    con: duckdb.DuckDBPyConnection, runs: list[str]
) -> dict[str, dict[str, str | None]]:
    """Per run, every metadata field and free tag (`tag:<key>`), from queries/tag_diff.sql."""
    rows = db.query(
        con, "tag_diff", {"failing": runs[0], "others": runs[1:], "locked": list(LOCKED_TAGS)}
    ).to_pylist()
    table: dict[str, dict[str, str | None]] = {r: {} for r in runs}
    for row in rows:
        table[runs[0]][row["key"]] = row["failing_value"]
        table[row["run_id"]][row["key"]] = row["other_value"]
    return table


def _pairing(
    store: Path, failing: str, comparator: str, fixed: str | None, suspect: str | None = None
) -> tuple[dict[str, dict[str, str | None]], list[str]]:
    """(locked tag table, pairing warnings); WorkbenchError when a run is not in the store."""
    con = db.connect(store)
    try:
        warnings = pair_warnings(con, failing, comparator, suspect=suspect, fixed=fixed)
        runs = list(dict.fromkeys(r for r in (failing, comparator, fixed) if r))
        return locked_tag_table(con, runs), warnings
    finally:
        con.close()


def pair(
    store: Path,
    incident_id: str,
    failing: str,
    comparator: str,
    actor: str,
    fixed_metadata: str | None = None,
    expected_version: int | None = None,
    *,
    suspect: str | None = None,
) -> Incident:
    """Set the failing / comparator (/ fixed-metadata) runs and lock their tags; `suspect` is
    the locked tag allowed to differ (kept in the record, left out of the warnings)."""
    if failing == comparator:
        raise WorkbenchError(repr(failing), "the failing run cannot be its own comparator")
    locked, warnings = _pairing(store, failing, comparator, fixed_metadata, suspect)

    def change(inc: Incident) -> Incident:
        _refuse_closed(inc)
        changed = (inc.failing, inc.comparator) != (failing, comparator)
        inc = msgspec.structs.replace(
            inc,
            failing=failing,
            comparator=comparator,
            fixed_metadata=fixed_metadata,
            suspect=suspect,
            locked_tags=locked,
            locked_keys=list(LOCKED_TAGS),
            pair_warnings=warnings,
        )
        if changed:
            # New runs make any localization or validation of the old pair meaningless.
            inc = lifecycle.fall_back(inc, "declared", actor, "runs re-paired")
            inc = msgspec.structs.replace(inc, localization=None, claims=[], triage={})
        if inc.status == "declared":
            return lifecycle.enter(inc, "paired", actor, f"{failing} vs {comparator}")
        return inc

    return modify(store, incident_id, actor, change, expected_version)


def declare(
    store: Path,
    title: str,
    severity: str,
    actor: str,
    incident_id: str | None = None,
    *,
    failing: str | None = None,
    comparator: str | None = None,
    fixed_metadata: str | None = None,
    suspect: str | None = None,
) -> Incident:
    """Declare an incident, paired at once when failing and comparator are given. The runs are
    checked before anything is written: a bad run id creates no incident."""
    if (failing is None) != (comparator is None):
        raise WorkbenchError("incident new", "give both --failing and --comparator, or neither")
    if failing is not None and comparator is not None:
        if failing == comparator:
            raise WorkbenchError(repr(failing), "the failing run cannot be its own comparator")
        _pairing(store, failing, comparator, fixed_metadata, suspect)
    inc = create_incident(store, title, severity, actor, incident_id)
    if failing is None or comparator is None:
        return inc
    return pair(
        store,
        inc.id,
        failing,
        comparator,
        actor,
        fixed_metadata,
        expected_version=inc.version,
        suspect=suspect,
    )


def _mechanisms(doc: dict[str, Any]) -> tuple[str | None, str | None]:
    mech = doc.get("mechanism")
    if isinstance(mech, dict):
        return mech.get("primary"), mech.get("secondary")
    if isinstance(mech, list):
        return (mech[0] if mech else None), (mech[1] if len(mech) > 1 else None)
    return (mech if isinstance(mech, str) else None), doc.get("secondary_mechanism")


def _claims(doc: dict[str, Any]) -> list[Claim]:
    raw = doc.get("claims") or []
    if not isinstance(raw, list):
        raise WorkbenchError("triage result", "claims must be a list")
    try:
        return [msgspec.convert(c, Claim) for c in raw]
    except msgspec.ValidationError as exc:
        raise WorkbenchError("triage result", f"malformed claim: {exc}") from exc


def attach_triage(
    store: Path,
    incident_id: str,
    triage_doc: dict[str, Any],
    actor: str,
    expected_version: int | None = None,
) -> Incident:
    """Record a triage result (TriageResult.to_json()) as the localization and claims."""
    failing, comparator = triage_doc.get("failing"), triage_doc.get("comparator")
    origin, manifest = triage_doc.get("origin_stage"), triage_doc.get("manifest_stage")
    if not isinstance(failing, str) or not isinstance(comparator, str):
        raise WorkbenchError("triage result", "names no failing and comparator run")
    if origin is None and triage_doc.get("mechanism") == "none":
        raise WorkbenchError(
            "triage result",
            f"found no regression of {failing} against {comparator} (mechanism none): "
            "nothing to localize",
        )
    if origin not in STAGES or manifest not in STAGES:
        raise WorkbenchError(
            "triage result", f"origin {origin!r} / manifest {manifest!r} are not pipeline stages"
        )
    primary, secondary = _mechanisms(triage_doc)
    claims = _claims(triage_doc)
    conf, share = triage_doc.get("confidence"), triage_doc.get("explained_share")
    localization = Localization(
        origin=origin,
        manifest=manifest,
        mechanism=primary,
        secondary_mechanism=secondary,
        confidence=float(conf) if isinstance(conf, int | float) else None,
        explained_share=float(share) if isinstance(share, int | float) else None,
        evidence_refs=sorted({c.query for c in claims if c.query}),
        source="triage",
    )
    rest = {k: v for k, v in triage_doc.items() if k != "claims"}

    def change(inc: Incident) -> Incident:
        _refuse_closed(inc)
        if inc.failing and (inc.failing, inc.comparator) != (failing, comparator):
            raise WorkbenchError(
                incident_id,
                f"triage compared {failing} vs {comparator} but the incident pairs "
                f"{inc.failing} vs {inc.comparator}",
            )
        if not inc.failing:
            locked, warnings = _pairing(store, failing, comparator, None)
            inc = msgspec.structs.replace(
                inc,
                failing=failing,
                comparator=comparator,
                locked_tags=locked,
                locked_keys=list(LOCKED_TAGS),
                pair_warnings=warnings,
            )
            inc = lifecycle.enter(inc, "paired", actor, f"{failing} vs {comparator}")
        inc = lifecycle.fall_back(inc, "paired", actor, "new triage result")
        inc = msgspec.structs.replace(inc, localization=localization, claims=claims, triage=rest)
        return lifecycle.enter(
            inc, "localized", actor, f"origin {origin}, manifest {manifest}, mechanism {primary}"
        )

    return modify(store, incident_id, actor, change, expected_version)


def classify(
    store: Path,
    incident_id: str,
    actor: str,
    mechanism: str | None = None,
    secondary: str | None = None,
    expected_version: int | None = None,
) -> Incident:
    """Confirm (or override) the mechanism; refused without proving artifacts for the claims."""
    for m in (mechanism, secondary):
        if m is not None and m not in MECHANISMS:
            raise WorkbenchError(repr(m), f"unknown mechanism (one of {', '.join(MECHANISMS)})")

    def change(inc: Incident) -> Incident:
        _refuse_closed(inc)
        if inc.localization is None:
            lifecycle.enter(inc, "classified", actor)  # raises, naming what is missing
            return inc
        loc = inc.localization
        loc = msgspec.structs.replace(
            loc,
            mechanism=mechanism or loc.mechanism,
            secondary_mechanism=secondary or loc.secondary_mechanism,
        )
        inc = msgspec.structs.replace(inc, localization=loc)
        if lifecycle.STATUS_INDEX[inc.status] > lifecycle.STATUS_INDEX["classified"]:
            lifecycle.enter(inc, "classified", actor)  # the new mechanism must still pass
            return lifecycle.note(inc, actor, "reclassified", f"mechanism {loc.mechanism}")
        inc = lifecycle.enter(inc, "classified", actor, f"mechanism {loc.mechanism}")
        return lifecycle.advance_while_ready(inc, actor, "assigned")

    return modify(store, incident_id, actor, change, expected_version)


def assign(
    store: Path,
    incident_id: str,
    role: str,
    person: str,
    actor: str,
    roster: Roster,
    due_days: int = 7,
    expected_version: int | None = None,
) -> Incident:
    """Give `role` to `person` with a follow-up action to deliver the role's closure artifact."""
    r = roster.role(role)
    if not person.strip():
        raise WorkbenchError(repr(role), "a person is required")
    whole(due_days, "due days", 0, MAX_DUE_DAYS)
    at = now_iso()
    due = (datetime.now(UTC).date() + timedelta(days=due_days)).isoformat()

    def change(inc: Incident) -> Incident:
        _refuse_closed(inc)
        owners = [o for o in inc.owners if o.role != role]
        owners.append(
            Owner(role=role, person=person, assumed_at=at, artifact=r.artifact, assigned_by=actor)
        )
        order = {name: i for i, name in enumerate(roster.roles)}
        owners.sort(key=lambda o: order.get(o.role, len(order)))
        text = f"Deliver the {role}'s closure artifact: {r.artifact}"
        # A reassigned role's artifact moves to the new person instead of piling up.
        actions = [a for a in inc.actions if not (a.text == text and a.status == "open")]
        actions.append(
            Action(
                id=max((a.id for a in inc.actions), default=0) + 1,
                text=text,
                owner=person,
                due=due,
                created_at=at,
                kind="artifact",
            )
        )
        inc = msgspec.structs.replace(inc, owners=owners, actions=actions)
        inc = lifecycle.note(inc, actor, "owner assigned", f"{role}: {person}")
        if inc.status == "classified":
            inc = lifecycle.advance_while_ready(inc, actor, "assigned")
        return inc

    return modify(store, incident_id, actor, change, expected_version)


def add_action(
    store: Path,
    incident_id: str,
    text: str,
    owner: str,
    due: str,
    actor: str,
    expected_version: int | None = None,
) -> Incident:
    """A follow-up action with owner and due date (YYYY-MM-DD)."""
    if not text.strip() or not owner.strip():
        raise WorkbenchError(incident_id, "an action needs a text and an owner")
    due_iso = parse_due(due)

    def change(inc: Incident) -> Incident:
        action = Action(
            id=max((a.id for a in inc.actions), default=0) + 1,
            text=text.strip(),
            owner=owner.strip(),
            due=due_iso,
            created_at=now_iso(),
        )
        return msgspec.structs.replace(inc, actions=[*inc.actions, action])

    return modify(store, incident_id, actor, change, expected_version)


def set_action_status(
    store: Path,
    incident_id: str,
    action_id: int,
    status: str,
    actor: str,
    expected_version: int | None = None,
) -> Incident:
    if status not in ACTION_STATUSES:
        raise WorkbenchError(repr(status), f"unknown action status ({', '.join(ACTION_STATUSES)})")

    def change(inc: Incident) -> Incident:
        if not any(a.id == action_id for a in inc.actions):
            raise WorkbenchError(incident_id, f"no action #{action_id}")
        actions = [
            msgspec.structs.replace(a, status=status) if a.id == action_id else a
            for a in inc.actions
        ]
        return msgspec.structs.replace(inc, actions=actions)

    return modify(store, incident_id, actor, change, expected_version)


def set_rollback_criteria(
    store: Path,
    incident_id: str,
    criteria: list[RollbackCriterion],
    actor: str,
    expected_version: int | None = None,
) -> Incident:
    """Replace the rollback criteria (the validation proposes them from the guardrails)."""
    for i, c in enumerate(criteria, start=1):
        check_criterion(c, f"rollback criterion {i}")

    def change(inc: Incident) -> Incident:
        _refuse_closed(inc)
        return msgspec.structs.replace(inc, rollback_criteria=list(criteria))

    return modify(store, incident_id, actor, change, expected_version)


def close(
    store: Path, incident_id: str, actor: str, note: str = "", expected_version: int | None = None
) -> Incident:
    """Close; refused, naming every missing piece, unless all gates pass."""

    def change(inc: Incident) -> Incident:
        if inc.status == "closed":
            raise WorkbenchError(incident_id, "is already closed")
        return lifecycle.enter(inc, "closed", actor, note)

    return modify(store, incident_id, actor, change, expected_version)


def reopen(
    store: Path, incident_id: str, actor: str, reason: str, expected_version: int | None = None
) -> Incident:
    """Reopen a closed incident: back to assigned; its validation moves to the history."""
    if not reason.strip():
        raise WorkbenchError(incident_id, "reopening needs a reason")

    def change(inc: Incident) -> Incident:
        if inc.status != "closed":
            raise WorkbenchError(incident_id, f"is {inc.status}, not closed")
        history = [*inc.validation_history, *([inc.validation] if inc.validation else [])]
        inc = msgspec.structs.replace(
            inc, validation=None, validation_history=history, replay_check=None
        )
        return lifecycle.fall_back(inc, "assigned", actor, f"reopened: {reason.strip()}")

    return modify(store, incident_id, actor, change, expected_version)


def edit_header(
    store: Path,
    incident_id: str,
    actor: str,
    title: str | None = None,
    severity: str | None = None,
    expected_version: int | None = None,
) -> Incident:
    """Change the title and / or the severity (audited, old -> new); allowed in any status."""
    if title is None and severity is None:
        raise WorkbenchError(incident_id, "nothing to change: give a title or a severity")
    if title is not None and not title.strip():
        raise WorkbenchError(incident_id, "a title cannot be empty")
    if severity is not None and severity not in SEVERITIES:
        raise WorkbenchError(repr(severity), f"unknown severity (one of {', '.join(SEVERITIES)})")

    def change(inc: Incident) -> Incident:
        return msgspec.structs.replace(
            inc,
            title=inc.title if title is None else title.strip(),
            severity=inc.severity if severity is None else severity,
        )

    return modify(store, incident_id, actor, change, expected_version)


def _refuse_closed(inc: Incident) -> None:
    if inc.status == "closed":
        raise WorkbenchError(inc.id, "is closed; reopen it first (`workbench incident reopen`)")
