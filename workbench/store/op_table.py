"""A big run's op table: its op columns, made once at commit, mapped on load without decoding.

The events Parquet file stays the truth. Beside it, in the same partition directory, a run of
at least MIN_EVENTS events gets `_ops.arrow`: the columns op_columns.read makes for every
request of the run, in an uncompressed Arrow IPC file that a load memory-maps (no decoding, no
copy; the pages come from the page cache). On 5M ops that turns a 0.4-0.8 s load into a few
ms, for about 95 bytes per op of disk. The table names the events file it came from (size and
footer hash) and is ignored when that no longer matches, so a rewritten Parquet file is never
shadowed. The leading "_" keeps Parquet dataset readers of the directory off it.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Final

import numpy as np
import pyarrow as pa

from workbench.store import op_columns
from workbench.store.atomic import write_atomic
from workbench.store.op_columns import OpColumns

FILE: Final[str] = "_ops.arrow"
FORMAT: Final[int] = 1
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
    """Where the op table of an events file is (whether or not there is one)."""
    return events_file.parent / FILE


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


def write(events_file: Path, request_ids: list[str], ops: OpColumns | None = None) -> None:
    """Make the op table of `events_file` (for requests request_ids) and write it beside the
    file: to a temporary file, then renamed into place. `ops`: the file's op columns when the
    caller has them already (op_columns.of_table of the table it wrote), else read here."""
    if ops is None:
        ops = op_columns.read(events_file, {r: i for i, r in enumerate(request_ids)})
    bools = [name for name, col in ops.cols.items() if col.dtype == np.bool_]
    meta = {
        "format": FORMAT,
        "events": _stamp(events_file),
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

    write_atomic(beside(events_file), fill)


def read(events_file: Path) -> OpTable | None:
    """The op table beside `events_file`; None when there is none, or it is unreadable, of
    another format, or made from another version of the file (the caller reads the Parquet)."""
    path = beside(events_file)
    if not path.is_file():
        return None
    try:
        table = pa.ipc.open_file(pa.memory_map(str(path))).read_all()
        meta: dict[str, Any] = json.loads((table.schema.metadata or {})[_META_KEY])
        if meta["format"] != FORMAT or meta["events"] != _stamp(events_file):
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
