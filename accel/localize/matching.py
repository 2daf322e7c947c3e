"""What the plan swaps start from: failing ops matched to the comparator's ops of the same
name and nearest size, the comparator's op timing curves and the lowering signatures.

Counterfactual op times are what the comparator's own ops with the same name and decision
took at the same size (median per M, interpolated linearly in M), so the cost model's
calibration error is not graded.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray

from accel.grouping import dense_ids, first_index, run_starts
from accel.ops import F64, I8, I64, B, OpArrays, RunArrays, joint_name_codes, nan_as_zero
from accel.replay import stage_times
from accel.stages import STAGE_CODE

EXEC = STAGE_CODE["execution"]


@dataclass(frozen=True)
class Match:
    """For each failing kernel op, the comparator op of the same name with the nearest M."""

    f_idx: I64  # failing op indices that were matched
    c_idx: I64  # the comparator op matched to each
    name_code: I64  # shared name code of each matched failing op
    c_name_code: I64  # name code of every comparator op
    vocab: list[str]
    f_name_code: I64  # name code of every failing op


def unmatched_reason(f: OpArrays, c: OpArrays) -> str:
    """Why match_ops found nothing to match, in the words of the proof list."""
    named = sum(1 for n in (f.name or f.kernel) if n) if not f.name_vocab else f.size
    has = "" if named else "no names or kernels, "
    sized = int(np.count_nonzero(np.isfinite(f.m)))
    placed = int(np.count_nonzero(f.core >= 0))
    return (
        f"execution ops carry {has}sizes on {sized} of {f.size} and cores on {placed} of "
        f"{f.size} (a match needs name, size and core): lowering/scheduling swaps skipped"
    )


def match_ops(f: OpArrays, c: OpArrays) -> Match | None:
    f_code, c_code, vocab = joint_name_codes(f, c, kernel_fallback=True)
    code = {n: i for i, n in enumerate(vocab)}
    f_ok = (f.stage == EXEC) & np.isfinite(f.m) & (f.core >= 0) & (f_code >= 0)
    c_ok = (c.stage == EXEC) & np.isfinite(c.m) & (c.core >= 0)
    if "" in code:
        f_ok &= f_code != code[""]
        c_ok &= c_code != code[""]
    if not f_ok.any() or not c_ok.any():
        return None
    big = 2.0 ** (int(np.log2(max(float(np.nanmax(c.m[c_ok])), float(np.nanmax(f.m[f_ok]))))) + 2)
    c_sel = np.flatnonzero(c_ok)
    f_sel = np.flatnonzero(f_ok)
    f_key = f_code[f_sel] * big + f.m[f_sel]
    distinct, first, last = _key_runs(c_code[c_sel], c.m[c_sel], big, c_sel)
    # The nearest key below (the last op of its run of equal keys, else the first op) or at or
    # above (the first op of its run, else the last op), searched among the distinct keys only:
    # a few sizes per name, where the ops number millions.
    pos = np.searchsorted(distinct, f_key)
    below = np.maximum(pos - 1, 0)
    above = np.minimum(pos, distinct.size - 1)
    lo = np.where(pos > 0, last[below], first[0])
    hi = np.where(pos < distinct.size, first[above], last[-1])
    nearer_below = np.abs(distinct[below] - f_key) <= np.abs(distinct[above] - f_key)
    cand = np.where(nearer_below, lo, hi)
    same = c_code[cand] == f_code[f_sel]
    return Match(f_sel[same], cand[same], f_code[f_sel[same]], c_code, vocab, f_code)


def _key_runs(code: I64, m: F64, big: float, sel: I64) -> tuple[F64, I64, I64]:
    """The distinct keys code * big + m in ascending order, and the first and last op of each
    (from `sel`, in order): what a stable sort of the keys gives at each run's ends.

    Whole M and a key range a table can hold (the usual case: M are sizes) number the keys in
    a table, O(n); other keys are sorted (~0.6 s on 3M ops)."""
    ib = int(big)
    # Integer keys within 2**53 are exact as floats, so they are the keys the sort compares;
    # the bounds are checked before any integer arithmetic could overflow.
    small = m.size and ib == big and float(np.abs(m).max()) < 2**52
    if small and int(code.max()) * ib < 2**52 and int(code.min()) >= 0:
        whole = m.astype(np.int64)
        key = code * ib + whole
        lo, hi = int(key.min()), int(key.max())
        if bool(np.array_equal(whole, m)) and hi - lo <= 4 * key.size + (1 << 22):
            key -= lo
            at = np.arange(key.size)
            first = np.full(hi - lo + 1, key.size, dtype=np.int64)
            np.minimum.at(first, key, at)
            last = np.full(hi - lo + 1, -1, dtype=np.int64)
            np.maximum.at(last, key, at)
            slots = np.flatnonzero(last >= 0)
            return (slots + lo).astype(np.float64), sel[first[slots]], sel[last[slots]]
    return _sorted_key_runs(code, m, big, sel)


def _sorted_key_runs(code: I64, m: F64, big: float, sel: I64) -> tuple[F64, I64, I64]:
    """_key_runs by a stable sort of the keys: any keys."""
    key_f = code * big + m
    order = np.argsort(key_f, kind="stable")
    sorted_sel, key_f = sel[order], key_f[order]
    starts = run_starts(key_f)
    ends = np.append(starts[1:], key_f.size) - 1
    return key_f[starts], sorted_sel[starts], sorted_sel[ends]


def signature(ops: OpArrays, idx: I64) -> I64:
    """Lowering decision of each op as one integer: fallback, fused, tier, tile."""
    return signature_of(
        tile_code(ops.tile_m[idx], ops.tile_n[idx]),
        ops.fusion_group[idx],
        ops.fallback[idx],
        ops.mem_tier[idx],
    )


def tile_code(tile_m: F64, tile_n: F64) -> I64:
    """The tile part of a signature (tm * 4096 + tn, NaN as 0)."""
    tm = nan_as_zero(tile_m, own=True).astype(np.int64)
    return tm * 4096 + nan_as_zero(tile_n, own=True).astype(np.int64)


def signature_of(tile: I64, group: I64, fallback: B, tier: I8) -> I64:
    """signature from the ops' fields (already taken at the ops of interest); tile: tile_code.

    Kept apart, the tile code of the ops a swap leaves alone is computed once for all swaps."""
    fused = (group >= 0).astype(np.int64)
    fb = fallback.astype(np.int64)
    return ((fb * 2 + fused) * 8 + tier.astype(np.int64) + 1) * (1 << 24) + tile


def leaders(ops: OpArrays, code: I64) -> I64:
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


def grouped(ids: I64, k: int) -> tuple[NDArray[np.intp], NDArray[np.intp]]:
    """Positions ordered by id 0..k-1, stably (an id's positions stay in order), and the k + 1
    bounds of each id's slice of them: one pass instead of a mask per id."""
    # A radix sort when the ids fit 16 bits, 4x faster than a sort of int64.
    order = np.argsort(ids.astype(np.uint16) if k <= 1 << 16 else ids, kind="stable")
    bounds = np.zeros(k + 1, dtype=np.intp)
    np.cumsum(np.bincount(ids, minlength=k), out=bounds[1:])
    return order, bounds


_FEW_GROUPS = 64  # below this many groups, group_medians partitions each group instead


def group_medians(key: I64, value: F64) -> tuple[I64, F64]:
    """Sorted distinct keys and the median of `value` within each."""
    if not key.size:
        return key[:0], np.zeros(0)
    ids, k = dense_ids(key)
    if k <= _FEW_GROUPS:
        # Few groups (op names by core, say): a partition per group, not a sort of every value.
        order, bounds = grouped(ids, k)
        med = np.empty(k)
        for g in range(k):
            v = value[order[bounds[g] : bounds[g + 1]]]
            lo, hi = (v.size - 1) // 2, v.size // 2
            part = np.partition(v, (lo, hi))
            med[g] = 0.5 * (part[lo] + part[hi])
        return key[order[bounds[:-1]]], med
    # Sort by value, then stably by dense group id (faster than lexsort on millions of ops).
    # Ties in value are equal, so any order does.
    by_value = np.argsort(value)
    by_group, bounds = grouped(ids[by_value], k)
    order = by_value[by_group]
    starts, counts = bounds[:-1], np.diff(bounds)
    v = value[order]
    lo = starts + (counts - 1) // 2
    hi = starts + counts // 2
    return key[order[starts]], 0.5 * (v[lo] + v[hi])


@dataclass(frozen=True)
class Timing:
    """The comparator's observed op time per (op name, lowering decision) as a function of M:
    the median at each M it ran, linearly interpolated in between."""

    curves: dict[tuple[int, int], tuple[F64, F64]]

    def lookup(self, name: I64, sig: I64, m: F64) -> F64:
        out = np.full(name.size, np.nan)
        pairs = name * (1 << 40) + sig
        order, bounds = grouped(*dense_ids(pairs))
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


def timing_curves(c: OpArrays, c_code: I64) -> Timing:
    sel = np.flatnonzero((c.stage == EXEC) & (c.core >= 0) & np.isfinite(c.m) & (c.m > 0))
    sig = signature(c, sel)
    t = nan_as_zero(c.observed_us[sel], own=True)
    curves: dict[tuple[int, int], tuple[F64, F64]] = {}
    key = c_code[sel] * (1 << 40) + sig
    m_sel = np.round(c.m[sel]).astype(np.int64)  # taken once, not once per key
    order, bounds = grouped(*dense_ids(key))
    for lo, hi in itertools.pairwise(bounds.tolist()):
        g = order[lo:hi]
        k = int(key[g[0]])
        ms, ts = group_medians(m_sel[g], t[g])
        curves[(k >> 40, k & ((1 << 40) - 1))] = (ms.astype(np.float64), ts)
    return Timing(curves)


@dataclass(frozen=True)
class SwapBase:
    """What every plan swap of one pair starts from (computed once, not once per swap)."""

    observed_stage_us: F64  # (n_req, 5) stage op time of the failing run's observed ops
    # Per matched op (m.f_idx): its tile_code, its comparator op's, and its signature.
    f_tile: I64
    c_tile: I64
    f_sig: I64
    # Per matched op, when the matched ops take the comparator's fusion groups: its new group,
    # and whether its group's leader changed with them (the fusion and all swaps).
    f_group: I64
    regrouped: B


def swap_base(f: OpArrays, c: OpArrays, n_req: int, m: Match) -> SwapBase:
    f_code = np.full(f.size, -1, dtype=np.int64)
    f_code[m.f_idx] = m.name_code
    obs = nan_as_zero(f.observed_us, own=True)
    fi, ci = m.f_idx, m.c_idx
    f_tile = tile_code(f.tile_m[fi], f.tile_n[fi])
    # New group instances: (request, comparator's group leader) for ops it fused.
    lead = leaders(c, m.c_name_code)[ci]
    key = np.where(lead >= 0, f.req[fi] * (len(m.vocab) + 1) + lead, -1)
    fgroup = f.fusion_group.copy()
    fgroup[fi] = key
    untouched = np.ones(f.size, dtype=bool)
    untouched[fi] = False
    fgroup[untouched & (fgroup >= 0)] += int(key.max(initial=0)) + 1
    regrouped = leaders(replace(f, fusion_group=fgroup), f_code)[fi] != leaders(f, f_code)[fi]
    return SwapBase(
        observed_stage_us=stage_times(f, obs, n_req).stage_us,
        f_tile=f_tile,
        c_tile=tile_code(c.tile_m[ci], c.tile_n[ci]),
        f_sig=signature_of(f_tile, f.fusion_group[fi], f.fallback[fi], f.mem_tier[fi]),
        f_group=fgroup[fi],
        regrouped=regrouped,
    )


@dataclass(frozen=True)
class PlacementShares:
    """The comparator's half of the placement swap: per (op name, lane) of its execution ops
    on cores, the median share of the lane in an op's rows; names are codes into `vocab` (the
    comparator's own, name_codes with kernel names for missing ones)."""

    vocab: list[str]
    code: I64
    lane: I64
    median: F64
    n_lane: int  # lanes of the comparator's busiest request


@dataclass(frozen=True)
class SwapInputs:
    """What every plan swap of one failing/comparator pair starts from; made by swap_inputs,
    before localize when the caller has a core to spare. None fields: the ops carry no names."""

    failing: str
    comparator: str
    match: Match | None
    timing: Timing | None
    base: SwapBase | None
    # swaps.lowering_deltas of the pair when made beforehand (swaps.prepare_swaps), else None.
    deltas: dict[str, F64] | None = None
    # swaps.comparator_shares of the comparator when made beforehand, else None.
    placement_shares: PlacementShares | None = None


def swap_inputs(failing: RunArrays, comparator: RunArrays) -> SwapInputs:
    """The op matching of the pair, the comparator's op timing curves and the swap base."""
    f, c = failing.ops, comparator.ops
    m = match_ops(f, c)
    if m is None:
        return SwapInputs(failing.run_id, comparator.run_id, None, None, None)
    base = swap_base(f, c, failing.requests.size, m)
    return SwapInputs(failing.run_id, comparator.run_id, m, timing_curves(c, m.c_name_code), base)
