"""Interval nesting per thread: the innermost enclosing event of every event, vectorized."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]

_MAX_ROUNDS = 256


def thread_order(thread: I64, ts: F64, end: F64) -> I64:
    """Indices sorted by thread, then start, then longest first (so parents precede children)."""
    return np.lexsort((-end, ts, thread)).astype(np.int64)


def enclosing(thread: I64, ts: F64, end: F64, order: I64 | None = None) -> I64:
    """Index of the innermost event on the same thread that contains each event, or -1.

    Pointer jumping: the parent of event i (in start order) is on the chain i-1, p(i-1), ...;
    each round replaces a candidate that does not contain i by the candidate's own current
    guess, which never skips the true parent, and the number of rounds grows like log(depth).
    """
    n = len(ts)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    o = thread_order(thread, ts, end) if order is None else order
    th = thread[o]
    e = end[o]
    p = np.arange(-1, n - 1, dtype=np.int64)
    p[0] = -1
    p[1:][th[1:] != th[:-1]] = -1
    for _ in range(_MAX_ROUNDS):
        has = p >= 0
        bad = np.flatnonzero(has & (e[np.maximum(p, 0)] < e))
        if bad.size == 0:
            break
        p[bad] = p[p[bad]]
    else:  # pragma: no cover - pathological overlap; drop links that did not settle
        has = p >= 0
        p[has & (e[np.maximum(p, 0)] < e)] = -1
    out = np.full(n, -1, dtype=np.int64)
    ok = p >= 0
    out[o[ok]] = o[p[ok]]
    return out


def top_level(idx: I64, thread: I64, ts: F64, end: F64) -> I64:
    """The spans among idx not nested in another of them on the same thread, by start."""
    if idx.size == 0:
        return idx
    order = idx[np.lexsort((-end[idx], ts[idx], thread[idx]))]
    keep: list[int] = []
    cur_thread: int | None = None
    reach = -np.inf
    for i in order.tolist():
        th = int(thread[i])
        if th != cur_thread:
            cur_thread, reach = th, -np.inf
        if end[i] <= reach:
            continue
        keep.append(i)
        reach = max(reach, float(end[i]))
    kept = np.array(keep, dtype=np.int64)
    return kept[np.lexsort((kept, ts[kept]))]
