"""Every incident of the store: switch to one, start a new one, reopen a closed one."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import DataTable, Input, Label, Static

from workbench.terminal_text import for_terminal
from workbench.tui.widgets.marked_table import MarkedTable

if TYPE_CHECKING:
    from pathlib import Path

    from workbench.incident.incident import IncidentSummary

# What the screen hands back to the app: ("switch" | "new" | "reopen", incident id, reason).
Choice = tuple[str, str, str]


class IncidentsScreen(ModalScreen[Choice | None]):
    """The store's incidents, most recently updated first; the open one is marked."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "switch", "Switch", id="incidents.switch"),
        Binding("n", "new", "New", id="incidents.new"),
        Binding("o", "reopen", "Reopen", id="incidents.reopen"),
        Binding("escape", "back", "Back", id="incidents.back"),
    ]

    class Listed(Message):
        def __init__(self, found: list[IncidentSummary]) -> None:
            super().__init__()
            self.found = found

    def __init__(self, store: Path, current: str | None) -> None:
        super().__init__()
        self.store = store
        self.current = current
        self.found: list[IncidentSummary] | None = None

    def compose(self) -> ComposeResult:
        with Vertical(id="incidents-box"):
            yield Static("[b]Incidents[/b] in this store", id="incidents-title")
            yield MarkedTable(id="incidents-table")
            with Horizontal(classes="field", id="reopen-row"):
                yield Label("reason", classes="field-label")
                yield Input(placeholder="why reopen it", id="reopen-reason", compact=True)
            yield Static("Reading the incidents...", id="incidents-hint", classes="hint")

    def on_mount(self) -> None:
        table = self.query_one("#incidents-table", DataTable)
        for key, label in (
            ("mark", "open"),
            ("id", "incident"),
            ("status", "status"),
            ("failing", "failing"),
            ("title", "title"),
        ):
            table.add_column(label, key=key)
        self.query_one("#reopen-row").display = False
        table.focus()
        self.list_incidents()

    @work(thread=True, exclusive=True, exit_on_error=False, description="List the incidents")
    def list_incidents(self) -> None:
        from workbench.incident.incident import list_incidents

        self.post_message(self.Listed(list_incidents(self.store)))

    def on_incidents_screen_listed(self, message: Listed) -> None:
        self.found = message.found
        table = self.query_one("#incidents-table", DataTable)
        table.clear()
        for s in message.found:
            here = s.id == self.current
            table.add_row(
                Text("*" if here else " ", style="bold"),
                Text(s.id, style="bold" if here else ""),
                s.status,
                for_terminal(s.failing or "-"),
                for_terminal(s.title),
                key=s.id,
            )
        if self.current and self.current in {s.id for s in message.found}:
            table.move_cursor(row=table.get_row_index(self.current))
        self._hint(
            "Enter switches to the highlighted incident; n starts a new one; o reopens a closed "
            "one; Esc goes back."
            if message.found
            else "No incidents yet: n starts one (then f on the failing run). Esc goes back."
        )

    def _hint(self, text: str) -> None:
        self.query_one("#incidents-hint", Static).update(text)

    def highlighted(self) -> IncidentSummary | None:
        table = self.query_one("#incidents-table", DataTable)
        if not self.found or table.row_count == 0:
            return None
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        return next((s for s in self.found if s.id == key), None)

    @on(DataTable.RowSelected, "#incidents-table")
    def _selected(self) -> None:
        self.action_switch()

    def action_switch(self) -> None:
        s = self.highlighted()
        if s is not None:
            self.dismiss(("switch", s.id, ""))

    def action_new(self) -> None:
        self.dismiss(("new", "", ""))

    def action_reopen(self) -> None:
        s = self.highlighted()
        if s is None:
            return
        if s.status != "closed":
            self._hint(f"{s.id} is {s.status}, not closed: Enter switches to it.")
            return
        self.query_one("#reopen-row").display = True
        self.query_one("#reopen-reason", Input).focus()
        self._hint(f"Why reopen {s.id}? Type the reason and press Enter; Esc goes back.")

    @on(Input.Submitted, "#reopen-reason")
    def _reason(self, event: Input.Submitted) -> None:
        s = self.highlighted()
        reason = event.value.strip()
        if s is None:
            return
        if not reason:
            self._hint("Reopening needs a reason: type it, then Enter.")
            return
        self.dismiss(("reopen", s.id, reason))

    def action_back(self) -> None:
        if self.query_one("#reopen-row").display:
            self.query_one("#reopen-row").display = False
            self.query_one("#incidents-table", DataTable).focus()
            return
        self.dismiss(None)
