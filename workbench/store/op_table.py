"""A big run's op table: its op columns, made on its first load, mapped on later loads without
decoding.

The events Parquet file stays the record; the table is a cache, in the state directory
(cache_dir()), never in a store: a triage leaves the store as it was, a store's size is its
record alone (an nsys import of 1M kernels: ~7 MB of Parquet instead of ~200 MB beside it), and
deleting the folder costs the next load one decode. A run of at least MIN_EVENTS events gets
one: an uncompressed Arrow IPC file that a load memory-maps (no decoding, no copy; the pages
come from the page cache). On 5M ops that turns a 0.4-0.8 s load into a few ms, for about 95
bytes per op. A table is named by the content hash its events file was committed with, holds
that hash and the run's request ids, and has its own hash beside it, checked on every read: a
table of another file, another request list, a damaged one or one of another format is passed
over (and made again), so a cache never changes a verdict. Stores written before kept the
table beside the events file as `_ops.arrow` (covered by the run's recorded hashes): it is
still read. The cache keeps at most CACHE_LIMIT bytes, the least recently used going first.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Final

import numpy as np
import pyarrow as pa

from workbench.store import integrity, op_columns
from workbench.store.atomic import write_atomic
from workbench.store.op_columns import OpColumns
from workbench.store.workspace import state_home

FILE: Final[str] = "_ops.arrow"  # beside the events file, in stores written before the cache
FORMAT: Final[int] = 2  # 2: the table names its events file's content hash and lives in a cache
# What the cache may hold (~95 bytes per op: 8 GiB is about 90M ops, some nine 10M-event pairs).
CACHE_LIMIT: Final[int] = 8 * 2**30
# One writer: writing a 5M-op table (~480 MB of fresh pages) takes 1-2 s here, which a cold
# triage would otherwise wait for.
_writer: Final = ThreadPoolExecutor(max_workers=1, thread_name_prefix="op-table-cache")
_pending: list[Future[None]] = []
_pending_lock: Final = threading.Lock()
# Below this the Parquet file loads in well under 0.1 s: no table, no disk spent on one.
MIN_EVENTS: Final[int] = 1_000_000
_META_KEY: Final[bytes] = b"workbench.op_table"


@dataclass(frozen=True)
class OpTable:
    """The op columns of every request of a run; `req` indexes request_ids."""

    ops: OpColumns
    request_ids: list[str]

    def for_requests(self, requests: dict[str, int]) -> OpColumns:
        """The ops of the given requests (id -> index), as op_columns.read gives them: ops of
        other requests left out, the vocabularies unchanged."""
        new = np.asarray([requests.get(r, -1) for r in self.request_ids], dtype=np.int64)
        cols = self.ops.cols
        if len(requests) == new.size and np.array_equal(new, np.arange(new.size)):
            return self.ops  # the same requests in the same order: the columns as mapped
        req = new[cols["req"]]
        rows = np.flatnonzero(req >= 0)
        sel: slice | np.ndarray = rows
        if not rows.size:
            sel = slice(0, 0)
        elif int(rows[-1]) - int(rows[0]) + 1 == rows.size:
            # One stretch of ops (all, or the skipped requests came first or last): views.
            sel = slice(int(rows[0]), int(rows[-1]) + 1)
        picked = {name: col[sel] for name, col in cols.items() if name != "req"}
        picked["req"] = req[sel]
        return OpColumns(picked, self.ops.name_vocab, self.ops.kernel_vocab)


def beside(events_file: Path) -> Path:
    """Where a store written before the cache kept the op table of an events file."""
    return events_file.parent / FILE


def cache_dir() -> Path:
    """The op-table cache: the state directory's cache/op_tables (deleting it drops the cache)."""
    return state_home() / "cache" / "op_tables"


def cache_path(events_digest: str) -> Path:
    """Where the op table of the events file committed with content hash events_digest is."""
    name = hashlib.sha256(f"{FORMAT}:{events_digest}".encode()).hexdigest()[:40]
    return cache_dir() / f"{name}.arrow"


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".xxh3")


def _stamp(events_file: Path) -> str:
    """Size and footer hash of a Parquet file: what an op table was made from."""
    with events_file.open("rb") as f:
        size = f.seek(0, os.SEEK_END)
        if size < 12:
            raise ValueError("too short for a Parquet file")
        f.seek(size - 8)
        tail = f.read(8)
        footer_len = int.from_bytes(tail[:4], "little")
        if tail[4:] != b"PAR1" or footer_len > size - 12:
            raise ValueError("no Parquet footer")
        f.seek(size - 8 - footer_len)
        footer = f.read(footer_len)
    return f"{size}:{hashlib.sha256(footer).hexdigest()}"


