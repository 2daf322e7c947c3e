"""The token model: requests rows and the tokens table of a joined serving run (SERVING_SPEC).

`token_tables(joined) -> (requests, tokens)` in schema.REQUESTS_FILE / schema.TOKENS_FILE. Each
gap (token 0: arrival -> first token; token k: the k-th inter-token latency) is split into the
six stages: before the request's first admission -> ingress (its own tokenize too); admitted
but not a member of the running step -> scheduling; a member -> the engine timeline's stage at
that instant. A request's stages are its tokens' plus the split of [last token, end], so they
sum to its latency. Records without engine steps: gaps go to other, except that a stated queue
time puts min(queue, TTFT) of the first gap into ingress. All splits are done at once with
per-stage prefix sums over the timeline and per-request cumulative member time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from workbench.store import schema
from workbench.store.serving.engine_trace import (
    INGRESS,
    SCHEDULING,
    STAGE_NAMES,
    EngineSteps,
    stage_before,
)
from workbench.store.serving.join import EMIT_TOLERANCE_US, Joined
from workbench.store.serving.records import ServingRecord

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]
B = npt.NDArray[np.bool_]

NAME: Final[str] = "llm_request"
STAGE_COLUMNS: Final[tuple[str, ...]] = tuple(f"{s}_us" for s in STAGE_NAMES)
OTHER_ROW: Final[int] = len(STAGE_NAMES) - 1


def _bucket(n: int | None) -> str:
    """The power of two at or above n ("?" when unknown)."""
    if n is None:
        return "?"
    return "0" if n <= 0 else str(1 << (n - 1).bit_length())


def shape_key(input_tokens: int | None, output_tokens: int | None) -> str:
    """`in=512 out=128`: the request's prompt and output lengths, bucketed to powers of two."""
    return f"in={_bucket(input_tokens)} out={_bucket(output_tokens)}"


def _locate(owner: I64, start: F64, q_owner: I64, q_t: F64) -> I64:
    """For each query, the index of the last interval of q_owner starting at or before q_t
    (intervals sorted by owner, then start), or -1. Times become exact integer ranks so one
    searchsorted over (owner, rank) keys answers every owner at once."""
    if owner.size == 0 or q_t.size == 0:
        return np.full(q_t.size, -1, dtype=np.int64)
    uniq = np.unique(np.concatenate([start, q_t]))
    width = np.int64(uniq.size + 1)
    key = owner * width + np.searchsorted(uniq, start).astype(np.int64)
    q_key = q_owner * width + np.searchsorted(uniq, q_t).astype(np.int64)
    pos = np.searchsorted(key, q_key, side="right").astype(np.int64) - 1
    ok = (pos >= 0) & (owner[np.maximum(pos, 0)] == q_owner)
    return np.where(ok, pos, -1)


def _owned_time(
    owner: I64,
    start: F64,
    end: F64,
    q_owner: I64,
    q_t: F64,
    measure: Callable[[F64], F64],
) -> F64:
    """measure (rows of cumulative time, e.g. per stage) of q_owner's intervals before q_t:
    full intervals by a per-owner prefix sum, the one holding q_t in part."""
    rows = measure(np.zeros(1)).shape[0]
    out = np.zeros((rows, q_t.size))
    if owner.size == 0:
        return out
    full = measure(end) - measure(start)
    before = np.zeros((rows, owner.size + 1))
    before[:, 1:] = np.cumsum(full, axis=1)
    first = np.searchsorted(owner, owner, side="left")  # each owner's first interval
    pos = _locate(owner, start, q_owner, q_t)
    hit = np.flatnonzero(pos >= 0)
    p = pos[hit]
    t = np.clip(q_t[hit], start[p], end[p])
    out[:, hit] = before[:, p] - before[:, first[p]] + measure(t) - measure(start[p])
    return out


def _identity(t: F64) -> F64:
    return t.reshape(1, -1)


