"""Store -> accel.ops.RunArrays for one run: the numpy input of the accelerator model."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Collection

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from accel.ops import OpArrays, RequestArrays, RunArrays
from accel.stages import MEM_TIERS, OTHER, STAGES
from workbench.errors import WorkbenchError
from workbench.store import db

Progress = Callable[[str, float], None]

# Requests named like this (record_function("warmup#0")) warm the service up; not traffic.
WARMUP_NAME = r"(?i)warm[-_ ]?up"


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


def _f64(col: pa.ChunkedArray) -> np.ndarray:
    return np.asarray(pc.fill_null(col.cast(pa.float64()), math.nan).to_numpy(), dtype=np.float64)


def run_presence(con: duckdb.DuckDBPyConnection, run_id: str) -> tuple[bool, int]:
    """(run is committed, its number of requests)."""
    row = db.query(con, "run_presence", {"run_id": run_id}).to_pylist()[0]
    return bool(row["n_runs"]), int(row["n_requests"])


def run_exists(con: duckdb.DuckDBPyConnection, run_id: str) -> bool:
    return run_presence(con, run_id)[0]


def compiled_shapes(con: duckdb.DuckDBPyConnection, run_id: str) -> frozenset[str]:
    """Shape keys compiled ahead of serving: those of warm-up requests and warm-up compiles."""
    params = {"run_id": run_id, "warmup_name": WARMUP_NAME}
    phases = db.query(con, "compile_phases", params).to_pylist()
    named = db.query(con, "warmup_requests", params).to_pylist()
    keys = {r["shape_key"] for r in phases if r["phase"] == "warmup" and r["shape_key"]}
    keys |= {r["shape_key"] for r in named if r["shape_key"]}
    return frozenset(keys)


def load_requests(
    con: duckdb.DuckDBPyConnection, run_id: str, skip_requests: Collection[str] = ()
) -> RequestArrays:
    t = db.query(con, "run_requests", {"run_id": run_id, "skip_requests": list(skip_requests)})
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


def load_ops(
    con: duckdb.DuckDBPyConnection, run_id: str, skip_requests: Collection[str] = ()
) -> OpArrays:
    stages = list(STAGES)
    values: dict[str, list[str]] = {"shape": [], "tile": [], "kernel": [], "name": []}
    for row in db.query(con, "run_op_values", {"run_id": run_id, "stages": stages}).to_pylist():
        values[row["kind"]].append(row["value"])
    t = db.query(
        con,
        "run_ops",
        {
            "run_id": run_id,
            "stages": stages,
            "tiers": list(MEM_TIERS),
            "shapes": values["shape"],
            "tiles": values["tile"],
            "kernels": values["kernel"],
            "names": values["name"],
        },
    )
    # duckdb returns join output in no fixed order: put ops in event order so that every sum
    # over them, and so every figure of a triage, is the same from one run to the next.
    event_id = np.asarray(t.column("event_id").to_numpy(), dtype=np.int64)
    in_order = bool(np.all(event_id[1:] > event_id[:-1]))  # single-threaded scans come sorted
    sel = None if in_order else np.argsort(event_id, kind="stable")
    del event_id
    renumber = None
    if skip_requests:
        ids = db.query(con, "run_requests", {"run_id": run_id, "skip_requests": []})
        skip = set(skip_requests)
        keep = np.array([r not in skip for r in ids.column("request_id").to_pylist()], dtype=bool)
        req_all = np.asarray(t.column("req").to_numpy(), dtype=np.int64)
        kept = np.flatnonzero(keep[req_all if sel is None else req_all[sel]])
        sel = kept if sel is None else sel[kept]
        renumber = np.cumsum(keep) - 1
    # Columns leave the Arrow table as they are converted, so that peak memory holds about one
    # copy of the ops, not two.
    columns = {name: t.column(name) for name in t.column_names}
    del t

    def col(name: str, dtype: type[np.generic]) -> np.ndarray:
        values = columns.pop(name)
        # Without nulls (most columns) Arrow hands over its values as they are: one copy less.
        arr = _f64(values) if dtype is np.float64 and values.null_count else values.to_numpy()
        out: np.ndarray = (arr if sel is None else arr[sel]).astype(dtype, copy=False)
        return out

    # Parse each distinct text once; the trailing NaN entry serves id -1.
    shape_ids, tile_ids = col("shape_id", np.int32), col("tile_id", np.int32)
    mn = [parse_shape_mn(v) for v in values["shape"]] + [(math.nan, math.nan)]
    tiles = [parse_tile(v) for v in values["tile"]] + [(math.nan, math.nan)]
    kernel_names = np.array([*values["kernel"], ""], dtype=object)
    op_names = np.array([*values["name"], ""], dtype=object)
    name_id = col("name_id", np.int32)
    name_code = np.where(name_id < 0, len(values["name"]), name_id).astype(np.int32)  # -1: ''
    return OpArrays(
        req=col("req", np.int64) if renumber is None else renumber[col("req", np.int64)],
        stage=col("stage", np.int8),
        observed_us=col("observed_us", np.float64),
        flops=col("flops", np.float64),
        bytes=col("bytes", np.float64),
        m=np.array([x[0] for x in mn])[shape_ids],
        n=np.array([x[1] for x in mn])[shape_ids],
        tile_m=np.array([x[0] for x in tiles])[tile_ids],
        tile_n=np.array([x[1] for x in tiles])[tile_ids],
        fusion_group=col("fusion_group", np.int64),
        mem_tier=col("mem_tier", np.int8),
        core=col("core", np.int32),
        fallback=col("fallback", np.bool_),
        recompile=col("recompile", np.bool_),
        predicted_us=col("predicted_us", np.float64),
        kernel=kernel_names[col("kernel_id", np.int64)].tolist(),
        name=op_names[name_code].tolist(),
        name_code=name_code,
        name_vocab=tuple(op_names.tolist()),
    )


def load_run_arrays(
    con: duckdb.DuckDBPyConnection,
    run_id: str,
    *,
    skip_requests: Collection[str] = (),
    progress: Progress | None = None,
) -> RunArrays:
    """Every request and attributed op of run_id, except skip_requests (and their ops);
    WorkbenchError when the run is not there."""
    if not run_exists(con, run_id):
        raise WorkbenchError(repr(run_id), "no such run in the store")
    if progress:
        progress(f"loading requests of {run_id}", 0.0)
    requests = load_requests(con, run_id, skip_requests)
    if progress:
        progress(f"loading ops of {run_id}", 0.3)
    ops = load_ops(con, run_id, skip_requests)
    if progress:
        progress(f"loaded {run_id}", 1.0)
    return RunArrays(
        run_id=run_id, ops=ops, requests=requests, compiled_shapes=compiled_shapes(con, run_id)
    )


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
    )
    kept_req = RequestArrays(
        request_id=[r for r, k in zip(req.request_id, keep, strict=True) if k],
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
