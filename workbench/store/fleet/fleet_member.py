"""One file of a fleet run, decoded on a worker (store/fleet/fleet_ingest.py merges the results).

The worker reads, decodes and attributes the file, makes its event ids unique in the run
((file index << 32) + id in the file), stamps host, rank and capture window on every event and
request (request ids prefixed with host.rank.window), and hands both tables back as whole zstd
Parquet files in the store's file schema: a few MB, cheap to send and to append.
"""

from __future__ import annotations

import gc
import os
import resource
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from workbench.errors import WorkbenchError
from workbench.store import layout, schema
from workbench.store.attribution.request_pattern import compile_pattern
from workbench.store.attribution.rules import load_rules
from workbench.store.attribution.trace_import import attribute
from workbench.store.columns import null_arrays
from workbench.store.importers import Importer, importer_for, registry

_ID_SHIFT = 32  # event ids of file k are k << 32 plus the id within the file


@dataclass(frozen=True)
class MemberTask:
    """What a worker needs to decode one file of the run."""

    index: int
    source: str
    host_hint: str | None
    rules_path: str
    pattern: str | None
    # Files per (host, rank) among those merged when the task was sent: the window to stamp.
    seen: tuple[tuple[tuple[str | None, int | None], int], ...] = ()


@dataclass
class MemberResult:
    """One decoded file: its tables and what the runs row and the report need of it."""

    index: int
    source: str
    sha: str = ""
    n_bytes: int = 0
    host: str | None = None
    rank: int | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    window: int = 0  # as stamped in the tables (the parent restamps if it was not the file's)
    # Whole zstd Parquet files in schema.EVENTS_FILE / REQUESTS_FILE.
    events: bytes = b""
    requests: bytes = b""
    n_events: int = 0
    n_requests: int = 0
    events_read: int = 0
    request_unit: str = ""
    warnings: list[str] = field(default_factory=list)
    peak_rss_mb: float = 0.0
    pid: int = 0
    cpu_s: float = 0.0  # the worker process's CPU seconds so far (start-up included)
    error: tuple[str, str] | None = None  # WorkbenchError does not pickle: (subject, problem)


def encode(table: pa.Table, name: str) -> bytes:
    """A table of the partitioned table `name` as the bytes of a whole zstd Parquet file,
    written as the store writes it (SplicedWriter joins such files)."""
    sink = pa.BufferOutputStream()
    file_schema = schema.PARTITIONED[name]
    with pq.ParquetWriter(sink, file_schema, **layout.parquet_options(file_schema)) as writer:
        writer.write_table(table, row_group_size=layout.ROW_GROUP)  # a member starts a row group
    return bytes(sink.getvalue())


def decode(data: bytes) -> pa.Table:
    """The table `encode` encoded."""
    return pq.read_table(pa.BufferReader(data))


def _member_label(host: str | None, rank: int | None, window: int) -> str:
    return f"{host or 'host'}.{rank if rank is not None else 'x'}.{window}"


def stamp(table: pa.Table, host: str | None, rank: int | None, window: int) -> pa.Table:
    """A member's table with its host, rank and window set and its request ids, as the file
    has them, prefixed with the member's label."""
    table = _fleet_columns(table, host, rank, window)
    rid = table.schema.get_field_index("request_id")
    label = _member_label(host, rank, window)
    ids = pc.binary_join_element_wise(label, table.column(rid), "/")
    return table.set_column(rid, "request_id", ids)


def restamp(table: pa.Table, host: str | None, rank: int | None, old: int, new: int) -> pa.Table:
    """A stamped table moved from window `old` to window `new`."""
    rid = table.schema.get_field_index("request_id")
    cut = len(_member_label(host, rank, old)) + 1
    bare = pc.utf8_slice_codeunits(table.column(rid), cut)
    return stamp(table.set_column(rid, "request_id", bare), host, rank, new)


def _fleet_columns(table: pa.Table, host: str | None, rank: int | None, window: int) -> pa.Table:
    n = table.num_rows
    for name, value, typ in (
        ("host", host, pa.string()),
        ("rank", rank, pa.int32()),
        ("window", window, pa.int32()),
    ):
        idx = table.schema.get_field_index(name)
        col = (
            pa.repeat(pa.scalar(value, typ), n) if value is not None else null_arrays.nulls(n, typ)
        )
        table = table.set_column(idx, name, col) if idx >= 0 else table.append_column(name, col)
    return table


def _shift_ids(events: pa.Table, index: int) -> pa.Table:
    shift = pa.scalar(index << _ID_SHIFT, pa.int64())
    for name in ("event_id", "parent_id"):
        idx = events.schema.get_field_index(name)
        events = events.set_column(idx, name, pc.add(events.column(name), shift))
    return events


@cache
def _formats() -> list[Importer]:
    """The importers, found once per worker: scanning the installed distributions' entry points
    took ~10 ms a file (~3% of a fleet import's CPU)."""
    return registry()


def decode_member(task: MemberTask) -> MemberResult:
    """Read, decode and attribute one file (runs on a worker); its tables come back as Parquet
    bytes in the store's file schema, ids made unique in the run, host, rank and window set."""
    out = MemberResult(task.index, task.source)
    gc_was_enabled = gc.isenabled()
    gc.disable()  # as ingest does: millions of short-lived objects, none cyclic
    try:
        path = Path(task.source)
        opened = importer_for(path, _formats()).open(path, None, None)
        rules = load_rules(Path(task.rules_path))
        pattern = compile_pattern(task.pattern)
        dec = opened.decode()
        out.sha, out.n_bytes = opened.sha, opened.n_bytes  # known once decoded (streamed)
        att = attribute(dec.cols, dec.args, rules, pattern)
        meta = dict(dec.meta)
        out.host = meta.pop("host", None) or task.host_hint
        rank = meta.pop("rank", None)
        out.rank = int(rank) if rank is not None else None
        out.meta = meta
        out.events_read = sum(dec.cols.read_by_phase.values())
        out.request_unit = att.request_unit
        out.warnings = [*dec.warnings, *dec.cols.warnings]
        del dec
        out.window = dict(task.seen).get((out.host, out.rank), 0)
        ev = stamp(_shift_ids(att.events, task.index), out.host, out.rank, out.window)
        rq = stamp(att.requests, out.host, out.rank, out.window)
        out.n_events, out.n_requests = ev.num_rows, rq.num_rows
        del att
        out.events = encode(ev.cast(schema.EVENTS_FILE), "events")
        del ev
        out.requests = encode(rq.cast(schema.REQUESTS_FILE), "requests")
    except WorkbenchError as exc:
        out.error = (exc.subject, exc.problem)
        out.events = out.requests = b""
    finally:
        if gc_was_enabled:
            gc.enable()
    me = resource.getrusage(resource.RUSAGE_SELF)
    out.peak_rss_mb = me.ru_maxrss / 1024
    out.pid, out.cpu_s = os.getpid(), me.ru_utime + me.ru_stime
    return out
