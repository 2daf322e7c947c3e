"""Chrome-trace JSON decoding (the bytes come from importers/source.py): chunked typed decode into TraceEvent
records (trace_columns.py turns them into columns).

The event array is decoded in chunks of a few MB so that only one chunk's Python objects are
alive at a time; everything kept is held in numpy arrays and Arrow buffers.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TypeVar

import msgspec
import numpy as np

from workbench.errors import WorkbenchError
from workbench.store.columns.trace_columns import TraceEvent

DECODE_CHUNK = 8 << 20
# Default of a header's traceEvents field: identity tells "no such key".
NO_EVENTS = msgspec.Raw(b"")

Buffer = bytes | bytearray


H = TypeVar("H", bound=msgspec.Struct)


def _first_byte(data: Buffer) -> int:
    m = re.search(rb"\S", data[:4096])
    return data[m.start()] if m else 0


def _json_problem(exc: msgspec.MsgspecError) -> str:
    if isinstance(exc, msgspec.ValidationError):
        return f"not a Chrome trace: {exc}"
    return f"malformed JSON: {exc}"


# Between two events: "}" then "," (then the next "{"). A match inside a string or a nested
# object makes one side invalid JSON, which the decoder reports; the chunk then grows.
EVENT_END = re.compile(rb"\}\s*,")
_SALVAGE_TRIES = 8


def _offset_in(data: Buffer, raw: msgspec.Raw) -> int | None:
    """Where a zero-copy Raw starts inside data (None when it is not a view of data)."""
    if not len(raw):
        return None
    base = np.frombuffer(data, dtype=np.uint8).ctypes.data
    start = int(np.frombuffer(raw, dtype=np.uint8).ctypes.data) - int(base)
    return start if 0 <= start <= len(data) - len(raw) else None


def split_events(
    data: Buffer, subject: str, file_type: type[H], warnings: list[str]
) -> tuple[H | None, Iterator[tuple[list[TraceEvent], int]]]:
    """The header (object form) and the event array decoded chunk by chunk.

    Yields (events, bytes of the text decoded so far).

    The object form's traceEvents must be complete (a cut-off object is an error); a bare
    array cut off at the end is accepted: its complete events are kept and a warning added.
    """
    first = _first_byte(data)
    if first == ord("{"):
        try:
            header = msgspec.json.decode(data, type=file_type)
        except RecursionError:
            raise WorkbenchError(subject, TOO_DEEP) from None
        except msgspec.MsgspecError as exc:
            if "truncated" in str(exc):
                raise WorkbenchError(subject, "JSON object is truncated (file cut off)") from exc
            raise WorkbenchError(subject, _json_problem(exc)) from exc
        raw = getattr(header, "traceEvents", NO_EVENTS)
        if raw is NO_EVENTS:
            raise WorkbenchError(subject, "not a Chrome trace: object has no traceEvents")
        start = _offset_in(data, raw)
        if start is None:  # pragma: no cover - msgspec hands out views of bytes-like input
            region: Buffer = bytes(raw)
            start = 0
        else:
            region = data
        if region[start] != ord("["):
            raise WorkbenchError(subject, "not a Chrome trace: traceEvents is not an array")
        end = start + len(raw) - 1  # the closing "]"
        # The header must not keep the whole text alive once the events are decoded.
        header.traceEvents = NO_EVENTS  # type: ignore[attr-defined]
        del raw
        return header, _chunks(region, start + 1, end, subject, warnings, complete=True)
    if first == ord("["):
        start = data.index(b"[")
        last = len(data) - 1
        while last > start and data[last] in b" \t\r\n":
            last -= 1
        complete = data[last] == ord("]") and last > start
        end = last if complete else len(data)
        return None, _chunks(data, start + 1, end, subject, warnings, complete)
    raise WorkbenchError(subject, "not a Chrome trace: expected a JSON object or array")


EVENTS_DECODER = msgspec.json.Decoder(list[TraceEvent])
TOO_DEEP = "JSON nested too deeply (event args nested past the decoder's depth limit)"


def _chunks(
    data: Buffer, pos: int, end: int, subject: str, warnings: list[str], complete: bool
) -> Iterator[tuple[list[TraceEvent], int]]:
    """Decode data[pos:end] (the inside of the event array) a few MB at a time."""
    while pos < end:
        target = pos + DECODE_CHUNK
        m = EVENT_END.search(data, target, end) if target < end else None
        while True:
            cut, nxt = (m.start() + 1, m.end()) if m else (end, end)
            try:
                events = decode_between(data, pos, cut)
                break
            except RecursionError:
                raise WorkbenchError(subject, TOO_DEEP) from None
            except msgspec.ValidationError as exc:
                raise WorkbenchError(subject, _json_problem(exc)) from exc
            except msgspec.DecodeError as exc:
                if m is not None and fails_at_cut(exc, cut - pos + 2):
                    m = EVENT_END.search(data, m.end(), end)
                    continue
                if m is not None:  # damaged before the cut: growing the chunk cannot help
                    raise WorkbenchError(subject, _json_problem(exc)) from exc
                if complete:
                    raise WorkbenchError(subject, _json_problem(exc)) from exc
                events = _salvage(data, pos, end, subject)
                warnings.append("JSON array was cut off; kept the events before the cut")
                break
        yield events, nxt
        pos = nxt


_AT_BYTE = re.compile(r"\(byte (\d+)\)")


def fails_at_cut(exc: msgspec.DecodeError, body_len: int) -> bool:
    """True when a chunk failed only because the cut fell inside an event (string or nest)."""
    msg = str(exc)
    if "truncated" in msg:
        return True
    m = _AT_BYTE.search(msg)
    return m is None or int(m.group(1)) >= body_len - 1


def decode_between(data: Buffer, pos: int, cut: int) -> list[TraceEvent]:
    """Decode data[pos:cut] as a JSON array.

    In a bytearray the byte before pos (the "[" or a ",") and the byte at cut (a separator
    after "}") are briefly turned into brackets so that the chunk decodes in place, without
    copying it; the Raw args of the events point outside those two bytes.
    """
    if not isinstance(data, bytearray) or pos < 1 or cut >= len(data):
        return EVENTS_DECODER.decode(b"[" + bytes(data[pos:cut]) + b"]")
    before, after = data[pos - 1], data[cut]
    data[pos - 1], data[cut] = 0x5B, 0x5D
    try:
        with memoryview(data) as view:
            return EVENTS_DECODER.decode(view[pos - 1 : cut + 1])
    finally:
        data[pos - 1], data[cut] = before, after


def _salvage(data: Buffer, pos: int, end: int, subject: str) -> list[TraceEvent]:
    """The events of a cut-off array's last chunk: close it after the last complete event."""
    body = bytes(data[pos:end]).rstrip()
    try:
        EVENTS_DECODER.decode(b"[" + body)
    except msgspec.DecodeError as exc:
        # A cut-off file is a valid prefix; anything else is damage, not a cut.
        if "truncated" not in str(exc):
            raise WorkbenchError(subject, _json_problem(exc)) from exc
    except msgspec.ValidationError as exc:
        raise WorkbenchError(subject, _json_problem(exc)) from exc
    if body.endswith(b","):
        body = body[:-1]
    candidates = [len(body)] if body.endswith(b"}") else []
    ends = [m.start() + 1 for m in EVENT_END.finditer(body, max(0, len(body) - (1 << 20)))]
    candidates += ends[::-1][:_SALVAGE_TRIES]
    for cut in candidates:
        try:
            return EVENTS_DECODER.decode(b"[" + body[:cut] + b"]")
        except msgspec.DecodeError:
            continue
        except msgspec.ValidationError as exc:
            raise WorkbenchError(subject, _json_problem(exc)) from exc
    # The cut fell inside this chunk's first event: the complete ones were in earlier chunks.
    return []
