"""Store -> accel.ops.RunArrays for one run: the numpy input of the accelerator model."""

from __future__ import annotations

import math
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from accel.ops import OpArrays, RequestArrays, RunArrays, sorted_used
from accel.stages import OTHER, STAGES
from workbench.errors import WorkbenchError
from workbench.store import db, integrity, op_columns, op_table
from workbench.store.layout import PART_FILE, partition_dir, run_file

Progress = Callable[[str, float], None]

# Requests named like this (record_function("warmup#0")) warm the service up; not traffic.
WARMUP_NAME = r"(?i)warm[-_ ]?up"


def _f64(col: pa.ChunkedArray) -> np.ndarray:
    return np.asarray(pc.fill_null(col.cast(pa.float64()), math.nan).to_numpy(), dtype=np.float64)


def run_presence(con: duckdb.DuckDBPyConnection, run_id: str) -> tuple[bool, int]:
    """(run is committed, its number of requests)."""
    row = db.query(con, "run_presence", {"run_id": run_id}).to_pylist()[0]
    return bool(row["n_runs"]), int(row["n_requests"])


def run_exists(con: duckdb.DuckDBPyConnection, run_id: str) -> bool:
    """Whether the run is committed; reads the runs table only (a triage asks about 8 times)."""
    return bool(db.query(con, "run_committed", {"run_id": run_id}).to_pylist()[0]["n_runs"])


@dataclass(frozen=True)
class CompileRows:
    """One run's compile_phases and warmup_requests results (same parameters), fetched once
    for everything a triage reads from them: warm-up split, compiled shapes, evidence."""

    params: dict[str, Any]
    phases: pa.Table
    named: pa.Table


def compile_rows(con: duckdb.DuckDBPyConnection, run_id: str) -> CompileRows:
    params = {"run_id": run_id, "warmup_name": WARMUP_NAME}
    return CompileRows(
        params, db.query(con, "compile_phases", params), db.query(con, "warmup_requests", params)
    )


def compiled_shapes(
    con: duckdb.DuckDBPyConnection, run_id: str, rows: CompileRows | None = None
) -> frozenset[str]:
    """Shape keys compiled ahead of serving: those of warm-up requests and warm-up compiles."""
    rows = rows or compile_rows(con, run_id)
    return compiled_shape_keys(rows.phases.to_pylist(), rows.named.to_pylist())


def compiled_shape_keys(
    phases: list[dict[str, Any]], named: list[dict[str, Any]]
) -> frozenset[str]:
    """compiled_shapes from the rows of the compile_phases and warmup_requests queries."""
    keys = {r["shape_key"] for r in phases if r["phase"] == "warmup" and r["shape_key"]}
    keys |= {r["shape_key"] for r in named if r["shape_key"]}
    return frozenset(keys)


def _request_arrays(t: pa.Table) -> RequestArrays:
    """RequestArrays from rows of the run_requests query."""
    stage_cols = [f"{s}_us" for s in (*STAGES, OTHER)]
    stage_us = (
        np.column_stack([_f64(t.column(c)) for c in stage_cols])
        if t.num_rows
        else (np.zeros((0, len(stage_cols))))
    )
    return RequestArrays(
        request_id=[str(x) for x in t.column("request_id").to_pylist()],
        arrival_us=_f64(t.column("arrival_us")),
        start_us=_f64(t.column("start_us")),
        latency_us=_f64(t.column("latency_us")),
        stage_us=np.nan_to_num(stage_us, nan=0.0),
        batch_size=np.asarray(pc.fill_null(t.column("batch_size"), -1).to_numpy(), dtype=np.int32),
        shape_key=[k or "" for k in t.column("shape_key").to_pylist()],
        batch_id=np.asarray(pc.fill_null(t.column("batch_id"), -1).to_numpy(), dtype=np.int64),
    )


def load_requests(
    con: duckdb.DuckDBPyConnection, run_id: str, skip_requests: Collection[str] = ()
) -> RequestArrays:
    t = db.query(con, "run_requests", {"run_id": run_id, "skip_requests": list(skip_requests)})
    return _request_arrays(t)


