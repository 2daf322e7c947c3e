"""The Incident Workbench app: store, incident state, navigation, keys, errors."""

from __future__ import annotations

import contextlib
import getpass
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from textual import work
from textual.app import App
from textual.binding import BindingType
from textual.message import Message
from textual.reactive import reactive

from workbench.tui.app_keys import APP_BINDINGS, binding_catalogue
from workbench.tui.contrast import ContrastFloor
from workbench.tui.palette import WorkbenchCommands
from workbench.tui.screens.confirm_modal import ConfirmModal
from workbench.tui.screens.error_modal import ErrorModal, one_line
from workbench.tui.screens.runs_screen import RunsScreen
from workbench.tui.steps import SCREENS, STEP_TITLES, new_screen, resume_step
from workbench.tui.triage_run import NoRegression, TriageProgress, no_regression_text
from workbench.tui.widgets import incident_changes as changes
from workbench.tui.widgets.incident_header import IncidentLine, incident_line

NO_INCIDENT = "No incident yet: on Runs (1), press f on the failing run."

if TYPE_CHECKING:
    from textual.filter import LineFilter

    from workbench.incident.incident import Incident, RollbackCriterion
    from workbench.incident.owners import Roster
    from workbench.store.runs import RunSummary
    from workbench.tui.keymap import BindingInfo


