"""torch.compile structured logs (TORCH_TRACE) as rows of the compiles table, one per compilation.

Times: start_us is kept as the log gives it, absolute Unix-epoch microseconds (torch 2.13
`start_time_us`). A Kineto trace of the same process is on the same clock once shifted:
epoch_us = ts + baseTimeNanoseconds / 1000 (checked on tests/fixtures/torch), so the ingest can
make it relative to its run start. Phase durations are exclusive (the log's nested cumulative
timers differenced), so dynamo_us + aot_us + inductor_us + codegen_us == duration_us whenever the
backend ran; a phase the log does not time is null.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import msgspec
import pyarrow as pa

from workbench.errors import WorkbenchError
from workbench.store.importers.compile_log.compile_artifacts import Pending, restart_reasons
from workbench.store.importers.source import read_bytes
from workbench.store.progress import ProgressFn
from workbench.store.run_row import file_sha
from workbench.store.schema import COMPILES_FILE

# glog prefix written by torch._logging's structured trace handler:
# V1129 19:27:23.987000 8841 torch/_dynamo/guards.py:5400] {"artifact": ...}
_ENVELOPE = re.compile(rb"^[VIWEDCF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ [^\]]*\] (\{.*)$")
_LOG_NAME = re.compile(r"\.log(\.gz)?$")
_RANK_IN_NAME = re.compile(r"_rank_(\d+)_")

# (hit, miss) counter names of the compile caches that compilation_metrics reports.
_CACHE_COUNTERS = [
    ("inductor_fx_local_cache_hit_count", "inductor_fx_local_cache_miss_count"),
    ("inductor_fx_remote_cache_hit_count", "inductor_fx_remote_cache_miss_count"),
    ("aotautograd_local_cache_hit_count", "aotautograd_local_cache_miss_count"),
    ("aotautograd_remote_cache_hit_count", "aotautograd_remote_cache_miss_count"),
]


@dataclass(frozen=True)
class _Row:
    compile_id: str
    start_us: float | None
    duration_us: float | None
    dynamo_us: float | None
    aot_us: float | None
    inductor_us: float | None
    codegen_us: float | None
    recompile_reason: str | None
    fail_reason: str | None
    guard_count: int | None
    graph_op_count: int | None
    cache_hit: bool | None
    fx_graph_cache: str | None = None
    aot_autograd_cache: str | None = None
    restarts: int | None = None
    restart_reasons: str | None = None
    graph_breaks: int | None = None
    graph_break_reasons: str | None = None
    rank: int | None = None


@dataclass(frozen=True)
class CompileLog:
    """The compiles table of a log and the torch versions its compilation_metrics state."""

    table: pa.Table
    pytorch_versions: frozenset[str]
    warnings: tuple[str, ...] = ()


def read_compile_log(
    path: Path,
    *,
    rank: int | None = None,
    progress: ProgressFn | None = None,
    cancel: threading.Event | None = None,
) -> pa.Table:
    """Compilations in a TORCH_TRACE log file or directory as a COMPILES_FILE table.

    A directory holding logs of several ranks needs `rank`; files may be gzip-compressed.
    """
    return load_compile_log(path, rank=rank, progress=progress, cancel=cancel).table


def load_compile_log(
    path: Path,
    *,
    rank: int | None = None,
    progress: ProgressFn | None = None,
    cancel: threading.Event | None = None,
) -> CompileLog:
    """read_compile_log plus the `pytorch_version`s the log states (for the runs row)."""
    rows: list[_Row] = []
    versions: set[str] = set()
    files = log_files(path)
    for file in _select_rank(path, files, rank):
        rows.extend(_read_file(file, versions, progress, cancel, _file_rank(file)))
    # Log order is completion order; start order is what a timeline wants.
    rows.sort(key=lambda r: (r.start_us is None, r.start_us or 0.0))
    columns = {f.name: [getattr(r, f.name) for r in rows] for f in COMPILES_FILE}
    warnings = _rank_differences(path, files, progress, cancel) if len(files) > 1 else []
    return CompileLog(
        pa.Table.from_pydict(columns, schema=COMPILES_FILE), frozenset(versions), tuple(warnings)
    )


def _file_rank(file: Path) -> int | None:
    m = _RANK_IN_NAME.search(file.name)
    return int(m.group(1)) if m else None


def _rank_differences(
    path: Path, files: list[Path], progress: ProgressFn | None, cancel: threading.Event | None
) -> list[str]:
    """A warning naming the ranks whose logs compiled other graphs than the lowest rank's.

    A graph is its compile id with its op count, graph breaks and failure: ranks running the
    same program compile the same graphs, so a difference points at divergent inputs or code.
    """
    by_rank: dict[int, list[tuple[object, ...]]] = {}
    for file in files:
        r = _file_rank(file)
        if r is None:
            continue
        rows = _read_file(file, set(), progress, cancel, r)
        by_rank[r] = sorted(
            (x.compile_id, x.graph_op_count, x.graph_breaks, x.fail_reason is not None)
            for x in rows
        )
    if len(by_rank) < 2:
        return []
    base = min(by_rank)
    differ = [r for r in sorted(by_rank) if by_rank[r] != by_rank[base]]
    if not differ:
        return []
    return [
        f"{path}: ranks {', '.join(map(str, differ))} compiled other graphs than rank {base} "
        "(compile ids, op counts, graph breaks or failures differ)"
    ]


def log_files(path: Path) -> list[Path]:
    """The logs a --compile-log path names: the file itself, or a directory's *.log[.gz]."""
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise WorkbenchError(str(path), "no such file or directory")
    files = sorted(p for p in path.iterdir() if p.is_file() and _LOG_NAME.search(p.name))
    if not files:
        raise WorkbenchError(str(path), "no TORCH_TRACE log (*.log or *.log.gz) in this directory")
    return files


