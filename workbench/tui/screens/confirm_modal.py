"""Ask before a key changes state that is hard to take back (re-pointing, closing, quitting)."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static


class ConfirmModal(ModalScreen[bool]):
    """A question answered by y (or Enter) and n (or Esc); the answer is the dismiss result."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y,enter", "answer(True)", "Yes", id="confirm.yes"),
        Binding("n,escape", "answer(False)", "No", id="confirm.no"),
    ]

    def __init__(self, question: str, yes: str = "Yes") -> None:
        super().__init__()
        self.question = question
        self.yes = yes

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-box"):
            yield Static(self.question, id="confirm-question", markup=False)
            yield Static(
                f"y or Enter: {self.yes}    n or Esc: no, nothing changes",
                id="confirm-keys",
                classes="hint",
                markup=False,
            )

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
