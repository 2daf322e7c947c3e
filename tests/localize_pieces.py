"""Small hand-built runs for the tests of accel.localize's pieces (queue, trigger, evidence)."""

from __future__ import annotations

import numpy as np

from accel.ops import F64, I64, RequestArrays


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
