"""Plan swaps: the failing run's stage op times when it takes the comparator's lowering
decisions (compiles, kernels and tiles, fusion groups) or its core placement.

A core's share of rows moves time along the failing run's own time-per-row.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from accel.grouping import rank_in_runs
from accel.localize.batching import SIM_TOLERANCE, ingress_swap
from accel.localize.gaps import gap_share, mean_share
from accel.localize.matching import (
    Match,
    PlacementShares,
    SwapBase,
    SwapInputs,
    Timing,
    group_medians,
    signature_of,
    swap_inputs,
)
from accel.localize.requeue import QueueState, requeue
from accel.ops import F64, I64, OpArrays, RunArrays, joint_name_codes, name_codes, nan_as_zero
from accel.replay import stage_times
from accel.stages import STAGE_CODE, STAGES

EXEC = STAGE_CODE["execution"]
LOW = STAGE_CODE["lowering"]


def _exec_delta(
    f: OpArrays, new_us: F64, n_req: int, observed: F64, placed: OpArrays | None = None
) -> F64:
    """Per request and stage: op time with `new_us` (on `placed` cores, default f's) minus the
    observed op time `observed` (each stage's serial ops plus its busiest core)."""
    new = stage_times(placed or f, new_us, n_req).stage_us
    return np.asarray(new - observed, dtype=np.float64)


def lowering_swap(
    f: OpArrays,
    c: OpArrays,
    n_req: int,
    part: str,
    m: Match,
    timing: Timing,
    base: SwapBase,
) -> F64:
    """(n_req, 5) change of stage op time when failing ops take the comparator's lowering
    decisions; `part` is "compile", "kernel" (fallback kernels and tiles), "fusion" or "all"."""
    delta = np.zeros((n_req, len(STAGES)))
    if part in ("compile", "all"):
        # Compiles the comparator does not do: its recompile time per request replaces ours.
        f_rc = np.bincount(f.req[f.recompile], f.observed_us[f.recompile], n_req)
        c_n = int(c.req.max()) + 1 if c.size else 1
        c_rate = float(np.nansum(c.observed_us[c.recompile])) / max(c_n, 1)
        delta[:, LOW] += np.minimum(c_rate - f_rc, 0.0)
    if part == "compile":
        return delta
    fi, ci, names = m.f_idx, m.c_idx, m.name_code
    f_tile, c_tile, sig_old = base.f_tile, base.c_tile, base.f_sig
    if part == "kernel":
        take = f.fallback[fi] | (f.tile_m[fi] != c.tile_m[ci]) | (f.tile_n[fi] != c.tile_n[ci])
        fi, ci, names, f_tile, c_tile, sig_old = (
            x[take] for x in (fi, ci, names, f_tile, c_tile, sig_old)
        )
    # The signature reads the swapped fields at fi only; the fusion groups were swapped whole
    # (in base), since the leaders of the new group instances span ops outside fi.
    tile, fallback, tier, group = f_tile, f.fallback[fi], f.mem_tier[fi], f.fusion_group[fi]
    if part in ("kernel", "all"):
        tile, fallback = c_tile, c.fallback[ci]
    if part in ("fusion", "all"):  # (no `take` here: fi is every matched op)
        tier, group = c.mem_tier[ci], base.f_group
    sig_new = signature_of(tile, group, fallback, tier)
    # An op is re-timed when its own decision or its fused group's make-up changed.
    changed = sig_new != sig_old
    if part in ("fusion", "all"):  # else fusion groups, hence leaders, are f's own
        changed |= base.regrouped
    # Looked up for those ops only: a lookup is op by op, and the others keep their time.
    at = np.flatnonzero(changed)
    t_new = timing.lookup(names[at], sig_new[at], f.m[fi[at]])
    new_us = nan_as_zero(f.observed_us)
    ok = np.isfinite(t_new)
    new_us[fi[at[ok]]] = t_new[ok]
    delta += _exec_delta(f, new_us, n_req, base.observed_stage_us)
    return delta


def _flat_index(row: I64, n_cols: int, col: I64) -> I64:
    """row * n_cols + col: the flat position of (row, col) in a C-ordered table, for one take
    (a 2-d fancy index over millions of shards is twice as slow)."""
    at = row * n_cols
    at += col
    return at


def _ols_slopes(code: I64, x: F64, y: F64, k: int) -> F64:
    """Per code 0..k-1: the least-squares slope of y on x, at least 0; 0 where a code has
    fewer than 3 points or one x value. Grouped sums in one pass each, not a fit per code."""
    n = np.bincount(code, minlength=k).astype(np.float64)
    has = n > 0
    mx = np.divide(np.bincount(code, x, k), n, out=np.zeros(k), where=has)
    my = np.divide(np.bincount(code, y, k), n, out=np.zeros(k), where=has)
    dx = x - mx[code]
    sxx = np.bincount(code, dx * dx, k)
    sxy = np.bincount(code, dx * (y - my[code]), k)
    # One x value: a rounded mean leaves dx tiny but not 0, so test the spread itself: a code
    # has two x values when one of its x differs from any one of them (whichever the scatter
    # kept), found without the ufunc.at passes of a min and a max.
    ref = np.zeros(k)
    ref[code] = x
    spread = np.zeros(k, dtype=np.bool_)
    spread[code[x != ref[code]]] = True
    ok = (n >= 3) & spread & (sxx > 0)
    out = np.zeros(k)
    out[ok] = np.maximum(sxy[ok] / sxx[ok], 0.0)
    return out


def _lanes(req: I64, core: I64, n_req: int) -> tuple[I64, I64, I64]:
    """Each op's lane rank within its request (the k-th distinct core the request used), the
    cores of each request by rank ((n_req, k) table, -1 past its last) and each request's count.
    Ranks, not core ids: a request served in one slot of several (continuous batching on a
    stream per slot and core) has its own set of lanes, and placement is within them."""
    k = max(int(core.max(initial=-1)) + 1, 1)
    cell = req * k + core  # (request, core), flat: one key for the scatter and the gather
    flat = np.zeros(n_req * k, dtype=np.bool_)
    flat[cell] = True
    present = flat.reshape(n_req, k)
    rank_of = np.cumsum(present, axis=1, dtype=np.int64) - 1
    count = present.sum(axis=1)
    by_rank = np.full(present.shape, -1, dtype=np.int64)
    r_idx, c_idx = np.nonzero(present)
    by_rank[r_idx, rank_of[r_idx, c_idx]] = c_idx
    return rank_of.ravel()[cell], by_rank, count.astype(np.int64)


def comparator_shares(c: OpArrays) -> PlacementShares | None:
    """What placement_swap reads of the comparator (None: no execution op on a core): it
    needs nothing of the failing run, so a caller with a core to spare makes it beforehand."""
    csel = np.flatnonzero((c.stage == EXEC) & (c.core >= 0) & np.isfinite(c.m))
    if not csel.size:
        return None
    c_all, vocab = name_codes(c, kernel_fallback=True)
    c_code = c_all[csel]
    del c_all
    nv = len(vocab)
    c_lane = _lanes(c.req[csel], c.core[csel].astype(np.int64), int(c.req.max()) + 1)[0]
    n_lane = int(c_lane.max()) + 1
    # Median share of each lane in an op's rows, per op name. (Codes of the comparator's own
    # names: the groups, their sums and medians are those of any numbering of the names.)
    c_tot = np.bincount(c.req[csel] * nv + c_code, c.m[csel], (int(c.req.max()) + 1) * nv)
    c_share = c.m[csel] / c_tot[c.req[csel] * nv + c_code]
    del c_tot
    keys, med = group_medians(c_code * n_lane + c_lane, c_share)
    return PlacementShares(vocab, keys // n_lane, keys % n_lane, med, n_lane)


def placement_swap(
    f: OpArrays,
    c: OpArrays,
    n_req: int,
    observed: F64,
    m: Match | None = None,
    shares: PlacementShares | None = None,
) -> F64:
    """(n_req, 5) change of stage op time when failing ops get the comparator's placement:
    the shards of one op spread over distinct lanes (cores a request used) in the comparator's
    row shares; `m` (_match of the pair) saves recoding the op names, `shares`
    (comparator_shares(c)) the comparator's half."""
    sel = np.flatnonzero((f.stage == EXEC) & (f.core >= 0) & np.isfinite(f.m))
    if shares is None:
        shares = comparator_shares(c)
    if not sel.size or shares is None:
        return np.zeros((n_req, len(STAGES)))
    if m is None:
        f_all, _, vocab = joint_name_codes(f, c, kernel_fallback=True)
    else:
        f_all, vocab = m.f_name_code, m.vocab
    f_code = f_all[sel]
    nv = len(vocab)
    req_sel, m_sel = f.req[sel], f.m[sel]  # each taken once for the uses below
    f_lane, f_by_rank, f_count = _lanes(req_sel, f.core[sel].astype(np.int64), n_req)
    n_core = max(int(f_lane.max()) + 1, shares.n_lane)
    index = {name: i for i, name in enumerate(vocab)}
    joint = np.array([index[name] for name in shares.vocab], dtype=np.int64)
    share = np.full((nv, n_core), np.nan)
    share[joint[shares.code], shares.lane] = shares.median
    # Each per-shard temporary is dropped once used: on 2M kernel shards they are 17 MB each,
    # and the stage table at the end is a triage's high-water mark.
    # Failing: the k-th shard (by lane) of an op in a request goes to the request's k-th lane.
    group = req_sel * nv + f_code
    # Stable sort by (group, lane): by lane (a radix sort), then stably by group, which only
    # merges n_core sorted runs when ops come grouped by request (as they usually do).
    by_lane = np.argsort(f_lane.astype(np.uint16) if n_core <= 1 << 16 else f_lane, kind="stable")
    order = by_lane[np.argsort(group[by_lane], kind="stable")]
    rank = np.empty(sel.size, dtype=np.int64)
    rank[order] = rank_in_runs(group[order])
    del by_lane, order
    new_lane = np.minimum(rank, n_core - 1)
    del rank
    f_tot = np.bincount(group, m_sel, n_req * nv)
    new_m = f_tot[group] * share.ravel().take(_flat_index(f_code, n_core, new_lane))
    del group, f_tot
    ok = np.isfinite(new_m) & (new_m > 0)
    # Time per row of each op name, fitted on the failing run's own shards (observed = a + b*m):
    # moving rows between lanes moves b * rows of time.
    t = nan_as_zero(f.observed_us[sel], own=True)
    slope = _ols_slopes(f_code, m_sel, t, nv)
    new_us = nan_as_zero(f.observed_us)
    new_us[sel] = np.maximum(t + slope[f_code] * np.where(ok, new_m - m_sel, 0.0), 0.0)
    del m_sel, t, new_m
    lane_at = _flat_index(req_sel, f_by_rank.shape[1], np.minimum(new_lane, f_count[req_sel] - 1))
    new_core = f_by_rank.ravel().take(lane_at)
    del req_sel, lane_at
    cores = f.core.copy()
    cores[sel] = np.where(ok, new_core, f.core[sel]).astype(cores.dtype)
    return _exec_delta(f, new_us, n_req, observed, replace(f, core=cores))


LOWERING_PARTS = ("compile", "kernel", "fusion", "all")


def lowering_deltas(failing: RunArrays, comparator: RunArrays, swap: SwapInputs) -> dict[str, F64]:
    """lowering_swap of each part; empty when the ops could not be matched. It needs no replay,
    so a caller with a core to spare makes it beside them (prepare_swaps)."""
    m, timing, base = swap.match, swap.timing, swap.base
    if m is None or timing is None or base is None:
        return {}
    f, c, n_req = failing.ops, comparator.ops, failing.requests.size
    return {p: lowering_swap(f, c, n_req, p, m, timing, base) for p in LOWERING_PARTS}


def prepare_swaps(
    failing: RunArrays, comparator: RunArrays, shares: PlacementShares | None = None
) -> SwapInputs:
    """swap_inputs of the pair with their lowering_deltas (and the comparator's placement
    shares, when the caller made them)."""
    swap = swap_inputs(failing, comparator)
    deltas = lowering_deltas(failing, comparator, swap)
    return replace(swap, deltas=deltas, placement_shares=shares)


def plan_swaps(
    failing: RunArrays,
    comparator: RunArrays,
    f_stage: F64,
    queues: tuple[QueueState, QueueState],
    base_lat: F64,
    gaps: dict[str, float],
    swap: SwapInputs,
    through: QueueState | None = None,
) -> tuple[dict[str, tuple[F64, F64]], dict[str, float], bool, list[str]]:
    """Per plan stage (ingress, lowering, scheduling): the failing latency it is compared with
    and the failing latency under the comparator's decisions for that stage; the mean share of
    the tail gap each lowering part (compile, kernel, fusion) removes; whether the ops could be
    matched (False: ops carry no names, so only the ingress swap was made); and notes on swaps
    left out (the ingress swap when the simulated batcher does not reproduce the runs).
    `through`: the queue the lowering and scheduling swaps are re-run through (default: the
    failing run's observed one; the batch-policy swap always simulates the observed runs)."""
    fr, cr = failing.requests, comparator.requests
    fq, cq = queues
    rq = fq if through is None else through
    n_req = fr.size
    out: dict[str, tuple[F64, F64]] = {}
    parts: dict[str, float] = {}
    notes: list[str] = []
    ingress = ingress_swap(fr, cr, (fq, cq), (failing.ops, comparator.ops))
    if ingress.usable:
        out["ingress"] = (ingress.own, ingress.swapped)
    else:
        notes.append(
            f"the simulated batcher does not give back the runs' p50/p95/p99 (off by up to "
            f"{ingress.error:.0%}, tolerance {SIM_TOLERANCE:.0%}): no batch-policy swap"
        )
    m, base = swap.match, swap.base
    if m is None or base is None:
        return out, parts, False, notes
    deltas = swap.deltas if swap.deltas is not None else lowering_deltas(failing, comparator, swap)
    for part in LOWERING_PARTS:
        d = deltas[part]
        cf = f_stage.copy()
        cf[:, :5] = np.maximum(f_stage[:, :5] + d, 0.0)
        cf_lat = requeue(rq, cf)
        if part == "all":
            out["lowering"] = (base_lat, cf_lat)
        else:
            parts[part] = mean_share(gap_share(base_lat, cf_lat, gaps))
    d = placement_swap(
        failing.ops, comparator.ops, n_req, base.observed_stage_us, m, swap.placement_shares
    )
    cf = f_stage.copy()
    cf[:, :5] = np.maximum(f_stage[:, :5] + d, 0.0)
    out["scheduling"] = (base_lat, requeue(rq, cf))
    return out, parts, True, notes
