"""The seed's primary metric, per shape bucket: compile-time mapping accuracy against runtime
adaptation gain (DESIGN §5).

Buckets: requests whose shape key was compiled ahead of serving ("seen") and the others
("drifted"). Per bucket:

- mapping accuracy of the compiler's own estimate (`predicted_us`) against the observed op
  time: MAPE and Spearman rank correlation, with the share of ops that carried an estimate;
- regret of the chosen kernel: how much slower (cost model) the chosen tile is than the best
  tile of the menu the run used for that op, and generic (fallback) kernels against it;
- runtime adaptation gain: p50/p95/p99 latency of the static plan (drifted shapes on generic
  fallback kernels, no recompiles) minus that of the runtime-adapted plan (exact-shape kernels,
  paying each new shape's compile once), on the same requests. Whichever plan the run used is
  taken as observed; the other is counterfactual: op times from this run's own ops of the same
  name and kind (median per M, interpolated), compile cost from its compiles or `compile_us`.
  Positive gain: adapting at runtime pays off, net of recompile cost.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from accel.cost import RETIMED_PART, OpCost, op_times, retimed
from accel.grouping import chunks
from accel.localize import group_medians, observed_queue, requeue
from accel.ops import F64, I64, OpArrays, RunArrays, name_codes, nan_as_zero
from accel.profiles import HardwareProfile
from accel.replay import stage_times_of
from accel.stages import STAGE_CODE
from accel.stats import mape, quantile, spearman

BUCKETS = ("seen", "drifted")
# Tile shapes a GEMM autotuner commonly tries; the regret menu is these plus any tile the run used.
STANDARD_TILES: tuple[tuple[int, int], ...] = ((64, 64), (128, 128), (128, 256), (256, 128))
_EXEC = STAGE_CODE["execution"]
_LOW = STAGE_CODE["lowering"]


@dataclass(frozen=True)
class BucketMetric:
    bucket: str
    n_requests: int
    n_ops: int  # execution ops on cores (kernels)
    estimate_share: float  # share of those ops with a compiler estimate
    mape_pct: float
    spearman: float
    regret_pct: float  # mean (chosen - best tile) / chosen, cost model, tuned kernels
    fallback_share: float
    fallback_regret_pct: float  # generic kernels vs the tuned kernel of the same op and size
    observed_plan: str  # "adapted", "static" or "n/a" (no drifted ops)
    static_us: dict[str, float]  # p50/p95/p99 latency under the static plan
    adapted_us: dict[str, float]
    gain_us: dict[str, float]  # static - adapted
    recompile_us: float  # compile time paid (adapted) in this bucket
    net_of_compile: bool  # False: no compile cost was known, the gain is gross


@dataclass(frozen=True)
class PrimaryMetric:
    run_id: str
    profile: str
    buckets: dict[str, BucketMetric]
    compile_us: float  # per-shape compile cost used for the adapted plan (NaN: unknown)


def _qs(x: F64) -> dict[str, float]:
    if not x.size:
        return {"p50": math.nan, "p95": math.nan, "p99": math.nan}
    v = np.asarray(quantile(x, [0.5, 0.95, 0.99]), dtype=np.float64)
    return {"p50": float(v[0]), "p95": float(v[1]), "p99": float(v[2])}


def _kernel_ops(ops: OpArrays) -> I64:
    return np.flatnonzero((ops.stage == _EXEC) & (ops.core >= 0) & np.isfinite(ops.m))


def _regret(ops: OpArrays, hw: HardwareProfile, sel: I64, cost: OpCost) -> F64:
    """Per op in `sel`: (model time of its tile - best tile of the run's menu) / its time;
    cost = op_times(ops, hw)."""
    at = np.flatnonzero(~ops.fallback[sel] & np.isfinite(ops.tile_m[sel]))  # tuned, in sel
    out = np.full(sel.size, np.nan)
    if not at.size:
        return out
    tuned = sel[at]
    # The menu: distinct (tm, tn) pairs as complex numbers (a 1-d unique is far cheaper than
    # axis=0); pairs with a NaN collapse into one, which is harmless: a NaN tile means untiled
    # whatever tm is. Only the first op of each run of equal pairs goes in: every distinct pair
    # starts a run (NaN != NaN keeps NaN pairs), and ops in a row mostly share a tile. Chunk
    # by chunk, as everything below: a whole-run temporary per step is fresh memory to fault in.
    used = [np.asarray([complex(tm, tn) for tm, tn in STANDARD_TILES])]
    prev = None
    for part in chunks(tuned.size):
        tm, tn = ops.tile_m[tuned[part]], ops.tile_n[tuned[part]]
        change = np.empty(tm.size, dtype=np.bool_)
        change[1:] = (tm[1:] != tm[:-1]) | (tn[1:] != tn[:-1])
        change[0] = prev is None or not (tm[0] == prev[0] and tn[0] == prev[1])
        starts = np.flatnonzero(change)
        pairs = np.empty(starts.size, dtype=np.complex128)
        pairs.real, pairs.imag = tm[starts], tn[starts]
        used.append(pairs)
        prev = (tm[-1], tn[-1])
    menu = [(float(t.real), float(t.imag)) for t in np.unique(np.concatenate(used))]
    for part in chunks(tuned.size, RETIMED_PART):
        base = cost.predicted_us[tuned[part]]
        (best,) = retimed(ops, cost, tuned[part], hw, tiles=menu, fastest=True)
        np.minimum(best, base, out=best)
        ok = base > 0
        if ok.all():  # the usual case: no boolean gathers
            out[at[part]] = (base - best) / base
        else:
            out[at[part][ok]] = (base[ok] - best[ok]) / base[ok]
    return out


def _curves(ops: OpArrays, sel: I64, code: I64) -> dict[int, tuple[F64, F64]]:
    """Observed time vs M per op name, median per M, over `sel`."""
    out: dict[int, tuple[F64, F64]] = {}
    # Only the ops in `sel` are read, each column taken once (not once per name).
    code_sel = code[sel]
    t_sel = nan_as_zero(ops.observed_us[sel], own=True)
    m_sel = np.round(ops.m[sel]).astype(np.int64)
    if not sel.size:
        return out
    # One pass over all names: (name, M) packed in one key, medians per key, split by name.
    m_lo = int(m_sel.min())
    span = int(m_sel.max()) - m_lo + 1
    keys, med = group_medians(code_sel * span + (m_sel - m_lo), t_sel)
    names, ms = np.divmod(keys, span)
    bounds = np.flatnonzero(np.diff(names)) + 1
    for lo, hi in zip(np.append(0, bounds), np.append(bounds, names.size), strict=True):
        out[int(names[lo])] = ((ms[lo:hi] + m_lo).astype(np.float64), med[lo:hi])
    return out


def _lookup(curves: dict[int, tuple[F64, F64]], code: I64, m: F64) -> F64:
    out = np.full(code.size, np.nan)
    # The codes present, in order: name codes are dense (0..names - 1), so a bincount finds
    # them in one pass where np.unique would sort or hash millions of ops.
    for c in np.flatnonzero(np.bincount(code)) if code.size else ():
        curve = curves.get(int(c))
        if curve is None:
            continue
        ms, ts = curve
        k = code == c
        x = m[k]  # taken once, not once per use
        out[k] = np.where(x > ms[-1], ts[-1] * x / ms[-1], np.interp(x, ms, ts))
    return out


def primary_metric(
    run: RunArrays,
    hw: HardwareProfile,
    compile_us: float | None = None,
    *,
    op_cost: OpCost | None = None,
) -> PrimaryMetric:
    """The primary metric of one run, per shape bucket (see the module docstring); op_cost:
    op_times(run.ops, hw) when the caller has it already."""
    ops, req = run.ops, run.requests
    n = req.size
    seen_req = np.array([k in run.compiled_shapes for k in req.shape_key], dtype=bool)
    if not run.compiled_shapes:
        seen_req[:] = True  # nothing known about compile-time shapes: one bucket
    code = name_codes(ops)[0]
    kern = _kernel_ops(ops)
    # once: the regret and the fallback penalty both re-cost ops
    cost_model = op_times(ops, hw) if op_cost is None else op_cost
    regret = _regret(ops, hw, kern, cost_model)
    obs = nan_as_zero(ops.observed_us, own=True)

    # Counterfactual op times: tuned kernels (from non-fallback ops) and generic kernels (from
    # fallback ops) of the same name, as a function of M, in this run.
    tuned_curves = _curves(ops, kern[~ops.fallback[kern]], code)
    generic_curves = _curves(ops, kern[ops.fallback[kern]], code)
    drift_ops = kern[~seen_req[ops.req[kern]]]
    as_tuned = obs  # the observed times themselves until a drifted op takes a tuned time
    as_generic = obs.copy()
    if drift_ops.size:
        fb = ops.fallback[drift_ops]
        d_code, d_m = code[drift_ops], ops.m[drift_ops]  # taken once for both lookups
        t_tuned = _lookup(tuned_curves, d_code, d_m)
        t_generic = _lookup(generic_curves, d_code, d_m)
        del d_code, d_m
        to_tuned = fb & np.isfinite(t_tuned)
        if to_tuned.any():  # a run with no fallback op keeps them all: no copy to re-sum
            as_tuned = obs.copy()
            as_tuned[drift_ops] = np.where(to_tuned, t_tuned, obs[drift_ops])
        # A static plan without generic-kernel evidence runs the tuned kernel's time scaled by
        # the cost model's fallback penalty.
        pen = _fallback_penalty(ops, hw, drift_ops, cost_model)
        guess = obs[drift_ops] * pen
        as_generic[drift_ops] = np.where(
            fb, obs[drift_ops], np.where(np.isfinite(t_generic), t_generic, guess)
        )
    del cost_model  # per-op costs of the whole run: not held through the rest

    recompiles = ops.recompile & (ops.stage == _LOW)
    rc_us = float(np.median(obs[recompiles])) if recompiles.any() else math.nan
    cost = compile_us if compile_us is not None else rc_us
    known = math.isfinite(cost)
    cost = cost if known else 0.0

    stage = np.nan_to_num(np.asarray(req.stage_us, dtype=np.float64), nan=0.0)
    q = observed_queue(req)
    # as_tuned is obs itself when no op took a tuned time: stage_times_of sums it once
    obs_exec, tuned_exec, generic_exec = (
        st.stage_us[:, _EXEC] for st in stage_times_of(ops, (obs, as_tuned, as_generic), n)
    )
    low_rc = np.bincount(ops.req[recompiles], obs[recompiles], n)

    adapted = stage.copy()
    adapted[:, _EXEC] += tuned_exec - obs_exec
    if not recompiles.any() and drift_ops.size:
        # The run did not recompile: the adapted plan pays one compile per new shape, on the
        # first request (by arrival) that brings it.
        first = _first_of_shape(req.shape_key, req.arrival_us, ~seen_req)
        adapted[first, _LOW] += cost
    static = stage.copy()
    static[:, _EXEC] += generic_exec - obs_exec
    static[:, _LOW] -= low_rc
    lat_adapted = requeue(q, adapted)
    lat_static = requeue(q, static)
    paid = adapted[:, _LOW] - stage[:, _LOW] + low_rc

    pred = ops.predicted_us[kern]
    buckets: dict[str, BucketMetric] = {}
    for name, mask in (("seen", seen_req), ("drifted", ~seen_req)):
        in_b = mask[ops.req[kern]]
        k = kern[in_b]
        est = np.isfinite(pred[in_b])
        fb_ops = k[ops.fallback[k]]
        fb_regret = math.nan
        if fb_ops.size:
            t_t = _lookup(tuned_curves, code[fb_ops], ops.m[fb_ops])
            ok = np.isfinite(t_t) & (obs[fb_ops] > 0)
            if ok.any():
                fb_regret = float(np.mean((obs[fb_ops][ok] - t_t[ok]) / obs[fb_ops][ok]) * 100)
        drifted_kern = drift_ops.size > 0 and name == "drifted"
        plan = ("static" if ops.fallback[drift_ops].any() else "adapted") if drifted_kern else "n/a"
        s_q, a_q = _qs(lat_static[mask]), _qs(lat_adapted[mask])
        buckets[name] = BucketMetric(
            bucket=name,
            n_requests=int(mask.sum()),
            n_ops=int(k.size),
            estimate_share=float(est.mean()) if k.size else math.nan,
            mape_pct=mape(pred[in_b][est], obs[k][est]) if est.any() else math.nan,
            spearman=spearman(pred[in_b][est], obs[k][est]) if est.sum() > 1 else math.nan,
            regret_pct=float(np.nanmean(regret[in_b]) * 100)
            if np.isfinite(regret[in_b]).any()
            else math.nan,
            fallback_share=float(ops.fallback[k].mean()) if k.size else math.nan,
            fallback_regret_pct=fb_regret,
            observed_plan=plan,
            static_us=s_q,
            adapted_us=a_q,
            gain_us={p: s_q[p] - a_q[p] for p in s_q},
            recompile_us=float(paid[mask].sum()),
            net_of_compile=known or not drifted_kern,
        )
    return PrimaryMetric(run.run_id, hw.name, buckets, cost if known else math.nan)


def _fallback_penalty(ops: OpArrays, hw: HardwareProfile, sel: I64, cost: OpCost) -> F64:
    """Cost-model slowdown of running these ops on a generic (fallback) kernel;
    cost = op_times(ops, hw)."""
    base = cost.predicted_us[sel]
    generic = np.empty(sel.size)
    for part in chunks(sel.size, RETIMED_PART):
        generic[part] = next(retimed(ops, cost, sel[part], hw, fallback=True))
    return np.asarray(np.where(base > 0, generic / base, 1.0), dtype=np.float64)


def _first_of_shape(keys: list[str], arrival: F64, mask: np.ndarray) -> I64:
    """Index of the earliest request of each distinct shape key among `mask`."""
    idx = np.flatnonzero(mask)
    if not idx.size:
        return idx.astype(np.int64)
    order = idx[np.argsort(np.asarray(arrival)[idx], kind="stable")]
    seen: set[str] = set()
    first = []
    for i in order.tolist():
        if keys[i] not in seen:
            seen.add(keys[i])
            first.append(i)
    return np.asarray(first, dtype=np.int64)