def _split_joined(
    joined: Joined,
    steps: EngineSteps,
    admitted: F64,
    owner: I64,
    a: F64,
    b: F64,
) -> F64:
    """Stages (6, n) of the gaps [a, b] of matched requests `owner`, by the token model."""
    mr, ms = joined.member_record, joined.member_step
    m_start, m_end = steps.start[ms], steps.end[ms]

    def stages(t: F64) -> F64:
        return stage_before(steps, t)

    q_owner = np.concatenate([owner, owner])
    q_t = np.concatenate([a, b])
    member = _owned_time(mr, m_start, m_end, q_owner, q_t, stages)
    n = a.size
    out = member[:, n:] - member[:, :n]
    adm = admitted[owner]
    pre = np.maximum(0.0, np.minimum(b, adm) - np.minimum(a, adm))
    k_owner, k_start, k_end = _late_tokenize(joined, steps, admitted)
    late = _owned_time(k_owner, k_start, k_end, q_owner, q_t, _identity)[0]
    tok = late[n:] - late[:n]
    rest = (b - a) - pre - tok - out.sum(axis=0)
    out[INGRESS] += pre + tok
    out[SCHEDULING] += np.maximum(rest, 0.0)
    return out


def _late_tokenize(joined: Joined, steps: EngineSteps, admitted: F64) -> tuple[I64, F64, F64]:
    """A request's own tokenize spans after its admission, in steps it is not a member of
    (ingress, not scheduling), sorted by request then start."""
    index = {r.request_id: i for i, r in enumerate(joined.records.records)}
    members = set(zip(joined.member_record.tolist(), joined.member_step.tolist(), strict=True))
    step_of = np.searchsorted(steps.start, steps.tokenize_start, side="right") - 1
    rows: list[tuple[int, float, float]] = []
    for rid, s, e, j in zip(
        steps.tokenize_request.tolist(),
        steps.tokenize_start.tolist(),
        steps.tokenize_end.tolist(),
        step_of.tolist(),
        strict=True,
    ):
        r = index.get(rid)
        if r is None or (r, j) in members:
            continue
        s = max(s, float(admitted[r]))
        if e > s:
            rows.append((r, s, e))
    rows.sort()
    return (
        np.asarray([x[0] for x in rows], dtype=np.int64),
        np.asarray([x[1] for x in rows], dtype=np.float64),
        np.asarray([x[2] for x in rows], dtype=np.float64),
    )


def _split_records(queue: F64, first: B, a: F64, b: F64) -> F64:
    """Records only: the gap to other, min(queue, gap) of a request's first gap to ingress."""
    out = np.zeros((len(STAGE_NAMES), a.size))
    gap = b - a
    q = np.where(first & np.isfinite(queue), np.clip(queue, 0.0, None), 0.0)
    out[INGRESS] = np.clip(np.minimum(q, gap), 0.0, None)
    out[OTHER_ROW] = gap - out[INGRESS]
    return out


def _opt(values: list[float | None] | list[int | None], typ: pa.DataType) -> pa.Array:
    return pa.array(values, type=typ)


