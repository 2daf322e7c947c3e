"""Mechanism: what the origin stage's evidence points at, and queueing as a secondary one."""

from __future__ import annotations

import numpy as np

from accel.localize.batching import policy
from accel.localize.events.witness import witness
from accel.localize.gaps import at_q
from accel.localize.graph_break import graph_break
from accel.localize.requeue import QueueState, observed_queue
from accel.ops import F64, RunArrays
from accel.replay import stage_times
from accel.stages import STAGE_CODE

EXEC = STAGE_CODE["execution"]
INGRESS = STAGE_CODE["ingress"]


def exec_parts(run: RunArrays) -> tuple[F64, F64, F64]:
    """Per request: barrier time, core imbalance (max - mean busy), mean core busy."""
    ops, n = run.ops, run.requests.size
    ex = ops.stage == EXEC
    serial = ex & (ops.core < 0)
    bar = np.bincount(ops.req[serial], ops.observed_us[serial], n).astype(np.float64)
    st = stage_times(ops, np.where(ex & (ops.core >= 0), np.nan_to_num(ops.observed_us), 0.0), n)
    imb = st.barrier_us[:, EXEC]
    busy = st.stage_us[:, EXEC] - imb
    return bar, imb, busy


def compile_time(run: RunArrays) -> float:
    """Mean lowering time per request spent in requests that compiled while serving."""
    n = run.requests.size
    if n == 0 or not run.ops.recompile.any():
        return 0.0
    compiled = np.bincount(run.ops.req[run.ops.recompile], minlength=n) > 0
    low = np.nan_to_num(run.requests.stage_us[:, STAGE_CODE["lowering"]], nan=0.0)
    return float(low[compiled].sum()) / n


def mechanism_of(
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
        hold = policy(observed_queue(fr), fr)[1] / max(policy(observed_queue(cr), cr)[1], 1.0)
        scores.update({"ingress.batch_growth": grow, "ingress.cap_ratio": cap})
        scores["ingress.hold_ratio"] = hold
        return "batch_policy" if cap > 1.0 or grow > 1.25 or hold > 2.0 else "queueing"
    if origin == "lowering":
        if graph_break(failing, comparator, scores):
            return "graph_break"
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
        if rc_f > rc_c or compile_time(failing) > compile_time(comparator):
            # More compilations while serving, or the same ones taking longer (a cold cache).
            return "recompile"
        if fb_f > fb_c:
            return "mapping_fallback"
        return "fusion_memory_burst"
    if origin in ("scheduling", "execution") and not (np.any(f.core >= 0) or np.any(c.core >= 0)):
        # No per-core ops (a CPU or host-only trace): no barrier or imbalance to read. More ops
        # per request is launch overhead; else the ops themselves got slower.
        if witness("launch_overhead", failing, comparator) is not None:
            return "launch_overhead"
        return "bandwidth_bound"
    if origin in ("scheduling", "execution"):
        bar_f, imb_f, busy_f = exec_parts(failing)
        bar_c, imb_c, busy_c = exec_parts(comparator)
        # A barrier waits for the busiest core (imbalance) plus its own sync cost.
        sync_f, sync_c = np.maximum(bar_f - imb_f, 0.0), np.maximum(bar_c - imb_c, 0.0)
        d_sync = at_q(sync_f, 0.95) - at_q(sync_c, 0.95)
        d_imb = at_q(imb_f, 0.95) - at_q(imb_c, 0.95)
        d_busy = at_q(busy_f, 0.95) - at_q(busy_c, 0.95)
        scores.update({"exec.sync_p95_us": d_sync, "exec.imbalance_p95_us": d_imb})
        scores["exec.busy_p95_us"] = d_busy
        if origin == "scheduling" or d_imb >= max(d_sync, 0.0):
            return "core_imbalance" if d_imb > 0 else "bandwidth_bound"
        return "barrier_stall" if d_sync > 0 else "bandwidth_bound"
    if origin == "assembly":
        return "assembly"
    return "queueing"


def secondary_of(
    fq: QueueState, cq: QueueState, primary: str, gaps: dict[str, float]
) -> str | None:
    """Queueing as the secondary mechanism when the wait for the server and for batch-mates
    grew at p95 by at least a fifth of the p95 gap (requests waited behind the slowdown)."""
    if primary in ("queueing", "batch_policy") or not gaps["p95"] > 0:
        return None
    grew = at_q(fq.queue_us + fq.mates_us, 0.95) - at_q(cq.queue_us + cq.mates_us, 0.95)
    return "queueing" if grew >= 0.2 * gaps["p95"] else None
