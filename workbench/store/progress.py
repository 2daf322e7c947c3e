"""Progress and cancellation of a long import: what the app and the CLI bar are told."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from workbench.errors import WorkbenchError


@dataclass(frozen=True)
class IngestProgress:
    """One progress report: `phase` is read / decode / attribute / write."""

    path: str
    phase: str
    bytes_done: int
    bytes_total: int
    events: int


ProgressFn = Callable[[IngestProgress], None]


class ImportCancelled(WorkbenchError):
    """The caller set the cancel event; nothing was written."""


def check_cancel(cancel: threading.Event | None, subject: str) -> None:
    """Raise ImportCancelled when the caller asked to stop."""
    if cancel is not None and cancel.is_set():
        raise ImportCancelled(subject, "import cancelled; nothing was written")
