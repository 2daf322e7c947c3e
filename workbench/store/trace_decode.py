"""JSON trace text -> attributed columns of one file: the decode shared by every JSON import."""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass

from workbench.errors import WorkbenchError
from workbench.store.chrome_trace import ColumnBuilder, TraceColumns, split_events
from workbench.store.kineto import KinetoFile, concat_args, decode_args
from workbench.store.progress import IngestProgress, ProgressFn, check_cancel
from workbench.store.rules import Rules
from workbench.store.trace_import import Attributed, attribute


@dataclass
class DecodedTrace:
    """One trace file decoded and attributed; `warnings` come from the header and the events."""

    header: KinetoFile | None
    cols: TraceColumns
    att: Attributed
    warnings: list[str]
    n_bytes: int

    @property
    def t0(self) -> float:
        """The first event's timestamp, microseconds on the trace's own clock."""
        return float(self.cols.ts.min())


def decode_trace(
    box: list[bytearray],
    subject: str,
    rules: Rules,
    pattern: re.Pattern[str] | None,
    progress: ProgressFn | None = None,
    cancel: threading.Event | None = None,
) -> DecodedTrace:
    """Decode the text handed over in `box` (emptied, so the caller does not keep it alive)."""
    check_cancel(cancel, subject)
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
    check_cancel(cancel, subject)
    att = attribute(cols, args, rules, pattern)
    if progress is not None:
        progress(IngestProgress(subject, "attribute", n_bytes, n_bytes, cols.n))
    return DecodedTrace(header, cols, att, warnings + cols.warnings, n_bytes)
