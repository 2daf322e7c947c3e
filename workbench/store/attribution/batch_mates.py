"""Batch-mates from the device events they share, for traces that carry no batch ids.

A lane (a device stream) runs one kernel at a time, so two kernel events on one lane with the
same start and duration are one execution. When that execution is attributed to several
requests (the trace repeats a batched kernel under each member), those requests were served
together: batch-mates. Their batch is the connected group of requests sharing any execution.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]
B = npt.NDArray[np.bool_]


def _start_ties(ts: F64) -> I64:
    """Positions in `ts` of the values some other position shares exactly."""
    # Sorting the starts alone is cheap (a trace is nearly in time order).
    order = np.argsort(ts, kind="stable")
    t = ts[order]
    tie = np.zeros(t.size, dtype=bool)
    if t.size > 1:
        same = t[1:] == t[:-1]
        tie[1:] |= same
        tie[:-1] |= same
    return np.asarray(order[tie], dtype=np.int64)


def shared_executions(lane: I64, ts: F64, dur: F64, request: I64) -> tuple[I64, I64]:
    """(group, request) pairs: events that coincide (same lane, start and duration) numbered as
    one group, for every group whose events belong to more than one request."""
    sub = np.lexsort((request, dur, lane, ts))
    same = np.ones(max(sub.size - 1, 0), dtype=bool)  # as the row before, in every key column
    for col in (ts, lane, dur):
        v = col[sub]  # one gather per column
        same &= v[1:] == v[:-1]
    key_new = np.ones(sub.size, dtype=bool)
    key_new[1:] = ~same
    group = np.cumsum(key_new) - 1
    req = request[sub]
    # Groups with two or more distinct requests (requests are sorted within a group).
    distinct = np.ones(sub.size, dtype=bool)
    distinct[1:] = key_new[1:] | (req[1:] != req[:-1])
    n_req = np.bincount(group, weights=distinct.astype(np.float64))
    keep = distinct & (n_req[group] >= 2)
    return group[keep].astype(np.int64), req[keep].astype(np.int64)


def batch_mates(
    kernel: B, lanes: pa.Array, ts: F64, dur: F64, request_of: I64, n_requests: int
) -> tuple[I64, I64] | None:
    """(batch id, batch size) per request from kernel executions shared between requests, or
    None when no execution is shared (the trace shows no batches). `lanes`: each event's
    kernel lane (null off kernels). Batch ids are the lowest request index of each batch; a
    request sharing nothing is a batch of one."""
    if n_requests < 2:
        return None
    k = np.flatnonzero(kernel)
    # Only kernels that tie on a start with another kernel can be one execution: the rest
    # of the columns are read for those alone.
    idx = k[_start_ties(ts[k])]
    idx = idx[request_of[idx] >= 0]
    if idx.size < 2:
        return None
    lane = np.asarray(
        pc.fill_null(lanes.take(pa.array(idx)), -1).to_numpy(zero_copy_only=False), np.int64
    )
    idx, lane = idx[lane >= 0], lane[lane >= 0]
    group, req = shared_executions(lane, ts[idx], dur[idx], request_of[idx])
    if not group.size:
        return None
    batch = np.arange(n_requests, dtype=np.int64)
    n_groups = int(group.max()) + 1
    # Connected components of requests linked by shared executions: propagate the lowest
    # request index through the groups until nothing moves (once, when members share alike).
    while True:
        low = np.full(n_groups, n_requests, dtype=np.int64)
        np.minimum.at(low, group, batch[req])
        before = batch.copy()
        np.minimum.at(batch, req, low[group])
        batch = batch[batch]  # follow links to the lowest index found so far
        if np.array_equal(batch, before):
            break
    size = np.bincount(batch, minlength=n_requests)[batch]
    return batch, size.astype(np.int64)
