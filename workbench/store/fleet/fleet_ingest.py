"""One run from many trace files (hosts x ranks x capture windows), decoded in parallel.

Each file (store/fleet/fleet_sources.py finds them) is decoded, attributed, stamped and encoded on the
engine (store/fleet/engine.py) by a worker (store/fleet/fleet_member.py) that holds one file's columns at a
time and hands back that file's events and requests as finished zstd Parquet bytes in the
store's file schema (a few MB: cheap to send and to hold).
This process only appends those bytes, file after file in path order, to the run's single
staged Parquet file per table (store/fleet/parquet_splice.py joins the footers), so it encodes
nothing and its memory and its share of the work do not grow with the fleet. Every event and
request keeps its host, rank and window; event ids stay unique as (file index << 32) + id in
the file, request ids are prefixed with host.rank.window. The run commits all-or-nothing
(layout).
The commit makes no op table (that would hold every op of the run in one process, which is
what this module avoids); like any big run, its first triage caches one (store/op_table.py).

Where a file's host and rank come from: its Kineto header (hostname, distributedInfo.rank),
else the name of the directory holding it for the host. Its window is its order among the
files of the same host and rank (path order; Kineto names files by capture time). A worker
learns its own host and rank only by decoding, so it stamps the window counted over the files
this process had merged when it sent the task; a file whose earlier captures of the same rank
were still in flight then gets its window and request ids restamped here (only that file).
"""

from __future__ import annotations

import hashlib
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from workbench.errors import WorkbenchError
from workbench.store import layout, schema
from workbench.store.attribution.request_pattern import compile_pattern
from workbench.store.attribution.rules import DEFAULT_RULES, load_rules
from workbench.store.fleet.engine import Engine
from workbench.store.fleet.fleet_member import (
    MemberResult,
    MemberTask,
    decode,
    decode_member,
    encode,
    restamp,
)
from workbench.store.fleet.fleet_sources import expand_sources
from workbench.store.fleet.parquet_splice import SplicedWriter
from workbench.store.ingest import parse_tags
from workbench.store.run_row import existing_matches, file_sha, fingerprint, run_row

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
                table = restamp(decode(data), r.host, r.rank, r.window, window)
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
        for name in ("compiles", "tokens"):
            empty = schema.PARTITIONED[name]
            layout.write_table(empty.empty_table(), empty, stage / name / layout.PART_FILE)
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
