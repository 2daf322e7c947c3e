"""Localization of a tail regression: which stage first went wrong, and by which mechanism.

DESIGN §5, for a failing run against a comparator on one hardware profile:
  1. trigger: the p95 or p99 latency gap is significant (bootstrap interval above zero) and
     larger than fault-free A/A pairs produce (thresholds from `calibrate`);
  2. conditional replay: ingress is re-predicted from the observed downstream service times
     (queueing amplifies every downstream slowdown; that part is not ingress's fault);
  3. plan swaps: the failing run gets the comparator's decisions for one plan-bearing stage
     (ingress: batch cap and hold; lowering: compiles, kernel/tile choice, fusion groups;
     scheduling: core placement), the queue is re-run, and the share of the p95/p99 gap that
     disappears is measured;
  4. residual shift per stage (Mann-Whitney, Hodges-Lehmann) of observed - predicted.
Origin = the first stage in pipeline order whose swap explains most of the gap or whose residual
shifts significantly (and explains a real share of it); failing both, the manifest stage.

Counterfactual op times are what the comparator's own ops with the same name and decision
took at the same size (median per M, interpolated linearly in M), and a core's share of rows
moves time along the failing run's own time-per-row; so the cost model's calibration error
is not graded. The cost model (accel.replay) supplies the residuals of step 4.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, replace
from typing import Final, TypedDict

import numpy as np
from numpy.typing import NDArray

from accel.cost import OpCost, dense_ids, first_index, rank_in_runs, run_starts
from accel.ops import F64, I8, I64, B, OpArrays, RequestArrays, RunArrays, joint_name_codes
from accel.profiles import HardwareProfile
from accel.queueing import batched_waits
from accel.replay import COLUMNS, Replay, conditional_replay, replay, stage_times
from accel.stages import MECHANISMS, STAGE_CODE, STAGES
from accel.stats import (
    bootstrap_quantile_diff,
    hodges_lehmann_ci,
    mann_whitney_u,
    quantile,
)

QS: Final[tuple[float, ...]] = (0.95, 0.99)
QNAMES: Final[tuple[str, ...]] = ("p95", "p99")
PLAN_STAGES: Final[tuple[str, ...]] = ("ingress", "lowering", "scheduling")
METHODS: Final[tuple[str, ...]] = ("full", "no_swap", "naive")
SUMMARY_QS: Final[tuple[float, ...]] = (0.5, 0.95, 0.99)  # quantiles of replay_summary
SUMMARY_QNAMES: Final[tuple[str, ...]] = ("p50", "p95", "p99")

# Decision thresholds (shares of the tail gap, and test levels); see bench/localize.py.
SWAP_SHARE: Final[float] = 0.5  # a plan swap must remove at least half of the tail gap
RESIDUAL_SHARE: Final[float] = 0.3  # a residual shift must account for this share of the gap
RESIDUAL_ALPHA: Final[float] = 0.01 / len(STAGES)  # Bonferroni over the five stages
N_BOOT: Final[int] = 400
_EXEC = STAGE_CODE["execution"]
_LOW = STAGE_CODE["lowering"]
_SCHED = STAGE_CODE["scheduling"]
_INGRESS = STAGE_CODE["ingress"]
_ASM = STAGE_CODE["assembly"]


@dataclass(frozen=True)
class Claim:
    """One statement of the verdict with the numbers that prove it and how they were made."""

    text: str
    numbers: dict[str, float]
    method: str


@dataclass(frozen=True)
class Calibration:
    """Trigger thresholds: relative p95/p99 gaps that fault-free A/A pairs exceed rarely."""

    p95_rel: float
    p99_rel: float
    alpha: float
    n_pairs: int
    source: str
    n_requests: int = 600  # requests per run of the A/A pairs the thresholds came from

    def scaled(self, n: int) -> tuple[float, float]:
        """Thresholds for runs of n requests: quantile noise shrinks as 1/sqrt(n)."""
        k = math.sqrt(self.n_requests / n) if n > 0 else math.inf
        return self.p95_rel * k, self.p99_rel * k


# From `calibrate(("h100", "tpu-v5e"), n_pairs=150, seed=1, alpha=0.03)` (re-derive with
# `bench/localize.py --calibrate`): the (1 - alpha/2) quantile of A/A relative gaps per
# quantile at 600 requests per run; alpha 0.03 keeps the A/A alarm rate under 5% with margin.
DEFAULT_CALIBRATION: Final[Calibration] = Calibration(
    p95_rel=0.088,
    p99_rel=0.434,
    alpha=0.03,
    n_pairs=300,
    source="calibrate(('h100', 'tpu-v5e'), n_pairs=150, seed=1, alpha=0.03), 600 requests/run",
)


@dataclass(frozen=True)
class Localization:
    """The verdict for one failing/comparator pair (see the module docstring)."""

    triggered: bool
    origin_stage: str | None
    manifest_stage: str | None
    mechanism: str
    secondary_mechanism: str | None
    confidence: float
    # stage -> {"p95": share, "p99": share} of the tail gap removed by giving failing the
    # comparator's plan (ingress, lowering, scheduling) or removing the stage's residual shift
    # (execution, assembly); empty when not triggered.
    explained_share: dict[str, dict[str, float]]
    p95_gap_us: float
    p99_gap_us: float
    p95_gap_ci: tuple[float, float]
    p99_gap_ci: tuple[float, float]
    n_failing: int
    n_comparator: int
    claims: list[Claim]
    p95_rel_gap: float = math.nan
    p99_rel_gap: float = math.nan
    decided_by: str = "none"  # "plan_swap", "residual", "manifest", "raw_shift" or "none"
    residual_shift: dict[str, dict[str, float]] = field(default_factory=dict)
    manifest_gap_us: dict[str, float] = field(default_factory=dict)  # stage -> p95 own-time gap
    mechanism_scores: dict[str, float] = field(default_factory=dict)
    method: str = "full"
    # role ("failing", "comparator") -> row (STAGES, "other", "latency") -> replay_summary's
    # figures; empty when no replay was made (not triggered, or method "naive").
    replay_summary: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)


class _Common(TypedDict):
    """Localization fields known once the gaps are measured."""

    p95_gap_us: float
    p99_gap_us: float
    p95_gap_ci: tuple[float, float]
    p99_gap_ci: tuple[float, float]
    n_failing: int
    n_comparator: int
    p95_rel_gap: float
    p99_rel_gap: float
    method: str


# --- small pieces -----------------------------------------------------------------------------


def _q(x: F64, q: float) -> float:
    return float(quantile(x, q))


def _gap_share(base: F64, cf: F64, gaps: dict[str, float]) -> dict[str, float]:
    """Share of each tail gap that a counterfactual latency removes (clipped to [-1, 1.5])."""
    out = {}
    for q, name in zip(QS, QNAMES, strict=True):
        g = gaps[name]
        s = (_q(base, q) - _q(cf, q)) / g if g > 0 else 0.0
        out[name] = float(np.clip(s, -1.0, 1.5))
    return out


def _mean_share(share: dict[str, float]) -> float:
    return float(np.mean([share[n] for n in QNAMES]))


def _batch_heads(req: RequestArrays) -> I64:
    """Index of one request per batch (batch-level stages are identical within a batch)."""
    if req.batch_id is None or not np.any(req.batch_id >= 0):
        return np.arange(req.size, dtype=np.int64)
    bid = np.asarray(req.batch_id, dtype=np.int64)
    solo = np.flatnonzero(bid < 0)
    _, first = np.unique(bid[bid >= 0], return_index=True)
    heads = np.flatnonzero(bid >= 0)[first]
    return np.sort(np.concatenate((heads, solo))).astype(np.int64)


def _batch_ids(req: RequestArrays) -> I64:
    if req.batch_id is None:
        return np.arange(req.size, dtype=np.int64)
    bid = np.asarray(req.batch_id, dtype=np.int64).copy()
    solo = bid < 0
    bid[solo] = bid.max(initial=-1) + 1 + np.arange(int(solo.sum()))
    return bid


# --- the queue, re-run ------------------------------------------------------------------------


@dataclass(frozen=True)
class QueueState:
    """What re-running a run's queue needs: arrivals, batches and the batcher's observed holds."""

    arrival: F64
    batch: I64
    hold: F64  # per request: how long its batch was held after its last member arrived
    work: F64  # observed ingress time that is not waiting (0 when start times are known)


def observed_queue(req: RequestArrays) -> QueueState:
    """The observed queue: per batch, the hold = start - max(last arrival, server free)."""
    arrival = np.asarray(req.arrival_us, dtype=np.float64)
    start = np.asarray(req.start_us, dtype=np.float64)
    stage = np.nan_to_num(np.asarray(req.stage_us, dtype=np.float64), nan=0.0)
    known = np.isfinite(start)
    wait = np.where(known, start - arrival, stage[:, _INGRESS])
    work = np.maximum(stage[:, _INGRESS] - wait, 0.0)
    batch = _batch_ids(req)
    _, job = np.unique(batch, return_inverse=True)
    job = job.ravel()
    nj = int(job.max()) + 1 if job.size else 0
    last = np.full(nj, -np.inf)
    np.maximum.at(last, job, arrival)
    jstart = np.full(nj, np.inf)
    np.minimum.at(jstart, job, np.where(known, start, arrival + wait))
    service = np.zeros(nj)
    np.maximum.at(service, job, work + stage[:, 1:].sum(axis=1))
    order = np.argsort(jstart, kind="stable")
    prev_end = np.full(nj, -np.inf)
    ends = jstart[order] + service[order]
    prev_end[order[1:]] = np.maximum.accumulate(ends)[:-1]
    hold = np.maximum(jstart - np.maximum(last, prev_end), 0.0)
    return QueueState(arrival, batch, np.asarray(hold[job], dtype=np.float64), work)


def requeue(
    qu: QueueState, stage_us: F64, batch: I64 | None = None, hold: F64 | None = None
) -> F64:
    """Latency when the run's service stages take `stage_us` (the queue re-run)."""
    st = np.nan_to_num(stage_us, nan=0.0)
    service = qu.work + st[:, 1:].sum(axis=1)
    b = qu.batch if batch is None else batch
    h = qu.hold if hold is None else hold
    wait = batched_waits(qu.arrival + h, service, b)
    return np.asarray(wait + h + service, dtype=np.float64)


