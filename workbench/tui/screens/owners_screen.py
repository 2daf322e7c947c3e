"""Step 5: an owner for every role the localization involves (owners follow the origin)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.message import Message
from textual.widgets import DataTable, Input, Label, Static

from workbench.tui.screens.step_screen import StepScreen
from workbench.tui.widgets.marked_table import MarkedTable

if TYPE_CHECKING:
    from workbench.incident.owners import Proposal, Roster


class OwnersScreen(StepScreen):
    """Roles involved, proposed people, follow-up actions."""

    AUTO_FOCUS = "#owners-table"
    STEP = "owners"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("e", "edit", "Assign person", id="owners.edit"),
        Binding("escape", "leave_input", "Back to roles", id="owners.back", show=False),
    ]

    class Proposed(Message):
        def __init__(self, proposals: list[Proposal], roster: Roster) -> None:
            super().__init__()
            self.proposals = proposals
            self.roster = roster

    def __init__(self) -> None:
        super().__init__()
        self.proposals: list[Proposal] = []
        self.roster: Roster | None = None
        self.proposed_for: tuple[str, int] | None = None

    def compose_body(self) -> ComposeResult:
        yield Static("", id="owners-summary")
        yield MarkedTable(id="owners-table")
        with Horizontal(classes="field", id="owner-field"):
            yield Label("person", classes="field-label")
            yield Input(
                placeholder="name of the owner; Enter assigns", id="owner-input", compact=True
            )
        yield MarkedTable(id="actions-table")

    def on_mount(self) -> None:
        t = self.query_one("#owners-table", DataTable)
        for key, label in (
            ("role", "role"),
            ("person", "owner"),
            ("why", "why"),
            ("artifact", "delivers"),
        ):
            t.add_column(label, key=key)
        a = self.query_one("#actions-table", DataTable)
        for key, label in (
            ("id", "#"),
            ("owner", "owner"),
            ("due", "due"),
            ("status", "status"),
            ("text", "follow-up"),
        ):
            a.add_column(label, key=key)
        super().on_mount()

    def refresh_view(self) -> None:
        inc = self.wb.incident
        if inc is None or inc.localization is None:
            self.query_one("#owners-summary", Static).update(
                "Owners follow the origin stage, which the triage has not named yet."
            )
            self.set_hint("Next: press 4 (Localize); owners come after the origin is known.")
            return
        key = (inc.id, inc.version)
        if key != self.proposed_for:
            self.proposed_for = key
            self.propose()
        self.fill_actions()

    @work(
        thread=True,
        exclusive=True,
        exit_on_error=False,
        group="owners",
        description="Propose owners",
    )
    def propose(self) -> None:
        from workbench.incident.owners import load_roster, propose_owners

        inc = self.wb.incident
        assert inc is not None
        roster = load_roster(self.wb.store)
        self.post_message(self.Proposed(propose_owners(inc, roster), roster))

    def on_owners_screen_proposed(self, message: Proposed) -> None:
        self.proposals = message.proposals
        self.roster = message.roster
        inc = self.wb.incident
        assigned = {o.role: o.person for o in inc.owners} if inc else {}
        t = self.query_one("#owners-table", DataTable)
        row = t.cursor_row
        t.clear()
        for p in self.proposals:
            person = assigned.get(p.role)
            t.add_row(
                Text(p.role, style="bold"),
                Text(person, style="green")
                if person
                else Text(f"{p.person}? (proposed)" if p.person else "unassigned", style="yellow"),
                p.reason,
                p.artifact,
                key=p.role,
            )
        if t.row_count:
            t.move_cursor(row=min(row, t.row_count - 1))
        loc = inc.localization if inc else None
        self.query_one("#owners-summary", Static).update(
            Text.assemble(
                "Origin ",
                (loc.origin if loc else "?", "bold"),
                ", manifest ",
                (loc.manifest if loc else "?", "bold"),
                f"; roster {Path(message.roster.source).name}",
            )
        )
        self.update_hint()
        if not self.query_one("#owner-input", Input).has_focus:
            t.focus()

    def update_hint(self) -> None:
        inc = self.wb.incident
        missing = [
            p.role for p in self.proposals if inc and p.role not in {o.role for o in inc.owners}
        ]
        if missing:
            self.set_hint(
                f"Next: highlight a role, press e (or Enter), type the person, Enter. "
                f"Unassigned: {', '.join(missing)}."
            )
        else:
            self.set_hint("Every role has an owner. Next: 6 Validate a rollback candidate.")

    def fill_actions(self) -> None:
        inc = self.wb.incident
        a = self.query_one("#actions-table", DataTable)
        a.clear()
        for act in inc.actions if inc else []:
            a.add_row(str(act.id), act.owner, act.due, act.status, act.text)

    def highlighted_role(self) -> str | None:
        t = self.query_one("#owners-table", DataTable)
        if t.row_count == 0:
            return None
        key = t.coordinate_to_cell_key(t.cursor_coordinate).row_key.value
        return None if key is None else str(key)

    @on(DataTable.RowSelected, "#owners-table")
    def _selected(self) -> None:
        self.action_edit()

    def action_edit(self) -> None:
        role = self.highlighted_role()
        if role is None:
            self.notify("No role to assign yet.", severity="warning")
            return
        field = self.query_one("#owner-input", Input)
        inc = self.wb.incident
        current = {o.role: o.person for o in inc.owners}.get(role) if inc else None
        proposal = next((p.person for p in self.proposals if p.role == role), None)
        field.value = current or proposal or ""
        field.placeholder = f"owner for the {role}; Enter assigns, Esc goes back"
        field.focus()

    def action_leave_input(self) -> None:
        self.query_one("#owners-table", DataTable).focus()

    @on(Input.Submitted, "#owner-input")
    def _assign(self, event: Input.Submitted) -> None:
        role = self.highlighted_role()
        person = event.value.strip()
        if role is None or self.roster is None:
            return
        if not person:
            self.notify("Type the person's name first.", severity="warning")
            return
        roster = self.roster
        self.wb.assign_owner(role, person, roster)
        event.input.value = ""
        self.query_one("#owners-table", DataTable).focus()
