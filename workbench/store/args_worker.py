"""A forked helper process that decodes the args keys of each decode chunk while the importing
process decodes the next chunk: the args' share of decoding (~0.5 s of ~1.7 s on the 209 MB
real-shaped trace) moves to the second core, which the GIL would keep a thread from using.

The parent sends each chunk's args text (the column it builds and packs anyway) over a socket
pair and gets kineto.text_values of it back, in order. The helper is forked before the file is
opened (no thread of ours runs yet) and uses no thread pool; should it fail in any way, the
parent decodes the values itself from the packed text, so the result never depends on it.
"""

from __future__ import annotations

import multiprocessing
import queue
import threading
import time
from multiprocessing.connection import Connection
from typing import Any

import pyarrow as pa

from workbench.store.kineto import text_values

# Below this much JSON the fork and the transfers cost more than the helper saves.
MIN_BYTES = 48 << 20
_AHEAD = 4  # chunks queued for the helper at most
# A helper silent this long is given up (a chunk takes it ~20 ms): the parent decodes itself.
_STALL_S = 30.0
_END = b""


def available() -> bool:
    """True where a helper can be forked: the fork start method exists (Linux, not macOS or
    Windows) and this process may have children (a pool's daemonic worker may not)."""
    if multiprocessing.current_process().daemon:
        return False
    return "fork" in multiprocessing.get_all_start_methods()


def _serve(conn: Connection, parent_end: Connection) -> None:
    """The helper's loop: (offsets, characters) in, text_values out, until the end marker."""
    parent_end.close()
    # glibc's malloc is made safe across fork; Arrow's own allocator may have been in use by
    # another thread of the parent (the app runs imports beside other work).
    pa.set_memory_pool(pa.system_memory_pool())
    try:
        while True:
            offsets = conn.recv_bytes()
            if offsets == _END:
                break
            data = conn.recv_bytes()
            try:
                conn.send(text_values(offsets, data))
            except Exception as exc:  # any failure: the parent decodes the values itself
                conn.send(f"{type(exc).__name__}: {exc}")
                break
    except (EOFError, OSError):
        pass  # the parent stopped early (an error in the file, a cancel): nothing to report
    finally:
        conn.close()


class ArgsWorker:
    """One helper for one file's decode: submit() each chunk's args text, then values()."""

    def __init__(self) -> None:
        ctx = multiprocessing.get_context("fork")
        self._conn, child = ctx.Pipe(duplex=True)
        self._proc = ctx.Process(
            target=_serve, args=(child, self._conn), name="args-worker", daemon=True
        )
        self._proc.start()
        child.close()
        # Bounded: should the helper fall behind, the decoder waits rather than piling up text.
        self._queue: queue.Queue[pa.StringArray | None] = queue.Queue(maxsize=_AHEAD)
        self._results: list[dict[str, Any]] = []
        self._problem: str | None = None
        self._submitted = 0
        self._sender = threading.Thread(target=self._send, name="args-send", daemon=True)
        self._receiver = threading.Thread(target=self._receive, name="args-recv", daemon=True)
        self._sender.start()
        self._receiver.start()

    def submit(self, text: pa.StringArray) -> None:
        """Queue a chunk's args column (unsliced, as kineto.args_text makes it)."""
        if self._problem is not None:
            return  # given up: values() will say so
        try:
            self._queue.put(text, timeout=_STALL_S)
        except queue.Full:
            self._problem = "the helper stalled"
            return
        self._submitted += 1

    def _send(self) -> None:
        # Socket writes release the GIL: sending costs the decoding thread next to nothing.
        try:
            while (text := self._queue.get()) is not None:
                _, offsets, data = text.buffers()
                assert offsets is not None and not text.offset
                self._conn.send_bytes(memoryview(offsets)[: (len(text) + 1) * 4])
                self._conn.send_bytes(memoryview(data) if data is not None else b"")
                del text, offsets, data
            self._conn.send_bytes(_END)
        except (OSError, ValueError) as exc:
            self._problem = self._problem or f"send: {exc}"

    def _receive(self) -> None:
        try:
            last = time.monotonic()
            while len(self._results) < self._submitted or self._sender.is_alive():
                if self._problem is not None:
                    return
                if not self._conn.poll(0.05):
                    if not self._proc.is_alive() and not self._conn.poll():
                        raise EOFError("the helper exited")
                    if self._submitted > len(self._results) and time.monotonic() - last > _STALL_S:
                        raise EOFError("the helper stalled")
                    if self._submitted == len(self._results):
                        last = time.monotonic()  # nothing owed: waiting on the decoder
                    continue
                last = time.monotonic()
                item = self._conn.recv()
                if isinstance(item, str):
                    raise RuntimeError(item)
                self._results.append(item)
        except EOFError as exc:
            # The helper exits after the end marker, maybe before the sender thread does.
            if len(self._results) < self._submitted:
                self._problem = self._problem or f"receive: {exc}"
        except (OSError, RuntimeError) as exc:
            self._problem = self._problem or f"receive: {exc}"

    def values(self) -> list[dict[str, Any]] | None:
        """text_values of every submitted chunk in order; None when the helper failed."""
        self._stop_sender()
        self._receiver.join()  # ends: every value in, or a problem, or a stall
        self.close()
        if self._problem is not None or len(self._results) != self._submitted:
            return None
        return self._results

    def _stop_sender(self) -> None:
        if not self._sender.is_alive():
            return
        try:
            self._queue.put(None, timeout=_STALL_S)
        except queue.Full:
            self._problem = self._problem or "the helper stalled"

    def close(self) -> None:
        """Stop the helper (also after an error mid-decode); idempotent."""
        self._stop_sender()
        self._conn.close()
        self._proc.join(timeout=2.0)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join()
