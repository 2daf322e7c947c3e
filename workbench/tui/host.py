"""What a step screen may ask of the app it runs in (the app implements it; screens import this,
never the app, so the app can import the screens without a cycle)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from workbench.store.runs import RunSummary
    from workbench.triage.incident import Incident, RollbackCriterion
    from workbench.triage.owners import Roster


class Workbench(Protocol):
    """The app's store, incident state and the incident changes the screens start."""

    store: Path
    state_dir: Path
    runs: list[RunSummary] | None
    incident: Incident | None
    incident_loaded: bool
    incident_rev: int
    pending_failing: str | None
    triage_status: str
    triage_progress: str

    def triage_state(self) -> str: ...
    def start_triage(self, force: bool = False) -> None: ...
    def show_error(self, title: str, exc: BaseException) -> None: ...
    def confirm(self, question: str, then: Callable[[], object], yes: str = "Yes") -> None: ...
    def mark_failing(self, run_id: str) -> None: ...
    def pair(self, failing: str, comparator: str, suspect: str | None = None) -> None: ...
    def pin_fixed(self, run_id: str) -> None: ...
    def assign_owner(self, role: str, person: str, roster: Roster) -> None: ...
    def classify(self) -> None: ...
    def validate_candidate(self, candidate: str) -> None: ...
    def set_rollback_criteria(self, criteria: list[RollbackCriterion]) -> None: ...
    def close_incident(self) -> None: ...
