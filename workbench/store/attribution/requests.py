"""Requests of a run, which events belong to which request, and exclusive stage times."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from accel.grouping import dense_ids
from accel.stages import STAGES
from workbench.store.attribution.engine_steps import UNIT as ENGINE_STEP
from workbench.store.attribution.engine_steps import is_step
from workbench.store.attribution.nesting import top_level
from workbench.store.attribution.request_pattern import matches
from workbench.store.attribution.rules import PairCodes, Rules, pair_mask

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]
B1 = npt.NDArray[np.bool_]


@dataclass
class Requests:
    """Request windows sorted by start; `event` is the defining span (-1 for the whole run)."""

    unit: str  # "annotation" | "engine_step" | "step" | "pattern" | "run"
    event: I64
    start: F64
    end: F64
    thread: I64

    @property
    def n(self) -> int:
        return len(self.start)


def find_requests(
    rules: Rules,
    pairs: PairCodes,
    ts: F64,
    dur: F64,
    thread: I64,
    spans: B1,
    pattern: re.Pattern[str] | None,
) -> Requests:
    """Request windows by DESIGN §4: a pattern, else serving-engine steps, else annotations,
    else profiler steps, else the run."""
    end = ts + dur
    if pattern is not None:
        per_pair = matches(pattern, pairs.names)  # linear time, whatever the pattern
        hit = per_pair[pairs.inverse] if per_pair.size else np.zeros(len(ts), dtype=np.bool_)
        idx = top_level(np.flatnonzero(hit & spans), thread, ts, end)
        return _windows("pattern", idx, ts, end, thread)
    if rules.engine_steps:
        eng = np.flatnonzero(
            spans
            & pair_mask(pairs, lambda c, n: c in rules.annotation_categories and is_step(rules, n))
        )
        if eng.size:
            return _windows(ENGINE_STEP, top_level(eng, thread, ts, end), ts, end, thread)
    steps = np.flatnonzero(
        spans
        & pair_mask(
            pairs,
            lambda c, n: c in rules.annotation_categories and bool(rules.step.search(n or "")),
        )
    )
    cand = np.flatnonzero(
        spans
        & pair_mask(
            pairs,
            lambda c, n: (
                c in rules.annotation_categories
                and not rules.step.search(n or "")
                and not any(p.search(n or "") for p in rules.not_requests)
            ),
        )
    )
    top = top_level(cand, thread, ts, end)
    if top.size and (steps.size == 0 or not _all_inside(top, steps, ts, end)):
        return _windows("annotation", top, ts, end, thread)
    if steps.size:
        return _windows("step", top_level(steps, thread, ts, end), ts, end, thread)
    lo = float(ts.min()) if ts.size else 0.0
    hi = float(end.max()) if ts.size else 0.0
    return Requests(
        "run",
        np.array([-1], np.int64),
        np.array([lo]),
        np.array([hi]),
        np.array([0], np.int64),
    )


def _all_inside(idx: I64, steps: I64, ts: F64, end: F64) -> bool:
    """True when every span of idx lies inside some profiler step (a training trace)."""
    order = steps[np.argsort(ts[steps], kind="stable")]
    s_start, s_end = ts[order], end[order]
    pos = np.searchsorted(s_start, ts[idx], side="right") - 1
    inside = (pos >= 0) & (end[idx] <= s_end[np.maximum(pos, 0)])
    return bool(inside.all())


def _windows(unit: str, idx: I64, ts: F64, end: F64, thread: I64) -> Requests:
    return Requests(unit, idx, ts[idx].copy(), end[idx].copy(), thread[idx].copy())


def assign(
    req: Requests,
    ts: F64,
    thread: I64,
    device: B1,
    launcher: I64,
) -> I64:
    """Request index of every event (-1 = background).

    A host event belongs to the request of its own thread whose window holds its start; on a
    thread without requests of its own, to the request whose window holds its start (steps
    span all threads). A device activity belongs to the request of its launching call.
    """
    n = len(ts)
    out = np.full(n, -1, dtype=np.int64)
    if req.n == 0:
        return out
    if req.unit == "run":
        out[:] = 0
        return out
    host = ~device
    own = np.zeros(n, dtype=np.bool_)
    for th in np.unique(req.thread).tolist():
        r_idx = np.flatnonzero(req.thread == th)
        sel = np.flatnonzero(host & (thread == th))
        own[sel] = True
        out[sel] = _contain(req.start[r_idx], req.end[r_idx], ts[sel], r_idx)
    rest = np.flatnonzero(host & ~own)
    out[rest] = _contain(req.start, req.end, ts[rest], np.arange(req.n, dtype=np.int64))
    dev = np.flatnonzero(device)
    linked = launcher[dev] >= 0
    out[dev[linked]] = out[launcher[dev[linked]]]
    loose = dev[~linked]
    out[loose] = _contain(req.start, req.end, ts[loose], np.arange(req.n, dtype=np.int64))
    return out


def _contain(start: F64, end: F64, t: F64, ids: I64) -> I64:
    """ids[k] of the latest-starting window with start <= t < end (windows sorted by start)."""
    if start.size == 0 or t.size == 0:
        return np.full(t.size, -1, dtype=np.int64)
    pos = np.searchsorted(start, t, side="right") - 1
    pc = np.maximum(pos, 0)
    # A zero-length request still owns the events that start exactly at its instant.
    ok = (pos >= 0) & ((t < end[pc]) | ((t == start[pc]) & (end[pc] == start[pc])))
    return np.where(ok, ids[pc], -1)


# Input Dims whose first argument is a tensor with at least one dimension ("[[4,32,64],[],...]").
_SHAPED = r"^\[\[\d"
# The leading tensor arguments of an Input Dims text, up to its first non-tensor argument.
_LEADING_TENSORS = re.compile(r"^\[(\[\d+(?:,\d+)*\](?:,\[\d+(?:,\d+)*\])*)")


def shape_keys(
    req: Requests,
    request_of: I64,
    ts: F64,
    shape: pa.Array | pa.ChunkedArray,
    usable: B1 | None = None,
    thread: I64 | None = None,
    region: B1 | None = None,
) -> list[str | None]:
    """Each request's input shape: the leading tensor dims of its first eager operator, else of
    the last operator on its thread between the previous request and it (the input being made).

    `usable` drops compilation and compiled-code events (fake tensors, flattened [B*T, D] views);
    with `region` (compiled-region spans) an operator counts only if it starts before the
    request's first region, so that output handling after compiled code is not taken for input.
    Both sources yield the same key for the same input, whichever path (compiled, recompiling,
    eager fallback) served it.
    """
    n = len(ts)
    keys: list[str | None] = [None] * req.n
    if req.n == 0 or n == 0:
        return keys
    shaped = np.asarray(
        pc.fill_null(pc.match_substring_regex(shape, _SHAPED), False).to_numpy(
            zero_copy_only=False
        ),
        dtype=np.bool_,
    )
    if usable is not None:
        shaped &= usable
    inside = np.flatnonzero(shaped & (request_of >= 0))
    if region is not None and inside.size:
        reg = np.flatnonzero(region & (request_of >= 0))
        first_region = np.full(req.n, np.inf)
        np.minimum.at(first_region, request_of[reg], ts[reg])
        inside = inside[ts[inside] < first_region[request_of[inside]]]
    pick = np.full(req.n, -1, dtype=np.int64)
    if inside.size:
        order = inside[np.lexsort((ts[inside], request_of[inside]))]
        r = request_of[order]
        head = np.flatnonzero(np.r_[True, r[1:] != r[:-1]])
        pick[r[head]] = order[head]
    if thread is not None and req.unit != "run" and (pick < 0).any():
        before = _made_before(req, ts, thread, np.flatnonzero(shaped & (request_of < 0)))
        pick = np.where(pick >= 0, pick, before)
    chosen = np.flatnonzero(pick >= 0)
    texts = pc.take(shape, pa.array(pick[chosen])).to_pylist() if chosen.size else []
    for i, text in zip(chosen.tolist(), texts, strict=True):
        m = _LEADING_TENSORS.match(text or "")
        keys[i] = f"[{m.group(1)}]" if m else None
    return keys


def _made_before(req: Requests, ts: F64, thread: I64, cand: I64) -> I64:
    """Per request, the last of cand on its thread after the previous request ended, or -1."""
    out = np.full(req.n, -1, dtype=np.int64)
    for th in np.unique(req.thread).tolist():
        r_idx = np.flatnonzero(req.thread == th)
        c = cand[thread[cand] == th]
        if c.size == 0:
            continue
        nxt = np.searchsorted(req.start[r_idx], ts[c], side="right")
        ok = nxt < r_idx.size
        prev = np.maximum(nxt - 1, 0)
        ok &= (nxt == 0) | (ts[c] >= req.end[r_idx[prev]])
        c, nxt = c[ok], nxt[ok]
        if c.size == 0:
            continue
        order = np.lexsort((ts[c], nxt))
        c, nxt = c[order], nxt[order]
        tail = np.flatnonzero(np.r_[nxt[1:] != nxt[:-1], True])
        out[r_idx[nxt[tail]]] = c[tail]
    return out


def exclusive_times(
    req: Requests,
    request_of: I64,
    ts: F64,
    end: F64,
    stage: I64,
    priority: I64,
) -> F64:
    """(n_requests, 5) exclusive stage times; `other` is the latency minus their sum.

    Each request window is cut at every clipped start/end of its attributed events; a segment
    goes to the covering event of highest priority (ties: pipeline order). See _best_level.
    Temporaries are kept few and narrow: on millions of events the page faults of fresh
    memory cost more than the arithmetic.
    """
    n_req = req.n
    n_stages = len(STAGES)
    out = np.zeros((n_req, n_stages), dtype=np.float64)
    sel = np.flatnonzero((request_of >= 0) & (stage >= 0))
    r = request_of[sel]
    s = np.maximum(ts[sel], req.start[r])
    e = np.minimum(end[sel], req.end[r])
    live = e > s
    if not live.all():
        sel, r, s, e = sel[live], r[live], s[live], e[live]
    if sel.size == 0:
        return out
    # Levels numbered by priority (high first), ties in pipeline order.
    ev_level, n_levels = dense_ids(stage[sel] - priority[sel] * (n_stages + 1))
    level_stage = np.full(n_levels + 1, -1, dtype=np.int8)  # the last: no level covers
    level_stage[ev_level] = stage[sel]
    n_ev = sel.size
    # Boundaries: every event start/end plus the window ends (so gaps count as `other`).
    idx = np.int32 if n_req * n_stages < 2**31 else np.int64
    windows = np.arange(n_req, dtype=idx)
    r = r.astype(idx)
    pt_req = np.concatenate([r, r, windows, windows])
    pt_t = np.concatenate([s, e, req.start, req.end])
    del r, s, e, sel
    order = np.lexsort((pt_t, pt_req))
    pt_req, pt_t = pt_req[order], pt_t[order]
    # Small level codes make the grouping by level a linear (radix) sort.
    small = np.int8 if n_levels < 127 else np.int16 if n_levels < 32767 else np.int64
    lv = ev_level.astype(small)
    del ev_level
    pt_level = np.concatenate([lv, lv, np.full(2 * n_req, -1, small)])[order]
    pt_delta = np.concatenate(
        [np.ones(n_ev, np.int8), np.full(n_ev, -1, np.int8), np.zeros(2 * n_req, np.int8)]
    )[order]
    del order, lv
    seg_stage = level_stage[_best_level(pt_level, pt_delta, n_levels, 2 * n_req)]
    del pt_level, pt_delta
    seg = np.zeros(pt_t.size, dtype=np.float64)
    np.subtract(pt_t[1:], pt_t[:-1], out=seg[:-1], where=pt_req[1:] == pt_req[:-1])
    del pt_t
    # One weighted count over (request, stage); each bin sums its segments in boundary order.
    hit = seg_stage >= 0
    key = pt_req[hit] * n_stages
    key += seg_stage[hit]
    sums = np.bincount(key, weights=seg[hit], minlength=n_req * n_stages)
    out[:] = sums.reshape(n_req, n_stages)
    return out


# Levels whose coverage one int64 bitmask holds (bit k: level k covers the segment).
_MASK_LEVELS = 62


def _best_level(
    level: npt.NDArray[Any], delta: npt.NDArray[np.int8], n_levels: int, n_windows: int
) -> npt.NDArray[Any]:
    """Per boundary (sorted by request, time), the highest-priority level covering the segment
    after it; n_levels where none does.

    A level covers a segment when its running sum of +1/-1 is positive there. Each level's
    sum runs over its own boundaries only (grouped by a stable sort, in boundary order), and
    where it turns positive or back to zero sets or clears the level's bit in one running
    bitmask: the lowest set bit is the best level. Beyond 62 levels, the next 62 fill in the
    segments the first ones left uncovered, and so on.
    """
    n = level.size
    # Grouped by level in boundary order; window boundaries (level -1) sort first, skipped.
    by_level = np.argsort(level, kind="stable")[n_windows:]
    d = delta[by_level]
    # Each level's +1/-1 cancel, so one running sum over all groups is each group's own.
    count = np.cumsum(d, dtype=np.int32 if d.size < 2**31 else np.int64)
    edge = count == 0  # coverage ends
    edge |= (d > 0) & (count == 1)  # coverage starts
    del count
    at = by_level[edge]
    sign = d[edge].astype(np.int64)
    lv_at = level[at].astype(np.int64)
    del by_level, d, edge
    best = np.full(n, n_levels, dtype=np.int16 if n_levels < 32767 else np.int64)
    marks = np.empty(n, dtype=np.int64)
    for lo in range(0, n_levels, _MASK_LEVELS):
        mine = (lv_at >= lo) & (lv_at < lo + _MASK_LEVELS)
        marks.fill(0)
        marks[at[mine]] = np.left_shift(sign[mine], lv_at[mine] - lo)
        mask = np.cumsum(marks, out=marks)
        todo = mask != 0
        if lo:
            todo &= best == n_levels
        low = mask[todo]
        width = min(_MASK_LEVELS, n_levels - lo)
        if width <= _TABLE_LEVELS:
            # Few levels (the usual case): each possible mask's lowest bit looked up, not
            # computed per boundary (frexp of millions of floats was a third of the call).
            best[todo] = lo + _lowest_bits(width)[low]
            continue
        low &= -low
        # The lowest set bit's index: frexp of an exact power of two.
        best[todo] = lo + np.frexp(low.astype(np.float64))[1] - 1
    return best


# Up to this many levels in a round, _best_level looks the lowest bit up in a table.
_TABLE_LEVELS = 12


def _lowest_bits(width: int) -> npt.NDArray[np.int64]:
    """Index of the lowest set bit of every mask of `width` bits (0 never asked: -1)."""
    masks = np.arange(1 << width, dtype=np.int64)
    low = masks & -masks
    out = np.frexp(low.astype(np.float64))[1].astype(np.int64) - 1
    out[0] = -1
    return out
