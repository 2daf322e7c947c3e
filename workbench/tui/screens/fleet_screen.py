"""The fleet view of runs over the current screen (from the Runs screen's highlighted run, or
the Evidence screen's pair): the fleet panel and the keys to close it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

from workbench.tui.widgets.fleet_panel import FleetPanel


class FleetScreen(ModalScreen[None]):
    """Shows FleetPanel for `failing` (against `comparator`) in `store`; Esc closes."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q", "close_fleet", "Close", id="fleet.close"),
    ]

    def __init__(self, store: Path, failing: Sequence[str], comparator: Sequence[str] = ()) -> None:
        super().__init__()
        self.store = store
        self.failing = list(failing)
        self.comparator = list(comparator)

    def compose(self) -> ComposeResult:
        with Vertical(id="fleet-box"):
            yield FleetPanel(id="fleet-panel")
            yield Static("Esc closes. Arrows scroll.", classes="hint", markup=False)

    def on_mount(self) -> None:
        panel = self.query_one(FleetPanel)
        panel.show(self.store, self.failing, self.comparator)
        panel.focus()

    def action_close_fleet(self) -> None:
        self.dismiss(None)
