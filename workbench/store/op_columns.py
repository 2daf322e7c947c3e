"""A run's op rows, read from its events Parquet file into numpy columns (no duckdb).

queries/run_ops.sql and run_op_values.sql define what the ops are; tests/
test_triage_speed_loader.py holds this reader to them. The columns are what
accel.ops.OpArrays holds, with names and kernels as codes into sorted vocabularies.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from accel.stages import MEM_TIERS, STAGES
from workbench.errors import WorkbenchError


def parse_shape_mn(shape: str | None) -> tuple[float, float]:
    """(M, N) of an op from Kineto "Input Dims" JSON; NaN when the text has no matrix input.

    M is the product of the first matrix input's leading dims (batch x rows), N the last dim of
    the last matrix input: `[[8,96,256],[256,512]]` -> (768, 512). Bias vectors are skipped.
    """
    if not shape:
        return math.nan, math.nan
    try:
        dims = json.loads(shape)
    except ValueError:
        return math.nan, math.nan
    if not isinstance(dims, list):
        return math.nan, math.nan
    mats = [
        d
        for d in dims
        if isinstance(d, list) and len(d) >= 2 and all(isinstance(x, int) for x in d)
    ]
    if not mats:
        return math.nan, math.nan
    first, last = mats[0], mats[-1]
    return float(math.prod(first[:-1])), float(last[-1])


def parse_tile(tile: str | None) -> tuple[float, float]:
    """(tm, tn) from "MxN"; NaN when absent or malformed."""
    if not tile:
        return math.nan, math.nan
    parts = tile.lower().split("x")
    try:
        if len(parts) == 2:
            return float(int(parts[0])), float(int(parts[1]))
    except ValueError:
        pass
    return math.nan, math.nan


# Columns of the events partition file that make OpArrays (queries/run_ops.sql says what they
# become; tests/test_triage_speed_loader.py holds this reader to it).
_OP_COLUMNS: Final[tuple[str, ...]] = (
    "event_id",
    "request_id",
    "stage",
    "dur_us",
    "parent_id",
    "flops",
    "bytes",
    "predicted_us",
    "fusion_group",
    "core",
    "fallback",
    "recompile",
    "mem_tier",
    "shape",
    "tile",
    "kernel",
    "name",
)
_TEXT_COLUMNS: Final[tuple[str, ...]] = (
    "request_id",
    "stage",
    "mem_tier",
    "shape",
    "tile",
    "kernel",
    "name",
)
_BATCH_ROWS: Final[int] = 1 << 17
_NULL_REQUEST: Final[int] = -2  # request code of an event without request_id (-1: not loaded)


class _Vocab:
    """Distinct values of one text column, numbered as first met, and which of them op rows
    use (Arrow dictionaries may hold values no row of the batch has)."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}
        self.used = np.zeros(0, dtype=np.bool_)

    def codes(self, arr: pa.Array) -> npt.NDArray[np.int32]:
        """Code per row of a dictionary array; -1 where null."""
        lookup = [-1 if v is None else self.ids.setdefault(v, len(self.ids)) for v in _dict(arr)]
        return np.asarray([*lookup, -1], dtype=np.int32)[_indices(arr)]

    def mark(self, codes: npt.NDArray[np.int32]) -> None:
        if not codes.size:
            return
        used = np.bincount(codes[codes >= 0], minlength=len(self.ids)) > 0
        self.used = np.pad(self.used, (0, len(self.ids) - self.used.size)) | used

    def sorted_used(self) -> tuple[list[str], npt.NDArray[np.int32]]:
        """(sorted values that op rows use, their position per code with -1 at the end)."""
        met = list(self.ids)
        used = np.pad(self.used, (0, len(met) - self.used.size))
        present = sorted(v for v, u in zip(met, used, strict=True) if u)
        index = {v: i for i, v in enumerate(present)}
        remap = np.asarray([index.get(v, -1) for v in met] + [-1], dtype=np.int32)
        return present, remap


