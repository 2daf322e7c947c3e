"""The modal that shows a failure as its one-line cause, never as a traceback."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

from workbench.errors import WorkbenchError


def one_line(exc: BaseException) -> str:
    """The cause of a failure on one line: WorkbenchError's subject and problem, else type: text."""
    if isinstance(exc, WorkbenchError):
        return exc.one_line()
    text = " ".join(str(exc).split()) or "no detail"
    return f"{type(exc).__name__}: {text}"[:300]


class ErrorModal(ModalScreen[None]):
    """One failure: what went wrong, in one line, and how to go on."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,enter", "dismiss_error", "Close", id="error.close"),
    ]

    def __init__(self, title: str, cause: str) -> None:
        super().__init__()
        self.error_title = title
        self.cause = cause

    def compose(self) -> ComposeResult:
        with Vertical(id="error-box"):
            yield Static(f"[b]{self.error_title}[/b]", id="error-title", markup=True)
            yield Static(self.cause, id="error-cause", markup=False)
            yield Static("Press Enter or Esc to close; nothing was changed.", classes="hint")

    def action_dismiss_error(self) -> None:
        self.dismiss(None)
