"""The importer protocol: what a trace format gives `ingest` (Decoded), how a file it opened
is identified and decoded (Opened), and the contract of a format (Importer). The table of
formats is the package's own module (`workbench.store.importers`)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from workbench.store.columns.args import ArgColumns
from workbench.store.columns.trace_columns import TraceColumns
from workbench.store.progress import ProgressFn

HEAD_BYTES = 4096


@dataclass
class Decoded:
    """A file read into attribution columns, and what it says about the run.

    `base_us` is the epoch time (microseconds) of ts == 0 when the file states one, so that a
    compile log's epoch times can be put on the run's clock; 0.0 when unknown.
    """

    cols: TraceColumns
    args: ArgColumns
    meta: dict[str, Any]
    source_format: str
    base_us: float = 0.0
    warnings: list[str] = field(default_factory=list)


class Opened:
    """A file opened for import: its identity (to skip unchanged re-imports), then decode.

    `sha` and `n_bytes` may be given as functions: a format that hashes the file while decoding
    it says so, and they are worked out (once) only when asked for before decode has run.
    """

    def __init__(
        self,
        sha: str | Callable[[], str],
        n_bytes: int | Callable[[], int],
        decode: Callable[[], Decoded],
    ) -> None:
        self._sha = sha
        self._n_bytes = n_bytes
        self.decode = decode
        # Set before decode by a caller that writes the events file itself (ingest): a format
        # that can hand the args text over packed (ArgColumns.text a PackedText) then does.
        self.pack_text = False
        # Set by a caller that imports one file at a time (ingest, not a fleet's workers, which
        # already keep every core busy): a format may then decode on a second process too.
        self.second_process = False

    @property
    def sha(self) -> str:
        if not isinstance(self._sha, str):
            self._sha = self._sha()
        return self._sha

    @property
    def n_bytes(self) -> int:
        if not isinstance(self._n_bytes, int):
            self._n_bytes = self._n_bytes()
        return self._n_bytes


@runtime_checkable
class Importer(Protocol):
    """One trace format."""

    name: str  # short id, also the runs row's source_format unless the reader says otherwise
    summary: str  # one line for `workbench ingest --help`

    def recognise(self, path: Path, head: bytes) -> bool:
        """True when the file is of this format; `head` is its first HEAD_BYTES bytes."""
        ...

    def open(
        self, path: Path, progress: ProgressFn | None, cancel: threading.Event | None
    ) -> Opened:
        """Hash the file and return how to decode it; errors are WorkbenchError naming it."""
        ...