def verify(con: duckdb.DuckDBPyConnection, run_id: str) -> bool:
    """Check the run's files against the hashes recorded at commit before computing on them:
    WorkbenchError naming a damaged or missing Parquet file (runs from before hashes pass).
    Returns whether its op table, if any, may be used (False when it was damaged)."""
    store = db.store_of(con)
    return not integrity.verify_run(store, run_file(store, run_id))


def has_op_table(con: duckdb.DuckDBPyConnection, run_id: str) -> bool:
    """Whether the run's op columns load without decoding (an op table, see op_table): a
    scheduling hint, so the cached table's own checks are left to the load."""
    events = _events_file(con, run_id)
    digest = _events_digest(con, run_id, events)
    return op_table.beside(events).is_file() or (
        digest is not None and op_table.cache_path(digest).is_file()
    )


def _events_digest(con: duckdb.DuckDBPyConnection, run_id: str, events: Path) -> str | None:
    """The content hash the run's events file was committed with (None for runs from before
    hashes were recorded, which get no cached op table)."""
    store = db.store_of(con)
    try:
        hashes = integrity.recorded(run_file(store, run_id))
    except WorkbenchError:
        return None
    return None if hashes is None else hashes.get(events.relative_to(store).as_posix())


def _events_file(con: duckdb.DuckDBPyConnection, run_id: str) -> Path:
    return partition_dir(db.store_of(con), "events", run_id) / PART_FILE


def _request_index(requests: pa.Table, skip_requests: Collection[str]) -> dict[str, int]:
    """Request id -> index among the loaded requests (run_requests order, skipped left out)."""
    skip = set(skip_requests)
    kept = (r for r in requests.column("request_id").to_pylist() if r not in skip)
    return {r: i for i, r in enumerate(kept)}


def _op_table(
    con: duckdb.DuckDBPyConnection, run_id: str, all_ids: list[str], table_ok: bool
) -> op_table.OpTable | None:
    """The run's op table: one committed beside its events file (older stores), else the
    cached one, else, for a big run, one made now from the Parquet and cached for next time;
    None for a small run or one without recorded hashes (its Parquet is read)."""
    events = _events_file(con, run_id)
    stored = op_table.read(events) if table_ok else None
    if stored is not None:
        return stored
    digest = _events_digest(con, run_id, events)
    if digest is None:
        return None
    # The footer says how many events (a load verified the file against `digest` already).
    if pq.ParquetFile(events).metadata.num_rows < op_table.MIN_EVENTS:
        return None
    hit = op_table.cached(events, digest, all_ids)
    if hit is not None:
        return hit
    made = op_table.OpTable(op_columns.read(events, {r: i for i, r in enumerate(all_ids)}), all_ids)
    op_table.store_cached(events, digest, made)
    return made


def _load_ops(
    con: duckdb.DuckDBPyConnection,
    run_id: str,
    requests: dict[str, int],
    all_ids: list[str],
    texts: bool,
    table_ok: bool = True,
) -> OpArrays:
    table = _op_table(con, run_id, all_ids, table_ok)
    found = (
        table.for_requests(requests)
        if table is not None
        else op_columns.read(_events_file(con, run_id), requests)
    )
    cols = dict(found.cols)
    kernel_vocab, kernel_code = found.kernel_vocab, cols["kernel_code"]
    # Once here, not in each of the triage's name_codes calls: the names the loaded ops use,
    # sorted (the stored vocabulary also holds '' and the names of ops left out).
    name_code, name_vocab = sorted_used(cols["name_code"], found.name_vocab)
    cols["name_code"] = name_code
    return OpArrays(
        **{name: cols[name] for name in op_columns.FIELDS},
        kernel=np.asarray(kernel_vocab, dtype=object)[kernel_code].tolist() if texts else [],
        name=np.asarray(name_vocab, dtype=object)[name_code].tolist() if texts else [],
        name_vocab=name_vocab,
        name_vocab_used=True,
        kernel_vocab=kernel_vocab,
    )


