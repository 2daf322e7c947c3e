"""The tables of an Nsight Systems SQLite export that the importer reads, and how.

Documented in the Nsight Systems user guide ("Exporter: SQLite schema reference"). The 2022
exports name their metadata table EXPORT_META_DATA; current ones META_DATA_EXPORT and create an
activity table only when it has rows. Big activity tables are read into Arrow by the ADBC
SQLite driver (a row-at-a-time Python cursor would take seconds per million kernels).
"""

from __future__ import annotations

import json
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import adbc_driver_sqlite.dbapi as adbc
import numpy as np
import numpy.typing as npt
import pyarrow as pa

from workbench.errors import WorkbenchError
from workbench.store.importers.devices import device_meta

I64 = npt.NDArray[np.int64]
B1 = npt.NDArray[np.bool_]

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
SYNC = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
NVTX = "NVTX_EVENTS"
ACTIVITY = (KERNEL, MEMCPY, MEMSET, SYNC, RUNTIME, NVTX)

# NVTX_EVENTS.eventType values (ENUM_NSYS_EVENT_TYPE): ranges, and domain creation.
NVTX_PUSH_POP = 59
NVTX_START_END = 60
NVTX_DOMAIN_CREATE = 75
# CUPTI_ActivityMemcpyKind and CUPTI_ActivitySynchronizationType, as the export stores them.
MEMCPY_KIND = {1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA",
               8: "DtoD", 9: "HtoH", 10: "PtoP"}  # fmt: skip
# Tables with more rows than this are read in two halves at once.
SPLIT_ROWS = 200_000
SYNC_KIND = {1: "event", 2: "stream wait event", 3: "stream", 4: "context"}

# A globalTid / globalPid packs the process id in bits 24..47 and the thread id in bits 0..23.
_PID = "(({col} >> 24) & 16777215)"
_TID = "({col} & 16777215)"


@dataclass
class Schema:
    """Which tables (with rows or not) and columns the export has."""

    tables: set[str]
    columns: dict[str, set[str]]

    def has(self, table: str, column: str) -> bool:
        return column in self.columns.get(table, set())


@dataclass
class Strings:
    """StringIds: sorted ids and their values; `values` grows with names the importer makes."""

    ids: I64
    values: list[str | None]

    def codes(self, ids: I64, valid: B1) -> I64:
        """Positions in `values` of string ids; unknown or null ids name the null entry."""
        pos = np.searchsorted(self.ids, ids)
        pos_c = np.minimum(pos, max(len(self.ids) - 1, 0))
        ok = valid & (pos < len(self.ids))
        if len(self.ids):
            ok &= self.ids[pos_c] == ids
        return np.where(ok, pos_c, self.add(None))

    def add(self, value: str | None) -> int:
        """Position of a name the export does not intern (memcpy kinds, inline NVTX text)."""
        try:
            return self.values.index(value, len(self.ids))
        except ValueError:
            self.values.append(value)
            return len(self.values) - 1


@dataclass
class Device:
    """One TARGET_INFO_GPU row."""

    id: int
    name: str
    sm_count: int | None
    memory_bandwidth: float | None  # bytes/s
    total_memory: int | None  # bytes
    l2_bytes: int | None


@dataclass
class Rows:
    """One activity table's rows as event columns (codes into CATEGORIES and Strings.values)."""

    category: I64
    name: I64
    start: I64
    end: I64
    pid: I64
    tid: I64
    process: I64  # the host process whose correlation ids these rows use
    correlation: I64
    correlation_valid: B1
    stream: pa.Array
    device: pa.Array
    nbytes: pa.Array
    text: pa.Array

    @property
    def n(self) -> int:
        return len(self.start)


