"""Chrome-trace JSON reading: bytes (gzip by magic), chunked typed decode into TraceEvent
records (trace_columns.py turns them into columns).

The event array is decoded in chunks of a few MB so that only one chunk's Python objects are
alive at a time; everything kept is held in numpy arrays and Arrow buffers.
"""

from __future__ import annotations

import codecs
import hashlib
import re
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import TypeVar

import msgspec
import numpy as np

from workbench.errors import WorkbenchError
from workbench.store.progress import IngestProgress, ProgressFn, check_cancel
from workbench.store.trace_columns import TraceEvent

CHUNK = 8 << 20
DECODE_CHUNK = 8 << 20
GZIP_MAGIC = b"\x1f\x8b"
# Default of a header's traceEvents field: identity tells "no such key".
NO_EVENTS = msgspec.Raw(b"")

Buffer = bytes | bytearray


def read_bytes(
    path: Path,
    progress: ProgressFn | None = None,
    cancel: threading.Event | None = None,
) -> bytes:
    """The file's JSON text, gunzipped when it starts with the gzip magic bytes."""
    return bytes(read_source(path, progress, cancel)[0])


def read_source(
    path: Path,
    progress: ProgressFn | None = None,
    cancel: threading.Event | None = None,
) -> tuple[bytearray, str]:
    """(JSON text, sha256 of the file): gunzipped when it starts with the gzip magic bytes.

    Read in chunks (progress, cancel) into one buffer, so the text exists once in memory.
    """
    subject = str(path)
    try:
        total = path.stat().st_size
        fh = open(path, "rb")  # noqa: SIM115 - closed below; chunked for progress and cancel
    except OSError as exc:
        raise WorkbenchError(subject, f"cannot read file: {exc.strerror or exc}") from exc
    digest = hashlib.sha256()
    done = 0
    with fh:
        head = fh.read(2)
        fh.seek(0)
        inflate = zlib.decompressobj(wbits=31) if head == GZIP_MAGIC else None
        raw = bytearray(total if inflate is None else 0)
        view = memoryview(raw) if inflate is None else None
        out = bytearray()
        try:
            while True:
                check_cancel(cancel, subject)
                if view is not None:
                    got = fh.readinto(view[done : done + CHUNK])
                    if not got:
                        break
                    digest.update(view[done : done + got])
                    done += got
                else:
                    chunk = fh.read(CHUNK)
                    if not chunk:
                        break
                    digest.update(chunk)
                    done += len(chunk)
                    limit = inflated_limit(total)
                    out += inflate.decompress(chunk, limit - len(out) + 1)  # type: ignore[union-attr]
                    # Concatenated gzip members are one stream to gzip(1); follow them.
                    while inflate.eof and inflate.unused_data:  # type: ignore[union-attr]
                        rest = inflate.unused_data  # type: ignore[union-attr]
                        inflate = zlib.decompressobj(wbits=31)
                        out += inflate.decompress(rest, max(limit - len(out) + 1, 1))
                    if len(out) > limit or inflate.unconsumed_tail:  # type: ignore[union-attr]
                        raise WorkbenchError(
                            subject,
                            f"gzip data inflates past {limit / 1e9:.1f} GB ({INFLATE_RATIO}x the "
                            "file plus 256 MB): refused as a decompression bomb",
                        )
                if progress is not None:
                    progress(IngestProgress(subject, "read", done, total, 0))
        except zlib.error as exc:
            raise WorkbenchError(subject, f"bad gzip data: {exc}") from exc
        except OSError as exc:
            raise WorkbenchError(subject, f"cannot read file: {exc.strerror or exc}") from exc
        if inflate is not None and not inflate.eof:
            raise WorkbenchError(subject, "gzip stream is truncated")
    if view is not None:
        view.release()
        data = raw if done == total else raw[:done]
    else:
        data = out
    if re.search(rb"\S", data) is None:
        raise WorkbenchError(subject, "file is empty")
    return as_utf8(data, subject), digest.hexdigest()


# Trace JSON gzips 10-20x (the shared real traces); this leaves room for very repetitive
# traces while a decompression bomb (deflate reaches ~1000x) stops early.
INFLATE_RATIO = 200
_INFLATE_FLOOR = 256 << 20


def inflated_limit(compressed: int) -> int:
    """The most bytes a gzip file of `compressed` bytes may inflate to."""
    return INFLATE_RATIO * compressed + _INFLATE_FLOOR


def utf16_encoding(head: bytes) -> str | None:
    """The UTF-16 codec text starting with `head` is in (told by a byte order mark, or by the
    zero byte of an ASCII first character), or None."""
    if head[:2] in (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE):
        return "utf-16"
    if len(head) >= 2 and head[0] != 0 and head[1] == 0:
        return "utf-16-le"
    if len(head) >= 2 and head[0] == 0 and head[1] != 0:
        return "utf-16-be"
    return None


def as_utf8(data: bytearray, subject: str) -> bytearray:
    """JSON text as UTF-8: a UTF-8 byte order mark dropped, UTF-16 (with a mark, or told by
    its zero bytes) transcoded, as editors on Windows save it."""
    if data[:3] == codecs.BOM_UTF8:
        del data[:3]
        return data
    encoding = utf16_encoding(bytes(data[:2]))
    if encoding is None:
        return data
    try:
        return bytearray(bytes(data).decode(encoding).encode("utf-8"))
    except UnicodeError as exc:
        raise WorkbenchError(subject, f"text looks like UTF-16 but does not decode: {exc}") from exc


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
