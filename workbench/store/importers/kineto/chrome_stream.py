"""Chrome-trace JSON streamed from disk: the event array decoded a chunk at a time while a thread
reads, hashes and inflates the file, so the whole text is never held and the hash costs no time.

The stream takes only what it can read exactly as chrome_trace's whole-text reader would (same
chunk cuts, same header): anything else (a cut-off array, damage, UTF-16, a duplicate
traceEvents key, a file the reader cannot open) raises Fallback, and the caller reads the whole
text instead, which says precisely what is wrong or salvages what it can.
"""

from __future__ import annotations

import codecs
import hashlib
import queue
import re
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType

import msgspec

from workbench.store.columns.trace_columns import TraceEvent
from workbench.store.importers.kineto import chrome_trace
from workbench.store.importers.kineto.chrome_trace import (
    EVENT_END,
    EVENTS_DECODER,
    NO_EVENTS,
    H,
    decode_between,
    fails_at_cut,
)
from workbench.store.importers.source import GZIP_MAGIC, inflated_limit, utf16_encoding

READ_BLOCK = 4 << 20
# Blocks read ahead of the decoder: bounds what the reader thread holds.
READ_AHEAD = 2
# How far into the text the traceEvents key may sit (a header past this is read whole).
HEAD_LIMIT = 64 << 20
_TRAILING = re.compile(r"trailing characters \(byte (\d+)\)")
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_FIRST = re.compile(rb"\S")
_DONE = object()
_SCAN = msgspec.json.Decoder(list[msgspec.Raw])
# The last chunk's array close is looked for among the last few "]" of the text's last 64 KB
# (the object's keys after the array) before the chunk is scanned for it.
_CLOSE_WINDOW = 64 << 10
_CLOSE_TRIES = 4
_BLANKS = frozenset(b" \t\n\r\x0b\x0c")  # what bytes.rstrip() strips


def _header(head: bytes, tail: bytes, file_type: type[H]) -> msgspec.Struct:
    """The object around the event array, the array left empty."""
    return msgspec.json.decode(head + b'"traceEvents":[]' + tail, type=file_type)


class Fallback(Exception):
    """The stream met something the whole-text reader must judge."""