def compile_log_sha(path: Path) -> str:
    """Identity of a compile log for the import fingerprint: the file's bytes, or the relative
    names and bytes of every log in the directory (other files there are not read)."""
    if path.is_file():
        return file_sha(path)
    digest = hashlib.sha256()
    for p in log_files(path):
        digest.update(f"{p.relative_to(path)}\0{file_sha(p)}\0".encode())
    return digest.hexdigest()


def _select_rank(path: Path, files: list[Path], rank: int | None) -> list[Path]:
    if path.is_file():
        return files
    by_rank: dict[int | None, list[Path]] = {}
    for p in files:
        m = _RANK_IN_NAME.search(p.name)
        by_rank.setdefault(int(m.group(1)) if m else None, []).append(p)
    if len(files) == 1:
        # One log serves the trace whatever its rank, unless its name says it is another rank's.
        named = next(iter(by_rank))
        if rank is not None and named is not None and named != rank:
            raise WorkbenchError(
                str(path), f"holds only the log of rank {named}, not of rank {rank}"
            )
        return files
    if rank is not None and set(by_rank) != {None}:
        # A rank only selects among rank-named files; unranked logs belong to whoever asks.
        if rank not in by_rank:
            raise WorkbenchError(str(path), f"no TORCH_TRACE log of rank {rank} in this directory")
        return by_rank[rank]
    if len(by_rank) > 1:
        ranks = ", ".join(str(r) for r in sorted(k for k in by_rank if k is not None))
        raise WorkbenchError(str(path), f"holds logs of ranks {ranks}; choose one rank")
    return files