def write(
    events_file: Path,
    request_ids: list[str],
    ops: OpColumns | None = None,
    *,
    dest: Path | None = None,
    events_digest: str = "",
    durable: bool = True,
) -> None:
    """Write the op table of `events_file` (for requests request_ids) to `dest` (beside the
    file when not given): to a temporary file, then renamed into place. `ops`: the file's op
    columns when the caller has them already, else read here. `durable` False: no fsync
    (a cached table is checked against its hash on every read)."""
    if ops is None:
        ops = op_columns.read(events_file, {r: i for i, r in enumerate(request_ids)})
    bools = [name for name, col in ops.cols.items() if col.dtype == np.bool_]
    meta = {
        "format": FORMAT,
        "events": _stamp(events_file),
        "events_digest": events_digest,
        "request_ids": request_ids,
        "name_vocab": list(ops.name_vocab),
        "kernel_vocab": list(ops.kernel_vocab),
        "bool_columns": bools,
    }
    # Arrow packs booleans into bits; as bytes they map straight back to numpy bools.
    table = pa.table(
        {name: col.view(np.uint8) if name in bools else col for name, col in ops.cols.items()}
    ).replace_schema_metadata({_META_KEY: json.dumps(meta).encode()})

    def fill(sink: BinaryIO) -> None:
        with pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)

    write_atomic(dest or beside(events_file), fill, durable=durable)


def read(events_file: Path, path: Path | None = None) -> OpTable | None:
    """The op table at `path` (beside `events_file` when not given); None when there is none,
    or it is unreadable, of another format, or made from another version of the file (the
    caller reads the Parquet)."""
    path = path or beside(events_file)
    if not path.is_file():
        return None
    try:
        table = pa.ipc.open_file(pa.memory_map(str(path))).read_all()
        meta: dict[str, Any] = json.loads((table.schema.metadata or {})[_META_KEY])
        if meta["format"] not in (1, FORMAT) or meta["events"] != _stamp(events_file):
            return None
        cols: dict[str, np.ndarray] = {}
        for name in table.column_names:
            column = table.column(name)
            arr = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
            values = arr.to_numpy(zero_copy_only=False)
            cols[name] = values.view(np.bool_) if name in meta["bool_columns"] else values
        request_ids = [str(r) for r in meta["request_ids"]]
        if set(cols) != set(op_columns.FIELDS):
            return None
        req = cols["req"]
        if req.dtype != np.int64 or (req.size and int(req.max()) >= len(request_ids)):
            return None
    except (OSError, ValueError, KeyError, TypeError, pa.ArrowException):
        return None
    vocab = (tuple(meta["name_vocab"]), tuple(meta["kernel_vocab"]))
    return OpTable(OpColumns(cols, *vocab), request_ids)


def cached(events_file: Path, events_digest: str, request_ids: list[str]) -> OpTable | None:
    """The cached op table of the events file committed with `events_digest`, made for
    request_ids; None when there is none or it does not check out (hash, file, requests)."""
    path = cache_path(events_digest)
    if not (path.is_file() and _sidecar(path).is_file()):  # never open a FIFO or a folder
        return None
    try:
        if _sidecar(path).read_text(encoding="ascii") != integrity.digest(path):
            return None
    except (OSError, ValueError):
        return None
    found = read(events_file, path)
    if found is None or found.request_ids != request_ids:
        return None
    with contextlib.suppress(OSError):
        os.utime(path)  # recently used: the last to be pruned
    return found


def store_cached(events_file: Path, events_digest: str, table: OpTable) -> None:
    """Keep `table` in the cache for later loads, written on a background thread (the triage
    goes on meanwhile; the interpreter waits for it at exit). Best effort: a cache that cannot
    be written (read-only state directory, full disk) only costs those loads a decode."""
    with _pending_lock:
        _pending[:] = [f for f in _pending if not f.done()]
        _pending.append(_writer.submit(_store, events_file, events_digest, table))


def flush() -> None:
    """Wait until every table handed to store_cached is written (or given up)."""
    with _pending_lock:
        waiting = list(_pending)
        _pending.clear()
    for f in waiting:
        f.result()


def _store(events_file: Path, events_digest: str, table: OpTable) -> None:
    # At the lowest CPU priority (Linux nices threads one by one): the table's fresh pages
    # cost as much CPU as the decode did, and a cold triage should not wait for them.
    with contextlib.suppress(OSError, AttributeError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    path = cache_path(events_digest)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _sidecar(path).unlink(missing_ok=True)  # no stale hash beside a table being replaced
        write(events_file, table.request_ids, table.ops, dest=path,
              events_digest=events_digest, durable=False)  # fmt: skip
        digest = integrity.digest(path)
        write_atomic(_sidecar(path), lambda fh: fh.write(digest.encode("ascii")), durable=False)
        prune(CACHE_LIMIT, keep=path)
    except (OSError, ValueError, pa.ArrowException):
        return


def prune(limit: int, keep: Path | None = None) -> None:
    """Delete the least recently used tables (and their hashes) until the cache holds at most
    `limit` bytes; `keep` is never deleted."""
    try:
        tables = [(p.stat().st_mtime_ns, p.stat().st_size, p) for p in cache_dir().glob("*.arrow")]
    except OSError:
        return
    total = sum(size for _, size, _ in tables)
    for _, size, p in sorted(tables):
        if total <= limit:
            break
        if p == keep:
            continue
        _sidecar(p).unlink(missing_ok=True)
        p.unlink(missing_ok=True)
        total -= size
