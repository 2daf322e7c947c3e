"""One run from many trace files (hosts x ranks x capture windows), decoded in parallel.

Each file is decoded, attributed, stamped and encoded on the engine (store/engine.py) by a
worker that holds one file's columns at a time and hands back that file's events and requests
as finished zstd Parquet bytes in the store's file schema (a few MB: cheap to send and to hold).
This process only appends those bytes, file after file in path order, to the run's single
staged Parquet file per table (store/parquet_splice.py joins the footers), so it encodes
nothing and its memory and its share of the work do not grow with the fleet. Every event and
request keeps its host, rank and window; event ids stay unique as (file index << 32) + id in
the file, request ids are prefixed with host.rank.window. The run commits all-or-nothing
(layout).
A fleet run gets no op table (store/op_table.py): building one holds every op of the run in one
process, which is what this module avoids; `workbench triage` reads its ops from the Parquet.

Where a file's host and rank come from: its Kineto header (hostname, distributedInfo.rank),
else the name of the directory holding it for the host. Its window is its order among the
files of the same host and rank (path order; Kineto names files by capture time). A worker
learns its own host and rank only by decoding, so it stamps the window counted over the files
this process had merged when it sent the task; a file whose earlier captures of the same rank
were still in flight then gets its window and request ids restamped here (only that file).
"""

from __future__ import annotations

import gc
import glob
import hashlib
import os
import resource
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from workbench.errors import WorkbenchError
from workbench.store import layout, null_arrays, objstore, schema
from workbench.store.engine import Engine
from workbench.store.importers import importer_for
from workbench.store.ingest import parse_tags
from workbench.store.parquet_splice import SplicedWriter
from workbench.store.request_pattern import compile_pattern
from workbench.store.rules import DEFAULT_RULES, load_rules
from workbench.store.run_row import existing_matches, file_sha, fingerprint, run_row
from workbench.store.trace_import import attribute

TRACE_SUFFIXES = (".json", ".json.gz", ".trace")
_GLOB_CHARS = frozenset("*?[")
_ID_SHIFT = 32  # event ids of file k are k << 32 plus the id within the file
# Columns of the runs row a fleet states only when every file agrees.
_SHARED = (
    "model",
    "workload",
    "compiler",
    "compiler_version",
    "runtime",
    "runtime_version",
    "hardware",
    "device_count",
    "driver_version",
    "world_size",
)


@dataclass(frozen=True)
class FleetProgress:
    """Files and bytes (as stored: compressed for .gz) done of the run's sources."""

    files_done: int
    files_total: int
    bytes_done: int
    bytes_total: int
    events: int


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


@dataclass
class FleetReport:
    """What a fleet import did: the run, its shape, the totals and the worst worker memory."""

    run_id: str
    status: str  # imported | unchanged
    files: int
    hosts: int
    ranks: int
    windows: int
    events: int
    requests: int
    bytes_read: int
    seconds: float
    engine: str
    worker_peak_rss_mb: float
    worker_cpu_s: float = 0.0  # summed over the processes that decoded (this one if serial)
    warnings: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        """Human-readable summary."""
        if self.status == "unchanged":
            return [f"run {self.run_id}: unchanged (it already holds these {self.files} files)"]
        out = [
            f"run {self.run_id}: imported {self.files} files ({self.bytes_read / 1e6:.1f} MB) "
            f"in {self.seconds:.2f} s on {self.engine}",
            f"  fleet: {self.hosts} hosts, {self.ranks} ranks, {self.windows} windows",
            f"  events: {self.events:,}  requests: {self.requests:,}",
        ]
        out += [f"  warning: {w}" for w in self.warnings]
        return out


def _has_glob(text: str) -> bool:
    return any(c in text for c in _GLOB_CHARS)


def _is_trace(name: str) -> bool:
    return name.lower().endswith(TRACE_SUFFIXES)


def expand_sources(items: list[str]) -> list[tuple[str, str | None]]:
    """Files named by a list of files, directories (searched recursively for *.json,
    *.json.gz, *.trace) or globs, as (path, host hint), in path order, each once."""
    found: dict[str, str | None] = {}
    for item in items:
        if objstore.is_remote(item):
            raise WorkbenchError(item, "trace files are read from local disk; copy them first")
        path = Path(item)
        if _has_glob(item):
            matches = sorted(glob.glob(item, recursive=True))
            files = [Path(m) for m in matches if Path(m).is_file()]
        elif path.is_dir():
            files = sorted(p for p in path.rglob("*") if p.is_file() and _is_trace(p.name))
        elif path.is_file():
            files = [path]
        else:
            raise WorkbenchError(item, "no such file or directory")
        if not files:
            raise WorkbenchError(item, "names no trace files (*.json, *.json.gz, *.trace)")
        for f in files:
            found.setdefault(str(f), f.parent.name or None)
    return sorted(found.items())


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


