"""Small hand-built runs for the tests of accel.localize's pieces (queue, trigger, evidence)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from accel.ops import F64, I64, OpArrays, RequestArrays, RunArrays
from workbench.store import db
from workbench.store.arrays import load_run_arrays


def requests(
    arrival: F64,
    latency: F64,
    service: F64,
    *,
    batch_id: I64 | None = None,
    start: F64 | None = None,
    exec_share: float = 1.0,
) -> RequestArrays:
    """Requests whose service (put in execution, the rest of it in assembly) ends at
    arrival + latency; the time before it is ingress."""
    n = arrival.size
    stage = np.zeros((n, 6))
    stage[:, 0] = latency - service
    stage[:, 3] = service * exec_share
    stage[:, 4] = service * (1.0 - exec_share)
    bs = np.ones(n, dtype=np.int32)
    if batch_id is not None:
        _, inv, counts = np.unique(batch_id, return_inverse=True, return_counts=True)
        bs = counts[inv].astype(np.int32)
    return RequestArrays(
        request_id=[f"r{i}" for i in range(n)],
        arrival_us=np.asarray(arrival, dtype=np.float64),
        start_us=np.asarray(arrival if start is None else start, dtype=np.float64),
        latency_us=np.asarray(latency, dtype=np.float64),
        stage_us=stage,
        batch_size=bs,
        shape_key=[""] * n,
        batch_id=batch_id,
    )


def sequential_batches(arrival: F64, service: F64, size: int) -> tuple[F64, I64, F64]:
    """(latency, batch id, batch start) of a batcher that waits for `size` requests, then
    serves them one after another, on one server (FIFO over batches)."""
    n = arrival.size
    bid = np.arange(n) // size
    latency = np.empty(n)
    start = np.empty(n)
    free = -np.inf
    for b in range(int(bid.max()) + 1):
        members = np.flatnonzero(bid == b)
        t = max(free, float(arrival[members].max()))
        start[members] = t
        for i in members:
            t += float(service[i])
            latency[i] = t - arrival[i]
        free = t
    return latency, bid.astype(np.int64), start


def ops(
    req: np.ndarray,
    stage: np.ndarray,
    observed: np.ndarray,
    core: np.ndarray,
    name: list[str],
    *,
    flops: np.ndarray | None = None,
    nbytes: np.ndarray | None = None,
) -> OpArrays:
    """Ops with the fields direct evidence reads; flops/bytes NaN (unmodelled) unless given."""
    n = req.size
    nan = np.full(n, np.nan)
    return OpArrays(
        req=np.asarray(req, dtype=np.int64),
        stage=np.asarray(stage, dtype=np.int8),
        observed_us=np.asarray(observed, dtype=np.float64),
        flops=nan.copy() if flops is None else flops,
        bytes=nan.copy() if nbytes is None else nbytes,
        m=nan.copy(),
        n=nan.copy(),
        tile_m=nan.copy(),
        tile_n=nan.copy(),
        fusion_group=np.full(n, -1, dtype=np.int64),
        mem_tier=np.full(n, -1, dtype=np.int8),
        core=np.asarray(core, dtype=np.int32),
        fallback=np.zeros(n, dtype=bool),
        recompile=np.zeros(n, dtype=bool),
        predicted_us=nan.copy(),
        kernel=[""] * n,
        name=list(name),
    )


def load_pair(store: Path) -> tuple[RunArrays, RunArrays]:
    """Runs "failing" and "comparator" of a store, loaded as a triage loads them."""
    con = db.connect(store)
    try:
        return load_run_arrays(con, "failing"), load_run_arrays(con, "comparator")
    finally:
        con.close()
