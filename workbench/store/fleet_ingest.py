"""One run from many trace files (hosts x ranks x capture windows), decoded in parallel.

Each file is decoded and attributed on the engine (store/engine.py) by a worker that holds one
file's columns at a time and hands back that file's events and requests; this process writes
them, file after file in path order, into the run's single staged Parquet file per table, so no
process holds more than a few files' tables whatever the fleet's size. Every event and request
keeps its host, rank and window; event ids stay unique as (file index << 32) + id in the file,
request ids are prefixed with host.rank.window. The run commits all-or-nothing (layout).
A fleet run gets no op table (store/op_table.py): building one holds every op of the run in one
process, which is what this module avoids; `workbench triage` reads its ops from the Parquet.

Where a file's host and rank come from: its Kineto header (hostname, distributedInfo.rank),
else the name of the directory holding it for the host. Its window is its order among the
files of the same host and rank (path order; Kineto names files by capture time).
"""

from __future__ import annotations

import gc
import glob
import hashlib
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
from workbench.store import layout, objstore, schema
from workbench.store.engine import Engine
from workbench.store.importers import importer_for
from workbench.store.ingest import parse_tags
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
    events: pa.Table | None = None
    requests: pa.Table | None = None
    events_read: int = 0
    request_unit: str = ""
    warnings: list[str] = field(default_factory=list)
    peak_rss_mb: float = 0.0
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


def decode_member(task: MemberTask) -> MemberResult:
    """Read, decode and attribute one file (runs on a worker)."""
    out = MemberResult(task.index, task.source)
    gc_was_enabled = gc.isenabled()
    gc.disable()  # as ingest does: millions of short-lived objects, none cyclic
    try:
        path = Path(task.source)
        opened = importer_for(path).open(path, None, None)
        out.sha, out.n_bytes = opened.sha, opened.n_bytes
        rules = load_rules(Path(task.rules_path))
        pattern = compile_pattern(task.pattern)
        dec = opened.decode()
        att = attribute(dec.cols, dec.args, rules, pattern)
        meta = dict(dec.meta)
        out.host = meta.pop("host", None) or task.host_hint
        rank = meta.pop("rank", None)
        out.rank = int(rank) if rank is not None else None
        out.meta = meta
        out.events, out.requests = att.events, att.requests
        out.events_read = sum(dec.cols.read_by_phase.values())
        out.request_unit = att.request_unit
        out.warnings = [*dec.warnings, *dec.cols.warnings]
    except WorkbenchError as exc:
        out.error = (exc.subject, exc.problem)
        out.events = out.requests = None
    finally:
        if gc_was_enabled:
            gc.enable()
    out.peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
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


def _fleet_columns(table: pa.Table, host: str | None, rank: int | None, window: int) -> pa.Table:
    n = table.num_rows
    for name, value, typ in (
        ("host", host, pa.string()),
        ("rank", rank, pa.int32()),
        ("window", window, pa.int32()),
    ):
        idx = table.schema.get_field_index(name)
        col = pa.array([value] * n, typ) if value is not None else pa.nulls(n, typ)
        table = table.set_column(idx, name, col) if idx >= 0 else table.append_column(name, col)
    return table


def _member_label(host: str | None, rank: int | None, window: int) -> str:
    return f"{host or 'host'}.{rank if rank is not None else 'x'}.{window}"


class _Merger:
    """Writes the members' tables, in index order, into the staged Parquet files."""

    def __init__(self, stage: Path, host_tags: dict[str, dict[str, str]]) -> None:
        self.stage = stage
        self.host_tags = host_tags
        self.writers: dict[str, pq.ParquetWriter] = {}
        self.seen: Counter[tuple[str | None, int | None]] = Counter()
        self.members: list[dict[str, Any]] = []
        self.requests = 0
        self.metas: list[dict[str, Any]] = []
        self.events = 0
        self.events_read = 0
        self.units: set[str] = set()
        self.warnings: list[str] = []
        self.peak_rss_mb = 0.0

    def _writer(self, name: str) -> pq.ParquetWriter:
        if name not in self.writers:
            path = self.stage / name / layout.PART_FILE
            path.parent.mkdir(parents=True, exist_ok=True)
            self.writers[name] = pq.ParquetWriter(
                path, schema.PARTITIONED[name], compression="zstd"
            )
        return self.writers[name]

    def add(self, r: MemberResult) -> None:
        assert r.events is not None and r.requests is not None
        window = self.seen[(r.host, r.rank)]
        self.seen[(r.host, r.rank)] += 1
        label = _member_label(r.host, r.rank, window)
        shift = pa.scalar(r.index << _ID_SHIFT, pa.int64())
        ev = r.events
        ev = ev.set_column(0, "event_id", pc.add(ev.column("event_id"), shift))
        pidx = ev.schema.get_field_index("parent_id")
        ev = ev.set_column(pidx, "parent_id", pc.add(ev.column("parent_id"), shift))
        ev = ev.set_column(
            1, "request_id", pc.binary_join_element_wise(label, ev.column("request_id"), "/")
        )
        rq = r.requests
        rq = rq.set_column(
            0, "request_id", pc.binary_join_element_wise(label, rq.column("request_id"), "/")
        )
        ev = _fleet_columns(ev, r.host, r.rank, window).cast(schema.EVENTS_FILE)
        rq = _fleet_columns(rq, r.host, r.rank, window).cast(schema.REQUESTS_FILE)
        self._writer("events").write_table(ev, row_group_size=256 * 1024)
        self._writer("requests").write_table(rq)
        self.requests += rq.num_rows
        self.events += ev.num_rows
        self.events_read += r.events_read
        self.units.add(r.request_unit)
        self.warnings += [f"{r.source}: {w}" for w in r.warnings]
        self.peak_rss_mb = max(self.peak_rss_mb, r.peak_rss_mb)
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
                "events": ev.num_rows,
                "requests": rq.num_rows,
                "tags": sorted(self.host_tags.get(r.host or "", {}).items()),
            }
        )

    def close(self) -> None:
        for w in self.writers.values():
            w.close()
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
    tasks = [
        MemberTask(i, f, hint, str(rules_path), request_pattern)
        for i, (f, hint) in enumerate(files)
    ]
    total = sum(sizes)
    shas: list[str] = []
    merger: _Merger | None = None

    def fill(stage: Path) -> pa.Table:
        nonlocal merger
        merger = _Merger(stage, host_tags)
        done_bytes = 0
        try:
            for r in engine.map(decode_member, tasks):
                if r.error is not None:
                    raise WorkbenchError(*r.error)
                merger.add(r)
                shas.append(r.sha)
                r.events = r.requests = None
                done_bytes += sizes[r.index]
                if progress is not None:
                    progress(
                        FleetProgress(r.index + 1, len(tasks), done_bytes, total, merger.events)
                    )
        finally:
            merger.close()
        layout.write_table(
            schema.COMPILES_FILE.empty_table(),
            schema.COMPILES_FILE,
            stage / "compiles" / layout.PART_FILE,
        )
        meta = merger.shared_meta()
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
            "hosts": len({m["host"] for m in merger.members}),
            "ranks": len({(m["host"], m["rank"]) for m in merger.members}),
            "windows": max(m["window"] for m in merger.members) + 1,
            "members": [merger.members],
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
        warnings=m.warnings,
    )