# --- plan swaps -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Match:
    """For each failing kernel op, the comparator op of the same name with the nearest M."""

    f_idx: I64  # failing op indices that were matched
    c_idx: I64  # the comparator op matched to each
    name_code: I64  # shared name code of each matched failing op
    c_name_code: I64  # name code of every comparator op
    vocab: list[str]
    f_name_code: I64  # name code of every failing op


def _match(f: OpArrays, c: OpArrays) -> _Match | None:
    f_code, c_code, vocab = joint_name_codes(f, c, kernel_fallback=True)
    code = {n: i for i, n in enumerate(vocab)}
    f_ok = (f.stage == _EXEC) & np.isfinite(f.m) & (f.core >= 0) & (f_code >= 0)
    c_ok = (c.stage == _EXEC) & np.isfinite(c.m) & (c.core >= 0)
    if "" in code:
        f_ok &= f_code != code[""]
        c_ok &= c_code != code[""]
    if not f_ok.any() or not c_ok.any():
        return None
    big = 2.0 ** (int(np.log2(max(float(np.nanmax(c.m[c_ok])), float(np.nanmax(f.m[f_ok]))))) + 2)
    c_sel = np.flatnonzero(c_ok)
    c_key = c_code[c_sel] * big + c.m[c_sel]
    order = np.argsort(c_key, kind="stable")
    c_sorted, c_key = c_sel[order], c_key[order]
    f_sel = np.flatnonzero(f_ok)
    f_key = f_code[f_sel] * big + f.m[f_sel]
    # The nearest key below (the last op of its run of equal keys, else the first op) or at or
    # above (the first op of its run, else the last op), searched among the distinct keys only:
    # a few sizes per name, where the ops number millions.
    starts = run_starts(c_key)
    ends = np.append(starts[1:], c_key.size) - 1
    distinct = c_key[starts]
    pos = np.searchsorted(distinct, f_key)
    below = np.maximum(pos - 1, 0)
    above = np.minimum(pos, distinct.size - 1)
    lo = np.where(pos > 0, ends[below], 0)
    hi = np.where(pos < distinct.size, starts[above], c_key.size - 1)
    nearer_below = np.abs(distinct[below] - f_key) <= np.abs(distinct[above] - f_key)
    pick = np.where(nearer_below, lo, hi)
    cand = c_sorted[pick]
    same = c_code[cand] == f_code[f_sel]
    return _Match(f_sel[same], cand[same], f_code[f_sel[same]], c_code, vocab, f_code)