def _restamp(table: pa.Table, host: str | None, rank: int | None, old: int, new: int) -> pa.Table:
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


def decode_member(task: MemberTask) -> MemberResult:
    """Read, decode and attribute one file (runs on a worker); its tables come back as Parquet
    bytes in the store's file schema, ids made unique in the run, host, rank and window set."""
    out = MemberResult(task.index, task.source)
    gc_was_enabled = gc.isenabled()
    gc.disable()  # as ingest does: millions of short-lived objects, none cyclic
    try:
        path = Path(task.source)
        opened = importer_for(path).open(path, None, None)
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


def parse_host_tags(items: list[str] | None) -> dict[str, dict[str, str]]:
    """HOST:KEY=VALUE strings -> {host: {key: value}} (tags of one host of the fleet)."""
    out: dict[str, dict[str, str]] = {}
    for item in items or []:
        host, sep, tag = item.partition(":")
        if not sep or not host.strip():
            raise WorkbenchError(f"--host-tag {item!r}", "expected HOST:KEY=VALUE")
        out.setdefault(host.strip(), {}).update(parse_tags([tag], "--host-tag"))
    return out


class _Merger:
    """Appends the members' Parquet bytes, in index order, to the staged Parquet files."""

    def __init__(self, stage: Path, host_tags: dict[str, dict[str, str]]) -> None:
        self.stage = stage
        self.host_tags = host_tags
        self.writers: dict[str, SplicedWriter] = {}
        self.seen: Counter[tuple[str | None, int | None]] = Counter()
        self.members: list[dict[str, Any]] = []
        self.requests = 0
        self.metas: list[dict[str, Any]] = []
        self.events = 0
        self.events_read = 0
        self.units: set[str] = set()
        self.warnings: list[str] = []
        self.peak_rss_mb = 0.0
        self.cpu_by_pid: dict[int, float] = {}

    def _writer(self, name: str) -> SplicedWriter:
        if name not in self.writers:
            path = self.stage / name / layout.PART_FILE
            path.parent.mkdir(parents=True, exist_ok=True)
            self.writers[name] = SplicedWriter(path)
        return self.writers[name]

    def seen_so_far(self) -> tuple[tuple[tuple[str | None, int | None], int], ...]:
        return tuple(self.seen.items())

    def add(self, r: MemberResult) -> None:
        window = self.seen[(r.host, r.rank)]
        self.seen[(r.host, r.rank)] += 1
        for name in ("events", "requests"):
            data: bytes = getattr(r, name)
            if window != r.window:  # an earlier capture of its rank was in flight: restamp
                table = _restamp(decode(data), r.host, r.rank, r.window, window)
                data = encode(table, name)
            self._writer(name).append(data)
        ev_rows, rq_rows = r.n_events, r.n_requests
        self.requests += rq_rows
        self.events += ev_rows
        self.events_read += r.events_read
        self.units.add(r.request_unit)
        self.warnings += [f"{r.source}: {w}" for w in r.warnings]
        self.peak_rss_mb = max(self.peak_rss_mb, r.peak_rss_mb)
        self.cpu_by_pid[r.pid] = max(self.cpu_by_pid.get(r.pid, 0.0), r.cpu_s)
        self.metas.append(r.meta)
        self.members.append(
            {
                "host": r.host,
                "rank": r.rank,
                "window": window,
                "source_file": str(Path(r.source).resolve()),
                "source_sha256": r.sha,
                "hardware": r.meta.get("hardware"),
                "driver_version": r.meta.get("driver_version"),
                "runtime_version": r.meta.get("runtime_version"),
                "events": ev_rows,
                "requests": rq_rows,
                "tags": sorted(self.host_tags.get(r.host or "", {}).items()),
            }
        )

    def close(self, ok: bool) -> None:
        """Finish the staged files (only when every member was added)."""
        for w in self.writers.values():
            if ok:
                w.close()
            else:
                w.abort()
        self.writers.clear()

    def shared_meta(self) -> dict[str, Any]:
        """Run metadata every file agrees on; where files differ the members say."""
        out: dict[str, Any] = {}
        for key in _SHARED:
            values = {repr(m.get(key)) for m in self.metas}
            if len(values) == 1 and self.metas[0].get(key) is not None:
                out[key] = self.metas[0][key]
        hosts = {m["host"] for m in self.members}
        ranks = {m["rank"] for m in self.members}
        if len(hosts) == 1:
            out["host"] = next(iter(hosts))
        if len(ranks) == 1 and None not in ranks:
            out["rank"] = next(iter(ranks))
        return out


