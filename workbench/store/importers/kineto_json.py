"""The built-in Chrome-trace / Kineto JSON format (gzip or not)."""

from __future__ import annotations

import threading
import zlib
from pathlib import Path

from workbench.errors import WorkbenchError
from workbench.store.chrome_trace import GZIP_MAGIC, ColumnBuilder, read_source, split_events
from workbench.store.importers import Decoded, Opened
from workbench.store.importers.devices import device_meta
from workbench.store.kineto import KinetoFile, concat_args, decode_args, run_metadata
from workbench.store.progress import IngestProgress, ProgressFn, check_cancel


def _text_head(head: bytes) -> bytes:
    if head[:2] != GZIP_MAGIC:
        return head
    try:
        return zlib.decompressobj(wbits=31).decompress(head)
    except zlib.error:
        return b""


def _is_utf8(head: bytes) -> bool:
    """True when head is UTF-8, allowing a character cut at the end of the sample."""
    for cut in range(4):
        try:
            head[: len(head) - cut].decode("utf-8")
            return True
        except UnicodeDecodeError:
            continue
    return False


class KinetoJson:
    """PyTorch profiler (Kineto) or any Chrome-trace JSON: an object or an array of events."""

    name = "kineto-json"
    summary = "PyTorch profiler / Kineto or Chrome-trace JSON (gzip ok)"

    def recognise(self, path: Path, head: bytes) -> bool:
        # Any text (or gzip) file is ours, JSON or not: the JSON reader then says precisely
        # what is wrong with it, which helps more than "no importer recognises it".
        if head[:2] == GZIP_MAGIC:
            return True
        text = _text_head(head)
        return b"\x00" not in text and _is_utf8(text)

    def open(
        self, path: Path, progress: ProgressFn | None, cancel: threading.Event | None
    ) -> Opened:
        data, sha = read_source(path, progress, cancel)
        # Handed over in a list so that no frame keeps the text alive while it becomes columns.
        box = [data]
        n_bytes = len(data)
        del data
        return Opened(sha, n_bytes, lambda: _decode(path, box, progress, cancel))


def _decode(
    path: Path,
    box: list[bytearray],
    progress: ProgressFn | None,
    cancel: threading.Event | None,
) -> Decoded:
    subject = str(path)
    warnings: list[str] = []
    data = box.pop()
    header, chunks = split_events(data, subject, KinetoFile, warnings)
    n_bytes = len(data)
    builder = ColumnBuilder(subject)
    arg_parts = []
    for events, done in chunks:
        check_cancel(cancel, subject)
        arg_parts.append(decode_args(builder.add(events), subject))
        del events
        if progress is not None:
            progress(IngestProgress(subject, "decode", done, n_bytes, builder.seen))
    del data, chunks
    cols, keep = builder.finish()
    args = concat_args(arg_parts, keep)
    del arg_parts, builder
    if cols.n == 0:
        raise WorkbenchError(subject, "trace holds no events")
    is_kineto = header is not None and (
        header.deviceProperties is not None or header.distributedInfo is not None
    )
    base_ns = header.baseTimeNanoseconds if header is not None else None
    devices = (header.deviceProperties or []) if header is not None else []
    meta = run_metadata(header)
    meta.update(device_meta([d.numSms for d in devices], [d.totalGlobalMem for d in devices]))
    return Decoded(
        cols=cols,
        args=args,
        meta=meta,
        source_format="kineto-json" if is_kineto else "chrome-json",
        base_us=base_ns / 1000.0 if base_ns else 0.0,
        warnings=warnings,
    )


KINETO_JSON = KinetoJson()
