"""The app's changes to the incident record, each a function the app runs in a worker: given the
store, the record as last saved and the actor, it saves and returns the new record."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from workbench.incident.incident import Incident, RollbackCriterion
    from workbench.incident.owners import Roster

IncidentChange = Callable[[Path, "Incident | None", str], "Incident"]
# (store, incident id, actor, version shown) -> the saved record
RecordCall = Callable[[Path, str, str, int], "Incident"]


def declare(run_id: str, today: datetime) -> IncidentChange:
    """A new incident about `run_id` as the failing run."""

    def change(store: Path, _inc: Incident | None, actor: str) -> Incident:
        import msgspec

        from workbench.incident.incident import create_incident, modify, next_incident_id

        title = f"Tail latency regression in run {run_id}"
        iid = next_incident_id(store, today)
        inc = create_incident(store, title, "sev2", actor, incident_id=iid)
        return modify(store, inc.id, actor, lambda i: msgspec.structs.replace(i, failing=run_id))

    return change


def pair(failing: str, comparator: str, fixed: str | None, suspect: str | None) -> IncidentChange:
    """Pair the runs (with the pinned fixed-metadata run, when there is one)."""

    def change(store: Path, inc: Incident | None, actor: str) -> Incident:
        from workbench.incident import workflow

        assert inc is not None
        return workflow.pair(
            store,
            inc.id,
            failing,
            comparator,
            actor,
            fixed,
            expected_version=inc.version,
            suspect=suspect,
        )

    return change


def pin_fixed(run_id: str, failing: str | None, comparator: str | None) -> IncidentChange:
    """Pin the fixed-metadata run: re-pair with it when paired, else remember it for pairing."""

    def change(store: Path, inc: Incident | None, actor: str) -> Incident:
        import msgspec

        from workbench.incident import workflow
        from workbench.incident.incident import modify

        assert inc is not None
        if failing and comparator:
            return workflow.pair(
                store,
                inc.id,
                failing,
                comparator,
                actor,
                run_id,
                expected_version=inc.version,
                suspect=inc.suspect,
            )
        # Not paired yet: remember it; pairing locks its tags with the others'.
        return modify(
            store,
            inc.id,
            actor,
            lambda i: msgspec.structs.replace(i, fixed_metadata=run_id),
            expected_version=inc.version,
        )

    return change


def on_record(call: RecordCall) -> IncidentChange:
    """A workflow call on the open incident at the version the app showed: a record changed
    meanwhile by someone else (the CLI, another app) is a conflict, never overwritten."""

    def change(store: Path, inc: Incident | None, actor: str) -> Incident:
        assert inc is not None
        return call(store, inc.id, actor, inc.version)

    return change


def assign(role: str, person: str, roster: Roster) -> IncidentChange:
    def call(store: Path, iid: str, actor: str, version: int) -> Incident:
        from workbench.incident import workflow

        return workflow.assign(store, iid, role, person, actor, roster, expected_version=version)

    return on_record(call)


def classify() -> IncidentChange:
    def call(store: Path, iid: str, actor: str, version: int) -> Incident:
        from workbench.incident import workflow

        return workflow.classify(store, iid, actor, expected_version=version)

    return on_record(call)


def validate(candidate: str) -> IncidentChange:
    def call(store: Path, iid: str, actor: str, version: int) -> Incident:
        from workbench.incident.validation import validate_incident

        return validate_incident(store, iid, candidate, actor, expected_version=version)

    return on_record(call)


def rollback_criteria(criteria: list[RollbackCriterion]) -> IncidentChange:
    def call(store: Path, iid: str, actor: str, version: int) -> Incident:
        from workbench.incident import workflow

        return workflow.set_rollback_criteria(store, iid, criteria, actor, expected_version=version)

    return on_record(call)


def close(reason: str) -> IncidentChange:
    def call(store: Path, iid: str, actor: str, version: int) -> Incident:
        from workbench.incident import workflow

        return workflow.close(store, iid, actor, reason, expected_version=version)

    return on_record(call)