def _signature(ops: OpArrays, idx: I64) -> I64:
    """Lowering decision of each op as one integer: fallback, fused, tier, tile."""
    return _signature_of(
        _tile_code(ops.tile_m[idx], ops.tile_n[idx]),
        ops.fusion_group[idx],
        ops.fallback[idx],
        ops.mem_tier[idx],
    )


def _tile_code(tile_m: F64, tile_n: F64) -> I64:
    """The tile part of a signature (tm * 4096 + tn, NaN as 0)."""
    tm = np.nan_to_num(tile_m, nan=0.0).astype(np.int64)
    return tm * 4096 + np.nan_to_num(tile_n, nan=0.0).astype(np.int64)


def _signature_of(tile: I64, group: I64, fallback: B, tier: I8) -> I64:
    """_signature from the ops' fields (already taken at the ops of interest); tile: _tile_code.

    Kept apart, the tile code of the ops a swap leaves alone is computed once for all swaps."""
    fused = (group >= 0).astype(np.int64)
    fb = fallback.astype(np.int64)
    return ((fb * 2 + fused) * 8 + tier.astype(np.int64) + 1) * (1 << 24) + tile


def _leaders(ops: OpArrays, code: I64) -> I64:
    """Per op: name code of the first op of its fused group instance (-1 when unfused)."""
    out = np.full(ops.size, -1, dtype=np.int64)
    fused = np.flatnonzero(ops.fusion_group >= 0)
    if not fused.size:
        return out
    key = ops.req[fused] * (int(ops.fusion_group.max()) + 1) + ops.fusion_group[fused]
    # Dense ids and each id's first position: what np.unique(return_index, return_inverse)
    # gives, without its sort.
    inv, k = dense_ids(key)
    out[fused] = code[fused[first_index(inv, k)]][inv]
    return out


def _grouped(ids: I64, k: int) -> tuple[NDArray[np.intp], NDArray[np.intp]]:
    """Positions ordered by id 0..k-1, stably (an id's positions stay in order), and the k + 1
    bounds of each id's slice of them: one pass instead of a mask per id."""
    # A radix sort when the ids fit 16 bits, 4x faster than a sort of int64.
    order = np.argsort(ids.astype(np.uint16) if k <= 1 << 16 else ids, kind="stable")
    bounds = np.zeros(k + 1, dtype=np.intp)
    np.cumsum(np.bincount(ids, minlength=k), out=bounds[1:])
    return order, bounds


def group_medians(key: I64, value: F64) -> tuple[I64, F64]:
    """Sorted distinct keys and the median of `value` within each."""
    if not key.size:
        return key[:0], np.zeros(0)
    ids, k = dense_ids(key)
    # Sort by value, then stably by dense group id (faster than lexsort on millions of ops).
    # Ties in value are equal, so any order does.
    by_value = np.argsort(value)
    by_group, bounds = _grouped(ids[by_value], k)
    order = by_value[by_group]
    starts, counts = bounds[:-1], np.diff(bounds)
    v = value[order]
    lo = starts + (counts - 1) // 2
    hi = starts + counts // 2
    return key[order[starts]], 0.5 * (v[lo] + v[hi])


@dataclass(frozen=True)
class _Timing:
    """The comparator's observed op time per (op name, lowering decision) as a function of M:
    the median at each M it ran, linearly interpolated in between."""

    curves: dict[tuple[int, int], tuple[F64, F64]]

    def lookup(self, name: I64, sig: I64, m: F64) -> F64:
        out = np.full(name.size, np.nan)
        pairs = name * (1 << 40) + sig
        order, bounds = _grouped(*dense_ids(pairs))
        for lo, hi in itertools.pairwise(bounds.tolist()):
            sel = order[lo:hi]
            key = int(pairs[sel[0]])
            curve = self.curves.get((key >> 40, key & ((1 << 40) - 1)))
            if curve is None:
                continue
            ms, ts = curve
            x = m[sel]
            y = np.interp(x, ms, ts)
            # Past the largest M it ran, time grows with M (the work is proportional to rows).
            out[sel] = np.where(x > ms[-1], ts[-1] * x / ms[-1], y)
        return out


def _timing(c: OpArrays, c_code: I64) -> _Timing:
    sel = np.flatnonzero((c.stage == _EXEC) & (c.core >= 0) & np.isfinite(c.m) & (c.m > 0))
    sig = _signature(c, sel)
    t = np.nan_to_num(c.observed_us[sel], nan=0.0)
    curves: dict[tuple[int, int], tuple[F64, F64]] = {}
    key = c_code[sel] * (1 << 40) + sig
    m_sel = np.round(c.m[sel]).astype(np.int64)  # taken once, not once per key
    order, bounds = _grouped(*dense_ids(key))
    for lo, hi in itertools.pairwise(bounds.tolist()):
        g = order[lo:hi]
        k = int(key[g[0]])
        ms, ts = group_medians(m_sel[g], t[g])
        curves[(k >> 40, k & ((1 << 40) - 1))] = (ms.astype(np.float64), ts)
    return _Timing(curves)


@dataclass(frozen=True)
class _SwapBase:
    """What every plan swap of one pair starts from (computed once, not once per swap)."""

    observed_stage_us: F64  # (n_req, 5) stage op time of the failing run's observed ops
    # Per matched op (m.f_idx): its _tile_code, its comparator op's, and its _signature.
    f_tile: I64
    c_tile: I64
    f_sig: I64
    # Per matched op, when the matched ops take the comparator's fusion groups: its new group,
    # and whether its group's leader changed with them (the fusion and all swaps).
    f_group: I64
    regrouped: B


def _swap_base(f: OpArrays, c: OpArrays, n_req: int, m: _Match) -> _SwapBase:
    f_code = np.full(f.size, -1, dtype=np.int64)
    f_code[m.f_idx] = m.name_code
    obs = np.nan_to_num(f.observed_us, nan=0.0)
    fi, ci = m.f_idx, m.c_idx
    f_tile = _tile_code(f.tile_m[fi], f.tile_n[fi])
    # New group instances: (request, comparator's group leader) for ops it fused.
    lead = _leaders(c, m.c_name_code)[ci]
    key = np.where(lead >= 0, f.req[fi] * (len(m.vocab) + 1) + lead, -1)
    fgroup = f.fusion_group.copy()
    fgroup[fi] = key
    untouched = np.ones(f.size, dtype=bool)
    untouched[fi] = False
    fgroup[untouched & (fgroup >= 0)] += int(key.max(initial=0)) + 1
    regrouped = _leaders(replace(f, fusion_group=fgroup), f_code)[fi] != _leaders(f, f_code)[fi]
    return _SwapBase(
        observed_stage_us=stage_times(f, obs, n_req).stage_us,
        f_tile=f_tile,
        c_tile=_tile_code(c.tile_m[ci], c.tile_n[ci]),
        f_sig=_signature_of(f_tile, f.fusion_group[fi], f.fallback[fi], f.mem_tier[fi]),
        f_group=fgroup[fi],
        regrouped=regrouped,
    )