def read_schema(conn: sqlite3.Connection, subject: str) -> Schema:
    """Tables and columns; a one-line error when the file is not an nsys export."""
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if "StringIds" not in names or not names & set(ACTIVITY):
        raise WorkbenchError(
            subject,
            "SQLite database but not an Nsight Systems export "
            "(no StringIds with CUPTI_ACTIVITY_KIND_* or NVTX_EVENTS tables)",
        )
    columns = {
        t: {r[1] for r in conn.execute(f'PRAGMA table_info("{t}")')}
        for t in names & {*ACTIVITY, "TARGET_INFO_GPU"}
    }
    for table, need in _REQUIRED.items():
        missing = need - columns.get(table, need)
        if missing:
            raise WorkbenchError(
                subject, f"{table} lacks {', '.join(sorted(missing))}: unknown export schema"
            )
    return Schema(names, columns)


_REQUIRED = {
    KERNEL: {"start", "end", "deviceId", "streamId", "correlationId"},
    MEMCPY: {"start", "end", "deviceId", "streamId", "correlationId", "bytes", "copyKind"},
    MEMSET: {"start", "end", "deviceId", "streamId", "correlationId", "bytes"},
    SYNC: {"start", "end", "deviceId", "streamId", "correlationId", "syncType"},
    RUNTIME: {"start", "end", "globalTid", "correlationId", "nameId"},
    NVTX: {"start", "end", "eventType", "globalTid"},
}


def read_strings(conn: sqlite3.Connection) -> Strings:
    rows = conn.execute("SELECT id, value FROM StringIds ORDER BY id").fetchall()
    return Strings(np.array([r[0] for r in rows], dtype=np.int64), [r[1] for r in rows])


def read_devices(conn: sqlite3.Connection, schema: Schema) -> list[Device]:
    if "TARGET_INFO_GPU" not in schema.tables:
        return []
    want = ["id", "name", "smCount", "memoryBandwidth", "totalMemory", "l2CacheSize"]
    sel = ", ".join(c if schema.has("TARGET_INFO_GPU", c) else "NULL" for c in want)
    rows = conn.execute(f"SELECT DISTINCT {sel} FROM TARGET_INFO_GPU ORDER BY id").fetchall()
    return [Device(int(r[0]), str(r[1] or "unknown GPU"), r[2], r[3], r[4], r[5]) for r in rows]


def _driver(v: str) -> str:
    """NvDriverVersion 52510517 -> 525.105.17."""
    n = int(v)
    return f"{n // 100000}.{(n // 100) % 1000}.{n % 100:02d}"


def read_meta(
    conn: sqlite3.Connection, schema: Schema, devices: list[Device]
) -> tuple[dict[str, Any], float]:
    """(runs-row fields, session start in epoch microseconds)."""
    meta: dict[str, Any] = {}
    if devices:
        meta["hardware"] = " + ".join(sorted({d.name for d in devices}))
        meta["device_count"] = len(devices)
        meta.update(
            device_meta(
                [d.sm_count for d in devices],
                [d.total_memory for d in devices],
                [d.memory_bandwidth for d in devices],
            )
        )
    if schema.tables & {KERNEL, RUNTIME, MEMCPY}:
        meta["runtime"] = "cuda"
    if "TARGET_INFO_SYSTEM_ENV" in schema.tables:
        row = conn.execute(
            "SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'NvDriverVersion' LIMIT 1"
        ).fetchone()
        if row and str(row[0]).isdigit():
            meta["driver_version"] = _driver(str(row[0]))
    base_us = 0.0
    if "TARGET_INFO_SESSION_START_TIME" in schema.tables:
        row = conn.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()
        if row and row[0]:
            base_us = int(row[0]) / 1000.0
    return meta, base_us


def _fetch(path: Path, sql: str) -> pa.Table:
    conn = adbc.connect(f"{path.resolve().as_uri()}?mode=ro")
    try:
        cur = conn.cursor()
        try:
            cur.execute(sql)
            table: pa.Table = cur.fetch_arrow_table()
        finally:
            cur.close()
    finally:
        conn.close()
    return table


