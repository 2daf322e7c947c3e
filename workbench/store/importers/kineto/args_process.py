"""The args of a big trace decoded on a second process, so that one import uses both cores.

The importing process decodes the events and hands each chunk's args (half a real trace's
bytes) over a pipe; this module, run as `python -m workbench.store.importers.kineto.args_process`, decodes them
(kineto.args_columns), packs their text and writes the columns to an answer file, in order.
Anything amiss with the second process raises ArgsProcessFailed: the caller then decodes
in-process as before.
"""

from __future__ import annotations

import contextlib
import gc
import pickle
import queue
import struct
import subprocess
import sys
import threading
from functools import partial
from typing import IO, Any

import msgspec
import numpy as np
import pyarrow as pa

from workbench.store.columns.args import ArgColumns
from workbench.store.columns.packed_text import PackedChunk, PackedText, pack_now
from workbench.store.importers.kineto.args_spawn import spawn
from workbench.store.importers.kineto.kineto import (
    B1,
    I64,
    args_columns,
    args_present,
    raw_lengths,
    string_column,
)

# A chunk's header: its events and the bytes of their args as one JSON array (-1: the end).
_HEAD = struct.Struct("<qq")
# An answer's header: the bytes of its pickle.
_SIZE = struct.Struct("<q")
# Chunks handed over but not yet written to the pipe: while the second process starts (~0.3 s
# of imports) the decoder runs on, holding ~4 MB of args per chunk here.
QUEUED = 12
# Seconds the second process may take, once all its input is in, to finish the last chunks it
# holds (a few MB: well under a second); past it, it is stopped and the import decodes on one.
ANSWER_WAIT = 60.0


class ArgsProcessFailed(Exception):
    """The second process died, said it failed or answered out of step."""


class ArgsProcess:
    """decode_args on a second process: submit each chunk's args, then results() in order."""

    def __init__(self) -> None:
        try:
            self._helper = spawn()
        except OSError as exc:  # no process or temp file to be had now: decode on one
            raise ArgsProcessFailed(f"cannot start the args process: {exc}") from exc
        # Each chunk's (lengths, present, encoded); None ends the input.
        self._queue: queue.Queue[tuple[I64, B1, bytes] | None] = queue.Queue(maxsize=QUEUED)
        self._failed: list[str] = []
        self._sent = 0
        self._sender = threading.Thread(target=self._send, name="args-send", daemon=True)
        self._sender.start()

    def submit(self, raws: list[msgspec.Raw]) -> None:
        """Hand over one chunk's args (the Raw slices of its kept events, in order)."""
        if self._failed:
            raise ArgsProcessFailed(self._failed[0])
        lengths, present = raw_lengths(raws), args_present(raws)
        # "[a,b,...]": the array decode_args decodes; the other process cuts the text out.
        self._queue.put((lengths, present, msgspec.json.encode(raws)))
        self._sent += 1

    def results(self, sink: PackedText | None) -> list[ArgColumns]:
        """Every chunk's ArgColumns, in the order submitted; the text goes to `sink` (packed)
        or is unpacked into each part."""
        self._queue.put(None)
        self._sender.join()
        try:
            code = self._helper.proc.wait(timeout=ANSWER_WAIT)
        except subprocess.TimeoutExpired as exc:
            raise ArgsProcessFailed(f"no answer {ANSWER_WAIT:g} s after the last chunk") from exc
        if self._failed:
            raise ArgsProcessFailed(self._failed[0])
        answers = self._answers()
        if answers and isinstance(answers[-1], str):
            raise ArgsProcessFailed(answers[-1])
        if code != 0 or len(answers) != self._sent:
            raise ArgsProcessFailed(f"exit {code}, {len(answers)} of {self._sent} chunks answered")
        parts = []
        for fields in answers:
            chunk: PackedChunk = fields.pop("text")
            if sink is not None:
                sink.add_packed(chunk)
                text: Any = sink
            else:
                text = chunk.unpack()
            parts.append(ArgColumns(text=text, **fields))
        return parts

    def _answers(self) -> list[Any]:
        """What the process wrote to its answer file, in order."""
        out = self._helper.out
        answers = []
        try:
            out.seek(0)
            while head := out.read(_SIZE.size):
                if len(head) != _SIZE.size:
                    raise ArgsProcessFailed("the args process stopped mid-answer")
                (size,) = _SIZE.unpack(head)
                body = out.read(size)
                if len(body) != size:
                    raise ArgsProcessFailed("the args process stopped mid-answer")
                answers.append(pickle.loads(body))
        except (OSError, ValueError, struct.error, pickle.UnpicklingError) as exc:
            raise ArgsProcessFailed(f"cannot read the args process's answer: {exc}") from exc
        return answers

    def close(self) -> None:
        """Stop the second process (if still running) and the thread that feeds it."""
        self._fail("closed")
        if self._helper.proc.poll() is None:
            self._helper.proc.kill()  # a sender stuck writing to it is let go
        with contextlib.suppress(queue.Full):  # a full queue is drained by the failed sender
            self._queue.put_nowait(None)
        self._sender.join()
        self._helper.stop()

    def _fail(self, why: str) -> None:
        if not self._failed:
            self._failed.append(why)

    def _send(self) -> None:
        pipe = self._helper.proc.stdin
        assert pipe is not None
        while True:
            item = self._queue.get()
            if item is None:
                break
            if self._failed:
                continue  # drained, so that submit never waits on a dead process
            lengths, present, encoded = item
            try:
                # One write call each: the GIL is let go for the whole write, not per piece.
                pipe.write(_HEAD.pack(len(lengths), len(encoded)))
                pipe.write(lengths.data)
                pipe.write(present.data)
                pipe.write(encoded)
            except (OSError, ValueError) as exc:
                self._fail(f"cannot write to the args process: {exc}")
        with contextlib.suppress(OSError, ValueError):  # a dead process says so at its exit
            pipe.write(_HEAD.pack(-1, 0))
            pipe.close()