@dataclass(frozen=True)
class SwapInputs:
    """What every plan swap of one failing/comparator pair starts from; made by swap_inputs,
    before localize when the caller has a core to spare. None fields: the ops carry no names."""

    failing: str
    comparator: str
    match: _Match | None
    timing: _Timing | None
    base: _SwapBase | None


def swap_inputs(failing: RunArrays, comparator: RunArrays) -> SwapInputs:
    """The op matching of the pair, the comparator's op timing curves and the swap base."""
    f, c = failing.ops, comparator.ops
    m = _match(f, c)
    if m is None:
        return SwapInputs(failing.run_id, comparator.run_id, None, None, None)
    base = _swap_base(f, c, failing.requests.size, m)
    return SwapInputs(failing.run_id, comparator.run_id, m, _timing(c, m.c_name_code), base)


def _exec_delta(
    f: OpArrays, new_us: F64, n_req: int, observed: F64, placed: OpArrays | None = None
) -> F64:
    """Per request and stage: op time with `new_us` (on `placed` cores, default f's) minus the
    observed op time `observed` (each stage's serial ops plus its busiest core)."""
    new = stage_times(placed or f, new_us, n_req).stage_us
    return np.asarray(new - observed, dtype=np.float64)


def _lowering_swap(
    f: OpArrays,
    c: OpArrays,
    n_req: int,
    part: str,
    m: _Match,
    timing: _Timing,
    base: _SwapBase,
) -> F64:
    """(n_req, 5) change of stage op time when failing ops take the comparator's lowering
    decisions; `part` is "compile", "kernel" (fallback kernels and tiles), "fusion" or "all"."""
    delta = np.zeros((n_req, len(STAGES)))
    if part in ("compile", "all"):
        # Compiles the comparator does not do: its recompile time per request replaces ours.
        f_rc = np.bincount(f.req[f.recompile], f.observed_us[f.recompile], n_req)
        c_n = int(c.req.max()) + 1 if c.size else 1
        c_rate = float(np.nansum(c.observed_us[c.recompile])) / max(c_n, 1)
        delta[:, _LOW] += np.minimum(c_rate - f_rc, 0.0)
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
    sig_new = _signature_of(tile, group, fallback, tier)
    t_new = timing.lookup(names, sig_new, f.m[fi])
    # An op is re-timed when its own decision or its fused group's make-up changed.
    changed = sig_new != sig_old
    if part in ("fusion", "all"):  # else fusion groups, hence leaders, are f's own
        changed |= base.regrouped
    new_us = np.nan_to_num(f.observed_us, nan=0.0)
    ok = changed & np.isfinite(t_new)
    new_us[fi[ok]] = t_new[ok]
    delta += _exec_delta(f, new_us, n_req, base.observed_stage_us)
    return delta


def _placement_swap(
    f: OpArrays, c: OpArrays, n_req: int, observed: F64, m: _Match | None = None
) -> F64:
    """(n_req, 5) change of stage op time when failing ops get the comparator's placement:
    the shards of one op spread over distinct cores in the comparator's row shares; `m`
    (_match of the pair) saves recoding the op names."""
    sel = np.flatnonzero((f.stage == _EXEC) & (f.core >= 0) & np.isfinite(f.m))
    csel = np.flatnonzero((c.stage == _EXEC) & (c.core >= 0) & np.isfinite(c.m))
    if not sel.size or not csel.size:
        return np.zeros((n_req, len(STAGES)))
    if m is None:
        f_all, c_all, vocab = joint_name_codes(f, c, kernel_fallback=True)
    else:
        f_all, c_all, vocab = m.f_name_code, m.c_name_code, m.vocab
    f_code, c_code = f_all[sel], c_all[csel]
    nv = len(vocab)
    n_core = int(max(f.core.max(), c.core.max())) + 1
    # Comparator: median share of each core in an op's rows, per op name.
    c_tot = np.bincount(c.req[csel] * nv + c_code, c.m[csel], (int(c.req.max()) + 1) * nv)
    c_share = c.m[csel] / c_tot[c.req[csel] * nv + c_code]
    keys, med = group_medians(c_code * n_core + c.core[csel].astype(np.int64), c_share)
    flat = np.full(nv * n_core, np.nan)
    flat[keys] = med
    share = flat.reshape(nv, n_core)
    # Each per-shard temporary is dropped once used (here and below): on 2M kernel shards they
    # are 17 MB each, and the stage table at the end is a triage's high-water mark.
    del csel, c_code, c_tot, c_share
    # Failing: the k-th shard (by core) of an op in a request goes to the k-th core.
    group = f.req[sel] * nv + f_code
    # Stable sort by (group, core): by core (a radix sort), then stably by group, which only
    # merges n_core sorted runs when ops come grouped by request (as they usually do).
    core = f.core[sel]
    by_core = np.argsort(core.astype(np.uint16) if n_core <= 1 << 16 else core, kind="stable")
    order = by_core[np.argsort(group[by_core], kind="stable")]
    rank = np.empty(sel.size, dtype=np.int64)
    rank[order] = rank_in_runs(group[order])
    del core, by_core, order
    new_core = np.minimum(rank, n_core - 1)
    del rank
    f_tot = np.bincount(group, f.m[sel], n_req * nv)
    new_m = f_tot[group] * share[f_code, new_core]
    del group, f_tot
    ok = np.isfinite(new_m) & (new_m > 0)
    # Time per row of each op name, fitted on the failing run's own shards (observed = a + b*m):
    # moving rows between cores moves b * rows of time.
    t = np.nan_to_num(f.observed_us[sel], nan=0.0)
    slope = np.zeros(nv)
    # Each name's shards in their original order, sliced instead of masked.
    by_code, bounds = _grouped(f_code, nv)
    m_by, t_by = f.m[sel][by_code], t[by_code]
    for code, (lo, hi) in enumerate(itertools.pairwise(bounds.tolist())):
        x = m_by[lo:hi]
        if hi - lo >= 3 and np.ptp(x) > 0:
            slope[code] = max(float(np.polyfit(x, t_by[lo:hi], 1)[0]), 0.0)
    del by_code, m_by, t_by
    new_us = np.nan_to_num(f.observed_us, nan=0.0)
    new_us[sel] = np.maximum(t + slope[f_code] * np.where(ok, new_m - f.m[sel], 0.0), 0.0)
    cores = f.core.copy()
    cores[sel] = np.where(ok, new_core, f.core[sel]).astype(cores.dtype)
    return _exec_delta(f, new_us, n_req, observed, replace(f, core=cores))