class _Pairs:
    """Two numbers parsed from a text column's values (a shape's M and N, a tile's sizes),
    each distinct value parsed once per load."""

    def __init__(self, parse: Callable[[str], tuple[float, float]]) -> None:
        self.parse = parse
        self.parsed: dict[str, tuple[float, float]] = {}

    def _of(self, value: str | None) -> tuple[float, float]:
        if value is None:
            return (math.nan, math.nan)
        pair = self.parsed.get(value)
        if pair is None:
            pair = self.parsed[value] = self.parse(value)
        return pair

    def write(
        self,
        arr: pa.Array | None,
        rows: npt.NDArray[np.int64] | None,
        first: npt.NDArray[np.float64],
        second: npt.NDArray[np.float64],
    ) -> None:
        """Write the numbers of each row's value (of the rows `rows`; all when None) into first
        and second; NaN where null or where the file lacks the column."""
        if arr is None:
            first.fill(math.nan)
            second.fill(math.nan)
            return
        # One row per dictionary value, and a last one for nulls (index -1).
        table = np.asarray([*map(self._of, _dict(arr)), (math.nan, math.nan)], dtype=np.float64)
        idx = _indices(arr) if rows is None else _indices(arr)[rows]
        # Contiguous columns: take() from a strided column is several times slower.
        np.take(np.ascontiguousarray(table[:, 0]), idx, out=first)
        np.take(np.ascontiguousarray(table[:, 1]), idx, out=second)


def _dict(arr: pa.Array) -> list[str | None]:
    values: list[str | None] = arr.dictionary.to_pylist()
    return values


def _indices(arr: pa.Array) -> npt.NDArray[np.int64]:
    """Dictionary indices of each row, -1 where null."""
    idx = arr.indices
    if idx.null_count:
        idx = pc.fill_null(idx, -1)
    return np.asarray(idx.to_numpy(zero_copy_only=False), dtype=np.int64)


def _lookup(
    arr: pa.Array | None, n: int, table: dict[str, int], null: int
) -> npt.NDArray[np.int64]:
    """table[value] per row of a dictionary array (-1 for values not in it, `null` for nulls)."""
    if arr is None:
        return np.full(n, null, dtype=np.int64)
    lookup = [null if v is None else table.get(v, -1) for v in _dict(arr)]
    return np.asarray([*lookup, null], dtype=np.int64)[_indices(arr)]


def _numbers(arr: pa.Array | None, n: int, fill: float | bool) -> np.ndarray:
    """Values of a numeric column, `fill` where null (or where the file lacks the column)."""
    if arr is None:
        return np.full(n, fill)
    if arr.null_count:
        arr = pc.fill_null(arr, pa.scalar(fill, arr.type))
    return np.asarray(arr.to_numpy(zero_copy_only=False))


