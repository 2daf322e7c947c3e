"""Store v1 columns of a generated run (events, compiles), as plain numpy arrays and lists."""

from __future__ import annotations

import json
from typing import Final

import numpy as np

from accel.ops import F64

Column = np.ndarray | list[str | None] | list[str]
_GRID: Final[float] = 1024.0  # times are multiples of 2**-10 us, so sums of them are exact


def quantize_us(x: F64) -> F64:
    """Round to the 2**-10 us grid (keeps every later sum of times exact)."""
    return np.asarray(np.round(np.asarray(x, dtype=np.float64) * _GRID) / _GRID, dtype=np.float64)


def codes(labels: np.ndarray, table: dict[str, int]) -> np.ndarray:
    """Int8 codes of a string array through `table` (-1 when absent), one lookup per distinct."""
    uniq, inv = np.unique(labels, return_inverse=True)
    lut = np.array([table.get(str(u), -1) for u in uniq], dtype=np.int8)
    return lut[inv.ravel()]


def event_columns(
    o: dict[str, np.ndarray], req_ids: list[str], compile_ids: dict[int, str]
) -> dict[str, Column]:
    n = o["req"].size
    is_compile = o["name"] == "compile"
    cid: list[str | None] = [None] * n
    for i in np.flatnonzero(is_compile):
        cid[int(i)] = compile_ids.get(int(o["batch"][i]))
    args = [json.dumps({"batch_id": int(b)}) for b in o["batch"]]
    tier = [str(t) if t else None for t in o["tier"]]
    return {
        "event_id": np.arange(n, dtype=np.int64),
        "request_id": [req_ids[int(i)] for i in o["req"]],
        "stage": [str(s) for s in o["stage"]],
        "category": [str(c) for c in o["category"]],
        "name": [str(x) for x in o["name"]],
        "ts_us": o["ts"].astype(np.float64),
        "dur_us": o["dur"].astype(np.float64),
        "device": np.zeros(n, dtype=np.int32),
        "core": o["core"].astype(np.int32),
        "stream": np.where(o["core"] >= 0, o["core"] + 7, 0).astype(np.int32),
        "pid": np.full(n, 1000, dtype=np.int64),
        "tid": np.where(o["core"] >= 0, 2000 + o["core"], 1000).astype(np.int64),
        "correlation": np.arange(n, dtype=np.int64),
        "parent_id": np.full(n, -1, dtype=np.int64),
        "shape": [str(s) if s else None for s in o["shape"]],
        "flops": o["flops"].astype(np.float64),
        "bytes": o["nbytes"].astype(np.float64),
        "kernel": [str(k) if k else None for k in o["kernel"]],
        "tile": [
            f"{int(a)}x{int(b)}" if np.isfinite(a) else None
            for a, b in zip(o["tile_m"], o["tile_n"], strict=True)
        ],
        "fusion_group": o["fusion_group"].astype(np.int64),
        "mem_tier": tier,
        "predicted_us": o["predicted"].astype(np.float64),
        "fallback": o["fallback"].astype(bool),
        "recompile": o["recompile"].astype(bool),
        "compile_id": cid,
        "args": args,
    }


def with_warmup_events(events: dict[str, Column], compiles: dict[str, Column]) -> dict[str, Column]:
    """Prepend the warm-up compiles as background events (no request) carrying their shape.

    This is how a reader learns which shapes were compiled ahead of serving.
    """
    ids = [str(c) for c in compiles["compile_id"]]
    warm = [i for i, c in enumerate(ids) if c.startswith("w/")]
    nw = len(warm)
    start = np.asarray(compiles["start_us"], dtype=np.float64)[warm]
    dur = np.asarray(compiles["duration_us"], dtype=np.float64)[warm]
    shapes = [str(compiles["shape_key"][i]) for i in warm]
    nan = np.full(nw, np.nan)
    none: list[str | None] = [None] * nw
    add: dict[str, Column] = {
        "event_id": np.zeros(nw, dtype=np.int64),
        "request_id": none,
        "stage": ["lowering"] * nw,
        "category": ["compile"] * nw,
        "name": ["compile"] * nw,
        "ts_us": start,
        "dur_us": dur,
        "device": np.zeros(nw, dtype=np.int32),
        "core": np.full(nw, -1, dtype=np.int32),
        "stream": np.zeros(nw, dtype=np.int32),
        "pid": np.full(nw, 1000, dtype=np.int64),
        "tid": np.full(nw, 1000, dtype=np.int64),
        "correlation": np.full(nw, -1, dtype=np.int64),
        "parent_id": np.full(nw, -1, dtype=np.int64),
        "shape": list(shapes),
        "flops": nan,
        "bytes": nan,
        "kernel": none,
        "tile": none,
        "fusion_group": np.full(nw, -1, dtype=np.int64),
        "mem_tier": none,
        "predicted_us": nan,
        "fallback": np.zeros(nw, dtype=bool),
        "recompile": np.zeros(nw, dtype=bool),
        "compile_id": [ids[i] for i in warm],
        "args": [json.dumps({"warmup": True, "shape_key": k}) for k in shapes],
    }
    out: dict[str, Column] = {}
    for k, v in events.items():
        a = add[k]
        if isinstance(v, np.ndarray):
            out[k] = np.concatenate((np.asarray(a), v))
        else:
            out[k] = list(a) + list(v)
    out["event_id"] = np.arange(len(out["name"]), dtype=np.int64)
    return out


def compile_columns(
    cb: np.ndarray,
    start_b: F64,
    compile_us: F64,
    keys: list[str],
    first_seen: np.ndarray,
    compiled: frozenset[str],
    ngraph: int,
    rng: np.random.Generator,
) -> dict[str, Column]:
    """The compiler's log: warm-up compiles of the compiled shapes, then the misses of batches
    `cb`; `ngraph` ops per graph."""
    warm = sorted(compiled, key=lambda k: tuple(json.loads(k)))
    nw = len(warm)
    w_dur = quantize_us(rng.uniform(2000.0, 6000.0, nw))
    w_start = np.concatenate(([0.0], np.cumsum(w_dur)[:-1])) - float(w_dur.sum())
    dur = np.concatenate((w_dur, compile_us[cb]))
    start = np.concatenate((w_start, start_b[cb]))
    frac = rng.dirichlet([2.0, 2.0, 4.0, 2.0], dur.size)
    reasons: list[str | None] = [None] * nw + [
        (
            f"new shape {keys[int(b)]} not in compile cache"
            if first_seen[int(b)]
            else f"guard failed on shape {keys[int(b)]} (cache entry evicted)"
        )
        for b in cb
    ]
    no_reason: list[str | None] = [None] * dur.size
    return {
        "compile_id": [f"w/{i}" for i in range(nw)] + [f"0/{i + 1}" for i in range(cb.size)],
        "start_us": start,
        "duration_us": dur,
        "dynamo_us": dur * frac[:, 0],
        "aot_us": dur * frac[:, 1],
        "inductor_us": dur * frac[:, 2],
        "codegen_us": dur * frac[:, 3],
        "recompile_reason": reasons,
        "fail_reason": no_reason,
        "guard_count": np.full(dur.size, 12, dtype=np.int32),
        "graph_op_count": np.full(dur.size, ngraph, dtype=np.int32),
        "cache_hit": np.zeros(dur.size, dtype=bool),
        "shape_key": warm + [keys[int(b)] for b in cb],
    }
