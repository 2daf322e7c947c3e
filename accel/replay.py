"""Replay of a run on a hardware profile: predicted exclusive stage times per request (DESIGN §5).

Ops aggregate per (request, stage): ops without a core run one after another (times add up);
ops placed on cores run side by side, so they count with the busiest core (the barrier waits for
it), and `barrier_us` = max - mean of per-core busy time over the cores used.

The replay is anchored on the observed run: predicted stage = observed stage + (aggregate of
predicted op times - aggregate of observed op times), floored at 0. Unmodelled ops keep their
observed time, so only modelled ops move a stage, and time a trace's ops do not account for one
by one (streams overlapping, idle gaps) stays as observed instead of being summed twice or
dropped. The residual (observed - predicted) is the model's disagreement with the run's own op
times; op_observed_us / op_predicted_us hold the two aggregates for other readings.

Ingress = queue wait + ingress work: the work is observed ingress minus the observed wait
(start - arrival), moved by its modelled ops; the wait comes from the FIFO single-server queue
(Lindley) over the arrivals and each request's service time, i.e. everything after the wait.
`other` (time in no stage) is not modelled. Predicted stages sum to the predicted latency.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from accel.cost import DEFAULT_PARAMS, CostParams, OpCost, op_times
from accel.grouping import CHUNK, chunks, dense_ids, run_starts
from accel.ops import F64, I64, B, OpArrays, RequestArrays, RunArrays
from accel.profiles import HardwareProfile
from accel.queueing import batched_waits
from accel.stages import OTHER, STAGE_CODE, STAGES

N_STAGES = len(STAGES)
COLUMNS: tuple[str, ...] = (*STAGES, OTHER)  # column order of every (n_req, 6) array here
_INGRESS = STAGE_CODE["ingress"]
_OTHER_COL = N_STAGES


@dataclass(frozen=True)
class StageTimes:
    """Op time per request and stage, shape (n_req, 5) in STAGES order."""

    stage_us: F64
    barrier_us: F64  # max - mean of per-core busy time; 0 where the stage used no core


@dataclass(frozen=True)
class Replay:
    """A run replayed on one profile; (n_req, 6) arrays follow COLUMNS (STAGES, then other)."""

    run_id: str
    profile: str
    predicted_stage_us: F64
    observed_stage_us: F64
    residual_us: F64  # observed - predicted
    predicted_latency_us: F64  # row sums of predicted_stage_us
    observed_latency_us: F64
    queue_wait_us: F64  # predicted ingress queue wait, (n_req,)
    observed_wait_us: F64  # start - arrival (or ingress minus its ops when start is unknown)
    service_us: F64  # predicted service time the queue was run on, (n_req,)
    op_predicted_us: F64  # (n_req, 6) aggregate of predicted op times; other column 0
    op_observed_us: F64  # (n_req, 6) aggregate of observed op times; other column 0
    barrier_us: F64  # (n_req, 6) max - mean over cores, predicted op times; other column 0
    observed_barrier_us: F64  # the same over observed op times
    modelled_share: float  # share of observed op time whose op was modelled (not copied)
    stage_modelled_share: F64  # (6,), NaN where a column has no observed op time
    ops: OpCost


@dataclass(frozen=True)
class ConditionalReplay:
    """One stage predicted while the others keep their observed values (queue re-run)."""

    stage: str
    predicted_us: F64  # (n_req,) the stage's prediction
    observed_us: F64
    residual_us: F64  # observed - predicted
    stage_us: F64  # (n_req, 6) observed, with `stage` predicted and ingress re-queued
    latency_us: F64  # row sums of stage_us: the counterfactual latency
    queue_wait_us: F64  # the re-run queue's waits


def _add_grouped(total: F64, key: I64, weights: F64, pending: list[tuple[I64, F64]]) -> None:
    """total[key] += weights, by a bincount over the chunk's key range when that is narrow
    (ops sorted by request), else deferred to one bincount over the whole table."""
    if not key.size:
        return
    lo, hi = int(key.min()), int(key.max())
    if hi - lo <= 4 * key.size:
        total[lo : hi + 1] += np.bincount(key - lo, weights=weights, minlength=hi - lo + 1)
    else:
        pending.append((key, weights))


def _busiest_core(rs: I64, core: I64, t: F64, total: F64, barrier: F64) -> None:
    """Add each (request, stage) cell's busiest-core time to `total`; max - mean to `barrier`."""
    cells = total.size
    top = int(core.max())
    if top < 4 * core.size + 1024:
        core_id, n_cores = core, top + 1  # raw ids; unused ones are empty columns
    else:
        core_id, n_cores = dense_ids(core)
    key = rs * n_cores + core_id
    if cells * n_cores <= 4 * key.size + (1 << 22):
        # Table of (cell, core): a few passes over a bounded table, no sort.
        busy = np.bincount(key, weights=t, minlength=cells * n_cores).reshape(cells, n_cores)
        present = np.bincount(key, minlength=cells * n_cores).reshape(cells, n_cores) > 0
        used = present.sum(axis=1)
        cell = np.flatnonzero(used)
        busy, present = busy[cell], present[cell]
        peak = np.where(present, busy, -np.inf).max(axis=1)
        mean = busy.sum(axis=1) / used[cell]
    else:
        # Sparse: number the occupied (cell, core) pairs; ascending ids keep cells sorted.
        rsc_id, n_rsc = dense_ids(key)
        busy_p = np.bincount(rsc_id, weights=t, minlength=n_rsc)
        rsc_cell = np.empty(n_rsc, dtype=np.int64)
        rsc_cell[rsc_id] = rs
        starts = run_starts(rsc_cell)
        cell = rsc_cell[starts]
        peak = np.maximum.reduceat(busy_p, starts)
        mean = np.add.reduceat(busy_p, starts) / np.diff(np.concatenate((starts, [n_rsc])))
    total[cell] += peak
    barrier[cell] = peak - mean


