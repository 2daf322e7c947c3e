"""The fleet view of a cohort of runs (`workbench fleet`'s text) as a panel for the Runs and
Evidence screens: the cohort's p95/p99 with n and CIs, the hosts whose tail differs from the
rest (most affected first, flagged ones marked) and the tags they share, then p99 by host and
rank. The view is computed on a thread worker; a failure shows as one line in the panel."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.message import Message
from textual.widgets import Static
from textual.worker import Worker, WorkerState

from workbench.errors import WorkbenchError
from workbench.terminal_text import for_terminal

if TYPE_CHECKING:
    from workbench.triage.fleet import FleetView


def fleet_text(view: FleetView, title: str) -> Text:
    """The panel's text: a title, then text_lines with flagged hosts and shared tags bold."""
    from workbench.triage.fleet import text_lines

    # Host names and tags come from the traces: shown escaped, never sent to the terminal.
    out = Text(for_terminal(title), style="bold")
    for line in text_lines(view):
        out.append("\n")
        strong = line.startswith("  * ") or line.startswith("  shared by the flagged")
        out.append(for_terminal(line), style="bold" if strong else "")
    return out


def cohort_title(failing: Sequence[str], comparator: Sequence[str]) -> str:
    """Which runs the view covers."""
    title = f"Fleet view: failing {', '.join(failing)}"
    return title + (f" vs comparator {', '.join(comparator)}" if comparator else "")


class FleetPanel(VerticalScroll):
    """Shows the fleet view of the runs given to `show`; `view` holds the last one shown."""

    class Loaded(Message):
        """The worker computed the fleet view."""

        def __init__(self, view: FleetView, title: str) -> None:
            super().__init__()
            self.view = view
            self.title = title

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.view: FleetView | None = None
        self.error: str | None = None

    def compose(self) -> ComposeResult:
        yield Static("No fleet view yet.", id="fleet-text")

    def show(self, store: Path, failing: Sequence[str], comparator: Sequence[str] = ()) -> None:
        """Compute and show the fleet view of `failing` (against `comparator`) in `store`."""
        self.view, self.error = None, None
        self.query_one("#fleet-text", Static).update("Computing the fleet view...")
        self._load(store, list(failing), list(comparator))

    @work(thread=True, exclusive=True, exit_on_error=False, group="fleet", description="Fleet view")
    def _load(self, store: Path, failing: list[str], comparator: list[str]) -> None:
        from workbench.triage.fleet import fleet_view

        view = fleet_view(store, failing, comparator)
        self.post_message(self.Loaded(view, cohort_title(failing, comparator)))

    def on_fleet_panel_loaded(self, message: Loaded) -> None:
        message.stop()
        self.view = message.view
        self.query_one("#fleet-text", Static).update(fleet_text(message.view, message.title))

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.worker.group != "fleet" or event.state != WorkerState.ERROR:
            return
        exc = event.worker.error
        if isinstance(exc, WorkbenchError):
            self.error = for_terminal(f"{exc.subject}: {exc.problem}")
        else:
            first = str(exc).splitlines()[0] if str(exc) else ""
            self.error = for_terminal(f"{type(exc).__name__}: {first}")
        self.query_one("#fleet-text", Static).update(
            Text(f"Fleet view failed: {self.error}", style="bold red")
        )