class _OpReader:
    """Accumulates the op rows of an events file, batch by batch, into arrays sized for the
    whole file: no Arrow table of the run and no second copy of a column is ever held."""

    _DTYPES: Final[dict[str, type[np.generic]]] = {
        "event_id": np.int64,
        "req": np.int64,
        "stage": np.int8,
        "dur_us": np.float64,
        "flops": np.float64,
        "bytes": np.float64,
        "predicted_us": np.float64,
        "fusion_group": np.int64,
        "core": np.int32,
        "fallback": np.bool_,
        "recompile": np.bool_,
        "mem_tier": np.int8,
        "m": np.float64,
        "n": np.float64,
        "tile_m": np.float64,
        "tile_n": np.float64,
        "kernel": np.int32,
        "name": np.int32,
    }
    # Value for nulls per numeric column; a null duration has no exclusive time (-inf -> 0).
    _FILL: Final[dict[str, float | bool]] = {
        "event_id": -1,
        "dur_us": -math.inf,
        "flops": math.nan,
        "bytes": math.nan,
        "predicted_us": math.nan,
        "fusion_group": -1,
        "core": -1,
        "fallback": False,
        "recompile": False,
    }

    def __init__(self, capacity: int, requests: dict[str, int]) -> None:
        self.cols = {k: np.empty(capacity, dtype=d) for k, d in self._DTYPES.items()}
        self.n = 0
        self.requests = requests
        self.shapes, self.tiles = _Pairs(parse_shape_mn), _Pairs(parse_tile)
        self.names = {k: _Vocab() for k in ("kernel", "name")}
        self.parents: list[tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]] = []

    def add(self, batch: pa.RecordBatch) -> None:
        n = batch.num_rows
        col = {name: batch.column(name) for name in batch.schema.names}
        req = _lookup(col.get("request_id"), n, self.requests, _NULL_REQUEST)
        stage = _lookup(col.get("stage"), n, _STAGE_INDEX, -1)
        attributed = stage >= 0
        rows = np.flatnonzero((req >= 0) & attributed)
        # Rows of skipped or unknown requests still name values (as run_op_values reads them).
        unloaded = np.flatnonzero((req == -1) & attributed)
        lo, hi = self.n, self.n + rows.size
        out = self.cols

        def put(name: str, values: np.ndarray) -> None:
            # Most batches are ops only: a whole-column copy then, no gather.
            if rows.size == n:
                out[name][lo:hi] = values
            else:
                np.take(values, rows, out=out[name][lo:hi])

        put("req", req)
        put("stage", stage)
        put("mem_tier", _lookup(col.get("mem_tier"), n, _TIER_INDEX, -1))
        for name, fill in self._FILL.items():
            put(name, _numbers(col.get(name), n, fill))
        for name, vocab in self.names.items():
            codes = vocab.codes(col[name]) if name in col else np.full(n, -1, dtype=np.int32)
            # Values the batch's ops use, and those of rows of skipped or unknown requests.
            vocab.mark(codes if rows.size == n else codes[np.append(rows, unloaded)])
            put(name, codes)
        every = None if rows.size == n else rows
        self.shapes.write(col.get("shape"), every, out["m"][lo:hi], out["n"][lo:hi])
        self.tiles.write(col.get("tile"), every, out["tile_m"][lo:hi], out["tile_n"][lo:hi])
        parent = col.get("parent_id")
        if parent is not None and parent.null_count < n:
            has = np.flatnonzero(_numbers(parent.is_valid(), n, False))
            # sum(dur_us) over children skips null durations (and is 0 for none)
            dur = _numbers(col.get("dur_us"), n, 0.0)
            self.parents.append((_numbers(parent, n, -1)[has].astype(np.int64), dur[has]))
        self.n = hi

    def finish(self) -> dict[str, np.ndarray]:
        """The op columns in event order, with exclusive time as "observed_us"."""
        # Views, not copies: pages past k (rows that were no ops) were never touched, so they
        # take no memory, where a copy would fault in every page of the run once more.
        cols = {name: a[: self.n] for name, a in self.cols.items()}
        self.cols = {}
        event_id = cols.pop("event_id")
        # Events are written in id order; a file that is not gets its ops sorted, so that every
        # sum over them (and so every figure of a triage) is the same from one run to the next.
        if not bool(np.all(event_id[1:] > event_id[:-1])):
            order = np.argsort(event_id, kind="stable")
            event_id = event_id[order]
            for name in cols:
                cols[name] = cols[name][order]
        dur = cols.pop("dur_us")
        if self.parents:
            parent = np.concatenate([p for p, _ in self.parents])
            weight = np.concatenate([w for _, w in self.parents])
            child_us, has_child = _child_sums(parent, weight, event_id)
            hit = has_child & ~np.isneginf(dur)
            dur[hit] -= child_us[hit]
        cols["observed_us"] = np.maximum(dur, 0.0, out=dur)
        return cols