_LANES = 8  # interleaved partial sums for the few-bin share bincount (see _stage_table)


def _stage_code_index(stage: NDArray[np.integer]) -> NDArray[np.intp]:
    """Index of each op's stage code into a 256-entry table: the code itself for STAGES, >=
    N_STAGES for every other code (-1 unattributed, unknown codes)."""
    if stage.dtype == np.int8:  # read as uint8: -1 and other negatives land past STAGES
        return stage.view(np.uint8).astype(np.intp)
    return np.where((stage >= 0) & (stage < N_STAGES), stage, 255).astype(np.intp)


def _stage_table(
    ops: OpArrays,
    op_us: tuple[F64, ...],
    n_requests: int,
    width: int,
    share_of: B | None = None,
) -> tuple[list[StageTimes], F64 | None] | None:
    """stage_times through one table of (column, stage slot, request) sums and presence; None
    when an op's request is outside 0..n_requests-1 (the sparse path then takes the run).

    Column 0 sums core-less ops, column c+1 core c; stage slot 5 takes ops of no known stage
    and is dropped. Per chunk, one bincount per time array over the chunk's request range
    fills it; a (slot, request) plane per column is contiguous, so the busiest-core reduction
    runs over whole planes. With `share_of` (a mask over ops), also returns (2, 6) sums of the
    last time array per stage slot: over all ops, and over the masked ones.
    """
    slots = N_STAGES + 1
    tables = [np.zeros((width, slots, n_requests)) for _ in op_us]
    present = np.zeros((width, slots, n_requests), dtype=np.bool_)
    negative = [False for _ in op_us]
    slot_of = np.full(256, N_STAGES, dtype=np.intp)
    slot_of[:N_STAGES] = np.arange(N_STAGES)
    shares = np.zeros(_LANES * 2 * slots) if share_of is not None else None
    # Lane l of the share bincount takes ops l, l+LANES, ...: with one running sum per bin
    # (only 12 bins) every add would wait for the previous one.
    lanes = (np.arange(min(ops.size, CHUNK)) % _LANES) * (2 * slots)
    for sl in chunks(ops.size):
        req = ops.req[sl]
        lo, hi = int(req.min()), int(req.max())
        if lo < 0 or hi >= n_requests:
            return None
        if (hi - lo + 1) * slots * width > 4 * req.size + 4096:
            lo, hi = 0, n_requests - 1  # ops not grouped by request here: bin over all of them
        nr = hi - lo + 1
        code = _stage_code_index(ops.stage[sl])
        # key = ((core + 1) * slots + slot) * nr + req - lo
        key = np.multiply(ops.core[sl], slots * nr, dtype=np.intp)
        key += (slot_of * nr + (slots * nr - lo)).take(code)
        key += req
        n_bins = width * slots * nr
        for table, times, i in zip(tables, op_us, range(len(op_us)), strict=True):
            t = times[sl]
            if not np.isfinite(t.sum()):  # one pass; an overflowing sum only costs a copy
                t = np.nan_to_num(t, nan=0.0)
            negative[i] = negative[i] or bool(t.min() < 0)
            part = np.bincount(key, weights=t, minlength=n_bins)
            table[:, :, lo : hi + 1] += part.reshape(width, slots, nr)
        seen = np.zeros(n_bins, dtype=np.bool_)
        seen[key] = True
        present[:, :, lo : hi + 1] |= seen.reshape(width, slots, nr)
        if shares is not None and share_of is not None:
            sk = share_of[sl] * slots
            sk += slot_of.take(code)
            sk += lanes[: sk.size]
            shares += np.bincount(sk, weights=t, minlength=shares.size)
    cores = present[1:, :N_STAGES]
    used = np.zeros((N_STAGES, n_requests), dtype=np.intp)
    for col in cores:
        used += col
    on_core = used > 0
    mean_div = np.maximum(used, 1)
    out = []
    for table, neg in zip(tables, negative, strict=True):
        peak = np.full((N_STAGES, n_requests), -np.inf if neg else 0.0)
        busy_sum = np.zeros((N_STAGES, n_requests), dtype=np.float64)
        for col in range(1, width):
            column = table[col, :N_STAGES]
            busy_sum += column
            if neg:  # an empty core column (0) could outrank negative busy times
                np.maximum(peak, np.where(cores[col - 1], column, -np.inf), out=peak)
            else:
                np.maximum(peak, column, out=peak)
        peak = np.where(on_core, peak, 0.0)
        barrier = np.where(on_core, peak - busy_sum / mean_div, 0.0)
        peak += table[0, :N_STAGES]
        out.append(StageTimes(stage_us=peak.T.copy(), barrier_us=barrier.T.copy()))
    if shares is None:
        return out, None
    lane_sums = shares.reshape(_LANES, 2, slots).sum(axis=0)
    masked = lane_sums[1]
    return out, np.stack((lane_sums[0] + masked, masked))


