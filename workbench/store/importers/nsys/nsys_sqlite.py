"""Nsight Systems `nsys export --type sqlite` files (the 2022 and the current export schema).

Kernels, memcpy/memset and synchronisation run on the device; CUDA runtime and driver calls on
host threads, linked to what they launched by correlationId within one process; NVTX push/pop
and start/end ranges become user annotations, so the same request rules as for Kineto apply.
Times in the export are integer nanoseconds since the session start.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any, TypeVar, cast

import numpy as np
import numpy.typing as npt
import pyarrow as pa

import workbench.store.importers.nsys.nsys_arrow as nsys_arrow
from workbench.errors import WorkbenchError
from workbench.store.columns.args import ArgColumns
from workbench.store.columns.spans import span_columns
from workbench.store.columns.trace_columns import TraceColumns
from workbench.store.importers.nsys.nsys_schema import (
    KERNEL,
    MEMCPY,
    MEMSET,
    NVTX,
    RUNTIME,
    SYNC,
    Schema,
    connect,
    read_devices,
    read_meta,
    read_schema,
    read_strings,
)
from workbench.store.importers.nsys.nsys_tables import (
    NVTX_PUSH_POP,
    NVTX_START_END,
    Rows,
    device_rows,
    nvtx_rows,
    runtime_rows,
)
from workbench.store.importers.protocol import Decoded, Opened
from workbench.store.progress import IngestProgress, ProgressFn, check_cancel
from workbench.store.run_row import file_sha

SQLITE_MAGIC = b"SQLite format 3\x00"

I64 = npt.NDArray[np.int64]
B1 = npt.NDArray[np.bool_]
Arr = TypeVar("Arr", bound=npt.NDArray[Any])

# Category names; the rules file attributes them as it does Kineto's.
CATEGORIES = [
    "kernel",
    "gpu_memcpy",
    "gpu_memset",
    "cuda_sync",
    "cuda_runtime",
    "cuda_driver",
    "user_annotation",
]
CAT = {c: i for i, c in enumerate(CATEGORIES)}


class NsysSqlite:
    """`nsys export --type sqlite`: kernels, runtime calls, memcpy/memset, sync, NVTX ranges."""

    name = "nsys-sqlite"
    summary = "Nsight Systems export (nsys export --type sqlite), 2022 or current schema"

    def recognise(self, path: Path, head: bytes) -> bool:
        # Any SQLite file is claimed: one that is not an nsys export gets a precise error.
        return head.startswith(SQLITE_MAGIC)

    def open(
        self, path: Path, progress: ProgressFn | None, cancel: threading.Event | None
    ) -> Opened:
        sha = file_sha(path)
        size = path.stat().st_size
        return Opened(sha, size, lambda: read_nsys(path, progress, cancel))


NSYS_SQLITE = NsysSqlite()


# Device activity tables: (table, query, which rows, category).
DEVICE_TABLES = (
    (KERNEL, "nsys_kernels", "kernels", "kernel"),
    (MEMCPY, "nsys_memcpy", "memcpy", "gpu_memcpy"),
    (MEMSET, "nsys_memset", "memset", "gpu_memset"),
    (SYNC, "nsys_sync", "sync", "cuda_sync"),
)


def bulk_reads(uri: str, schema: Schema) -> tuple[dict[str, pa.Table], pa.Table | None]:
    """Every SQLite read of the export's rows: the device and runtime tables present (by
    query name), and the NVTX ranges (None without the table)."""
    big = [q for table, q, _, _ in DEVICE_TABLES if table in schema.tables]
    if RUNTIME in schema.tables:
        big.append("nsys_runtime")
    got = nsys_arrow.read_shares(uri, big)
    ranges = None
    if NVTX in schema.tables:
        params = {"push_pop": NVTX_PUSH_POP, "start_end": NVTX_START_END}
        ranges = nsys_arrow.read_one(uri, "nsys_nvtx_ranges", params)
    return got, ranges


def read_nsys(
    path: Path, progress: ProgressFn | None = None, cancel: threading.Event | None = None
) -> Decoded:
    """The export's activities as attribution columns; a one-line error for a bad file."""
    subject = str(path)
    size = path.stat().st_size
    uri = f"{path.resolve().as_uri()}?mode=ro"
    try:
        conn = connect(uri)
    except sqlite3.Error as exc:
        raise WorkbenchError(subject, f"cannot open SQLite file: {exc}") from exc
    try:
        schema = read_schema(conn, subject)
        strings = read_strings(conn)
        devices = read_devices(conn, schema)
        meta, base_us = read_meta(conn, schema, devices)
        check_cancel(cancel, subject)
        got, ranges = bulk_reads(uri, schema)
        check_cancel(cancel, subject)
        parts: list[Rows] = [
            device_rows(got.pop(q), which, strings, CAT[cat])
            for table, q, which, cat in DEVICE_TABLES
            if q in got
        ]
        if "nsys_runtime" in got:
            parts.append(
                runtime_rows(got.pop("nsys_runtime"), strings, CAT["cuda_runtime"],
                             CAT["cuda_driver"])
            )  # fmt: skip
        if ranges is not None:
            parts.append(nvtx_rows(ranges, conn, strings, CAT["user_annotation"]))
    except (sqlite3.Error, nsys_arrow.Error, pa.ArrowException) as exc:
        # A value of the wrong type (text where the schema has integers) shows up as Arrow's.
        why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise WorkbenchError(subject, f"not a readable Nsight Systems export: {why}") from exc
    finally:
        conn.close()
    n = sum(p.n for p in parts)
    if progress is not None:
        progress(IngestProgress(subject, "decode", size, size, n))
    if n == 0:
        raise WorkbenchError(subject, "Nsight Systems export holds no kernels, calls or ranges")
    cols, args, dropped = _assemble(parts, strings.values)
    warnings: list[str] = []
    if dropped:
        warnings.append(
            f"{dropped} nested runtime rows (e.g. cudaLaunchKernel_v7000 inside "
            "cudaLaunchKernel) dropped: one call per correlation id"
        )
    return Decoded(
        cols=cols,
        args=args,
        meta=meta,
        source_format=NsysSqlite.name,
        base_us=base_us,
        warnings=warnings,
    )