def _policy(q: QueueState, req: RequestArrays) -> tuple[int, float]:
    """A run's batching policy as observed: its largest batch and its longest usual hold."""
    cap = int(np.max(req.batch_size)) if req.size else 1
    return max(cap, 1), float(np.quantile(q.hold, 0.95)) if q.hold.size else 0.0


def _simulate_batcher(
    arrival: F64, work: F64, other: F64, fixed: float, per_work: float, cap: int, hold: float
) -> F64:
    """Latency per request under a batcher that dispatches when the server is free, taking
    what has arrived (up to `cap`), holding a batch up to `hold` us for it to fill.

    Batch service = fixed + per_work * batch work (size x largest member's work: padding).
    Sequential by nature (each dispatch depends on the last); one step per batch.
    """
    n = arrival.size
    order = np.argsort(arrival, kind="stable")
    a, w = arrival[order], work[order]
    done = np.empty(n)
    free = -np.inf
    i = 0
    while i < n:
        first = float(a[i])
        full_at = float(a[i + cap - 1]) if i + cap - 1 < n else np.inf
        dispatch = max(free, min(full_at, first + hold))
        j = min(i + cap, int(np.searchsorted(a, dispatch, side="right")))
        j = max(j, i + 1)
        end = dispatch + fixed + per_work * (j - i) * float(w[i:j].max())
        done[i:j] = end
        free, i = end, j
    lat = np.empty(n)
    lat[order] = done - a
    return np.asarray(lat + other, dtype=np.float64)