def token_tables(joined: Joined) -> tuple[pa.Table, pa.Table]:
    """(requests, tokens) of the joined run; see the module docstring for the split."""
    recs = joined.records.records
    n = len(recs)
    steps = joined.steps
    arrival = np.asarray([r.arrival_us for r in recs], dtype=np.float64).reshape(-1)
    end = np.asarray([r.end_us for r in recs], dtype=np.float64).reshape(-1)
    queue = np.asarray(
        [np.nan if r.queue_us is None else r.queue_us for r in recs], dtype=np.float64
    ).reshape(-1)
    counts = np.asarray([len(r.token_us) for r in recs], dtype=np.int64).reshape(-1)
    ts = np.concatenate([np.asarray(r.token_us, dtype=np.float64) for r in recs] or [np.zeros(0)])
    t_owner = np.repeat(np.arange(n, dtype=np.int64), counts)
    t_first = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64) if n else counts
    t_index = np.arange(ts.size, dtype=np.int64) - np.repeat(t_first, counts)
    prev = np.empty_like(ts)
    prev[1:] = ts[:-1]
    prev[t_index == 0] = arrival[t_owner[t_index == 0]]
    # Each request's tail [last token (or arrival), end] is split like a gap.
    top = max(ts.size - 1, 0)
    last_ts = ts[np.clip(t_first + counts - 1, 0, top)] if ts.size else np.zeros(n)
    last = np.where(counts > 0, last_ts, arrival)
    owner = np.concatenate([t_owner, np.arange(n, dtype=np.int64)])
    a = np.concatenate([prev, last])
    b = np.concatenate([ts, end])
    first = np.concatenate([t_index == 0, counts == 0])

    matched = np.zeros(n, dtype=bool)
    admitted = np.full(n, np.inf)
    if steps is not None and joined.member_record.size:
        matched[joined.member_record] = True
        np.minimum.at(admitted, joined.member_record, steps.start[joined.member_step])
    split = np.zeros((len(STAGE_NAMES), a.size))
    ok = b >= a
    on = ok & matched[owner]
    off = ok & ~matched[owner]
    if steps is not None and on.any():
        split[:, on] = _split_joined(joined, steps, admitted, owner[on], a[on], b[on])
    split[:, off] = _split_records(queue[owner[off]], first[off], a[off], b[off])
    split[OTHER_ROW, ~ok] = (b - a)[~ok]  # a failed request's tokens out of order
    tokens = _tokens_table(joined, recs, t_owner, t_index, ts, ts - prev, split[:, : ts.size])
    per_request = np.zeros((len(STAGE_NAMES), n))
    for s in range(len(STAGE_NAMES)):
        per_request[s] = np.bincount(owner, weights=split[s], minlength=n)
    requests = _requests_table(joined, arrival, end, admitted, matched, counts, ts, t_first)
    for s, col in enumerate(STAGE_COLUMNS):
        requests = requests.set_column(
            requests.schema.get_field_index(col), col, pa.array(per_request[s], pa.float64())
        )
    return requests, tokens


def _token_steps(joined: Joined, t_owner: I64, ts: F64) -> pa.Array:
    """The member step of the request whose detokenize span holds each token time (or is the
    nearest within EMIT_TOLERANCE_US: the last starting before it, or the next), else null."""
    steps = joined.steps
    if steps is None or joined.member_record.size == 0:
        return pa.nulls(ts.size, pa.int32())
    mr, ms = joined.member_record, joined.member_step
    pos = _locate(mr, steps.start[ms], t_owner, ts)
    nxt = np.minimum(np.where(pos >= 0, pos + 1, np.searchsorted(mr, t_owner)), mr.size - 1)
    best = np.full(ts.size, -1, dtype=np.int64)
    dist = np.full(ts.size, np.inf)
    for cand, valid in ((pos, pos >= 0), (nxt, mr[nxt] == t_owner)):
        j = ms[np.maximum(cand, 0)]
        d = np.maximum(0.0, np.maximum(steps.detok_start[j] - ts, ts - steps.detok_end[j]))
        d = np.where(valid & np.isfinite(d), d, np.inf)
        better = d < dist
        best[better], dist[better] = j[better], d[better]
    ok = dist <= EMIT_TOLERANCE_US
    return pa.array(steps.number[np.maximum(best, 0)], type=pa.int32(), mask=~ok)


def _tokens_table(
    joined: Joined,
    recs: list[ServingRecord],
    t_owner: I64,
    t_index: I64,
    ts: F64,
    gap: F64,
    split: F64,
) -> pa.Table:
    ids = pa.array([r.request_id for r in recs], pa.string())
    cols: dict[str, pa.Array] = {
        "request_id": ids.take(pa.array(t_owner)),
        "token": pa.array(t_index, pa.int32()),
        "ts_us": pa.array(ts, pa.float64()),
        "gap_us": pa.array(gap, pa.float64()),
        "step": _token_steps(joined, t_owner, ts),
    }
    for s, col in enumerate(STAGE_COLUMNS):
        cols[col] = pa.array(split[s], pa.float64())
    for f in ("host", "rank", "window"):
        cols[f] = pa.nulls(ts.size, schema.TOKENS_FILE.field(f).type)
    return pa.table(cols, schema=schema.TOKENS_FILE)