def _envelopes(data: bytes, subject: str) -> Iterator[tuple[int, dict[str, object], list[bytes]]]:
    """(line number, decoded envelope, payload lines) for every record of the log."""
    lines = data.split(b"\n")
    n = len(lines)
    i = 0
    while i < n:
        line = lines[i].rstrip(b"\r")
        i += 1
        if not line.strip():
            continue
        m = _ENVELOPE.match(line)
        if m is None:
            raise WorkbenchError(subject, f"line {i}: not a TORCH_TRACE structured log line")
        try:
            record = msgspec.json.decode(m.group(1))
        except msgspec.DecodeError as exc:
            raise WorkbenchError(subject, f"line {i}: truncated or malformed JSON ({exc})") from exc
        if not isinstance(record, dict):
            raise WorkbenchError(subject, f"line {i}: record is not a JSON object")
        start = i
        payload: list[bytes] = []
        while i < n and lines[i].startswith(b"\t"):
            payload.append(lines[i][1:].rstrip(b"\r"))
            i += 1
        yield start, record, payload


def _read_file(
    file: Path,
    versions: set[str],
    progress: ProgressFn | None,
    cancel: threading.Event | None,
    rank: int | None = None,
) -> list[_Row]:
    subject = str(file)
    data = read_bytes(file, progress, cancel)
    metrics: list[tuple[int, Mapping[str, object], str | None, Pending]] = []
    reasons: dict[str, str] = {}
    pending: dict[str, Pending] = {}
    for line_no, record, payload in _envelopes(data, subject):
        if "compilation_metrics" in record:
            m = record["compilation_metrics"]
            if not isinstance(m, dict):
                raise WorkbenchError(
                    subject, f"line {line_no}: compilation_metrics is not an object"
                )
            if m.get("is_runtime") is True:
                # Runtime events (autotuning, cudagraphs) reuse the record but are no compilation.
                continue
            version = m.get("pytorch_version")
            if isinstance(version, str) and version.strip():
                versions.add(version.strip())
            cid = _envelope_compile_id(record)
            seen = pending.pop(_frame_id(record) or "", Pending())
            metrics.append((line_no, m, cid, seen))
        elif (name := _artifact_name(record)) is not None:
            if name == "recompile_reasons":
                cid = _envelope_compile_id(record)
                first = _first_reason(payload)
                if cid is not None and first is not None:
                    reasons[cid] = first
            key = _frame_id(record)
            if key is not None:
                pending.setdefault(key, Pending()).add_artifact(name, payload)
    if rank is None:
        rank = _record_rank(data)
    return [
        _row(m, cid, reasons, subject, line_no, seen, rank) for line_no, m, cid, seen in metrics
    ]


def _frame_id(record: Mapping[str, object]) -> str | None:
    """ "frame/compile" without the attempt: artifacts of every attempt belong to the compile."""
    frame, comp = record.get("frame_id"), record.get("frame_compile_id")
    if not isinstance(frame, int) or not isinstance(comp, int):
        return None
    return f"{frame}/{comp}"


_RANK_KEY = re.compile(rb'"rank": (\d+)')


def _record_rank(data: bytes) -> int | None:
    """The rank distributed runs stamp on every envelope ("rank": N), when present."""
    m = _RANK_KEY.search(data[:65536])
    return int(m.group(1)) if m else None


def _artifact_name(record: Mapping[str, object]) -> str | None:
    art = record.get("artifact")
    name = art.get("name") if isinstance(art, dict) else None
    return name if isinstance(name, str) else None


def _envelope_compile_id(record: Mapping[str, object]) -> str | None:
    """ "frame/compile" (with "_attempt" after a restart), as torch prints a CompileId."""
    frame, comp, attempt = (record.get(k) for k in ("frame_id", "frame_compile_id", "attempt"))
    if not isinstance(frame, int) or not isinstance(comp, int):
        return None
    return f"{frame}/{comp}" + (f"_{attempt}" if isinstance(attempt, int) and attempt else "")


def _first_reason(payload: list[bytes]) -> str | None:
    """The newest guard failure: the payload is a JSON list, or one reason as plain text."""
    text = b"\n".join(payload).strip()
    if not text:
        return None
    try:
        value = msgspec.json.decode(text)
    except msgspec.DecodeError:
        return text.decode("utf-8", errors="replace")
    if isinstance(value, list):
        return str(value[0]) if value else None
    return str(value)


