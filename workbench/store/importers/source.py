"""Reading a trace file's bytes for any text importer: chunked (progress, cancel), gunzipped
by magic with a decompression-bomb limit, and transcoded to UTF-8."""

from __future__ import annotations

import codecs
import hashlib
import re
import threading
import zlib
from pathlib import Path

from workbench.errors import WorkbenchError
from workbench.store.progress import IngestProgress, ProgressFn, check_cancel

CHUNK = 8 << 20
GZIP_MAGIC = b"\x1f\x8b"


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
