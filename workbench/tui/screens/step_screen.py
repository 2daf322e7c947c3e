"""The frame every step screen shares: incident header, body, hint line, footer, worker errors."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import Footer, Static
from textual.worker import Worker, WorkerState

from workbench.tui.widgets.incident_header import IncidentHeader

if TYPE_CHECKING:
    from workbench.tui.host import Workbench


# Where work on an incident in each status goes on (the hint of screens off the main path).
NEXT_STEP: dict[str, str] = {
    "declared": "2 Pair: choose the comparator",
    "paired": "4 Localize: the triage names the origin stage",
    "localized": "4 Localize: press c to confirm the mechanism",
    "classified": "5 Owners: an owner for every role involved",
    "assigned": "6 Validate: judge a rollback candidate",
    "validating": "6 Validate until PASS, then 7 Close",
    "closed": "7 Close: export the summary",
}


class StepScreen(Screen[None]):
    """A step of the incident flow; subclasses yield their body and keep the hint current."""

    STEP: ClassVar[str] = ""
    TITLE_TEXT: ClassVar[str] = ""

    @property
    def wb(self) -> Workbench:
        """The app with its store and incident."""
        return self.app  # type: ignore[return-value]

    def compose(self) -> ComposeResult:
        yield IncidentHeader(self.STEP)
        yield from self.compose_body()
        yield Static("", id="hint", classes="hint")
        yield Footer()

    def compose_body(self) -> ComposeResult:
        yield from ()

    def on_mount(self) -> None:
        self.watch(self.app, "incident_rev", self._incident_changed, init=False)
        self.refresh_view()

    def _incident_changed(self, _rev: int) -> None:
        # Screens in the background catch up when shown (no queries for screens nobody sees).
        if self.is_current:
            self.refresh_view()

    def on_screen_resume(self) -> None:
        self.refresh_view()

    def refresh_view(self) -> None:
        """Re-read the app's state into the widgets (cheap; heavy work goes to workers)."""

    def focus_pane(self, pane_id: str) -> None:
        """Keys go to the first table of a tab pane once it is shown."""
        from textual.widgets import DataTable

        tables = self.query(f"#{pane_id} DataTable").results(DataTable)
        first = next(iter(tables), None)
        if first is not None:
            first.focus()

    def open_request(self, stage: str | None = None) -> None:
        """Drill into the failing run's p99 request (by `stage`'s time when it is a stage)."""
        from workbench.tui.screens.request_screen import DrillTarget, RequestScreen
        from workbench.tui.widgets.timeline import STAGE_STYLE

        inc = self.wb.incident
        failing = self.wb.pending_failing or (inc.failing if inc else None)
        if failing is None:
            self.notify("No failing run yet: on 1 Runs, press f on it.", severity="warning")
            return
        target = DrillTarget(
            failing=failing,
            comparator=inc.comparator if inc else None,
            stage=stage if stage in STAGE_STYLE else None,
        )
        self.app.push_screen(RequestScreen(self.wb.store, target))

    def set_hint(self, text: str) -> None:
        self.query_one("#hint", Static).update(text)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state is WorkerState.ERROR and event.worker.error is not None:
            self.worker_failed(event.worker)
            self.wb.show_error(event.worker.description or event.worker.name, event.worker.error)

    def worker_failed(self, worker: Worker[object]) -> None:
        """Put the screen back in a usable state after a worker failed."""
