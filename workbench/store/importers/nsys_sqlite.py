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
from typing import Any

import adbc_driver_sqlite.dbapi as adbc
import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from workbench.errors import WorkbenchError
from workbench.store.chrome_trace import TraceColumns
from workbench.store.importers import Decoded, Opened
from workbench.store.importers.columns import span_columns
from workbench.store.importers.nsys_tables import (
    KERNEL,
    MEMCPY,
    MEMSET,
    NVTX,
    RUNTIME,
    SYNC,
    Rows,
    read_device_table,
    read_devices,
    read_meta,
    read_nvtx,
    read_runtime,
    read_schema,
    read_strings,
)
from workbench.store.kineto import ArgColumns
from workbench.store.progress import IngestProgress, ProgressFn, check_cancel
from workbench.store.run_row import file_sha

SQLITE_MAGIC = b"SQLite format 3\x00"

I64 = npt.NDArray[np.int64]
B1 = npt.NDArray[np.bool_]

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


def read_nsys(
    path: Path, progress: ProgressFn | None = None, cancel: threading.Event | None = None
) -> Decoded:
    """The export's activities as attribution columns; a one-line error for a bad file."""
    subject = str(path)
    size = path.stat().st_size
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise WorkbenchError(subject, f"cannot open SQLite file: {exc}") from exc
    # Exports carry raw environment blobs that are not always UTF-8.
    conn.text_factory = lambda b: b.decode("utf-8", "replace")
    try:
        schema = read_schema(conn, subject)
        strings = read_strings(conn)
        devices = read_devices(conn, schema)
        meta, base_us = read_meta(conn, schema, devices)
        check_cancel(cancel, subject)
        parts: list[Rows] = []
        for table, cat in ((KERNEL, "kernel"), (MEMCPY, "gpu_memcpy"), (MEMSET, "gpu_memset"),
                           (SYNC, "cuda_sync")):  # fmt: skip
            if table in schema.tables:
                rows, raw = read_device_table(path, schema, strings, table, CAT[cat])
                if table == KERNEL:
                    rows.text = kernel_args_text(raw)
                parts.append(rows)
                check_cancel(cancel, subject)
        if RUNTIME in schema.tables:
            parts.append(read_runtime(path, strings, CAT["cuda_runtime"], CAT["cuda_driver"]))
        if NVTX in schema.tables:
            parts.append(read_nvtx(conn, schema, strings, CAT["user_annotation"]))
    except (sqlite3.Error, adbc.Error) as exc:
        raise WorkbenchError(subject, f"not a readable Nsight Systems export: {exc}") from exc
    finally:
        conn.close()
    if progress is not None:
        progress(IngestProgress(subject, "decode", size, size, sum(p.n for p in parts)))
    if not parts or sum(p.n for p in parts) == 0:
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


def _assemble(parts: list[Rows], names: list[str | None]) -> tuple[TraceColumns, ArgColumns, int]:
    """One set of columns from the per-table parts; nested runtime rows removed."""
    cat = np.concatenate([p.category for p in parts]).astype(np.int32)
    name = np.concatenate([p.name for p in parts]).astype(np.int32)
    start = np.concatenate([p.start for p in parts])
    end = np.concatenate([p.end for p in parts])
    pid = np.concatenate([p.pid for p in parts])
    tid = np.concatenate([p.tid for p in parts])
    corr = np.concatenate([p.correlation for p in parts])
    corr_ok = np.concatenate([p.correlation_valid for p in parts])
    host_pid = np.concatenate([p.process for p in parts])
    keep = _first_of_nested(cat == CAT["cuda_runtime"], cat == CAT["cuda_driver"], host_pid, corr,
                            corr_ok, start, end)  # fmt: skip
    dropped = int((~keep).sum())
    # Correlation ids restart in every process: make them one key when several processes ran.
    procs = np.unique(host_pid[corr_ok])
    if procs.size > 1:
        corr = np.where(corr_ok, (host_pid << 32) | (corr & 0xFFFFFFFF), corr)
    stream = pa.concat_arrays([p.stream for p in parts])
    device = pa.concat_arrays([p.device for p in parts])
    nbytes = pa.concat_arrays([p.nbytes for p in parts])
    text = pa.concat_arrays([p.text for p in parts])
    mask = pa.array(keep)
    cols, args = span_columns(
        category_codes=cat[keep],
        categories=list(CATEGORIES),
        name_codes=name[keep],
        names=names,
        ts_us=start[keep].astype(np.float64) / 1000.0,
        dur_us=(end[keep] - start[keep]).astype(np.float64) / 1000.0,
        pid=pid[keep],
        tid=tid[keep],
        correlation=corr[keep],
        correlation_valid=corr_ok[keep],
        stream=stream.filter(mask),
        device=device.filter(mask),
        nbytes=nbytes.filter(mask),
        text=text.filter(mask),
        skipped={"X (nested runtime rows)": dropped} if dropped else None,
    )
    return cols, args, dropped


def _first_of_nested(
    runtime: B1, driver: B1, process: I64, corr: I64, corr_ok: B1, start: I64, end: I64
) -> B1:
    """False for a runtime row nested in an earlier row of the same process and correlation.

    nsys writes one API call as several rows (`cudaLaunchKernel` and, inside it, the versioned
    `cudaLaunchKernel_v7000`); counting both would link each kernel to two launches.
    """
    keep = np.ones(len(start), dtype=np.bool_)
    idx = np.flatnonzero((runtime | driver) & corr_ok)
    if idx.size < 2:
        return keep
    order = idx[np.lexsort((-end[idx], start[idx], corr[idx], process[idx]))]
    same = (process[order][1:] == process[order][:-1]) & (corr[order][1:] == corr[order][:-1])
    # Within a group the first (earliest, longest) row is the call; later ones inside it go.
    first = np.maximum.accumulate(np.where(np.r_[True, ~same], np.arange(order.size), 0))
    head = order[first]
    inside = (start[order] >= start[head]) & (end[order] <= end[head]) & (order != head)
    keep[order[inside]] = False
    return keep


def kernel_args_text(table: pa.Table) -> pa.Array:
    """Kineto-style args JSON of kernel rows: grid, block, registers, shared memory."""

    def s(col: str) -> pa.Array:
        return pc.fill_null(table.column(col).cast(pa.string()), "null").combine_chunks()

    parts: list[Any] = [
        '{"grid": [', s("gridX"), ", ", s("gridY"), ", ", s("gridZ"), '], "block": [',
        s("blockX"), ", ", s("blockY"), ", ", s("blockZ"), '], "registers per thread": ',
        s("registersPerThread"), ', "shared memory": ', s("staticSharedMemory"), "}",
    ]  # fmt: skip
    joined: pa.Array = pc.binary_join_element_wise(*parts, "")
    return joined
