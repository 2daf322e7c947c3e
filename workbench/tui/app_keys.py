"""The app's own keys and the catalogue of every binding (help screen, keymap files)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.binding import Binding, BindingType

from workbench.tui.widgets.incident_header import STEPS

if TYPE_CHECKING:
    from workbench.tui.keymap import BindingInfo

APP_BINDINGS: list[BindingType] = [
    Binding("q,ctrl+q", "quit", "Quit", id="app.quit"),
    Binding("question_mark,f1", "help", "Help", id="app.help"),
    Binding("0", "incidents", "Incidents", id="app.incidents", show=False),
    Binding("ctrl+p", "command_palette", "Palette", id="app.palette", show=False),
    *(
        Binding(key, f"goto('{mode}')", f"Go to {title}", id=f"app.goto_{mode}", show=False)
        for mode, key, title in STEPS
    ),
]


def binding_scopes() -> list[tuple[str, list[BindingType]]]:
    """(scope, bindings) of the app and of every screen, in flow order."""
    from workbench.tui.screens.confirm_modal import ConfirmModal
    from workbench.tui.screens.error_modal import ErrorModal
    from workbench.tui.screens.fleet_screen import FleetScreen
    from workbench.tui.screens.help_screen import HelpScreen
    from workbench.tui.screens.incidents_screen import IncidentsScreen
    from workbench.tui.screens.ingest_screen import IngestScreen
    from workbench.tui.screens.request_screen import RequestScreen
    from workbench.tui.steps import screen_class
    from workbench.tui.widgets.path_input import PathInput
    from workbench.tui.widgets.timeline import Timeline

    scopes: list[tuple[str, list[BindingType]]] = [("everywhere", APP_BINDINGS)]
    for mode, _key, title in STEPS:
        scopes.append((title, list(screen_class(mode).BINDINGS)))
    scopes.append(("Request drill-down", list(RequestScreen.BINDINGS)))
    scopes.append(("Timeline", list(Timeline.BINDINGS)))
    scopes.append(("Fleet view", list(FleetScreen.BINDINGS)))
    scopes.append(("Incidents", list(IncidentsScreen.BINDINGS)))
    scopes.append(("Ingest", list(IngestScreen.BINDINGS)))
    scopes.append(("Path field", list(PathInput.BINDINGS)))
    scopes.append(("Confirm", list(ConfirmModal.BINDINGS)))
    scopes.append(("Help", list(HelpScreen.BINDINGS)))
    scopes.append(("Error", list(ErrorModal.BINDINGS)))
    return scopes


def known_binding_ids() -> list[str]:
    from workbench.tui.keymap import catalogue

    return [info.id for info in catalogue(binding_scopes())]


def binding_catalogue(keymap: dict[str, str]) -> list[BindingInfo]:
    """Every binding with its id and current keys (`keymap` applied)."""
    from workbench.tui.keymap import apply_overrides, catalogue

    return apply_overrides(catalogue(binding_scopes()), keymap)