def _read_exact(pipe: IO[bytes], size: int) -> bytes:
    data = pipe.read(size)
    if len(data) != size:
        raise EOFError("input ended mid-chunk")
    return data


def _starts(lengths: I64) -> I64:
    """Where each value starts in "[a,b,...]" (after the bracket or its comma)."""
    starts = np.empty(len(lengths), dtype=np.int64)
    if len(lengths):
        starts[0] = 1
        np.cumsum(lengths[:-1] + 1, out=starts[1:])
        starts[1:] += 1
    return starts


def _text(encoded: bytes, lengths: I64, present: B1) -> pa.StringArray:
    """The args text column: "[a,b,...]" without its brackets and commas."""
    keep = np.ones(len(encoded), dtype=np.bool_)
    keep[_starts(lengths) - 1] = False  # "[" and each ","
    keep[-1] = False  # "]"
    joined = np.frombuffer(encoded, dtype=np.uint8)[keep]
    return string_column(pa.py_buffer(joined), lengths, present)


def _values(encoded: bytes, lengths: I64) -> list[msgspec.Raw]:
    view = memoryview(encoded)
    return [
        msgspec.Raw(view[a : a + n])
        for a, n in zip(_starts(lengths).tolist(), lengths.tolist(), strict=True)
    ]


def _answer(out: IO[bytes], answer: object) -> None:
    body = pickle.dumps(answer, protocol=5)
    out.write(_SIZE.pack(len(body)))
    out.write(body)


def serve(inp: IO[bytes], out: IO[bytes]) -> None:
    """Decode chunks from inp until the end mark, answering each on out."""
    gc.disable()  # many short-lived objects, none cyclic (as in the importing process)
    while True:
        n, size = _HEAD.unpack(_read_exact(inp, _HEAD.size))
        if n < 0:
            out.flush()
            return
        lengths = np.frombuffer(_read_exact(inp, 8 * n), dtype=np.int64)
        present = np.frombuffer(_read_exact(inp, n), dtype=np.bool_)
        encoded = _read_exact(inp, size)
        text = _text(encoded, lengths, present)
        part = args_columns(encoded, present, text, partial(_values, encoded, lengths))
        fields = {k: v for k, v in vars(part).items() if k != "text"}
        fields["text"] = pack_now(text)
        _answer(out, fields)
        del part, fields, encoded, text


def main() -> int:
    """The second process: serve stdin to stdout; a failure is told as the last answer."""
    from workbench.store.heap import arrow_from_heap, reused_heap

    out = sys.stdout.buffer
    try:
        # As the importing process decodes (store/ingest.py): each chunk's multi-MB buffers
        # reuse the heap's pages instead of being mapped and faulted in afresh.
        with reused_heap(release=False), arrow_from_heap():
            serve(sys.stdin.buffer, out)
        return 0
    except Exception as exc:  # the importing process then decodes in-process instead
        _answer(out, f"{type(exc).__name__}: {exc}")
        out.flush()
        return 1


if __name__ == "__main__":
    sys.exit(main())