def fetch_arrow(path: Path, select: str, table: str) -> pa.Table:
    """`SELECT <select> FROM <table>` as Arrow through the ADBC SQLite driver (read-only).

    A big table is read as two rowid halves on two threads: SQLite steps rows one at a time
    and the driver releases the GIL, so the halves overlap.
    """
    top = _fetch(path, f"SELECT max(rowid) AS top FROM {table}").column("top")[0].as_py()
    sql = f"SELECT {select} FROM {table}"
    if not top or top < SPLIT_ROWS:
        return _fetch(path, sql)
    mid = int(top) // 2
    halves = [
        f"{sql} WHERE rowid <= {mid} ORDER BY rowid",
        f"{sql} WHERE rowid > {mid} ORDER BY rowid",
    ]
    with ThreadPoolExecutor(2) as pool:
        lo, hi = pool.map(lambda q: _fetch(path, q), halves)
    return pa.concat_tables([lo, hi.cast(lo.schema)])


def _np(table: pa.Table, col: str) -> I64:
    arr = table.column(col)
    return np.asarray(arr.fill_null(0).to_numpy(), dtype=np.int64)


def _valid(table: pa.Table, col: str) -> B1:
    return np.asarray(table.column(col).is_valid().to_numpy(zero_copy_only=False), np.bool_)


def _col(schema: Schema, table: str, col: str, expr: str | None = None) -> str:
    """`expr AS col` when the table has the column, else `NULL AS col`."""
    return f"{expr or col} AS {col}" if schema.has(table, col) else f"NULL AS {col}"


def _int32(table: pa.Table, col: str) -> pa.Array:
    return table.column(col).combine_chunks().cast(pa.int32())


def read_device_table(
    path: Path, schema: Schema, strings: Strings, table: str, category: int
) -> tuple[Rows, pa.Table]:
    """Rows of a device activity table (kernel, memcpy, memset, sync) and the raw extra columns.

    A device activity sits on (device, stream) as Kineto puts it (pid = device, tid = stream);
    `process` is the launching process, from globalPid.
    """
    extra = {
        KERNEL: ["demangledName", "shortName", "gridX", "gridY", "gridZ", "blockX", "blockY",
                 "blockZ", "registersPerThread", "staticSharedMemory"],
        MEMCPY: ["bytes", "copyKind"],
        MEMSET: ["bytes"],
        SYNC: ["syncType"],
    }[table]  # fmt: skip
    sel = [
        'start AS "start"',
        '"end" AS "end"',
        "deviceId",
        "streamId",
        "correlationId",
        _col(schema, table, "globalPid", _PID.format(col="globalPid")),
        *(_col(schema, table, c) for c in extra),
    ]
    raw = fetch_arrow(path, ", ".join(sel), table)
    n = raw.num_rows
    if table == KERNEL:
        demangled = _np(raw, "demangledName")
        short = _np(raw, "shortName")
        has_d = _valid(raw, "demangledName")
        ids = np.where(has_d, demangled, short)
        name = strings.codes(ids, has_d | _valid(raw, "shortName"))
    else:
        kinds = _np(raw, "copyKind" if table == MEMCPY else "syncType") if table != MEMSET else None
        name = np.empty(n, dtype=np.int64)
        if kinds is None:
            name[:] = strings.add("Memset (Device)")
        else:
            label = MEMCPY_KIND if table == MEMCPY else SYNC_KIND
            for k in np.unique(kinds).tolist():
                text = (
                    f"Memcpy {label.get(k, 'unknown')}"
                    if table == MEMCPY
                    else f"Sync: {label.get(k, 'unknown')}"
                )
                name[kinds == k] = strings.add(text)
    device = _np(raw, "deviceId")
    stream = _np(raw, "streamId")
    rows = Rows(
        category=np.full(n, category, dtype=np.int64),
        name=name,
        start=_np(raw, "start"),
        end=_np(raw, "end"),
        pid=device,
        tid=stream,
        process=_np(raw, "globalPid"),
        correlation=_np(raw, "correlationId"),
        correlation_valid=_valid(raw, "correlationId"),
        stream=_int32(raw, "streamId"),
        device=_int32(raw, "deviceId"),
        nbytes=(
            raw.column("bytes").combine_chunks().cast(pa.float64())
            if table in (MEMCPY, MEMSET)
            else pa.nulls(n, pa.float64())
        ),
        text=pa.nulls(n, pa.string()),
    )
    return rows, raw