def load_run_arrays(
    con: duckdb.DuckDBPyConnection,
    run_id: str,
    *,
    skip_requests: Collection[str] = (),
    progress: Progress | None = None,
    texts: bool = True,
    shapes: frozenset[str] | None = None,
    table_ok: bool | None = None,
) -> RunArrays:
    """Every request and attributed op of run_id, except skip_requests (and their ops);
    WorkbenchError when the run is not there. `texts` False: no per-op name / kernel lists
    (OpArrays.name_code and kernel_code carry them; saves seconds and memory on big runs).
    `shapes`: compiled_shapes(con, run_id) when the caller has it. `table_ok`: the caller
    has checked the run is there and verified it (a triage's RunContext.table_ok)."""
    if table_ok is None:
        if not run_exists(con, run_id):
            raise WorkbenchError(repr(run_id), "no such run in the store")
        table_ok = verify(con, run_id)
    if progress:
        progress(f"loading requests of {run_id}", 0.0)
    all_requests = db.query(con, "run_requests", {"run_id": run_id, "skip_requests": []})
    index = _request_index(all_requests, skip_requests)
    all_ids = [r for r in all_requests.column("request_id").to_pylist() if r is not None]
    keep = np.asarray([r in index for r in all_requests.column("request_id").to_pylist()])
    requests = _request_arrays(all_requests.filter(pa.array(keep, pa.bool_())))
    del all_requests
    if progress:
        progress(f"loading ops of {run_id}", 0.3)
    ops = _load_ops(con, run_id, index, all_ids, texts, table_ok)
    if progress:
        progress(f"loaded {run_id}", 1.0)
    if shapes is None:
        shapes = compiled_shapes(con, run_id)
    return RunArrays(run_id=run_id, ops=ops, requests=requests, compiled_shapes=shapes)


def _kept(values: list[str], keep: np.ndarray) -> list[str]:
    if not values:
        return []
    kept: list[str] = np.asarray(values, dtype=object)[keep].tolist()
    return kept


def drop_requests(run: RunArrays, request_ids: Collection[str]) -> RunArrays:
    """run without the given requests and their ops (request indices renumbered)."""
    drop = set(request_ids)
    keep = np.array([r not in drop for r in run.requests.request_id], dtype=bool)
    if keep.all():
        return run
    req = run.requests
    new_index = np.cumsum(keep) - 1
    op_keep = keep[run.ops.req]
    ops = run.ops
    kept_ops = OpArrays(
        req=new_index[ops.req[op_keep]].astype(np.int64),
        stage=ops.stage[op_keep],
        observed_us=ops.observed_us[op_keep],
        flops=ops.flops[op_keep],
        bytes=ops.bytes[op_keep],
        m=ops.m[op_keep],
        n=ops.n[op_keep],
        tile_m=ops.tile_m[op_keep],
        tile_n=ops.tile_n[op_keep],
        fusion_group=ops.fusion_group[op_keep],
        mem_tier=ops.mem_tier[op_keep],
        core=ops.core[op_keep],
        fallback=ops.fallback[op_keep],
        recompile=ops.recompile[op_keep],
        predicted_us=ops.predicted_us[op_keep],
        kernel=_kept(ops.kernel, op_keep),
        name=_kept(ops.name, op_keep),
        name_code=ops.name_code[op_keep] if ops.name_code.size == ops.size else ops.name_code,
        name_vocab=ops.name_vocab,
        kernel_code=(
            ops.kernel_code[op_keep] if ops.kernel_code.size == ops.size else ops.kernel_code
        ),
        kernel_vocab=ops.kernel_vocab,
    )
    kept_req = RequestArrays(
        request_id=_kept(req.request_id, keep),
        arrival_us=req.arrival_us[keep],
        start_us=req.start_us[keep],
        latency_us=req.latency_us[keep],
        stage_us=req.stage_us[keep],
        batch_size=req.batch_size[keep],
        shape_key=_kept(req.shape_key, keep),
        batch_id=None if req.batch_id is None else req.batch_id[keep],
    )
    return RunArrays(
        run_id=run.run_id, ops=kept_ops, requests=kept_req, compiled_shapes=run.compiled_shapes
    )
