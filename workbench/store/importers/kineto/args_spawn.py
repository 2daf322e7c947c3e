"""Starting the second process of a big trace's import (store/importers/kineto/args_process.py), early if asked.

Light on purpose (no numpy, no pyarrow): the CLI calls start_early before it imports the store,
so that the second process's own imports (~0.3 s) run beside the first one's.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import stat
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO

# Below this much text, starting a process costs more than it saves.
MIN_BYTES = 64 << 20
# importers/source.GZIP_MAGIC, spelt here: this module imports nothing of the store's.
_GZIP_MAGIC = b"\x1f\x8b"


@dataclass
class Spawned:
    """A second process waiting for chunks on its stdin; it answers into `out` (a temp file)."""

    proc: subprocess.Popen[bytes]
    out: IO[bytes]

    def stop(self) -> None:
        """Kill it if it still runs, reap it and drop its answer file."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):  # a pipe whose reader died: nothing to flush
                self.proc.stdin.close()
        self.out.close()


_early: list[Spawned] = []


def wanted(text_bytes: int) -> bool:
    """True when a trace of this many bytes is worth a second process on this machine.
    WORKBENCH_ARGS_PROCESS=0 never starts one, =1 always does (any size: tests use it)."""
    mode = os.environ.get("WORKBENCH_ARGS_PROCESS", "")
    if mode == "0" or not sys.executable:  # an embedded interpreter cannot be started again
        return False
    if mode == "1":
        return True
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    return cores >= 2 and text_bytes >= MIN_BYTES


def text_bytes(path: str | os.PathLike[str], file_bytes: int) -> int:
    """The JSON text's bytes in a file of file_bytes: for gzip, what its trailer says the last
    member inflates to (mod 4 GiB), if more; the file's own size otherwise."""
    try:
        with open(path, "rb") as fh:
            return _text_bytes(fh, fh.read(2), file_bytes)
    except OSError:
        return file_bytes


def _text_bytes(fh: IO[bytes], head: bytes, file_bytes: int) -> int:
    """text_bytes of the open file fh, whose first bytes are head."""
    if head[:2] != _GZIP_MAGIC or file_bytes < 20:
        return file_bytes
    try:
        fh.seek(file_bytes - 4)
        return max(file_bytes, int.from_bytes(fh.read(4), "little"))
    except OSError:
        return file_bytes


def spawn() -> Spawned:
    """A new second process (or the one start_early made, if still unused)."""
    if _early:
        return _early.pop()
    # The answer goes to a file, not a pipe: read back at the end in one go, where a pipe read
    # meanwhile would wait for the GIL the decoder holds at each piece (~5 ms a time).
    out = tempfile.TemporaryFile(prefix="workbench-args-")  # noqa: SIM115 - lives with proc
    try:
        # The same interpreter and import path as this process (uv's venv, a worktree's
        # PYTHONPATH): the child imports this very package.
        proc = subprocess.Popen(
            [sys.executable, "-m", "workbench.store.importers.kineto.args_process"],
            stdin=subprocess.PIPE, stdout=out, stderr=subprocess.DEVNULL,
        )  # fmt: skip
    except BaseException:
        out.close()
        raise
    return Spawned(proc, out)


def start_early(args: Sequence[str]) -> None:
    """Start a second process now when any of args names a regular file big enough to want one
    (an `ingest` command line, before it is parsed); an unused one is stopped at exit."""
    if _early:
        return
    for arg in args:
        try:
            st = os.stat(arg)  # no open: a FIFO would block
        except (OSError, ValueError):
            continue
        size = _json_text_bytes(arg, st.st_size) if stat.S_ISREG(st.st_mode) else None
        if size is not None and wanted(size):
            try:
                _early.append(spawn())
            except OSError:
                return  # no process to be had: the import runs on one
            atexit.register(_stop_unused)
            return


def _json_text_bytes(path: str, file_bytes: int) -> int | None:
    """text_bytes of a file that starts as JSON text or gzip does (the formats decoded with a
    second process), read in one opening; None for any other file."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(1024)
            if head.lstrip()[:1] not in (b"{", b"[") and head[:2] != _GZIP_MAGIC:
                return None
            return _text_bytes(fh, head, file_bytes)
    except OSError:
        return None


def _stop_unused() -> None:
    while _early:
        _early.pop().stop()