def read_runtime(path: Path, strings: Strings, runtime_cat: int, driver_cat: int) -> Rows:
    """CUDA runtime and driver API calls on their host threads."""
    raw = fetch_arrow(
        path,
        f'start, "end", {_PID.format(col="globalTid")} AS pid, '
        f"{_TID.format(col='globalTid')} AS tid, correlationId, nameId",
        RUNTIME,
    )
    n = raw.num_rows
    name = strings.codes(_np(raw, "nameId"), _valid(raw, "nameId"))
    # Runtime API names start with "cuda"; the rest (cuLaunchKernel, cuModule...) are driver.
    uniq = np.unique(name)
    is_rt = np.array(
        [bool((strings.values[u] or "").startswith("cuda")) for u in uniq.tolist()], np.bool_
    )
    rt = is_rt[np.searchsorted(uniq, name)] if n else np.zeros(0, np.bool_)
    pid = _np(raw, "pid")
    return Rows(
        category=np.where(rt, runtime_cat, driver_cat).astype(np.int64),
        name=name,
        start=_np(raw, "start"),
        end=_np(raw, "end"),
        pid=pid,
        tid=_np(raw, "tid"),
        process=pid,
        correlation=_np(raw, "correlationId"),
        correlation_valid=_valid(raw, "correlationId"),
        stream=pa.nulls(n, pa.int32()),
        device=pa.nulls(n, pa.int32()),
        nbytes=pa.nulls(n, pa.float64()),
        text=pa.nulls(n, pa.string()),
    )


def read_nvtx(conn: sqlite3.Connection, schema: Schema, strings: Strings, category: int) -> Rows:
    """Closed NVTX push/pop and start/end ranges, named by their text (inline or textId)."""
    text = "n.text" if schema.has(NVTX, "text") else "NULL"
    if schema.has(NVTX, "textId"):
        text = f"COALESCE({text}, (SELECT value FROM StringIds s WHERE s.id = n.textId))"
    domain = "n.domainId" if schema.has(NVTX, "domainId") else "0"
    rows = conn.execute(
        f'SELECT n.start, n."end", n.globalTid, {text}, {domain} FROM {NVTX} n '
        'WHERE n.eventType IN (:push_pop, :start_end) AND n."end" IS NOT NULL',
        {"push_pop": NVTX_PUSH_POP, "start_end": NVTX_START_END},
    ).fetchall()
    domains: dict[int, str] = {}
    if schema.has(NVTX, "domainId"):
        domains = {
            int(d): str(t)
            for d, t in conn.execute(
                f"SELECT domainId, {text} FROM {NVTX} n WHERE eventType = :create",
                {"create": NVTX_DOMAIN_CREATE},
            )
            if d is not None and t
        }
    n = len(rows)
    gtid = np.array([r[2] or 0 for r in rows], dtype=np.int64)
    codes = {t: strings.add(t) for t in {r[3] for r in rows}}
    args = [json.dumps({"domain": domains[r[4]]}) if r[4] in domains else None for r in rows]
    return Rows(
        category=np.full(n, category, dtype=np.int64),
        name=np.array([codes[r[3]] for r in rows], dtype=np.int64),
        start=np.array([r[0] for r in rows], dtype=np.int64),
        end=np.array([r[1] for r in rows], dtype=np.int64),
        pid=(gtid >> 24) & 0xFFFFFF,
        tid=gtid & 0xFFFFFF,
        process=(gtid >> 24) & 0xFFFFFF,
        correlation=np.zeros(n, dtype=np.int64),
        correlation_valid=np.zeros(n, dtype=np.bool_),
        stream=pa.nulls(n, pa.int32()),
        device=pa.nulls(n, pa.int32()),
        nbytes=pa.nulls(n, pa.float64()),
        text=pa.array(args, type=pa.string()),
    )
