"""Files replaced whole: written to a temporary file beside them, synced, then renamed."""

from __future__ import annotations

import os
import signal
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO


def fsync_file(path: Path) -> None:
    """Make a file written by a library that does not sync (pyarrow's writers) durable."""
    with open(path, "rb") as fh:
        os.fsync(fh.fileno())


def fsync_dir(path: Path) -> None:
    """Make the directory's entries (a rename into it) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, fill: Callable[[BinaryIO], object], *, durable: bool = True) -> None:
    """Write `path` through `fill`, all or nothing: readers see the old file or the whole new
    one, and a failure (a full disk) leaves no temporary file behind. `durable` False skips
    the fsyncs, for a cache whose reader checks its content anyway."""
    tmp = path.with_name(f".{path.stem}.{uuid.uuid4().hex}.tmp")
    try:
        with open(tmp, "wb") as fh:
            fill(fh)
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if durable:
        fsync_dir(path.parent)


_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
)


@contextmanager
def signals_deferred() -> Iterator[None]:
    """Run the block to its end whatever signal arrives (Ctrl-C, SIGTERM, SIGHUP): one that
    arrives meanwhile is delivered after it, to the handler that was in place. So a commit's
    renames are done or not started, never cut in the middle. Outside the main thread (where
    handlers cannot be set) the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    # None: a handler set outside Python, which could not be put back; such signals stay.
    previous = {s: h for s in _SIGNALS if (h := signal.getsignal(s)) is not None}

    def hold(signum: int, _frame: object) -> None:
        caught.append(signum)

    for sig in previous:
        signal.signal(sig, hold)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for signum in dict.fromkeys(caught):
            signal.raise_signal(signum)