def _own_work(padded: F64, size: F64, batch: I64, arrival: F64) -> F64:
    """Each request's own work, estimated: a batch is padded to its largest member, so one
    member (taken as the first) keeps the padded work and the others get the median work of
    requests served alone that fit under it (singletons show the unpadded distribution)."""
    alone = np.sort(padded[size <= 1])
    if not alone.size:
        return padded
    idx = np.searchsorted(alone, padded, side="right")
    cond = np.where(idx > 0, alone[np.maximum(idx - 1, 0) // 2], padded)
    order = np.lexsort((arrival, batch))
    first = np.zeros(batch.size, dtype=bool)
    first[order[run_starts(batch[order])]] = True
    return np.asarray(np.where(first | (size <= 1), padded, cond), dtype=np.float64)


def _batch_swap(
    fr: RequestArrays, cr: RequestArrays, fq: QueueState, cq: QueueState, ops: OpArrays
) -> tuple[F64, F64]:
    """Failing's latency under its own batching and under the comparator's (same model)."""
    stage = np.nan_to_num(np.asarray(fr.stage_us, dtype=np.float64), nan=0.0)
    svc = stage[:, 1:5].sum(axis=1)
    size = np.maximum(np.asarray(fr.batch_size, dtype=np.float64), 1.0)
    work_b = np.bincount(ops.req, np.nan_to_num(ops.flops, nan=0.0), fr.size)
    # Service = fixed + per_work * batch work, fitted over the failing run's batches.
    heads = _batch_heads(fr)
    if heads.size >= 3 and np.ptp(work_b[heads]) > 0:
        per_work, fixed = (float(v) for v in np.polyfit(work_b[heads], svc[heads], 1))
    else:
        per_work, fixed = 0.0, float(np.median(svc))
    per_work, fixed = max(per_work, 0.0), max(fixed, 0.0)
    work = _own_work(work_b / size, size, fq.batch, fq.arrival)
    other = stage[:, 5] + fq.work
    own = _simulate_batcher(fq.arrival, work, other, fixed, per_work, *_policy(fq, fr))
    swapped = _simulate_batcher(fq.arrival, work, other, fixed, per_work, *_policy(cq, cr))
    return own, swapped


# --- residuals --------------------------------------------------------------------------------


def _residuals(run: RunArrays, rep: Replay, hw: HardwareProfile) -> F64:
    """(n_req, 5) observed - predicted; ingress from the conditional replay (queue re-run)."""
    res = np.asarray(rep.residual_us[:, : len(STAGES)], dtype=np.float64).copy()
    cond = conditional_replay(run, hw, "ingress", base=rep)
    res[:, _INGRESS] = cond.residual_us
    return np.nan_to_num(res, nan=0.0)


@dataclass(frozen=True)
class Replayed:
    """What localization keeps of one run's replay (the replay itself, with its per-op costs,
    is dropped): residuals per (request, stage) and replay_summary."""

    run_id: str
    profile: str
    residual_us: F64  # (n_req, 5) observed - predicted, ingress from the conditional replay
    summary: dict[str, dict[str, float]]


def replayed(run: RunArrays, hw: HardwareProfile, cost: OpCost | None = None) -> Replayed:
    """Replay `run` on `hw` and keep what localize reads; cost: op_times(run.ops, hw) when the
    caller has it already."""
    rep = replay(run, hw, cost=cost)
    return Replayed(run.run_id, hw.name, _residuals(run, rep, hw), replay_summary(rep))


def replay_summary(rep: Replay) -> dict[str, dict[str, float]]:
    """Per column (STAGES, other) and end-to-end "latency": n, observed and predicted
    p50/p95/p99 in us over the requests whose value was observed, and the modelled share."""
    obs = np.column_stack((rep.observed_stage_us, rep.observed_latency_us))
    pred = np.column_stack((rep.predicted_stage_us, rep.predicted_latency_us))
    share = np.append(rep.stage_modelled_share, rep.modelled_share)
    seen = np.isfinite(obs)
    out: dict[str, dict[str, float]] = {}
    for j, name in enumerate((*COLUMNS, "latency")):
        # Predicted over the same requests as observed: a paired reading of the model.
        o = np.atleast_1d(quantile(obs[seen[:, j], j], SUMMARY_QS))
        p = np.atleast_1d(quantile(pred[seen[:, j], j], SUMMARY_QS))
        row: dict[str, float] = {"n": int(seen[:, j].sum()), "modelled_share": float(share[j])}
        for k, qn in enumerate(SUMMARY_QNAMES):
            row[f"observed_{qn}_us"] = float(o[k])
            row[f"predicted_{qn}_us"] = float(p[k])
        out[name] = row
    return out


# --- mechanism features -------------------------------------------------------------------------


def _exec_parts(run: RunArrays) -> tuple[F64, F64, F64]:
    """Per request: barrier time, core imbalance (max - mean busy), mean core busy."""
    ops, n = run.ops, run.requests.size
    ex = ops.stage == _EXEC
    serial = ex & (ops.core < 0)
    bar = np.bincount(ops.req[serial], ops.observed_us[serial], n).astype(np.float64)
    st = stage_times(ops, np.where(ex & (ops.core >= 0), np.nan_to_num(ops.observed_us), 0.0), n)
    imb = st.barrier_us[:, _EXEC]
    busy = st.stage_us[:, _EXEC] - imb
    return bar, imb, busy


# --- the verdict ------------------------------------------------------------------------------


def localize(
    failing: RunArrays,
    comparator: RunArrays,
    hw: HardwareProfile,
    calibration: Calibration | None = None,
    *,
    method: str = "full",
    n_boot: int = N_BOOT,
    seed: int = 0,
    replays: tuple[Replayed | None, Replayed | None] = (None, None),
    prepared: SwapInputs | None = None,
) -> Localization:
    """Origin stage, manifest stage and mechanism of failing's tail regression vs comparator.

    `method` "full" is DESIGN §5; "no_swap" skips the plan swaps; "naive" names the first stage
    whose raw time moved (kept for the ablation in bench/localize.py). `replays`: replayed(run,
    hw) of failing and of comparator, and `prepared`: swap_inputs(failing, comparator), when
    the caller made them already (None: made here).
    """
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; known: {', '.join(METHODS)}")
    for run, rep in zip((failing, comparator), replays, strict=True):
        if rep is not None and (rep.run_id != run.run_id or rep.profile != hw.name):
            raise ValueError(
                f"replay of {rep.run_id} on {rep.profile} is not of {run.run_id} on {hw.name}"
            )
    pair = (failing.run_id, comparator.run_id)
    if prepared is not None and (prepared.failing, prepared.comparator) != pair:
        raise ValueError(
            f"swap inputs of {prepared.failing} vs {prepared.comparator} are not of {pair[0]} "
            f"vs {pair[1]}"
        )
    cal = calibration or DEFAULT_CALIBRATION
    fr, cr = failing.requests, comparator.requests
    lf = np.asarray(fr.latency_us, dtype=np.float64)
    lc = np.asarray(cr.latency_us, dtype=np.float64)
    gaps: dict[str, float] = {}
    cis: dict[str, tuple[float, float]] = {}
    rel: dict[str, float] = {}
    for i, (q, name) in enumerate(zip(QS, QNAMES, strict=True)):
        d, lo, hi = bootstrap_quantile_diff(lf, lc, q, n_boot=n_boot, seed=seed + i)
        gaps[name], cis[name] = d, (lo, hi)
        base = _q(lc, q)
        rel[name] = d / base if base > 0 else math.nan
    t95, t99 = cal.scaled(min(fr.size, cr.size))
    limits = {"p95": t95, "p99": t99}
    fired = [n for n in QNAMES if rel[n] > limits[n] and cis[n][0] > 0]
    claims: list[Claim] = [
        Claim(
            f"p95 latency {_q(lf, 0.95):.0f} us vs {_q(lc, 0.95):.0f} us "
            f"(gap {gaps['p95']:+.0f} us, 95% CI {cis['p95'][0]:+.0f}..{cis['p95'][1]:+.0f}); "
            f"p99 gap {gaps['p99']:+.0f} us (CI {cis['p99'][0]:+.0f}..{cis['p99'][1]:+.0f})",
            {
                "p95_gap_us": gaps["p95"],
                "p99_gap_us": gaps["p99"],
                "p95_rel": rel["p95"],
                "p99_rel": rel["p99"],
                "p95_threshold_rel": t95,
                "p99_threshold_rel": t99,
                "n_failing": float(fr.size),
                "n_comparator": float(cr.size),
            },
            "bootstrap_quantile_diff; thresholds from A/A calibration",
        )
    ]
    common: _Common = {
        "p95_gap_us": gaps["p95"],
        "p99_gap_us": gaps["p99"],
        "p95_gap_ci": cis["p95"],
        "p99_gap_ci": cis["p99"],
        "n_failing": fr.size,
        "n_comparator": cr.size,
        "p95_rel_gap": rel["p95"],
        "p99_rel_gap": rel["p99"],
        "method": method,
    }
    if not fired:
        claims.append(
            Claim(
                "no significant tail regression: gaps within what A/A pairs show",
                {"p95_rel": rel["p95"], "p99_rel": rel["p99"]},
                "trigger",
            )
        )
        return Localization(
            triggered=False,
            origin_stage=None,
            manifest_stage=None,
            mechanism="none",
            secondary_mechanism=None,
            confidence=0.0,
            explained_share={},
            claims=claims,
            **common,
        )
    return _localize_triggered(
        failing, comparator, hw, method, gaps, claims, common, replays, prepared
    )


def _localize_triggered(
    failing: RunArrays,
    comparator: RunArrays,
    hw: HardwareProfile,
    method: str,
    gaps: dict[str, float],
    claims: list[Claim],
    common: _Common,
    replays: tuple[Replayed | None, Replayed | None],
    prepared: SwapInputs | None,
) -> Localization:
    fr, cr = failing.requests, comparator.requests
    f_stage = np.nan_to_num(np.asarray(fr.stage_us, dtype=np.float64), nan=0.0)
    c_stage = np.nan_to_num(np.asarray(cr.stage_us, dtype=np.float64), nan=0.0)
    f_heads, c_heads = _batch_heads(fr), _batch_heads(cr)
    fq, cq = observed_queue(fr), observed_queue(cr)
    base_lat = requeue(fq, f_stage)

    # Manifest: where the tail time shows up; ingress without the queue wait (the batcher's
    # hold and admission work only), since queueing amplifies every downstream slowdown.
    own_f, own_c = f_stage[:, :5].copy(), c_stage[:, :5].copy()
    own_f[:, _INGRESS] = fq.hold + fq.work
    own_c[:, _INGRESS] = cq.hold + cq.work
    manifest_gap = {s: _q(own_f[:, i], 0.95) - _q(own_c[:, i], 0.95) for i, s in enumerate(STAGES)}
    manifest = max(STAGES, key=lambda s: manifest_gap[s])

    explained: dict[str, dict[str, float]] = {}
    residual_shift: dict[str, dict[str, float]] = {}
    scores: dict[str, float] = {}
    origin: str | None = None
    decided_by = "manifest"

    if method == "naive":
        for i, s in enumerate(STAGES):
            a = f_stage[:, i] if i == _INGRESS else f_stage[f_heads, i]
            b = c_stage[:, i] if i == _INGRESS else c_stage[c_heads, i]
            _, p = mann_whitney_u(a, b)
            hl = hodges_lehmann_ci(a, b)[0]
            if p < RESIDUAL_ALPHA and hl > 0:
                origin, decided_by = s, "raw_shift"
                break
        origin = origin or manifest
        mech = _mechanism(origin, failing, comparator, {}, scores)
        return Localization(
            triggered=True,
            origin_stage=origin,
            manifest_stage=manifest,
            mechanism=mech,
            secondary_mechanism=None,
            confidence=0.5,
            explained_share={},
            claims=claims,
            decided_by=decided_by,
            manifest_gap_us=manifest_gap,
            **common,
        )

    # One replay at a time, dropped once its residuals are out: each holds per-op costs.
    rep_f = replays[0] or replayed(failing, hw)
    rep_c = replays[1] or replayed(comparator, hw)
    res_f, res_c = rep_f.residual_us, rep_c.residual_us

    # Residual shift per stage (batch-level stages tested once per batch: members share them),
    # with the share of the tail gap that removing the shift from the stage takes away.
    for i, s in enumerate(STAGES):
        if i == _INGRESS:
            a, b = res_f[:, i], res_c[:, i]
        else:
            a, b = res_f[f_heads, i], res_c[c_heads, i]
        _, p = mann_whitney_u(a, b)
        hl, lo, hi = hodges_lehmann_ci(a, b)
        # The failing stage without its median shift, queue re-run: the share that shift holds.
        cf = f_stage.copy()
        shift = max(hl, 0.0) if math.isfinite(hl) else 0.0
        if i == _INGRESS:
            cf_lat = base_lat - np.minimum(shift, f_stage[:, i])
        else:
            cf[:, i] = np.maximum(f_stage[:, i] - shift, 0.0)
            cf_lat = requeue(fq, cf)
        share = _gap_share(base_lat, cf_lat, gaps)
        residual_shift[s] = {
            "hl_us": hl,
            "hl_lo_us": lo,
            "hl_hi_us": hi,
            "p_value": p,
            "p95_share": share["p95"],
            "p99_share": share["p99"],
        }

    # Plan swaps.
    n_req = fr.size
    parts: dict[str, float] = {}
    if method == "full":
        swap = prepared or swap_inputs(failing, comparator)
        own, swapped = _batch_swap(fr, cr, fq, cq, failing.ops)
        explained["ingress"] = _gap_share(own, swapped, gaps)
        m, timing, base = swap.match, swap.timing, swap.base
        if m is not None and timing is not None and base is not None:
            for part in ("compile", "kernel", "fusion", "all"):
                d = _lowering_swap(failing.ops, comparator.ops, n_req, part, m, timing, base)
                cf = f_stage.copy()
                cf[:, :5] = np.maximum(f_stage[:, :5] + d, 0.0)
                sh = _gap_share(base_lat, requeue(fq, cf), gaps)
                if part == "all":
                    explained["lowering"] = sh
                else:
                    parts[part] = _mean_share(sh)
            d = _placement_swap(failing.ops, comparator.ops, n_req, base.observed_stage_us, m)
            cf = f_stage.copy()
            cf[:, :5] = np.maximum(f_stage[:, :5] + d, 0.0)
            explained["scheduling"] = _gap_share(base_lat, requeue(fq, cf), gaps)
        else:
            claims.append(
                Claim("ops carry no names or kernels: lowering/scheduling swaps skipped", {}, "")
            )

    for s in STAGES:
        if s in explained and _mean_share(explained[s]) >= SWAP_SHARE:
            origin, decided_by = s, "plan_swap"
            break
        r = residual_shift[s]
        if (
            r["p_value"] < RESIDUAL_ALPHA
            and r["hl_us"] > 0
            and (r["p95_share"] + r["p99_share"]) / 2 >= RESIDUAL_SHARE
        ):
            origin, decided_by = s, "residual"
            break
    if origin is None:
        origin = manifest
    for s, r in residual_shift.items():
        if s not in explained:
            explained[s] = {"p95": r["p95_share"], "p99": r["p99_share"]}

    scores.update({f"lowering.{k}": v for k, v in parts.items()})
    mech = _mechanism(origin, failing, comparator, parts, scores)
    secondary = _secondary(fr, cr, fq, cq, mech, gaps)
    if decided_by == "plan_swap":
        conf = min(1.0, _mean_share(explained[origin]))
    elif decided_by == "residual":
        r = residual_shift[origin]
        conf = min(1.0, (r["p95_share"] + r["p99_share"]) / 2) * 0.9
    else:
        conf = 0.4
    claims.extend(
        _verdict_claims(origin, manifest, mech, decided_by, explained, residual_shift, manifest_gap)
    )
    return Localization(
        triggered=True,
        origin_stage=origin,
        manifest_stage=manifest,
        mechanism=mech,
        secondary_mechanism=secondary,
        confidence=float(np.clip(conf, 0.0, 1.0)),
        explained_share=explained,
        claims=claims,
        decided_by=decided_by,
        residual_shift=residual_shift,
        manifest_gap_us=manifest_gap,
        mechanism_scores=scores,
        replay_summary={"failing": rep_f.summary, "comparator": rep_c.summary},
        **common,
    )


def _mechanism(
    origin: str,
    failing: RunArrays,
    comparator: RunArrays,
    lowering_parts: dict[str, float],
    scores: dict[str, float],
) -> str:
    """The mechanism id that the origin stage's evidence points at."""
    f, c = failing.ops, comparator.ops
    fr, cr = failing.requests, comparator.requests
    if origin == "ingress":
        grow = float(np.mean(fr.batch_size)) / max(float(np.mean(cr.batch_size)), 1e-9)
        cap = float(np.max(fr.batch_size)) / max(float(np.max(cr.batch_size)), 1.0)
        hold = _policy(observed_queue(fr), fr)[1] / max(_policy(observed_queue(cr), cr)[1], 1.0)
        scores.update({"ingress.batch_growth": grow, "ingress.cap_ratio": cap})
        scores["ingress.hold_ratio"] = hold
        return "batch_policy" if cap > 1.0 or grow > 1.25 or hold > 2.0 else "queueing"
    if origin == "lowering":
        rc_f = float(np.mean(f.recompile)) if f.size else 0.0
        rc_c = float(np.mean(c.recompile)) if c.size else 0.0
        fb_f = float(np.mean(f.fallback)) if f.size else 0.0
        fb_c = float(np.mean(c.fallback)) if c.size else 0.0
        scores.update(
            {"lowering.recompile_rate": rc_f - rc_c, "lowering.fallback_rate": fb_f - fb_c}
        )
        if lowering_parts:
            best = max(lowering_parts, key=lambda k: lowering_parts[k])
            if lowering_parts[best] > 0.1:
                return {
                    "compile": "recompile",
                    "kernel": "mapping_fallback",
                    "fusion": "fusion_memory_burst",
                }[best]
        if rc_f > rc_c:
            return "recompile"
        if fb_f > fb_c:
            return "mapping_fallback"
        return "fusion_memory_burst"
    if origin in ("scheduling", "execution"):
        bar_f, imb_f, busy_f = _exec_parts(failing)
        bar_c, imb_c, busy_c = _exec_parts(comparator)
        # A barrier waits for the busiest core (imbalance) plus its own sync cost.
        sync_f, sync_c = np.maximum(bar_f - imb_f, 0.0), np.maximum(bar_c - imb_c, 0.0)
        d_sync = _q(sync_f, 0.95) - _q(sync_c, 0.95)
        d_imb = _q(imb_f, 0.95) - _q(imb_c, 0.95)
        d_busy = _q(busy_f, 0.95) - _q(busy_c, 0.95)
        scores.update({"exec.sync_p95_us": d_sync, "exec.imbalance_p95_us": d_imb})
        scores["exec.busy_p95_us"] = d_busy
        if origin == "scheduling" or d_imb >= max(d_sync, 0.0):
            return "core_imbalance" if d_imb > 0 else "bandwidth_bound"
        return "barrier_stall" if d_sync > 0 else "bandwidth_bound"
    if origin == "assembly":
        return "assembly"
    return "queueing"


def _secondary(
    fr: RequestArrays,
    cr: RequestArrays,
    fq: QueueState,
    cq: QueueState,
    primary: str,
    gaps: dict[str, float],
) -> str | None:
    """Queueing as the secondary mechanism when the queue wait's p95 grew by at least a fifth
    of the p95 gap (the slowdown was amplified by requests waiting behind it)."""
    if primary in ("queueing", "batch_policy") or not gaps["p95"] > 0:
        return None

    def wait(req: RequestArrays, q: QueueState) -> F64:
        ingress = np.nan_to_num(np.asarray(req.stage_us, dtype=np.float64)[:, _INGRESS])
        return np.asarray(np.maximum(ingress - q.hold - q.work, 0.0), dtype=np.float64)

    grew = _q(wait(fr, fq), 0.95) - _q(wait(cr, cq), 0.95)
    return "queueing" if grew >= 0.2 * gaps["p95"] else None


def _verdict_claims(
    origin: str,
    manifest: str,
    mech: str,
    decided_by: str,
    explained: dict[str, dict[str, float]],
    residual: dict[str, dict[str, float]],
    manifest_gap: dict[str, float],
) -> list[Claim]:
    out = []
    if decided_by == "plan_swap":
        sh = explained[origin]
        out.append(
            Claim(
                f"giving the failing run the comparator's {origin} decisions removes "
                f"{sh['p95']:.0%} of the p95 gap and {sh['p99']:.0%} of the p99 gap",
                {"p95_share": sh["p95"], "p99_share": sh["p99"]},
                "plan_swap + queue re-run",
            )
        )
    elif decided_by == "residual":
        r = residual[origin]
        out.append(
            Claim(
                f"{origin} runs slower than the model predicts by {r['hl_us']:.0f} us "
                f"(Hodges-Lehmann, 95% CI {r['hl_lo_us']:.0f}..{r['hl_hi_us']:.0f}, "
                f"Mann-Whitney p={r['p_value']:.2g}); it accounts for {r['p95_share']:.0%} "
                "of the p95 gap",
                dict(r),
                "residual shift (Mann-Whitney + Hodges-Lehmann)",
            )
        )
    else:
        out.append(
            Claim(
                f"no plan swap or residual shift explains the gap; origin = manifest stage "
                f"{manifest}",
                {"p95_gap_us": manifest_gap[manifest]},
                "manifest",
            )
        )
    out.append(
        Claim(
            f"the time shows up in {manifest} (p95 own-time gap {manifest_gap[manifest]:+.0f} us);"
            f" mechanism {mech}",
            {f"{s}_p95_gap_us": v for s, v in manifest_gap.items()},
            "per-stage p95 difference",
        )
    )
    assert mech in MECHANISMS
    return out


# --- calibration ------------------------------------------------------------------------------


def calibrate(
    profiles: tuple[str, ...] = ("h100", "tpu-v5e"),
    n_pairs: int = 100,
    seed: int = 1,
    alpha: float = 0.05,
    n_requests: int = 600,
) -> Calibration:
    """Trigger thresholds from generated fault-free A/A pairs (accel.synth) on `profiles`.

    Each threshold is the (1 - alpha/2) quantile of the relative gap over all pairs, so the
    two quantiles together fire on at most about alpha of A/A pairs.
    """
    from accel.profiles import get_profile
    from accel.synth import Workload, generate_pair

    r95, r99 = [], []
    for k, name in enumerate(profiles):
        hw = get_profile(name)
        for i in range(n_pairs):
            pair = generate_pair(
                hw,
                "none",
                seed=seed * 1_000_003 + k * 100_000 + i,
                workload=Workload(n_requests=n_requests),
                tables=False,
            )
            lf = pair.failing.arrays.requests.latency_us
            lc = pair.comparator.arrays.requests.latency_us
            r95.append(_q(lf, 0.95) / _q(lc, 0.95) - 1.0)
            r99.append(_q(lf, 0.99) / _q(lc, 0.99) - 1.0)
    level = 1.0 - alpha / 2.0
    return Calibration(
        p95_rel=float(np.quantile(r95, level)),
        p99_rel=float(np.quantile(r99, level)),
        alpha=alpha,
        n_pairs=len(r95),
        source=f"calibrate({profiles!r}, n_pairs={n_pairs}, seed={seed}), {n_requests} requests",
        n_requests=n_requests,
    )
