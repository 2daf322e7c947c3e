"""Build the attribution columns (TraceColumns + ArgColumns) of complete spans: for importers
of formats that are not Chrome JSON (nsys SQLite, outside plugins)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from workbench.store.columns import null_arrays
from workbench.store.columns.args import ArgColumns
from workbench.store.columns.trace_columns import Flows, TraceColumns, thread_key

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]
B1 = npt.NDArray[np.bool_]


def span_columns(
    *,
    category_codes: npt.NDArray[np.int32],
    categories: list[str | None],
    name_codes: npt.NDArray[np.int32],
    names: list[str | None],
    ts_us: F64,
    dur_us: F64,
    pid: I64,
    tid: I64,
    correlation: I64 | None = None,
    correlation_valid: B1 | None = None,
    stream: pa.Array | pa.ChunkedArray | None = None,
    device: pa.Array | pa.ChunkedArray | None = None,
    nbytes: pa.Array | pa.ChunkedArray | None = None,
    text: pa.Array | pa.ChunkedArray | None = None,
    skipped: dict[str, int] | None = None,
) -> tuple[TraceColumns, ArgColumns]:
    """Columns of n complete ("X") events given as dictionary codes; absent args are null.

    A launch links a device event (category kernel, gpu_memcpy, ...) to the runtime call
    (cuda_runtime, ...) with the same correlation id; device events sit on (pid, tid) =
    (device, stream) as Kineto puts them.
    """
    n = len(ts_us)
    skipped = skipped or {}
    cols = TraceColumns(
        category_codes=category_codes,
        categories=categories,
        name_codes=name_codes,
        names=names,
        phase=np.full(n, ord("X"), dtype=np.uint8),
        ts=ts_us,
        dur=dur_us,
        pid=pid,
        pid_valid=np.ones(n, dtype=np.bool_),
        tid=tid,
        tid_valid=np.ones(n, dtype=np.bool_),
        thread=thread_key(pid, tid),
        flows=Flows(
            np.zeros(0, np.int64), np.zeros(0, np.uint8), np.zeros(0, np.int64), np.zeros(0)
        ),
        process_names={},
        thread_names={},
        read_by_phase={"X": n + sum(skipped.values())},
        kept_by_phase={"X": n},
        skipped_by_phase=dict(skipped),
    )
    args = ArgColumns(
        correlation=correlation if correlation is not None else np.zeros(n, np.int64),
        correlation_valid=(
            correlation_valid if correlation_valid is not None else np.zeros(n, np.bool_)
        ),
        external_id=np.zeros(n, np.int64),
        external_id_valid=np.zeros(n, np.bool_),
        stream=stream if stream is not None else null_arrays.nulls(n, pa.int32()),
        device=device if device is not None else null_arrays.nulls(n, pa.int32()),
        shape=null_arrays.nulls(n, pa.string()),
        nbytes=nbytes if nbytes is not None else null_arrays.nulls(n, pa.float64()),
        flops=null_arrays.nulls(n, pa.float64()),
        text=text if text is not None else null_arrays.nulls(n, pa.string()),
    )
    return cols, args


def _codes(values: Sequence[str]) -> tuple[npt.NDArray[np.int32], list[str | None]]:
    uniq, inverse = np.unique(np.asarray(values, dtype=object).astype(str), return_inverse=True)
    return inverse.astype(np.int32), [str(u) for u in uniq.tolist()]


def event_columns(
    category: Sequence[str],
    name: Sequence[str],
    ts_us: Sequence[float],
    dur_us: Sequence[float],
    pid: Sequence[int],
    tid: Sequence[int],
    correlation: Sequence[int | None] | None = None,
) -> tuple[TraceColumns, ArgColumns]:
    """span_columns from plain per-event lists: the easy path for an outside importer."""
    cat_codes, categories = _codes(category)
    name_codes, names = _codes(name)
    corr = corr_ok = None
    if correlation is not None:
        corr_ok = np.array([c is not None for c in correlation], dtype=np.bool_)
        corr = np.array([c if c is not None else 0 for c in correlation], dtype=np.int64)
    return span_columns(
        category_codes=cat_codes,
        categories=categories,
        name_codes=name_codes,
        names=names,
        ts_us=np.asarray(ts_us, dtype=np.float64),
        dur_us=np.asarray(dur_us, dtype=np.float64),
        pid=np.asarray(pid, dtype=np.int64),
        tid=np.asarray(tid, dtype=np.int64),
        correlation=corr,
        correlation_valid=corr_ok,
    )
