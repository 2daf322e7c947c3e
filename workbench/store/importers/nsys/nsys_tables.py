"""An Nsight Systems export's activity tables as event columns (one Rows per table).

The SQL (queries/nsys_*.sql) hands over only the columns the attribution takes, already
decoded (process and thread ids out of globalTid / globalPid, launch configuration as args
JSON); here they become numpy / Arrow columns without a loop over rows. Names stay StringIds
ids until the end, where they become codes into one name list.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from workbench.store.columns import null_arrays
from workbench.store.importers.nsys.nsys_schema import Strings
from workbench.store.query_files import load_query

I64 = npt.NDArray[np.int64]
B1 = npt.NDArray[np.bool_]

# NVTX_EVENTS.eventType values (ENUM_NSYS_EVENT_TYPE): ranges, and domain creation.
NVTX_PUSH_POP = 59
NVTX_START_END = 60
NVTX_DOMAIN_CREATE = 75
# CUPTI_ActivityMemcpyKind and CUPTI_ActivitySynchronizationType, as the export stores them.
MEMCPY_KIND = {1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA",
               8: "DtoD", 9: "HtoH", 10: "PtoP"}  # fmt: skip
SYNC_KIND = {1: "event", 2: "stream wait event", 3: "stream", 4: "context"}


INT64 = pa.int64()


@dataclass
class Rows:
    """One activity table's rows as event columns: category and name as codes (into
    CATEGORIES and Strings.values), the rest as the driver read them (int64, chunked) so that
    assembly copies each value once."""

    category: int | I64
    name: I64
    start: pa.ChunkedArray
    end: pa.ChunkedArray
    pid: pa.ChunkedArray
    tid: pa.ChunkedArray
    process: pa.ChunkedArray  # the host process whose correlation ids these rows use
    correlation: pa.ChunkedArray  # null when the row has none
    stream: pa.ChunkedArray
    device: pa.ChunkedArray
    nbytes: pa.ChunkedArray
    text: pa.ChunkedArray

    @property
    def n(self) -> int:
        return len(self.name)


def _col(table: pa.Table, col: str, type_: pa.DataType = INT64) -> pa.ChunkedArray:
    arr = table.column(col)
    return arr if arr.type == type_ else arr.cast(type_)


def _nulls(n: int, type_: pa.DataType) -> pa.ChunkedArray:
    return pa.chunked_array([null_arrays.nulls(n, type_)])


def _host_only(n: int) -> dict[str, pa.ChunkedArray]:
    """The device-side columns of rows recorded on host threads: none of them applies."""
    return {
        "stream": _nulls(n, pa.int32()),
        "device": _nulls(n, pa.int32()),
        "nbytes": _nulls(n, pa.float64()),
    }


def _ids(table: pa.Table, col: str) -> tuple[I64, B1]:
    """An id column as int64 numpy (nulls as 0) and where it is valid."""
    arr = _col(table, col)
    valid = (
        np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), dtype=np.bool_)
        if arr.null_count
        else np.ones(len(arr), dtype=np.bool_)
    )
    return np.asarray(arr.fill_null(0).to_numpy(), dtype=np.int64), valid


def _labels(kinds: I64, strings: Strings, label: dict[int, str], prefix: str) -> I64:
    """Name codes of memcpy / sync rows from their kind: one string per kind, not per row."""
    uniq, inverse = np.unique(kinds, return_inverse=True)
    codes = np.array(
        [strings.add(f"{prefix}{label.get(k, 'unknown')}") for k in uniq.tolist()], np.int64
    )
    return codes[inverse] if len(kinds) else np.zeros(0, np.int64)


def device_rows(table: pa.Table, which: str, strings: Strings, category: int) -> Rows:
    """Rows of kernels, memcpy, memset or sync (nsys_<which>.sql results).

    A device activity sits on (device, stream) as Kineto puts it (pid = device, tid = stream);
    `process` is the launching process, from globalPid.
    """
    n = table.num_rows
    if which == "kernels":
        name = strings.codes(*_ids(table, "name_id"))
    elif which in ("memcpy", "sync"):
        label, prefix = (MEMCPY_KIND, "Memcpy ") if which == "memcpy" else (SYNC_KIND, "Sync: ")
        name = _labels(_ids(table, "kind")[0], strings, label, prefix)
    else:
        name = np.full(n, strings.add("Memset (Device)"), dtype=np.int64)
    device, stream = _col(table, "device"), _col(table, "stream")
    return Rows(
        category=category,
        name=name,
        start=_col(table, "start"),
        end=_col(table, "end"),
        pid=device,
        tid=stream,
        process=_col(table, "process"),
        correlation=_col(table, "correlation"),
        stream=stream.cast(pa.int32()),
        device=device.cast(pa.int32()),
        nbytes=(
            _col(table, "bytes", pa.float64())
            if "bytes" in table.column_names
            else _nulls(n, pa.float64())
        ),
        text=_col(table, "args", pa.string()) if which == "kernels" else _nulls(n, pa.string()),
    )


def runtime_rows(table: pa.Table, strings: Strings, runtime_cat: int, driver_cat: int) -> Rows:
    """CUDA runtime and driver API calls on their host threads (nsys_runtime.sql results)."""
    n = table.num_rows
    name = strings.codes(*_ids(table, "name_id"))
    # Runtime API names start with "cuda"; the rest (cuLaunchKernel, cuModule...) are driver.
    # One look per name used (a count over the codes, not a sort of the rows).
    lut = np.full(len(strings.values), driver_cat, dtype=np.int64)
    for u in np.flatnonzero(np.bincount(name, minlength=len(lut))).tolist():
        if (strings.values[u] or "").startswith("cuda"):
            lut[u] = runtime_cat
    pid = _col(table, "pid")
    return Rows(
        category=lut[name],
        name=name,
        start=_col(table, "start"),
        end=_col(table, "end"),
        pid=pid,
        tid=_col(table, "tid"),
        process=pid,
        correlation=_col(table, "correlation"),
        text=_nulls(n, pa.string()),
        **_host_only(n),
    )


def _utf8(arr: pa.Array) -> pa.Array:
    """Text as valid UTF-8: SQLite stores what it was given, and exports are not always clean."""
    try:
        arr.validate(full=True)
        return arr
    except pa.ArrowInvalid:
        enc = arr.cast(pa.binary()).dictionary_encode()
        fixed = [None if b is None else b.decode("utf-8", "replace")
                 for b in enc.dictionary.to_pylist()]  # fmt: skip
        return pa.array(fixed, pa.string()).take(enc.indices)


def nvtx_rows(table: pa.Table, conn: sqlite3.Connection, strings: Strings, category: int) -> Rows:
    """Closed NVTX ranges (nsys_nvtx_ranges.sql results), named by their text, with their
    domain (if any) as args JSON; each distinct text and domain is handled once."""
    n = table.num_rows
    text = _utf8(table.column("text").combine_chunks().cast(pa.string()))
    enc = text.dictionary_encode()
    codes = np.array([strings.add(t) for t in enc.dictionary.to_pylist()], dtype=np.int64)
    idx = enc.indices
    name = (
        codes[np.asarray(idx.fill_null(0).to_numpy(), np.int64)]
        if len(codes)
        else np.zeros(n, np.int64)
    )
    if idx.null_count:
        name = np.where(idx.is_valid().to_numpy(zero_copy_only=False), name, strings.add(None))
    domains = {
        int(d): str(t)
        for d, t in conn.execute(
            load_query("nsys_nvtx_domains"), {"domain_create": NVTX_DOMAIN_CREATE}
        )
        if d is not None and t
    }
    args = null_arrays.nulls(n, pa.string())
    if domains and n:
        dom = table.column("domain_id").combine_chunks().cast(pa.int64())
        ids = pa.array(sorted(domains), pa.int64())
        docs = pa.array([json.dumps({"domain": domains[d]}) for d in sorted(domains)], pa.string())
        args = docs.take(pc.index_in(dom, value_set=ids))
    pid = _col(table, "pid")
    return Rows(
        category=category,
        name=name,
        start=_col(table, "start"),
        end=_col(table, "end"),
        pid=pid,
        tid=_col(table, "tid"),
        process=pid,
        correlation=_nulls(n, pa.int64()),
        text=pa.chunked_array([args]),
        **_host_only(n),
    )