def _table_width(ops: OpArrays, n_requests: int) -> int | None:
    """Core columns of the dense (core, stage, request) table, or None when it does not fit
    (_stage_table checks the requests as it goes)."""
    if not (ops.size and n_requests):
        return None
    core_lo, core_hi = int(ops.core.min()), int(ops.core.max())
    width = max(core_hi, -1) + 2
    fits = n_requests * (N_STAGES + 1) * width <= 4 * ops.size + (1 << 22)
    return width if core_lo >= -1 and fits else None


def stage_times(ops: OpArrays, op_us: F64, n_requests: int) -> StageTimes:
    """Group op times into (request, stage): sums for core-less ops, busiest core for the rest.

    Ops with a request outside 0..n_requests-1 or a stage outside STAGES are left out; NaN op
    times count as 0.
    """
    return stage_times_of(ops, (op_us,), n_requests)[0]


def stage_times_of(ops: OpArrays, op_us: tuple[F64, ...], n_requests: int) -> list[StageTimes]:
    """stage_times of several op time arrays of the same ops, in one pass over the ops; an
    array given more than once is summed once (its entries share one StageTimes)."""
    distinct = tuple({id(t): t for t in op_us}.values())
    width = _table_width(ops, n_requests)
    dense = None if width is None else _stage_table(ops, distinct, n_requests, width)
    if dense is None:
        found = [_stage_times_sparse(ops, t, n_requests) for t in distinct]
    else:
        found = dense[0]
    by_id = {id(t): st for t, st in zip(distinct, found, strict=True)}
    return [by_id[id(t)] for t in op_us]


def stage_times_pair(
    ops: OpArrays, first_us: F64, second_us: F64, n_requests: int
) -> tuple[StageTimes, StageTimes]:
    """stage_times of two op time arrays of the same ops (e.g. predicted and observed), in one pass."""
    a, b, _ = _pair_and_shares(ops, first_us, second_us, n_requests, None)
    return a, b


def _pair_and_shares(
    ops: OpArrays, first_us: F64, second_us: F64, n_requests: int, modelled: B | None
) -> tuple[StageTimes, StageTimes, F64 | None]:
    width = _table_width(ops, n_requests)
    dense = (
        None
        if width is None
        else _stage_table(ops, (first_us, second_us), n_requests, width, modelled)
    )
    if dense is None:
        return (
            _stage_times_sparse(ops, first_us, n_requests),
            _stage_times_sparse(ops, second_us, n_requests),
            None,
        )
    (a, b), shares = dense
    return a, b, shares


