"""A path field: Tab completes the typed path like a shell; candidates go out as a message."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from textual.binding import Binding, BindingType
from textual.message import Message
from textual.widgets import Input

from workbench.tui.widgets.path_complete import complete


class PathInput(Input):
    """Input for a file or folder path; relative paths are taken from `base`."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("tab", "complete", "Complete path", id="path.complete", show=False),
    ]

    class Completed(Message):
        """Tab was pressed: the candidates still open (empty when the completion is unique)."""

        def __init__(self, path_input: PathInput, candidates: list[str]) -> None:
            super().__init__()
            self.path_input = path_input
            self.candidates = candidates

        @property
        def control(self) -> PathInput:
            return self.path_input

    def __init__(self, value: str, base: Path, *, id: str | None = None) -> None:
        super().__init__(value, id=id, compact=True)
        self.base = base

    def action_complete(self) -> None:
        text, candidates = complete(self.value, self.base)
        self.value = text
        self.cursor_position = len(text)
        self.post_message(self.Completed(self, candidates))