def combined_sha(shas: list[str]) -> str:
    """The run's source hash: sha256 over its files' hashes in path order."""
    return hashlib.sha256("\n".join(shas).encode()).hexdigest()


def ingest_fleet(
    store: Path,
    sources: list[str],
    *,
    run_id: str,
    engine: Engine,
    label: str | None = None,
    tags: dict[str, str] | None = None,
    host_tags: dict[str, dict[str, str]] | None = None,
    request_pattern: str | None = None,
    progress: Callable[[FleetProgress], None] | None = None,
    rules_path: Path = DEFAULT_RULES,
) -> FleetReport:
    """Import the files named by `sources` as the one run `run_id`, all or nothing."""
    started = time.perf_counter()
    layout.check_run_id(run_id)
    tags = dict(tags or {})
    host_tags = dict(host_tags or {})
    rules = load_rules(rules_path)
    compile_pattern(request_pattern)  # a bad pattern fails here, before any work
    files = expand_sources(sources)
    sizes = [Path(f).stat().st_size for f, _ in files]
    host_items = sorted((h, sorted(t.items())) for h, t in host_tags.items())
    fp = fingerprint(label, {**tags, "_host_tags": repr(host_items)}, request_pattern, rules, None)
    subject = f"run {run_id}"
    if layout.read_run_row(store, run_id) is not None:
        sha = combined_sha([file_sha(Path(f)) for f, _ in files])
        existing_matches(store, run_id, sha, fp, subject)
        return FleetReport(
            run_id, "unchanged", len(files), 0, 0, 0, 0, 0, sum(sizes),
            time.perf_counter() - started, engine.kind, 0.0,
        )  # fmt: skip
    total = sum(sizes)
    shas: list[str] = []
    merger: _Merger | None = None

    def fill(stage: Path) -> pa.Table:
        nonlocal merger
        merger = m = _Merger(stage, host_tags)
        # Made as the engine sends each task, so each carries what was merged by then.
        tasks = (
            MemberTask(i, f, hint, str(rules_path), request_pattern, m.seen_so_far())
            for i, (f, hint) in enumerate(files)
        )
        done_bytes = 0
        ok = False
        try:
            # Results are a few MB: let each worker run two files ahead of this process.
            for r in engine.map(decode_member, tasks, ahead=2 * engine.workers):
                if r.error is not None:
                    raise WorkbenchError(*r.error)
                m.add(r)
                shas.append(r.sha)
                r.events = r.requests = b""
                done_bytes += sizes[r.index]
                if progress is not None:
                    progress(FleetProgress(r.index + 1, len(files), done_bytes, total, m.events))
            ok = True
        finally:
            m.close(ok)
        layout.write_table(
            schema.COMPILES_FILE.empty_table(),
            schema.COMPILES_FILE,
            stage / "compiles" / layout.PART_FILE,
        )
        meta = m.shared_meta()
        row = run_row(
            run_id,
            label=label,
            source_format="kineto-json",
            source_file=" ".join(sources),
            sha=combined_sha(shas),
            meta=meta,
            tags=tags,
            fp=fp,
        )
        shape = {
            "hosts": len({x["host"] for x in m.members}),
            "ranks": len({(x["host"], x["rank"]) for x in m.members}),
            "windows": max(x["window"] for x in m.members) + 1,
            "members": [m.members],
        }
        for name, value in shape.items():
            typ = schema.RUNS.field(name).type
            row = row.set_column(
                row.schema.get_field_index(name),
                name,
                pa.array(value if isinstance(value, list) else [value], typ),
            )
        return row

    layout.commit_staged(store, run_id, fill, source=subject)
    assert merger is not None
    m = merger
    return FleetReport(
        run_id=run_id,
        status="imported",
        files=len(files),
        hosts=len({x["host"] for x in m.members}),
        ranks=len({(x["host"], x["rank"]) for x in m.members}),
        windows=max(x["window"] for x in m.members) + 1,
        events=m.events,
        requests=m.requests,
        bytes_read=total,
        seconds=time.perf_counter() - started,
        engine=f"{engine.kind} ({engine.workers} worker{'s' if engine.workers > 1 else ''})",
        worker_peak_rss_mb=m.peak_rss_mb,
        worker_cpu_s=sum(m.cpu_by_pid.values()),
        warnings=m.warnings,
    )
