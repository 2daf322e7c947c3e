"""The built-in Chrome-trace / Kineto JSON format (gzip or not)."""

from __future__ import annotations

import threading
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import cast

from workbench.errors import WorkbenchError
from workbench.store.columns.args import ArgColumns, concat_args
from workbench.store.columns.packed_text import PackedText
from workbench.store.columns.trace_columns import ColumnBuilder, TraceColumns, TraceEvent
from workbench.store.importers.devices import device_meta
from workbench.store.importers.kineto.args_process import ArgsProcess, ArgsProcessFailed
from workbench.store.importers.kineto.args_spawn import text_bytes
from workbench.store.importers.kineto.args_spawn import wanted as second_process_wanted
from workbench.store.importers.kineto.chrome_stream import EventStream, Fallback
from workbench.store.importers.kineto.chrome_trace import split_events
from workbench.store.importers.kineto.kineto import KinetoFile, decode_args, run_metadata
from workbench.store.importers.protocol import Decoded, Opened
from workbench.store.importers.source import GZIP_MAGIC, read_source, utf16_encoding
from workbench.store.progress import ImportCancelled, IngestProgress, ProgressFn, check_cancel
from workbench.store.run_row import file_sha


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
        if utf16_encoding(text) is not None:
            return True  # read_source transcodes it
        return b"\x00" not in text and _is_utf8(text)

    def open(
        self, path: Path, progress: ProgressFn | None, cancel: threading.Event | None
    ) -> Opened:
        # Nothing is read yet: decode streams the file and hashes it on the way. The hash is
        # read ahead of decoding only when the run already exists (an unchanged re-import).
        state = _Read()
        opened = Opened(
            lambda: state.sha or file_sha(path),
            lambda: state.n_bytes or _file_size(path),
            lambda: _one_or_two(
                partial(_decode, path, state, progress, cancel, opened.pack_text),
                opened.second_process,
            ),
        )
        return opened


@dataclass
class _Read:
    """What decoding learnt of the file: its hash and its bytes of JSON text."""

    sha: str = ""
    n_bytes: int = 0


def _file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError as exc:
        raise WorkbenchError(str(path), f"cannot read file: {exc.strerror or exc}") from exc


def _one_or_two(decode: Callable[[bool], Decoded], second_process: bool) -> Decoded:
    """decode(second_process), or decode(False) when the second process failed: it is only a
    speed-up, and without it the same columns come out."""
    try:
        return decode(second_process)
    except ArgsProcessFailed:
        return decode(False)


def _decode(
    path: Path,
    state: _Read,
    progress: ProgressFn | None,
    cancel: threading.Event | None,
    pack_text: bool,
    second_process: bool,
) -> Decoded:
    subject = str(path)
    try:
        with EventStream(path) as stream:
            if progress is not None:
                progress(IngestProgress(subject, "read", 0, stream.reader.size, 0))
            total = stream.reader.text_total
            size = stream.reader.size
            second = second_process and second_process_wanted(text_bytes(path, size))
            cols, args = _columns(
                stream.chunks(KinetoFile), subject, total, progress, cancel, pack_text, second
            )
            header = cast(KinetoFile | None, stream.header)
            warnings: list[str] = []
            state.sha, state.n_bytes = stream.reader.sha, stream.reader.text_done
    except (ImportCancelled, ArgsProcessFailed):
        raise
    except (Fallback, WorkbenchError):
        # Anything odd (damage, a cut-off array, UTF-16, a limit): the whole-text reader
        # judges it, with its precise errors and salvage.
        data, state.sha = read_source(path, progress, cancel)
        state.n_bytes = len(data)
        warnings = []
        header, chunks = split_events(data, subject, KinetoFile, warnings)
        del data
        second = second_process and second_process_wanted(state.n_bytes)
        cols, args = _columns(
            chunks, subject, lambda: state.n_bytes, progress, cancel, pack_text, second
        )
    return _decoded(header, cols, args, warnings)


def _columns(
    chunks: Iterator[tuple[list[TraceEvent], int]],
    subject: str,
    total: Callable[[], int],
    progress: ProgressFn | None,
    cancel: threading.Event | None,
    pack_text: bool = False,
    second_process: bool = False,
) -> tuple[TraceColumns, ArgColumns]:
    """The kept events' columns and their args, chunk by chunk (the args text packed on a
    second thread as it comes when `pack_text`; the args decoded on a second process when
    `second_process`)."""
    builder = ColumnBuilder(subject)
    arg_parts = []
    helper = ArgsProcess() if second_process else None
    sink = PackedText() if pack_text else None
    try:
        for events, done in chunks:
            check_cancel(cancel, subject)
            raws = builder.add(events)
            if helper is None:
                arg_parts.append(decode_args(raws, subject, sink))
            else:
                helper.submit(raws)
            del events, raws
            if progress is not None:
                progress(IngestProgress(subject, "decode", done, max(total(), done), builder.seen))
        if helper is not None:
            arg_parts = helper.results(sink)
    finally:
        if helper is not None:
            helper.close()
        if sink is not None:
            sink.close()
    del chunks
    cols, keep = builder.finish()
    args = concat_args(arg_parts, keep)
    if cols.n == 0:
        raise WorkbenchError(subject, "trace holds no events")
    return cols, args


def _decoded(
    header: KinetoFile | None,
    cols: TraceColumns,
    args: ArgColumns,
    warnings: list[str],
) -> Decoded:
    """The decoded file with what its header says about the run."""
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
