"""accel.synth's op rows: batch-level op blocks, host ops, kernel names, shapes, RunArrays."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from accel.ops import F64, OpArrays, RequestArrays, RunArrays
from accel.stages import MEM_TIER_CODE, STAGE_CODE
from accel.synth.columns import codes


@dataclass
class OpBlocks:
    """Growing SoA of batch-level ops (before replication to requests)."""

    cols: dict[str, list[np.ndarray]] = field(default_factory=dict)

    def add(self, **cols: np.ndarray) -> None:
        n = len(next(iter(cols.values())))
        for k, v in cols.items():
            arr = np.asarray(v)
            if arr.shape[0] != n:
                raise ValueError(f"column {k} has {arr.shape[0]} rows, expected {n}")
            self.cols.setdefault(k, []).append(arr)

    def concat(self) -> dict[str, np.ndarray]:
        return {k: np.concatenate(v) for k, v in self.cols.items()}


def full(n: int, value: object) -> np.ndarray:
    return np.full(n, value)


def host_op(
    ops: OpBlocks,
    batches: np.ndarray,
    stage: str,
    category: str,
    name: str,
    ts: np.ndarray,
    dur: np.ndarray,
    *,
    nbytes: np.ndarray | None = None,
    tier: str = "host",
    recompile: bool = False,
) -> None:
    n = batches.size
    sel = dur if dur.shape[0] == n else dur[batches]
    ops.add(
        batch=batches,
        stage=full(n, stage),
        category=full(n, category),
        name=full(n, name),
        ts=ts if ts.shape[0] == n else ts[batches],
        dur=sel,
        core=full(n, -1),
        flops=full(n, np.nan),
        nbytes=full(n, np.nan) if nbytes is None else nbytes,
        m=full(n, np.nan),
        n=full(n, np.nan),
        tile_m=full(n, np.nan),
        tile_n=full(n, np.nan),
        fusion_group=full(n, -1),
        tier=full(n, tier),
        kernel=full(n, ""),
        shape=full(n, ""),
        predicted=full(n, np.nan),
        fallback=np.zeros(n, dtype=bool),
        recompile=np.full(n, recompile),
    )


def kernel_names(
    names: np.ndarray,
    fused: np.ndarray,
    fb: np.ndarray,
    tm: np.ndarray,
    tn: np.ndarray,
    fusion: str,
    mm: np.ndarray,
) -> np.ndarray:
    tiles = np.char.add(
        np.char.add(tm.astype(np.int64).astype(str), "x"), tn.astype(np.int64).astype(str)
    )
    plain = np.where(mm, np.char.add("gemm_bf16_", tiles), np.char.add("ew_", names))
    fused_name = np.char.add(f"fused_{fusion}_", names)
    out = np.where(fused, fused_name, plain)
    return np.where(fb, "gemm_generic_fallback", out)


def shape_text(r: np.ndarray, K: np.ndarray, N: np.ndarray, mm: np.ndarray) -> np.ndarray:
    ri, ki, ni = (x.astype(np.int64).astype(str) for x in (r, K, N))
    a = np.char.add(np.char.add(np.char.add("[[", ri), ","), ki)
    mm_txt = np.char.add(np.char.add(np.char.add(np.char.add(a, "],["), ki), ","), ni)
    return np.where(mm, np.char.add(mm_txt, "]]"), np.char.add(a, "]]"))


def run_arrays(
    run_id: str,
    o: dict[str, np.ndarray],
    req_ids: list[str],
    req_keys: list[str],
    arrival: F64,
    start: F64,
    latency: F64,
    stage: F64,
    bsize: np.ndarray,
    batch_of: np.ndarray,
    compiled: frozenset[str],
) -> RunArrays:
    tier = codes(o["tier"], dict(MEM_TIER_CODE))
    ops = OpArrays(
        req=o["req"].astype(np.int64),
        stage=codes(o["stage"], dict(STAGE_CODE)),
        observed_us=o["dur"].astype(np.float64),
        flops=o["flops"].astype(np.float64),
        bytes=o["nbytes"].astype(np.float64),
        m=o["m"].astype(np.float64),
        n=o["n"].astype(np.float64),
        tile_m=o["tile_m"].astype(np.float64),
        tile_n=o["tile_n"].astype(np.float64),
        fusion_group=o["fusion_group"].astype(np.int64),
        mem_tier=tier,
        core=o["core"].astype(np.int32),
        fallback=o["fallback"].astype(bool),
        recompile=o["recompile"].astype(bool),
        predicted_us=o["predicted"].astype(np.float64),
        kernel=[str(k) for k in o["kernel"]],
        name=[str(k) for k in o["name"]],
    )
    reqs = RequestArrays(
        request_id=req_ids,
        arrival_us=arrival,
        start_us=start,
        latency_us=latency,
        stage_us=stage,
        batch_size=bsize.astype(np.int32),
        shape_key=req_keys,
        batch_id=batch_of.astype(np.int64),
    )
    return RunArrays(run_id=run_id, ops=ops, requests=reqs, compiled_shapes=compiled)