def _stage_times_sparse(ops: OpArrays, op_us: F64, n_requests: int) -> StageTimes:
    """stage_times for any input: wide core ids, requests out of range (general, slower)."""
    cells = n_requests * N_STAGES
    total = np.zeros(cells, dtype=np.float64)
    pending: list[tuple[I64, F64]] = []
    core_rs: list[I64] = []
    core_no: list[I64] = []
    core_t: list[F64] = []
    for sl in chunks(ops.size):
        req, stage, core = ops.req[sl], ops.stage[sl], ops.core[sl]
        t = op_us[sl]
        if np.isnan(t).any():
            t = np.nan_to_num(t, nan=0.0)
        keep = (req >= 0) & (req < n_requests) & (stage >= 0) & (stage < N_STAGES)
        rs = req * N_STAGES + stage
        serial = np.flatnonzero(keep & (core < 0))
        _add_grouped(total, rs[serial], t[serial], pending)
        on_core = np.flatnonzero(keep & (core >= 0))
        core_rs.append(rs[on_core])
        core_no.append(core[on_core].astype(np.int64))
        core_t.append(t[on_core])
    for key, weights in pending:
        total += np.bincount(key, weights=weights, minlength=cells)
    barrier = np.zeros(cells, dtype=np.float64)
    if core_rs and sum(a.size for a in core_rs):
        _busiest_core(
            np.concatenate(core_rs), np.concatenate(core_no), np.concatenate(core_t), total, barrier
        )
    return StageTimes(
        stage_us=total.reshape(n_requests, N_STAGES),
        barrier_us=barrier.reshape(n_requests, N_STAGES),
    )


def observed_wait_us(requests: RequestArrays, observed_ingress_ops_us: F64) -> F64:
    """Observed queue wait: start - arrival, else observed ingress minus its ops' time."""
    direct = requests.start_us - requests.arrival_us
    fallback = np.maximum(requests.stage_us[:, _INGRESS] - observed_ingress_ops_us, 0.0)
    wait = np.where(np.isfinite(direct), direct, fallback)
    return np.asarray(np.nan_to_num(np.maximum(wait, 0.0), nan=0.0), dtype=np.float64)


def _shares(sums: F64) -> tuple[float, F64]:
    """(overall, per column) modelled share from (2, 6) sums: all op time, modelled op time."""
    all_t, mod_t = sums
    per_stage = np.divide(mod_t, all_t, out=np.full(N_STAGES + 1, np.nan), where=all_t > 0)
    total = float(all_t.sum())
    return (float(mod_t.sum()) / total if total > 0 else float("nan")), per_stage


def _modelled_shares(ops: OpArrays, cost: OpCost) -> tuple[float, F64]:
    """_shares for runs the dense stage table cannot hold (own pass over the ops)."""
    all_t = np.zeros(N_STAGES + 1, dtype=np.float64)
    mod_t = np.zeros(N_STAGES + 1, dtype=np.float64)
    odd_stage = bool(ops.size) and int(ops.stage.min()) < -1
    for sl in chunks(ops.size):
        col = ops.stage[sl].astype(np.intp)
        if odd_stage:
            col[(col < 0) | (col >= N_STAGES)] = _OTHER_COL
        else:
            col += (col < 0) * (N_STAGES + 1)  # -1 (unattributed) -> the `other` column
        obs = ops.observed_us[sl]
        if not np.isfinite(obs).all():
            obs = np.nan_to_num(obs, nan=0.0)
        a = np.bincount(col, weights=obs, minlength=N_STAGES + 1)
        m = np.bincount(col, weights=obs * cost.modelled[sl], minlength=N_STAGES + 1)
        # Codes past the last stage are not stages either: fold them into `other`.
        all_t[:_OTHER_COL] += a[:_OTHER_COL]
        all_t[_OTHER_COL] += a[_OTHER_COL:].sum()
        mod_t[:_OTHER_COL] += m[:_OTHER_COL]
        mod_t[_OTHER_COL] += m[_OTHER_COL:].sum()
    return _shares(np.stack((all_t, mod_t)))


def _padded(x: F64) -> F64:
    """(n_req, 5) stage array as (n_req, 6) with a zero `other` column."""
    out = np.zeros((x.shape[0], N_STAGES + 1), dtype=np.float64)
    out[:, :N_STAGES] = x
    return out