def _child_sums(
    parent: npt.NDArray[np.int64], weight: npt.NDArray[np.float64], event_id: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_]]:
    """Per event: the summed weight of the rows naming it as parent, and whether any does.

    Event ids are 0..n-1 as the importers write them: then a count indexed by id, not a sort
    of the parents; each sum adds its children in the same order either way.
    """
    both = [a for a in (parent, event_id) if a.size]
    lo = min((int(a.min()) for a in both), default=0)
    hi = max((int(a.max()) for a in both), default=0)
    if lo >= 0 and hi <= 4 * (parent.size + event_id.size) + 1024:
        sums = np.asarray(np.bincount(parent, weights=weight, minlength=hi + 1), np.float64)
        counts = np.bincount(parent, minlength=hi + 1)
        return sums[event_id], counts[event_id] > 0
    ids, inv = np.unique(parent, return_inverse=True)
    child_us = np.asarray(np.bincount(inv.ravel(), weights=weight, minlength=ids.size), np.float64)
    if not ids.size:
        return np.zeros(event_id.size), np.zeros(event_id.size, dtype=np.bool_)
    pos = np.minimum(np.searchsorted(ids, event_id), ids.size - 1)
    return child_us[pos], np.asarray(ids[pos] == event_id, dtype=np.bool_)


_STAGE_INDEX: Final[dict[str, int]] = {s: i for i, s in enumerate(STAGES)}
_TIER_INDEX: Final[dict[str, int]] = {t: i for i, t in enumerate(MEM_TIERS)}


def _read_ops(path: Path, requests: dict[str, int]) -> _OpReader:
    """The op rows of one events partition file (see queries/run_ops.sql for what they are)."""
    if not path.exists():
        return _OpReader(0, requests)
    try:
        present = set(pq.read_schema(path).names)  # older files may lack columns
        pf = pq.ParquetFile(path, read_dictionary=[c for c in _TEXT_COLUMNS if c in present])
        reader = _OpReader(pf.metadata.num_rows, requests)
        columns = [c for c in _OP_COLUMNS if c in present]
        for batch in pf.iter_batches(batch_size=_BATCH_ROWS, columns=columns):
            reader.add(batch)
    except (OSError, pa.ArrowException) as exc:
        raise WorkbenchError(str(path), f"cannot read the run's events: {exc}") from exc
    return reader


# The columns of OpColumns: the OpArrays fields, names and kernels as codes.
FIELDS: Final[tuple[str, ...]] = (
    "req",
    "stage",
    "observed_us",
    "flops",
    "bytes",
    "m",
    "n",
    "tile_m",
    "tile_n",
    "fusion_group",
    "mem_tier",
    "core",
    "fallback",
    "recompile",
    "predicted_us",
    "name_code",
    "kernel_code",
)


@dataclass(frozen=True)
class OpColumns:
    """A run's op rows in event order: one numpy column per OpArrays field (`req` indexes the
    requests the reader was given), names and kernels as codes into sorted vocabularies whose
    last entry, '', stands for unknown."""

    cols: dict[str, np.ndarray]
    name_vocab: tuple[str, ...]
    kernel_vocab: tuple[str, ...]

    @property
    def size(self) -> int:
        return int(self.cols["req"].size)


def read(path: Path, requests: dict[str, int]) -> OpColumns:
    """The op rows of one events partition file; `requests` maps the request ids to load to
    their index (ops of other requests are left out, but their names count as used)."""
    return _columns(_read_ops(path, requests))


def _columns(reader: _OpReader) -> OpColumns:
    """The finished columns of a reader, names and kernels coded into sorted vocabularies."""
    cols = reader.finish()
    names, name_remap = reader.names["name"].sorted_used()
    kernels, kernel_remap = reader.names["kernel"].sorted_used()
    # Unknown names and kernels are '' (the last vocabulary entry).
    name_code = name_remap[cols.pop("name")]
    name_code[name_code < 0] = len(names)
    kernel_code = kernel_remap[cols.pop("kernel")]
    kernel_code[kernel_code < 0] = len(kernels)
    cols["name_code"], cols["kernel_code"] = name_code, kernel_code
    return OpColumns(cols, (*names, ""), (*kernels, ""))
