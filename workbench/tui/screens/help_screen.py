"""Every key binding by screen, with its id for the keymap."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Static

from workbench.tui.keymap import BindingInfo
from workbench.tui.widgets.marked_table import MarkedTable


class HelpScreen(ModalScreen[None]):
    """The binding table; rebinding goes through a TOML keymap keyed by the ids shown."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,question_mark,f1", "close_help", "Close help", id="help.close"),
    ]

    def __init__(self, infos: list[BindingInfo]) -> None:
        super().__init__()
        self.infos = infos

    def compose(self) -> ComposeResult:
        with Vertical(id="help-box"):
            yield Static(
                "[b]Keys[/b]  Work through the steps 1-7; the line above the keys says what to "
                "do next. Arrows move, Enter picks, Tab moves focus, Ctrl+P searches actions.",
                id="help-title",
            )
            yield MarkedTable(id="help-table")
            yield Static(
                'Rebind: workbench --keymap FILE; FILE holds [keys] with "id" = "key". Esc closes.',
                classes="hint",
                markup=False,
            )

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.add_columns("screen", "key", "does", "id")
        for info in self.infos:
            keys = " ".join(
                self.app.get_key_display(Binding(k.strip(), info.action))
                for k in info.keys.split(",")
            )
            table.add_row(info.scope, keys, info.description, info.id, key=info.id)
        table.focus()

    def action_close_help(self) -> None:
        self.dismiss(None)