def replay(
    run: RunArrays,
    hw: HardwareProfile,
    params: CostParams = DEFAULT_PARAMS,
    *,
    cost: OpCost | None = None,
) -> Replay:
    """Predict every request's exclusive stage times on `hw` (see the module docstring); cost:
    op_times(run.ops, hw, params) when the caller has it already."""
    req = run.requests
    n_req = req.size
    if cost is None:
        cost = op_times(run.ops, hw, params)
    elif cost.predicted_us.size != run.ops.size:
        raise ValueError(
            f"cost has {cost.predicted_us.size} ops, run {run.run_id} has {run.ops.size}"
        )
    pred_agg, obs_agg, sums = _pair_and_shares(
        run.ops, cost.predicted_us, run.ops.observed_us, n_req, cost.modelled
    )
    observed = np.asarray(req.stage_us, dtype=np.float64)
    known = np.nan_to_num(observed, nan=0.0)
    delta = pred_agg.stage_us - obs_agg.stage_us
    obs_wait = observed_wait_us(req, obs_agg.stage_us[:, _INGRESS])
    predicted = np.empty((n_req, N_STAGES + 1), dtype=np.float64)
    # A stage cannot go below zero however much modelled time it sheds (its observed ops may
    # have overlapped, so their sum can exceed the stage's wall time).
    predicted[:, :N_STAGES] = np.maximum(known[:, :N_STAGES] + delta, 0.0)
    predicted[:, _INGRESS] = np.maximum(
        np.maximum(known[:, _INGRESS] - obs_wait, 0.0) + delta[:, _INGRESS], 0.0
    )
    predicted[:, _OTHER_COL] = known[:, _OTHER_COL]
    service = predicted.sum(axis=1)
    wait = batched_waits(req.arrival_us, service, req.batch_id)
    predicted[:, _INGRESS] += wait
    share, stage_share = _shares(sums) if sums is not None else _modelled_shares(run.ops, cost)
    return Replay(
        run_id=run.run_id,
        profile=hw.name,
        predicted_stage_us=predicted,
        observed_stage_us=observed,
        residual_us=observed - predicted,
        predicted_latency_us=predicted.sum(axis=1),
        observed_latency_us=np.asarray(req.latency_us, dtype=np.float64),
        queue_wait_us=wait,
        observed_wait_us=obs_wait,
        service_us=service,
        op_predicted_us=_padded(pred_agg.stage_us),
        op_observed_us=_padded(obs_agg.stage_us),
        barrier_us=_padded(pred_agg.barrier_us),
        observed_barrier_us=_padded(obs_agg.barrier_us),
        modelled_share=share,
        stage_modelled_share=stage_share,
        ops=cost,
    )


def conditional_replay(
    run: RunArrays,
    hw: HardwareProfile,
    stage: str,
    params: CostParams = DEFAULT_PARAMS,
    base: Replay | None = None,
) -> ConditionalReplay:
    """Predict `stage` given the observed values of the other stages.

    For ingress the queue is re-run on the observed service times (observed stages after
    ingress plus the predicted ingress work), so a downstream slowdown that merely queues up
    is explained and does not count against ingress. For any other stage its replay prediction
    replaces the observed value and the queue is re-run on the resulting service times, giving
    the counterfactual latency. Pass `base` (replay of the same run) to reuse its op work.
    """
    if stage not in STAGE_CODE:
        raise ValueError(f"unknown stage {stage!r}; known: {', '.join(STAGES)}")
    s = STAGE_CODE[stage]
    req = run.requests
    rep = base if base is not None else replay(run, hw, params)
    observed = np.asarray(req.stage_us, dtype=np.float64)
    stage_us = np.nan_to_num(observed, nan=0.0)
    ingress_work = np.maximum(stage_us[:, _INGRESS] - rep.observed_wait_us, 0.0)
    if s == _INGRESS:
        delta = rep.op_predicted_us[:, _INGRESS] - rep.op_observed_us[:, _INGRESS]
        ingress_work = np.maximum(ingress_work + delta, 0.0)
    else:
        stage_us[:, s] = rep.predicted_stage_us[:, s]
    service = ingress_work + stage_us[:, _INGRESS + 1 :].sum(axis=1)
    wait = batched_waits(req.arrival_us, service, req.batch_id)
    stage_us[:, _INGRESS] = wait + ingress_work
    predicted = stage_us[:, s].copy()
    return ConditionalReplay(
        stage=stage,
        predicted_us=predicted,
        observed_us=observed[:, s],
        residual_us=observed[:, s] - predicted,
        stage_us=stage_us,
        latency_us=stage_us.sum(axis=1),
        queue_wait_us=wait,
    )