class BlockReader:
    """A thread that reads, hashes and (gzip) inflates a file into text blocks, in order."""

    def __init__(self, path: Path) -> None:
        try:
            self.size = path.stat().st_size
        except OSError as exc:
            raise Fallback(str(exc)) from exc
        self.path = path
        self.sha = ""
        self.file_done = 0  # file bytes read so far (written by the thread only)
        self.text_done = 0  # text bytes handed out so far
        self.gzip = False
        self._queue: queue.Queue[object] = queue.Queue(maxsize=READ_AHEAD)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="trace-reader", daemon=True)
        self._thread.start()

    def _put(self, item: object) -> None:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def _run(self) -> None:
        try:
            digest = hashlib.sha256()
            with open(self.path, "rb") as fh:
                chunk = fh.read(READ_BLOCK)
                inflate = zlib.decompressobj(wbits=31) if chunk[:2] == GZIP_MAGIC else None
                self.gzip = inflate is not None
                limit, out = inflated_limit(self.size), 0
                while chunk and not self._stop.is_set():
                    # hashlib, zlib and reads release the GIL: this runs beside the decoder.
                    self.file_done += len(chunk)
                    if inflate is None:
                        self._put(chunk)
                    else:
                        pending = chunk
                        while pending:
                            if inflate.eof:  # concatenated members are one stream, as gzip(1)
                                inflate = zlib.decompressobj(wbits=31)
                            piece = inflate.decompress(pending, READ_BLOCK)
                            pending = inflate.unconsumed_tail or (
                                inflate.unused_data if inflate.eof else b""
                            )
                            out += len(piece)
                            if out > limit:
                                raise Fallback("inflates past the limit")
                            if piece:
                                self._put(piece)
                    # Hashed once handed over, so that the decoder starts on it sooner.
                    digest.update(chunk)
                    chunk = fh.read(READ_BLOCK)
                if inflate is not None and not inflate.eof:
                    raise Fallback("gzip stream is truncated")
            self.sha = digest.hexdigest()
            self._put(_DONE)
        except (OSError, zlib.error, Fallback) as exc:
            self._put(exc)

    def next_block(self) -> bytes | None:
        """The next text block; None at the end of the file."""
        item = self._queue.get()
        if item is _DONE:
            self._queue.put(_DONE)  # the end stays the end
            return None
        if isinstance(item, BaseException):
            self._queue.put(item)
            raise Fallback(str(item)) from item
        assert isinstance(item, bytes)
        self.text_done += len(item)
        return item

    def text_total(self) -> int:
        """Bytes of text in all (exact once the end was reached; extrapolated for gzip)."""
        if not self.gzip:
            return self.size
        if not self._thread.is_alive() or self.file_done == 0:
            return self.text_done
        return max(self.text_done, self.text_done * self.size // self.file_done)

    def close(self) -> None:
        self._stop.set()
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        self._thread.join()


class EventStream:
    """The event array of a Chrome trace read from `path`, decoded chunk by chunk.

    Iterate `chunks(file_type)`; `header` is set (object form) once the iteration is done.
    """

    def __init__(self, path: Path) -> None:
        self.reader = BlockReader(path)
        self.buf = bytearray()
        self.eof = False
        self.offset = 0  # text bytes before buf[0]
        self.header: msgspec.Struct | None = None

    def __enter__(self) -> EventStream:
        return self

    def __exit__(
        self, typ: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.reader.close()

    def _more(self) -> bool:
        """Append the next block to buf; False at the end of the text."""
        if self.eof:
            return False
        block = self.reader.next_block()
        if block is None:
            self.eof = True
            return False
        try:
            self.buf += block
        except BufferError:  # a decoded chunk still points into buf: grow a copy
            self.buf = self.buf + block
        return True

    def _search(self, pattern: re.Pattern[bytes], start: int) -> re.Match[bytes] | None:
        """The first match at or after start in the text, reading on until one is complete."""
        while True:
            m = pattern.search(self.buf, start)
            if m is not None or not self._more():
                return m

    def _start(self) -> int:
        """The first byte of the text, read past leading white space."""
        while True:
            m = _FIRST.search(self.buf)
            if m is not None:
                break
            if not self._more():
                raise Fallback("empty")
        head = bytes(self.buf[:4])
        if head[:3] == codecs.BOM_UTF8 or utf16_encoding(head[:2]) is not None:
            raise Fallback("not plain UTF-8")
        return self.buf[m.start()]

    def chunks(self, file_type: type[H]) -> Iterator[tuple[list[TraceEvent], int]]:
        """(events, text bytes done) per chunk; cut where chrome_trace._chunks cuts."""
        first = self._start()
        if first == ord("{"):
            key = _EVENTS_KEY.search(self.buf)
            while key is None:
                if len(self.buf) > HEAD_LIMIT or not self._more():
                    raise Fallback("no traceEvents key near the start")
                key = _EVENTS_KEY.search(self.buf)
            head = bytes(self.buf[: key.start()])
            pos = key.end()
        elif first == ord("["):
            head = None
            pos = self.buf.index(b"[") + 1
        else:
            raise Fallback("not an object or array")
        while True:
            chunk = chrome_trace.DECODE_CHUNK
            while len(self.buf) <= pos + chunk and self._more():
                pass
            m = self._search(EVENT_END, pos + chunk) if len(self.buf) > pos + chunk else None
            if m is None:
                yield self._last(head, pos, file_type), self.offset + len(self.buf)
                return
            while True:
                cut = m.start() + 1
                try:
                    events = decode_between(self.buf, pos, cut)
                    break
                except msgspec.DecodeError as exc:
                    if _TRAILING.search(str(exc)):  # the cut fell past the array's close
                        m = None
                        break
                    if not fails_at_cut(exc, cut - pos + 2):
                        raise Fallback(str(exc)) from exc
                except (msgspec.MsgspecError, RecursionError) as exc:
                    raise Fallback(str(exc)) from exc
                m = self._search(EVENT_END, m.end())
                if m is None:  # the chunk runs to the array's close, as the whole-text cut
                    break
            if m is None:
                yield self._last(head, pos, file_type), self.offset + len(self.buf)
                return
            nxt = m.end()
            yield events, self.offset + nxt
            del events
            # Keep the byte before the next event: decode_between brackets the chunk in place.
            self.offset += nxt - 1
            self.buf = self.buf[nxt - 1 :]
            pos = 1

    def _last(self, head: bytes | None, pos: int, file_type: type[H]) -> list[TraceEvent]:
        """The events from pos to the array's close, and the header around the array."""
        while self._more():
            pass
        if head is None:
            end = len(self.buf)
            while end > pos and self.buf[end - 1] in _BLANKS:
                end -= 1
            if end <= pos or self.buf[end - 1] != ord("]"):
                raise Fallback("array cut off")
            return self._decode_in_place(pos, end - 1)
        found = self._close_near_end(head, pos, file_type)
        if found is not None:
            self.buf = bytearray()  # the events' args hold what they point into
            return found
        rest = bytes(self.buf[pos:])
        self.buf = bytearray()
        # The events decode as one array followed by the rest of the object: the decoder names
        # the byte where that rest starts, and the array's close is the "]" before it. Scanned
        # as raw values (~3x faster than building the events, which _decode_last does next);
        # an event of the wrong type fails there as it would here.
        try:
            _SCAN.decode(b"[" + rest)
            raise Fallback("the object does not go on after the event array")
        except msgspec.DecodeError as exc:
            at = _TRAILING.search(str(exc))
            if at is None:
                raise Fallback(str(exc)) from exc
            close = rest.rfind(b"]", 0, int(at.group(1)) - 1)
        except (msgspec.MsgspecError, RecursionError) as exc:
            raise Fallback(str(exc)) from exc
        self._set_header(head, rest[close + 1 :], file_type)
        return self._decode_last(rest[:close])

    def _close_near_end(self, head: bytes, pos: int, file_type: type[H]) -> list[TraceEvent] | None:
        """The last chunk's events decoded in place, where the array closes at the last "]"
        after which the rest of the object decodes (as in most traces, whose last keys hold
        no "]"); None to find the close by scanning instead."""
        buf = self.buf
        window = max(pos, len(buf) - _CLOSE_WINDOW)
        close = buf.rfind(b"]", window)
        for _ in range(_CLOSE_TRIES):
            if close < pos:
                return None
            try:
                header = _header(head, bytes(buf[close + 1 :]), file_type)
            except (msgspec.MsgspecError, RecursionError):
                close = buf.rfind(b"]", window, close)
                continue
            try:
                # Only the array's own close decodes: one past it leaves trailing characters,
                # one inside it ends the array inside an event.
                events = decode_between(buf, pos, close)
            except (msgspec.MsgspecError, RecursionError):
                return None
            self._check_header(header)
            return events
        return None

    def _set_header(self, head: bytes, tail: bytes, file_type: type[H]) -> None:
        try:
            header = _header(head, tail, file_type)
        except (msgspec.MsgspecError, RecursionError) as exc:
            raise Fallback(str(exc)) from exc
        self._check_header(header)

    def _check_header(self, header: msgspec.Struct) -> None:
        raw = getattr(header, "traceEvents", NO_EVENTS)
        if bytes(raw) != b"[]":  # a second traceEvents key: the whole-text reader decides
            raise Fallback("traceEvents twice")
        header.traceEvents = NO_EVENTS  # type: ignore[attr-defined]
        self.header = header

    def _decode_in_place(self, pos: int, close: int) -> list[TraceEvent]:
        try:
            events = decode_between(self.buf, pos, close)
        except (msgspec.MsgspecError, RecursionError) as exc:
            raise Fallback(str(exc)) from exc
        self.buf = bytearray()
        return events

    def _decode_last(self, body: bytes) -> list[TraceEvent]:
        try:
            return EVENTS_DECODER.decode(b"[" + body + b"]")
        except (msgspec.MsgspecError, RecursionError) as exc:
            raise Fallback(str(exc)) from exc