def _fill(out: npt.NDArray[Any], parts: list[Rows], field: str) -> B1 | None:
    """Copy one int64 column of every part into `out` (nulls as 0); where it was valid, or
    None when nothing was null."""
    valid: B1 | None = None
    at = 0
    for part in parts:
        for chunk in getattr(part, field).chunks:
            k = len(chunk)
            if chunk.null_count:
                if valid is None:
                    valid = np.ones(len(out), dtype=np.bool_)
                valid[at : at + k] = chunk.is_valid().to_numpy(zero_copy_only=False)
                chunk = chunk.fill_null(0)
            out[at : at + k] = chunk.to_numpy()
            at += k
    return valid


def _assemble(parts: list[Rows], names: list[str | None]) -> tuple[TraceColumns, ArgColumns, int]:
    """One set of columns from the per-table parts, each value copied once; nested runtime
    rows removed."""
    n = sum(p.n for p in parts)

    def ints(field: str) -> I64:
        out = np.empty(n, dtype=np.int64)
        _fill(out, parts, field)
        return out

    def chunked(field: str) -> pa.ChunkedArray:
        return pa.chunked_array([c for p in parts for c in getattr(p, field).chunks])

    cat = np.concatenate([np.broadcast_to(np.int32(p.category), p.n) if isinstance(p.category, int)
                          else p.category for p in parts]).astype(np.int32, copy=False)  # fmt: skip
    start, end, host_pid = ints("start"), ints("end"), ints("process")
    corr = np.empty(n, dtype=np.int64)
    valid = _fill(corr, parts, "correlation")
    corr_ok = np.ones(n, dtype=np.bool_) if valid is None else valid
    api = (cat == CAT["cuda_runtime"]) | (cat == CAT["cuda_driver"])
    keep = _first_of_nested(api, host_pid, corr, corr_ok, start, end)
    dropped = 0 if keep is None else int((~keep).sum())
    # Correlation ids restart in every process: make them one key when several processes ran.
    linked = host_pid[corr_ok]
    if linked.size and linked.min() != linked.max():
        corr = np.where(corr_ok, (host_pid << 32) | (corr & 0xFFFFFFFF), corr)
    del host_pid, linked

    def kept(a: Arr) -> Arr:
        return a if keep is None else cast(Arr, a[keep])

    def pa_kept(a: pa.ChunkedArray) -> pa.ChunkedArray:
        return a if keep is None else a.filter(pa.array(keep))

    dur = np.subtract(end, start, dtype=np.float64)
    dur /= 1000.0
    del end
    ts = start.astype(np.float64)
    ts /= 1000.0
    del start
    cols, args = span_columns(
        category_codes=kept(cat),
        categories=list(CATEGORIES),
        name_codes=kept(np.concatenate([p.name for p in parts]).astype(np.int32)),
        names=names,
        ts_us=kept(ts),
        dur_us=kept(dur),
        pid=kept(ints("pid")),
        tid=kept(ints("tid")),
        correlation=kept(corr),
        correlation_valid=kept(corr_ok),
        stream=pa_kept(chunked("stream")),
        device=pa_kept(chunked("device")),
        nbytes=pa_kept(chunked("nbytes")),
        text=pa_kept(chunked("text")),
        skipped={"X (nested runtime rows)": dropped} if dropped else None,
    )
    return cols, args, dropped


def _first_of_nested(
    api: B1, process: I64, corr: I64, corr_ok: B1, start: I64, end: I64
) -> B1 | None:
    """False for an API row nested in an earlier row of the same process and correlation;
    None when no two API rows share one (then nothing is dropped).

    nsys writes one API call as several rows (`cudaLaunchKernel` and, inside it, the versioned
    `cudaLaunchKernel_v7000`); counting both would link each kernel to two launches.
    """
    idx = np.flatnonzero(api & corr_ok)
    if idx.size < 2:
        return None
    key = (process[idx] << 32) | (corr[idx] & 0xFFFFFFFF)
    order = np.argsort(key)
    sk = key[order]
    same = sk[1:] == sk[:-1]
    if not same.any():
        return None
    # Only rows whose (process, correlation) repeats need the nesting test.
    idx = idx[order[np.r_[same, False] | np.r_[False, same]]]
    order = idx[np.lexsort((-end[idx], start[idx], corr[idx], process[idx]))]
    same = (process[order][1:] == process[order][:-1]) & (corr[order][1:] == corr[order][:-1])
    # Within a group the first (earliest, longest) row is the call; later ones inside it go.
    first = np.maximum.accumulate(np.where(np.r_[True, ~same], np.arange(order.size), 0))
    head = order[first]
    inside = (start[order] >= start[head]) & (end[order] <= end[head]) & (order != head)
    keep = np.ones(len(start), dtype=np.bool_)
    keep[order[inside]] = False
    return keep