def _row(
    m: Mapping[str, object],
    envelope_id: str | None,
    reasons: Mapping[str, str],
    subject: str,
    line_no: int,
    seen: Pending | None = None,
    rank: int | None = None,
) -> _Row:
    def num(key: str, scale: float = 1.0) -> float | None:
        v = m.get(key)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise WorkbenchError(subject, f"line {line_no}: {key} is not a number")
        return float(v) * scale

    def count(key: str) -> int | None:
        v = num(key)
        return None if v is None else int(v)

    def first(*candidates: tuple[str, float]) -> float | None:
        for key, scale in candidates:
            v = num(key, scale)
            if v is not None:
                return v
        return None

    seen = seen or Pending()
    restarts = restart_reasons(m.get("restart_reasons"))
    cid = m.get("compile_id")
    compile_id = cid if isinstance(cid, str) and cid else envelope_id
    if compile_id is None:
        raise WorkbenchError(subject, f"line {line_no}: compilation_metrics without a compile id")
    # torch >= 2.6 logs microsecond integers; older versions seconds as floats.
    total = first(
        ("dynamo_cumulative_compile_time_us", 1.0),
        ("duration_us", 1.0),
        ("entire_frame_compile_time_s", 1e6),
    )
    backend = first(
        ("aot_autograd_cumulative_compile_time_us", 1.0), ("backend_compile_time_s", 1e6)
    )
    inductor = first(("inductor_cumulative_compile_time_us", 1.0), ("inductor_compile_time_s", 1e6))
    codegen = first(("inductor_code_gen_cumulative_compile_time_us", 1.0), ("code_gen_time_s", 1e6))
    reason = m.get("recompile_reason")
    fail_type, fail_reason = m.get("fail_type"), m.get("fail_reason")
    fail = None
    if fail_reason is not None or fail_type is not None:
        fail = ": ".join(str(x).strip() for x in (fail_type, fail_reason) if x is not None)
    return _Row(
        compile_id=compile_id,
        start_us=first(("start_time_us", 1.0), ("start_time", 1e6)),
        duration_us=first(("duration_us", 1.0), ("entire_frame_compile_time_s", 1e6)),
        dynamo_us=_minus(total, backend),
        aot_us=_minus(backend, inductor),
        inductor_us=_minus(inductor, codegen),
        codegen_us=codegen,
        recompile_reason=reason if isinstance(reason, str) else reasons.get(compile_id),
        fail_reason=fail,
        guard_count=count("guard_count"),
        graph_op_count=count("graph_op_count"),
        cache_hit=_cache_hit(m, subject, line_no, seen.cache_hit()),
        fx_graph_cache=seen.fx_graph_cache,
        aot_autograd_cache=seen.aot_autograd_cache,
        restarts=len(restarts),
        restart_reasons=json.dumps(restarts) if restarts else None,
        graph_breaks=len(seen.breaks),
        graph_break_reasons=seen.breaks_json(),
        rank=rank,
    )


def _minus(outer: float | None, inner: float | None) -> float | None:
    """Exclusive time of a timer around a nested one; the outer alone when nothing is nested."""
    if outer is None:
        return None
    return max(outer - (inner or 0.0), 0.0)


def _cache_hit(
    m: Mapping[str, object], subject: str, line_no: int, from_artifacts: bool | None
) -> bool | None:
    """True when every compile-cache lookup hit, False on any miss, None when none was made.

    The metrics' counters when they count anything; else the cache artifacts (older logs).
    """

    def counter(key: str) -> int:
        v = m.get(key)
        if v is None:
            return 0
        if isinstance(v, bool) or not isinstance(v, int):
            raise WorkbenchError(subject, f"line {line_no}: {key} is not an integer")
        return v

    hits = sum(counter(hit) for hit, _ in _CACHE_COUNTERS)
    misses = sum(counter(miss) for _, miss in _CACHE_COUNTERS)
    if hits == 0 and misses == 0:
        return from_artifacts
    return misses == 0
