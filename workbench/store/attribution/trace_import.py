"""A decoded Chrome/Kineto trace -> the events, requests and run-metadata of one run."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from accel.grouping import dense_ids
from accel.stages import OTHER, STAGES
from workbench.store import schema
from workbench.store.attribution.batch_mates import batch_mates
from workbench.store.attribution.engine_steps import UNIT as ENGINE_STEP
from workbench.store.attribution.engine_steps import StepFacts, step_facts
from workbench.store.attribution.nesting import enclosing
from workbench.store.attribution.requests import (
    Requests,
    assign,
    exclusive_times,
    find_requests,
    shape_keys,
)
from workbench.store.attribution.rules import Rules, distinct_pairs, pair_mask, stage_codes
from workbench.store.attribution.torch_compile import mark_compiles, mark_fallback
from workbench.store.columns import null_arrays
from workbench.store.columns.args import (
    DEVICE_CATEGORIES,
    RUNTIME_CATEGORIES,
    ArgColumns,
    category_mask,
    launch_links,
)
from workbench.store.columns.packed_text import PackedText
from workbench.store.columns.trace_columns import TraceColumns

I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]
F64 = npt.NDArray[np.float64]


@dataclass
class GraphReplays:
    """CUDA/HIP graph launches, the kernels linked to them, and launches with none linked."""

    launches: int
    kernels: int
    unlinked: int


def graph_replays(
    rules: Rules, pairs: Any, runtime: Any, device: Any, launcher: I64
) -> GraphReplays:
    """Count graph launches and the kernels the trace links to them (by correlation / flow)."""
    is_launch = runtime & pair_mask(pairs, lambda _c, n: bool(rules.graph_launch.search(n or "")))
    n_launch = int(is_launch.sum())
    if n_launch == 0:
        return GraphReplays(0, 0, 0)
    linked = device & (launcher >= 0)
    linked[linked] = is_launch[launcher[linked]]
    with_kernels = np.unique(launcher[linked]).size
    return GraphReplays(n_launch, int(linked.sum()), n_launch - with_kernels)


@dataclass
class Attributed:
    """What attribution produced, for the tables and the report."""

    events: pa.Table
    requests: pa.Table
    request_unit: str
    compilations: int
    background_events: int
    graph: GraphReplays = field(default_factory=lambda: GraphReplays(0, 0, 0))
    unattributed_by_category: dict[str, tuple[int, float]] = field(default_factory=dict)
    # The args column when decoded packed: `events` then lacks it (layout writes it back in).
    packed_args: PackedText | None = None


def _masked(values: I64, valid: npt.NDArray[np.bool_], typ: pa.DataType) -> pa.Array:
    return pa.array(values, type=typ, mask=~valid)


def _request_ids(n: int) -> list[str]:
    width = max(4, len(str(n)))
    return [f"r{k:0{width}d}" for k in range(n)]


def attribute(
    cols: TraceColumns,
    args: ArgColumns,
    rules: Rules,
    pattern: re.Pattern[str] | None,
) -> Attributed:
    """Stages, requests, launch and nesting links, compile marks; columns in store shape."""
    n = cols.n
    ts, dur = cols.ts, cols.dur
    end = ts + dur
    t0 = float(ts.min()) if n else 0.0
    pairs = distinct_pairs(cols.category, cols.name)
    device = category_mask(cols.category, DEVICE_CATEGORIES)
    runtime = category_mask(cols.category, RUNTIME_CATEGORIES)
    spans = cols.phase != ord("i")
    spans &= cols.phase != ord("I")
    spans &= cols.phase != ord("C")

    launcher = launch_links(cols, args, device, runtime)
    host = ~device
    parent = np.full(n, -1, dtype=np.int64)
    hidx = np.flatnonzero(host)
    if hidx.size:
        inner = enclosing(cols.thread[hidx], ts[hidx], end[hidx])
        ok = inner >= 0
        parent[hidx[ok]] = hidx[inner[ok]]
    parent[device] = launcher[device]

    stage, prio = stage_codes(rules, pairs)
    req = find_requests(rules, pairs, ts, dur, cols.thread, spans & host, pattern)
    request_of = assign(req, ts, cols.thread, device, launcher)
    excl = exclusive_times(req, request_of, ts, end, stage, prio)
    marks = mark_compiles(rules, pairs, ts, end, cols.thread, spans & host)
    fallback = mark_fallback(rules, pairs, ts, end, cols.thread, spans & host, request_of)

    ids = _request_ids(req.n)
    ids_arr = pa.array(ids, type=pa.string())
    request_idx = pa.array(request_of, mask=request_of < 0)
    request_id = ids_arr.take(request_idx)
    stage_idx = pa.array(stage, mask=stage < 0)
    stage_names = pa.array(list(STAGES), type=pa.string())
    stage_arr = stage_names.take(stage_idx)
    category = cols.category
    name = cols.name
    kernel_mask = category_mask(category, frozenset({"kernel"}))
    is_kernel = pa.array(kernel_mask)
    name_str = name.cast(pa.string())
    kernel = _masked_view(name_str, is_kernel)
    lanes = kernel_lanes(kernel_mask, args.device, args.stream, cols)
    nulls_f = null_arrays.nulls(n, pa.float64())
    columns: dict[str, Any] = {
        "event_id": pa.array(np.arange(n, dtype=np.int64)),
        "request_id": request_id,
        "stage": stage_arr,
        "category": category.cast(pa.string()),
        "name": name_str,
        "ts_us": pa.array(ts - t0),
        "dur_us": pa.array(dur),
        "device": args.device,
        "core": lanes,
        "stream": args.stream,
        "pid": _masked(cols.pid, cols.pid_valid, pa.int64()),
        "tid": _masked(cols.tid, cols.tid_valid, pa.int64()),
        "correlation": _masked(args.correlation, args.correlation_valid, pa.int64()),
        "parent_id": pa.array(parent, mask=parent < 0),
        "shape": args.shape,
        "flops": args.flops,
        "bytes": args.nbytes,
        "kernel": kernel,
        "tile": null_arrays.nulls(n, pa.string()),
        "fusion_group": null_arrays.nulls(n, pa.int64()),
        "mem_tier": null_arrays.nulls(n, pa.string()),
        "predicted_us": nulls_f,
        "fallback": fallback,
        "recompile": pa.array(marks.recompile),
        "compile_id": marks.compile_id,
        "args": args.text,
        # A run of one file: where in a fleet is the runs row's business (null here).
        "host": null_arrays.nulls(n, pa.string()),
        "rank": null_arrays.nulls(n, pa.int32()),
        "window": null_arrays.nulls(n, pa.int32()),
    }
    packed = args.text if isinstance(args.text, PackedText) else None
    file_schema = schema.EVENTS_FILE
    if packed is not None:
        del columns["args"]
        file_schema = file_schema.remove(file_schema.get_field_index("args"))
    events = pa.table(columns, schema=file_schema)
    del columns
    # Compilations (fake tensors) and compiled code (flattened views) do not show the input.
    usable = np.asarray(marks.compile_id.is_null().to_numpy(zero_copy_only=False), np.bool_)
    compiled = ~np.asarray(pc.fill_null(fallback, True).to_numpy(zero_copy_only=False), np.bool_)
    usable &= ~(compiled & (request_of >= 0))
    region = spans & pair_mask(pairs, lambda _c, nm: bool(rules.compile_region.search(nm or "")))
    keys = shape_keys(req, request_of, ts, args.shape, usable, cols.thread, region)
    names = _names(req, cols)
    steps = step_facts(rules, names) if req.unit == ENGINE_STEP else None
    mates = batch_mates(kernel_mask, lanes, ts, dur, request_of, req.n) if steps is None else None
    waiting = (
        spans & host & pair_mask(pairs, lambda _c, nm: bool(rules.queue_wait.search(nm or "")))
    )
    requests = request_rows(
        req,
        excl,
        names,
        ids,
        t0,
        request_of,
        ts,
        args.shape,
        keys=keys,
        steps=steps,
        mates=mates,
        served=service_starts(waiting, request_of, ts, dur, req.n),
    )
    return Attributed(
        events=events,
        requests=requests,
        request_unit=req.unit,
        compilations=marks.compilations,
        background_events=int((request_of < 0).sum()),
        unattributed_by_category=unattributed(cols.category, stage),
        graph=graph_replays(rules, pairs, runtime, device, launcher),
        packed_args=packed,
    )


def _masked_view(values: pa.Array, keep: pa.Array) -> pa.Array:
    """values where keep is true, null elsewhere: the same string buffers under a new validity
    bitmap (an if_else would copy every kernel name, ~16 MB on a 200 MB trace)."""
    values = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
    if values.offset or keep.offset or keep.null_count or not pa.types.is_string(values.type):
        return pc.if_else(keep, values, pa.scalar(None, values.type))
    valid = pc.and_(keep, values.is_valid()) if values.null_count else keep
    bitmap = valid.buffers()[1]
    _, offsets, data = values.buffers()
    return pa.StringArray.from_buffers(len(values), offsets, data, bitmap)


def kernel_lanes(
    kernel: npt.NDArray[np.bool_],
    device_id: pa.Array | pa.ChunkedArray,
    stream: pa.Array | pa.ChunkedArray,
    cols: TraceColumns,
) -> pa.Array:
    """The `core` of kernels: one lane per (device, stream) they ran on, numbered from 0 in
    sorted order; null for everything else (host ops, and copies, which move data rather than
    share the compute). A trace shows streams, not the cores inside a device, and a shard of a
    kernel per stream is what placement and core imbalance can see in it."""
    n = cols.n
    # args' device/stream when given, else where Kineto puts device activity: pid, tid.
    dev = _ints_or(device_id, cols.pid, cols.pid_valid)
    lane = _ints_or(stream, cols.tid, cols.tid_valid)
    idx = np.flatnonzero(kernel)
    out = np.full(n, -1, dtype=np.int64)
    if idx.size:
        # (device, stream) numbered in sorted order: each numbered alone, then the pair as one
        # key (dense_ids: a table or a running count, not a sort of every kernel row).
        dev_id, _ = dense_ids(dev[idx])
        lane_id, n_lanes = dense_ids(lane[idx])
        out[idx] = dense_ids(dev_id * n_lanes + lane_id)[0]
    return pa.array(out.astype(np.int32), mask=out < 0)


def _ints_or(values: pa.Array | pa.ChunkedArray, fallback: I64, fallback_ok: Any) -> I64:
    """values as int64, the fallback where values are null (and -1 where both are missing)."""
    present = np.asarray(pc.is_valid(values).to_numpy(zero_copy_only=False), np.bool_)
    v = np.asarray(pc.fill_null(values, 0).to_numpy(zero_copy_only=False), np.int64)
    alt = np.where(np.asarray(fallback_ok, dtype=np.bool_), np.asarray(fallback, np.int64), -1)
    return np.where(present, v, alt)


def _names(req: Requests, cols: TraceColumns) -> list[str]:
    if req.unit == "run":
        return ["run"]
    # Looked up in the dictionary's values: building the name column as Arrow to take ~3k rows
    # from it cost ~6 ms a file.
    values = cols.names
    return [values[c] for c in cols.name_codes[req.event].tolist()]


def service_starts(
    waiting: npt.NDArray[np.bool_], request_of: I64, ts: F64, dur: F64, n_requests: int
) -> F64 | None:
    """Per request, where its first queue-wait span (rules' requests.queue_wait) ends: the
    service starts there (NaN: the request names no wait); None when the trace names none."""
    at = np.flatnonzero(waiting & (request_of >= 0))
    if not at.size:
        return None
    at = at[np.argsort(ts[at], kind="stable")]
    reqs, first = np.unique(request_of[at], return_index=True)
    out = np.full(n_requests, np.nan)
    out[reqs] = ts[at[first]] + dur[at[first]]
    return out


def request_rows(
    req: Requests,
    excl: F64,
    names: list[str],
    ids: list[str] | None,
    t0: float,
    request_of: I64,
    ts: F64,
    shape: pa.Array | pa.ChunkedArray,
    keys: list[str | None] | None = None,
    steps: StepFacts | None = None,
    mates: tuple[I64, I64] | None = None,
    served: F64 | None = None,
) -> pa.Table:
    """The requests table (REQUESTS_FILE) from windows and exclusive stage times; `served`
    (service_starts) moves a request's start past its annotated wait for the server.

    `keys` are the shape keys when the caller knows compile spans and threads; else each request
    is keyed by its first operator with tensor dims (attribution.shape_keys). Engine steps
    (`steps`) are keyed by phase, batch size and tokens, and each is its own batch; else
    `mates` (batch_mates.batch_mates: batch id and size per request) gives the batches.
    """
    if steps is not None:
        keys = steps.keys()
    elif keys is None:
        keys = shape_keys(req, request_of, ts, shape)
    start = req.start - t0
    end = req.end - t0
    latency = req.end - req.start
    other = latency - excl.sum(axis=1)
    # Float rounding may leave -1e-9; the invariant is exact to tolerance, not below zero.
    other = np.where(np.abs(other) < 1e-6 * np.maximum(latency, 1.0), np.maximum(other, 0), other)
    cols_out: dict[str, Any] = {
        "request_id": pa.array(ids if ids is not None else _request_ids(req.n), pa.string()),
        "name": pa.array(names, type=pa.string()),
        # The profiler sees a request when the server starts handling it (its arrival), unless
        # the request names its wait for the server.
        "arrival_us": pa.array(start),
        "start_us": pa.array(
            start
            if served is None
            else np.where(np.isfinite(served), np.clip(served - t0, start, end), start)
        ),
        "end_us": pa.array(end),
        "latency_us": pa.array(latency),
        "shape_key": pa.array(keys, pa.string()),
    }
    for k, s in enumerate(STAGES):
        cols_out[f"{s}_us"] = pa.array(excl[:, k])
    cols_out[f"{OTHER}_us"] = pa.array(other)
    n = req.n
    if steps is not None:
        cols_out["batch_id"] = pa.array(np.arange(n, dtype=np.int64))
        cols_out["batch_size"] = pa.array(steps.batch_size, pa.int32(), mask=steps.batch_size < 0)
    elif mates is not None:
        cols_out["batch_id"] = pa.array(mates[0], pa.int64())
        cols_out["batch_size"] = pa.array(mates[1].astype(np.int32), pa.int32())
    for f in schema.REQUESTS_FILE:
        if f.name not in cols_out:
            cols_out[f.name] = null_arrays.nulls(n, f.type)
    return pa.table({f.name: cols_out[f.name] for f in schema.REQUESTS_FILE}).cast(
        schema.REQUESTS_FILE
    )


def unattributed(category: pa.Array | pa.ChunkedArray, stage: I64) -> dict[str, tuple[int, float]]:
    """category -> (events, share of them without a stage)."""
    if isinstance(category, pa.ChunkedArray):
        category = category.combine_chunks()
    enc = category if isinstance(category, pa.DictionaryArray) else pc.dictionary_encode(category)
    idx = np.asarray(enc.indices.fill_null(-1).to_numpy(zero_copy_only=False), dtype=np.int64)
    cats: list[str | None] = enc.dictionary.to_pylist()
    k = len(cats) + 1
    total = np.bincount(idx + 1, minlength=k)
    none = np.bincount(idx + 1, weights=(stage < 0).astype(np.float64), minlength=k)
    out: dict[str, tuple[int, float]] = {}
    for j in range(k):
        if total[j]:
            name = "(none)" if j == 0 else (cats[j - 1] or "(none)")
            out[name] = (int(total[j]), float(none[j] / total[j]))
    return out