class WorkbenchApp(App[int]):
    """Runs -> Pair -> Evidence -> Localize -> Owners -> Validate -> Close, one incident at a time."""

    # Absolute, so subclasses in other folders (bench/startup.py) find it.
    CSS_PATH = Path(__file__).with_name("app.tcss")
    TITLE = "Incident Workbench"
    # The first screen is imported with the app; the others when first shown (their widgets
    # cost import time that the first screen should not wait for).
    MODES: ClassVar[dict[str, Any]] = {
        mode: RunsScreen if mode == "runs" else partial(new_screen, mode) for mode in SCREENS
    }
    DEFAULT_MODE = "runs"
    COMMANDS = App.COMMANDS | {WorkbenchCommands}
    BINDINGS: ClassVar[list[BindingType]] = APP_BINDINGS

    incident_rev: reactive[int] = reactive(0, init=False)

    class IncidentSaved(Message):
        """A worker saved (or loaded) the incident record."""

        def __init__(
            self,
            incident: Incident | None,
            goto: str | None = None,
            resumed: bool = False,
            switched: bool = False,
        ) -> None:
            super().__init__()
            self.incident = incident
            self.goto = goto
            self.resumed = resumed
            self.switched = switched  # another incident than the one shown before

    def __init__(
        self,
        store: Path,
        keymap: dict[str, str] | None = None,
        *,
        clock: Callable[[], datetime] | None = None,
        actor: str | None = None,
        state_dir: Path | None = None,
    ) -> None:
        super().__init__()
        from workbench.store.workspace import state_home  # stdlib only; no data stack

        self.store = store
        self.state_dir = state_dir or state_home()
        self.user_keymap = dict(keymap or {})
        self._clock = clock or (lambda: datetime.now(UTC))
        self.actor = actor or _current_user()
        self.runs: list[RunSummary] | None = None
        self.incident: Incident | None = None
        self.incident_loaded = False
        # A failing run chosen while the incident still pairs another one; Pair re-pairs it.
        self.pending_failing: str | None = None
        self._save_lock = threading.Lock()
        self._latest: Incident | None = None  # the last saved record, for the next change
        self.triage_status = "idle"  # idle | running | failed
        self.triage_progress = ""
        self._triage_for: tuple[str, str] | None = None
        self._resume_started = False
        self._contrast = ContrastFloor()

    def get_line_filters(self) -> Sequence[LineFilter]:
        """Textual's filters (NO_COLOR's monochrome among them), then the contrast floor: every
        character at WCAG AA contrast, in colour, 256 colours and NO_COLOR alike."""
        return [*super().get_line_filters(), self._contrast]

    # -- state shown everywhere -------------------------------------------------------------

    def now(self) -> datetime:
        return self._clock()

    def incident_line(self) -> IncidentLine | None:
        return incident_line(self.incident)

    # -- lifecycle ----------------------------------------------------------------------------

    def on_mount(self) -> None:
        if self.user_keymap:
            self.set_keymap(self.user_keymap)
        self.mode_change_signal.subscribe(self, self._mode_changed)

    def on_runs_screen_runs_loaded(self, _message: object) -> None:
        self.resume_once()

    def resume_once(self) -> None:
        """Read the incident once the runs list is in (or failed): reading the record loads
        pyarrow, which would compete with painting the first screen for the GIL."""
        if not self._resume_started:
            self._resume_started = True
            self.resume_incident()

    @work(thread=True, exit_on_error=False, group="incident", description="Open the incident")
    def resume_incident(self) -> None:
        from workbench.tui.resume_state import resume_choice

        inc, goto = resume_choice(self.state_dir, self.store)
        with self._save_lock:
            self._latest = inc
        self.post_message(self.IncidentSaved(inc, goto=goto, resumed=True))

    @work(
        thread=True,
        exclusive=True,  # switching twice quickly: the last choice wins
        exit_on_error=False,
        group="switch",
        description="Switch incident",
    )
    def open_incident(self, incident_id: str, reopen_reason: str = "") -> None:
        """Make `incident_id` the app's incident (reopening it first when a reason is given)."""
        from workbench.incident import workflow
        from workbench.incident.incident import load_incident

        with self._save_lock:
            if reopen_reason:
                inc = workflow.reopen(self.store, incident_id, self.actor, reopen_reason)
            else:
                inc = load_incident(self.store, incident_id)
            self._latest = inc
        self.post_message(self.IncidentSaved(inc, goto=resume_step(inc), switched=True))

    def _mode_changed(self, mode: str) -> None:
        inc = self.incident
        if inc is None or not self.incident_loaded:
            return
        from workbench.tui.resume_state import remember

        # An unwritable state folder costs only the exact resume, never the work.
        with contextlib.suppress(OSError):
            remember(self.state_dir, self.store, inc.id, mode)

    @work(thread=True, exit_on_error=False, group="incident", description="Reload the incident")
    def reload_incident(self) -> None:
        from workbench.incident.incident import load_incident

        with self._save_lock:
            inc = self._latest
            if inc is None:
                return
            self._latest = load_incident(self.store, inc.id)
            fresh = self._latest
        self.post_message(self.IncidentSaved(fresh))

    def change_incident(
        self, description: str, change: changes.IncidentChange, goto: str | None = None
    ) -> None:
        """Apply `change` to the incident and save it at once, in a worker."""
        if not self.incident_loaded:
            self.notify("Still opening the incident; try again in a moment.", severity="warning")
            return
        # Not exclusive: a queued change must not cancel the one before it. The description is
        # the error modal's title when the change is refused.
        self.run_worker(
            partial(self._apply_change, change, goto),
            name="incident-change",
            group="incident",
            description=description,
            thread=True,
            exit_on_error=False,
        )

    def _apply_change(self, change: changes.IncidentChange, goto: str | None) -> None:
        # Saves are serialized: each change applies to the record the previous one saved.
        with self._save_lock:
            saved = change(self.store, self._latest, self.actor)
            self._latest = saved
        self.post_message(self.IncidentSaved(saved, goto=goto))

    def on_workbench_app_incident_saved(self, message: IncidentSaved) -> None:
        if message.switched:
            self.pending_failing = None
            self._triage_for = None
            self.triage_status, self.triage_progress = "idle", ""
        self.incident = message.incident
        self.incident_loaded = True
        self.start_triage()
        self.incident_rev += 1
        inc = message.incident
        if inc is not None and (message.resumed or message.switched) and message.goto:
            verb = "Resuming" if message.resumed else "Switched to"
            self.notify(f"{verb} {inc.id} ({inc.status}) at {STEP_TITLES[message.goto]}.")
        # On resume, jump to where the work stands unless the user already moved on.
        if message.goto and (not message.resumed or self.current_mode == self.DEFAULT_MODE):
            # Navigation is an action, as if the user pressed the step's key: it runs after
            # this handler (a first visit builds the screen and its styles).
            self.call_later(self._go_unless_moved, message.goto, message.resumed)

    def _go_unless_moved(self, mode: str, resumed: bool) -> None:
        # Checked again here: a key pressed since the record was read wins over the resume.
        if not resumed or self.current_mode == self.DEFAULT_MODE:
            self.action_goto(mode)

    def on_worker_state_changed(self, event: Any) -> None:
        from textual.worker import WorkerState

        worker = event.worker
        if event.state is WorkerState.ERROR and worker.error is not None:
            if worker.group == "incident" and worker.name == "incident-change":
                # The record may have moved on (a conflict): show what is on disk now.
                self.reload_incident()
            if worker.group == "triage":
                self.triage_status = "failed"
                self.triage_progress = "failed: " + one_line(worker.error)
                self.incident_rev += 1
            self.show_error(worker.description or worker.name, worker.error)

    # -- triage: replay and localization, attached to the incident when done ------------------

    def start_triage(self, force: bool = False) -> None:
        """Triage the incident's pair in the background unless it has a localization already."""
        inc = self.incident
        if inc is None or not inc.failing or not inc.comparator or inc.status == "closed":
            return
        pair = (inc.failing, inc.comparator)
        if not force and (inc.localization is not None or pair == self._triage_for):
            return
        self._triage_for = pair
        self.triage_status = "running"
        self.triage_progress = "starting..."
        self.run_triage(inc.id, inc.failing, inc.comparator, inc.fixed_metadata, inc.suspect)

    @work(
        thread=True,
        exclusive=True,
        exit_on_error=False,
        group="triage",
        description="Triage (replay and localize)",
    )
    def run_triage(
        self,
        incident_id: str,
        failing: str,
        comparator: str,
        fixed: str | None,
        suspect: str | None = None,
    ) -> None:
        from workbench.incident import workflow
        from workbench.tui.triage_run import localized, triage_doc

        def progress(step: str, fraction: float) -> None:
            self.post_message(TriageProgress(step, fraction))

        doc = triage_doc(self.store, failing, comparator, fixed, suspect, progress)
        if not localized(doc):
            # Nothing to localize (no significant tail gap): say so instead of recording it.
            self.post_message(NoRegression(doc))
            return
        with self._save_lock:
            saved = workflow.attach_triage(self.store, incident_id, doc, self.actor)
            self._latest = saved
        self.post_message(self.IncidentSaved(saved))

    def on_no_regression(self, message: NoRegression) -> None:
        self.triage_status = "no regression"
        self.triage_progress = no_regression_text(message.doc)
        self.incident_rev += 1

    def on_triage_progress(self, message: TriageProgress) -> None:
        self.triage_progress = f"{message.step} ({message.fraction:.0%})"
        if message.fraction >= 1.0:
            self.triage_status = "idle"
        self.incident_rev += 1

    def show_error(self, title: str, exc: BaseException) -> None:
        """The one-line cause in a modal; the app stays usable."""
        self.push_screen(ErrorModal(title or "Failed", one_line(exc)))

    def triage_state(self) -> str:
        """'none' (no pair), 'running', 'failed' or 'done' (localization recorded)."""
        inc = self.incident
        if inc is None or not inc.comparator:
            return "none"
        if inc.localization is not None and self.triage_status != "running":
            return "done"
        if self.triage_status in ("failed", "no regression"):
            return "failed"
        return "running"

    # -- incident changes (each saved at once by H6's workflow) -------------------------------

    def mark_failing(self, run_id: str) -> None:
        """Declare an incident for run_id, or re-pair the open one with run_id as failing."""
        inc = self.incident
        if inc is not None and inc.status != "closed" and inc.failing not in (None, run_id):

            def repoint() -> None:
                self.pending_failing = run_id
                self.incident_rev += 1
                self.switch_mode("pair")

            self.confirm(
                f"{inc.id} is about {inc.failing} (vs {inc.comparator or 'no comparator yet'}). "
                f"Re-point it at {run_id}? Nothing changes until you pick a comparator for "
                f"{run_id} on 2 Pair; then its triage is redone.\n"
                "For a separate incident answer n, then 0 (Incidents) and n (new).",
                repoint,
                yes=f"re-point at {run_id}",
            )
            return
        self.pending_failing = None
        if inc is not None and inc.status != "closed" and inc.failing == run_id:
            self.switch_mode("pair")
            return
        self.change_incident(
            "Declare the incident", changes.declare(run_id, self.now()), goto="pair"
        )

    def pair(self, failing: str, comparator: str, suspect: str | None = None) -> None:
        self.pending_failing = None
        fixed = self.incident.fixed_metadata if self.incident else None
        change = changes.pair(failing, comparator, fixed, suspect)
        self.change_incident("Pair the runs", change, goto="evidence")

    def pin_fixed(self, run_id: str) -> None:
        """Pin the fixed-metadata run: the failing config re-run with every tag pinned."""
        inc = self.incident
        if inc is None or inc.status == "closed":
            self.notify(
                "Declare the incident first: press f on the failing run.", severity="warning"
            )
            return
        if run_id in (inc.failing, inc.comparator):
            self.notify(f"{run_id} is already the failing or comparator run.", severity="warning")
            return
        change = changes.pin_fixed(run_id, inc.failing, inc.comparator)
        self.change_incident("Pin the fixed-metadata run", change)

    def _change_open(
        self, description: str, change: changes.IncidentChange, goto: str | None = None
    ) -> None:
        """A change to the open incident (a record call: see incident_changes.on_record)."""
        if self.incident is None:
            self.notify(NO_INCIDENT, severity="warning")
            return
        self.change_incident(description, change, goto)

    def assign_owner(self, role: str, person: str, roster: Roster) -> None:
        self._change_open(f"Assign the {role}", changes.assign(role, person, roster))

    def classify(self) -> None:
        self._change_open("Confirm the classification", changes.classify(), goto="owners")

    def validate_candidate(self, candidate: str) -> None:
        self._change_open(f"Validate {candidate}", changes.validate(candidate))

    def set_rollback_criteria(self, criteria: list[RollbackCriterion]) -> None:
        self._change_open("Save the rollback criteria", changes.rollback_criteria(criteria))

    def close_incident(self) -> None:
        inc = self.incident
        if inc is None:
            self.notify(NO_INCIDENT, severity="warning")
            return
        self.confirm(
            f"Close {inc.id}? Its record stops changing; reopening needs a reason. "
            "The summary can be exported after.",
            self._close_now,
            yes=f"close {inc.id}",
        )

    def _close_now(self) -> None:
        self._change_open("Close the incident", changes.close("closed from the workbench"))

    # -- actions ------------------------------------------------------------------------------

    async def action_on(self, mode: str, action: str) -> None:
        """Go to `mode` and run one of its screen's actions (the palette's way in)."""
        if mode != self.current_mode:
            await self.switch_mode(mode)
        await self.screen.run_action(action)

    def action_goto(self, mode: str) -> None:
        if mode in self.MODES and mode != self.current_mode:
            self.switch_mode(mode)

    def action_help(self) -> None:
        from workbench.tui.screens.help_screen import HelpScreen  # its table is not needed at start

        self.push_screen(HelpScreen(self.binding_catalogue()))

    def confirm(self, question: str, then: Callable[[], object], yes: str = "Yes") -> None:
        """Ask `question`; run `then` only on yes."""

        def answered(ok: bool | None) -> None:
            if ok:
                then()

        self.push_screen(ConfirmModal(question, yes), answered)

    async def action_quit(self) -> None:
        if isinstance(self.screen, ConfirmModal):
            return
        inc = self.incident
        where = (
            f"; next start resumes {inc.id} at {STEP_TITLES.get(self.current_mode, '')}"
            if inc is not None
            else ""
        )
        self.confirm(f"Quit the workbench? Everything is saved{where}.", self.exit, yes="quit")

    def action_incidents(self) -> None:
        from workbench.tui.screens.incidents_screen import IncidentsScreen

        current = self.incident.id if self.incident else None
        self.push_screen(IncidentsScreen(self.store, current), self._incident_chosen)

    def _incident_chosen(self, choice: tuple[str, str, str] | None) -> None:
        if choice is None:
            return
        kind, incident_id, reason = choice
        if kind == "new":
            # The next f on Runs declares a new incident; the others stay as they are.
            with self._save_lock:
                self._latest = None
            self.incident = None
            self.pending_failing = None
            self._triage_for = None
            self.triage_status, self.triage_progress = "idle", ""
            self.incident_rev += 1
            self.switch_mode("runs")
            self.notify("New incident: highlight its failing run and press f.")
            return
        self.open_incident(incident_id, reason)

    def binding_catalogue(self) -> list[BindingInfo]:
        """Every binding with its id and current keys (the keymap applied)."""
        return binding_catalogue(self.user_keymap)


def _current_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "on-call"
