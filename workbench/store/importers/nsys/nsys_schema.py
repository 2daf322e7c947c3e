"""What an Nsight Systems SQLite export holds besides its activity rows: which tables and
columns (2022 or current schema), the interned strings, the GPUs, and run metadata.

Documented in the Nsight Systems user guide ("Exporter: SQLite schema reference"). The 2022
exports name their metadata table EXPORT_META_DATA, current ones META_DATA_EXPORT; an activity
table exists only when it has rows. These are small reads, through the standard library.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from workbench.errors import WorkbenchError
from workbench.store.importers.devices import device_meta
from workbench.store.query_files import load_query

I64 = npt.NDArray[np.int64]
B1 = npt.NDArray[np.bool_]

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
SYNC = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
NVTX = "NVTX_EVENTS"
GPUS = "TARGET_INFO_GPU"
ACTIVITY = (KERNEL, MEMCPY, MEMSET, SYNC, RUNTIME, NVTX)

# The columns the queries in queries/nsys_*.sql read; both documented schemas have them all.
_DEVICE = {"start", "end", "deviceId", "streamId", "correlationId", "globalPid"}
REQUIRED = {
    KERNEL: _DEVICE | {"demangledName", "shortName", "gridX", "gridY", "gridZ", "blockX",
                       "blockY", "blockZ", "registersPerThread", "staticSharedMemory"},
    MEMCPY: _DEVICE | {"bytes", "copyKind"},
    MEMSET: _DEVICE | {"bytes"},
    SYNC: _DEVICE | {"syncType"},
    RUNTIME: {"start", "end", "globalTid", "correlationId", "nameId"},
    NVTX: {"start", "end", "eventType", "globalTid", "text", "textId", "domainId"},
    GPUS: {"id", "name", "smCount", "memoryBandwidth", "totalMemory", "l2CacheSize"},
}  # fmt: skip


@dataclass
class Schema:
    """Which tables the export has (with rows or not)."""

    tables: set[str]


@dataclass
class Strings:
    """StringIds: sorted ids and their values; `values` grows with names the importer makes."""

    ids: I64
    values: list[str | None]

    def codes(self, ids: I64, valid: B1) -> I64:
        """Positions in `values` of string ids; unknown or null ids name the null entry."""
        n = len(self.ids)
        if n and self.ids[0] == 0 and self.ids[-1] == n - 1:
            pos = ids  # ids 0..n-1, as exports write them: an id is its own position
        else:
            pos = np.searchsorted(self.ids, ids)
        pos_c = np.clip(pos, 0, max(n - 1, 0))
        ok = valid & (pos >= 0) & (pos < n)
        if n:
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


def connect(uri: str) -> sqlite3.Connection:
    conn = sqlite3.connect(uri, uri=True)
    # Exports carry raw environment blobs that are not always UTF-8.
    conn.text_factory = lambda b: b.decode("utf-8", "replace")
    return conn


def read_schema(conn: sqlite3.Connection, subject: str) -> Schema:
    """Tables present; a one-line error when the file is not an nsys export or lacks a column
    the importer reads."""
    names = {r[0] for r in conn.execute(load_query("nsys_tables"))}
    if "StringIds" not in names or not names & set(ACTIVITY):
        raise WorkbenchError(
            subject,
            "SQLite database but not an Nsight Systems export "
            "(no StringIds with CUPTI_ACTIVITY_KIND_* or NVTX_EVENTS tables)",
        )
    for table, need in REQUIRED.items():
        if table not in names:
            continue
        have = {r[0] for r in conn.execute(load_query("nsys_columns"), {"table": table})}
        missing = need - have
        if missing:
            raise WorkbenchError(
                subject, f"{table} lacks {', '.join(sorted(missing))}: unknown export schema"
            )
    return Schema(names)


def read_strings(conn: sqlite3.Connection) -> Strings:
    rows = conn.execute(load_query("nsys_strings")).fetchall()
    return Strings(np.array([r[0] for r in rows], dtype=np.int64), [r[1] for r in rows])


def read_devices(conn: sqlite3.Connection, schema: Schema) -> list[Device]:
    if GPUS not in schema.tables:
        return []
    rows = conn.execute(load_query("nsys_gpus")).fetchall()
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
        row = conn.execute(load_query("nsys_driver_version")).fetchone()
        if row and str(row[0]).isdigit():
            meta["driver_version"] = _driver(str(row[0]))
    base_us = 0.0
    if "TARGET_INFO_SESSION_START_TIME" in schema.tables:
        row = conn.execute(load_query("nsys_session_start")).fetchone()
        if row and row[0]:
            base_us = int(row[0]) / 1000.0
    return meta, base_us