def _requests_table(
    joined: Joined,
    arrival: F64,
    end: F64,
    admitted: F64,
    matched: B,
    counts: I64,
    ts: F64,
    t_first: I64,
) -> pa.Table:
    recs = joined.records.records
    n = len(recs)
    steps = joined.steps
    step_lists: list[list[int] | None] = [None] * n
    batch: list[int | None] = [None] * n
    preempt: list[int | None] = [r.preemptions for r in recs]
    if steps is not None:
        size = (
            steps.n_prefill + steps.n_decode
            if joined.method == "request_id"
            else np.bincount(joined.member_step, minlength=steps.n)
        )
        lists: dict[int, list[int]] = {}
        for r, j in zip(joined.member_record.tolist(), joined.member_step.tolist(), strict=True):
            lists.setdefault(r, []).append(j)
        spans: dict[str, int] = {}
        for rid in steps.preempt_request.tolist():
            spans[rid] = spans.get(rid, 0) + 1
        for r, js in lists.items():
            step_lists[r] = [int(k) for k in steps.number[js]]
            batch[r] = int(np.rint(size[js].mean()))
            preempt[r] = spans.get(recs[r].request_id, 0)
    start: list[float | None] = []
    queue: list[float | None] = []
    for i, r in enumerate(recs):
        if matched[i]:
            start.append(float(admitted[i]))
            queue.append(float(admitted[i] - arrival[i]))
        else:
            start.append(None if r.queue_us is None else r.arrival_us + r.queue_us)
            queue.append(r.queue_us)
    out_tokens = [
        r.output_tokens if r.output_tokens is not None else (len(r.token_us) or None) for r in recs
    ]
    top = max(ts.size - 1, 0)
    first_ts = ts[np.minimum(t_first, top)] if ts.size else np.zeros(n)
    last_ts = ts[np.clip(t_first + counts - 1, 0, top)] if ts.size else np.zeros(n)
    ttft = np.where(counts > 0, first_ts - arrival, np.nan)
    tpot = np.where(counts >= 2, (last_ts - first_ts) / np.maximum(counts - 1, 1), np.nan)
    zeros = np.zeros(n)
    cols: dict[str, pa.Array] = {
        "request_id": pa.array([r.request_id for r in recs], pa.string()),
        "name": pa.array([NAME] * n, pa.string()),
        "arrival_us": pa.array(arrival, pa.float64()),
        "start_us": _opt(start, pa.float64()),
        "end_us": pa.array(end, pa.float64()),
        "latency_us": pa.array(end - arrival, pa.float64()),
        "batch_id": pa.nulls(n, pa.int64()),
        "batch_size": _opt(batch, pa.int32()),
        "shape_key": pa.array(
            [shape_key(r.input_tokens, o) for r, o in zip(recs, out_tokens, strict=True)],
            pa.string(),
        ),
        **{col: pa.array(zeros, pa.float64()) for col in STAGE_COLUMNS},
        "sla_us": pa.nulls(n, pa.float64()),
        "quality": pa.nulls(n, pa.float64()),
        "ok": pa.array([r.ok for r in recs], pa.bool_()),
        "host": pa.nulls(n, pa.string()),
        "rank": pa.nulls(n, pa.int32()),
        "window": pa.nulls(n, pa.int32()),
        "input_tokens": _opt([r.input_tokens for r in recs], pa.int32()),
        "output_tokens": _opt(out_tokens, pa.int32()),
        "ttft_us": pa.array(ttft, pa.float64(), from_pandas=True),
        "tpot_us": pa.array(tpot, pa.float64(), from_pandas=True),
        "queue_us": _opt(queue, pa.float64()),
        "preemptions": _opt(preempt, pa.int32()),
        "steps": pa.array(step_lists, pa.list_(pa.int32())),
    }
    return pa.table(cols, schema=schema.REQUESTS_FILE)
