"""Retuning actions (the seed's closed loop): what to change, and the model's predicted gain.

Every gain is a counterfactual on the failing run: remove the time the action would save from
the requests that paid it, re-run the FIFO queue on the new service times (accel.queueing), and
compare the steady-state p95/p99 (warm-up requests left out) against the same queue re-run on
the observed service times.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from typing import Any, Final

import numpy as np

from accel import stats
from accel.cost import RETIMED_PART, OpCost, op_times, retimed
from accel.grouping import chunks, rank_in_runs
from accel.ops import OpArrays, RunArrays
from accel.profiles import HardwareProfile
from accel.queueing import batched_waits
from workbench.triage.warmup import CompileRecord, Warmup

_DIM = re.compile(r"tensor '(?P<tensor>.+?)' (?:size|stride) mismatch at index (?P<index>\d+)")
MIN_GAIN_US: Final[float] = 1.0  # below this an action is noise, not a proposal


@dataclass(frozen=True)
class Action:
    """One proposed change with its predicted tail gain and the evidence behind it."""

    kind: str  # precompile_shapes | mark_dynamic | batch_policy | split_fusion | pin_kernel
    target: str
    text: str
    predicted_p95_gain_us: float
    predicted_p99_gain_us: float
    priority: float  # traffic share x cost: the order actions are listed in
    evidence: dict[str, Any] = field(default_factory=dict)  # query names and numbers

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "target": self.target,
            "text": self.text,
            "predicted_p95_gain_us": _num(self.predicted_p95_gain_us),
            "predicted_p99_gain_us": _num(self.predicted_p99_gain_us),
            "priority": _num(self.priority),
            "evidence": self.evidence,
        }


def _num(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


@dataclass(frozen=True)
class Counterfactual:
    """The failing run's queue, ready to replay with less service time per request."""

    arrival_us: np.ndarray
    service_us: np.ndarray
    batch_id: np.ndarray | None  # requests of one batch are served as one job
    steady: np.ndarray  # bool mask: requests outside the warm-up
    base_p95: float
    base_p99: float

    @staticmethod
    def of(run: RunArrays, warm: Warmup) -> Counterfactual:
        req = run.requests
        wait = np.clip(np.nan_to_num(req.start_us - req.arrival_us, nan=0.0), 0.0, None)
        service = np.clip(np.nan_to_num(req.latency_us, nan=0.0) - wait, 0.0, None)
        skip = set(warm.affected_requests)
        steady = np.array([r not in skip for r in req.request_id], dtype=bool)
        if not steady.any():
            steady[:] = True
        cf = Counterfactual(req.arrival_us, service, req.batch_id, steady, math.nan, math.nan)
        p95, p99 = _tail(cf.latency(service, req.batch_id)[steady])
        return replace(cf, base_p95=p95, base_p99=p99)

    def latency(self, service_us: np.ndarray, batch_id: np.ndarray | None) -> np.ndarray:
        """Modelled latency: the queue (batched when batch ids are known) re-run + service."""
        wait = batched_waits(self.arrival_us, service_us, batch_id)
        return np.asarray(wait + service_us, dtype=np.float64)

    def gain(self, saved_us: np.ndarray, batch_id: np.ndarray | None = None) -> tuple[float, float]:
        """(p95 gain, p99 gain) when each request's service shrinks by saved_us (and, when
        given, requests are batched by batch_id instead of the observed batches)."""
        service = np.clip(self.service_us - saved_us, 0.0, None)
        lat = self.latency(service, self.batch_id if batch_id is None else batch_id)
        p95, p99 = _tail(lat[self.steady])
        return self.base_p95 - p95, self.base_p99 - p99


def _tail(lat: np.ndarray) -> tuple[float, float]:
    q = stats.quantile(lat, [0.95, 0.99])
    assert isinstance(q, np.ndarray)
    return float(q[0]), float(q[1])


def compile_time_per_request(run: RunArrays, records: list[CompileRecord]) -> np.ndarray:
    """Compile time each request paid, from the compile log records."""
    index = {r: i for i, r in enumerate(run.requests.request_id)}
    saved = np.zeros(run.requests.size)
    for c in records:
        if c.request_id in index:
            saved[index[c.request_id]] += c.duration_us
    return saved


def _recompile_from_ops(run: RunArrays, keys: set[str]) -> np.ndarray:
    """Recompile time per request from flagged events (stores without a compile log)."""
    ops = run.ops
    in_keys = np.array([k in keys for k in run.requests.shape_key], dtype=bool)
    mask = ops.recompile & in_keys[ops.req]
    return np.bincount(ops.req[mask], weights=ops.observed_us[mask], minlength=run.requests.size)


def shape_actions(
    run: RunArrays, warm: Warmup, buckets: list[dict[str, Any]], cf: Counterfactual
) -> list[Action]:
    """Pre-compile shape buckets seen at run time but not at compile time, ranked by traffic x
    cost; and mark dynamic the dimensions whose guards failed (from the recompile reasons)."""
    actions: list[Action] = []
    by_shape: dict[str, list[CompileRecord]] = {}
    for c in warm.steady:
        by_shape.setdefault(c.shape_key or "", []).append(c)
    for b in buckets:
        key = b["shape_key"]
        if b["compiled"] or not any(ch.isdigit() for ch in key):
            continue  # compiled already, or a bucket whose shape the trace did not record
        recs = by_shape.get(key, [])
        saved = compile_time_per_request(run, recs) if recs else _recompile_from_ops(run, {key})
        cost = float(saved.sum())
        if cost <= 0:
            continue
        g95, g99 = cf.gain(saved)
        share = float(b["traffic_share"])
        actions.append(
            Action(
                kind="precompile_shapes",
                target=key,
                text=(
                    f"pre-compile shape bucket {key} ({share:.0%} of requests, not compiled at "
                    f"warm-up; {max(len(recs), int(b['recompiles']))} recompiles, "
                    f"{cost / 1e3:.1f} ms)"
                ),
                predicted_p95_gain_us=g95,
                predicted_p99_gain_us=g99,
                priority=share * cost,
                evidence={
                    "query": "shape_buckets",
                    "n_requests": int(b["n_requests"]),
                    "traffic_share": share,
                    "recompile_us": cost,
                    "compile_ids": [c.compile_id for c in recs],
                },
            )
        )
    dims: dict[str, list[CompileRecord]] = {}
    for c in warm.steady:
        m = _DIM.search(c.recompile_reason or "")
        if m:
            dims.setdefault(f"{m['tensor']} dim {m['index']}", []).append(c)
    for dim, recs in dims.items():
        saved = compile_time_per_request(run, recs)
        # A dynamic graph still compiles once: charge the mean recompile at the first payer.
        first = min(recs, key=lambda c: c.start_us)
        idx = run.requests.request_id.index(first.request_id) if first.request_id else -1
        if idx >= 0:
            saved[idx] -= float(np.mean([c.duration_us for c in recs]))
        g95, g99 = cf.gain(saved)
        shapes = sorted({c.shape_key for c in recs if c.shape_key})
        affected = np.array([k in shapes for k in run.requests.shape_key], dtype=bool)
        share = float(affected.mean()) if affected.size else 0.0
        cost = float(sum(c.duration_us for c in recs))
        actions.append(
            Action(
                kind="mark_dynamic",
                target=dim,
                text=(
                    f"mark {dim} dynamic (torch._dynamo.mark_dynamic): its guard failed "
                    f"{len(recs)} times ({cost / 1e3:.1f} ms of recompiles over "
                    f"{len(shapes)} shapes)"
                ),
                predicted_p95_gain_us=g95,
                predicted_p99_gain_us=g99,
                priority=share * cost,
                evidence={
                    "query": "compile_phases",
                    "recompiles": len(recs),
                    "recompile_us": cost,
                    "reasons": sorted({c.recompile_reason or "" for c in recs}),
                    "shape_keys": shapes,
                },
            )
        )
    return actions


def _op_saving(
    run: RunArrays, hw: HardwareProfile, mask: np.ndarray, changed: RunArrays, base: OpCost
) -> np.ndarray:
    """Per request: observed time of masked ops scaled by the model's relative saving."""
    # Only the masked ops are read, so only they are re-costed (what op_times(changed.ops)
    # gives them): the changes here alter no group a masked op stays fused in, whose memory
    # and launch retimed then takes from base.
    sel = np.flatnonzero(mask)
    per_op = np.empty(sel.size)
    # Part by part (each op is costed on its own): retimed's temporaries for all of a 5M-op
    # run's spilled ops would fault in ~0.2 GB at the triage's high-water mark.
    for part in chunks(sel.size, RETIMED_PART):
        at = sel[part]
        before = base.predicted_us[at]
        after = next(retimed(changed.ops, base, at, hw))
        ratio = np.where(before > 0, 1.0 - after / np.where(before > 0, before, 1.0), 0.0)
        per_op[part] = run.ops.observed_us[at] * np.clip(ratio, -1.0, 1.0)
    return np.bincount(run.ops.req[sel], weights=per_op, minlength=run.requests.size)


def _kernel_names(ops: OpArrays, idx: np.ndarray) -> list[str]:
    """Kernel names of the ops at idx, from the codes when the loader left out the list."""
    if ops.kernel:
        return [ops.kernel[i] for i in idx]
    if ops.kernel_code.size == ops.size and ops.kernel_vocab:
        return [ops.kernel_vocab[c] for c in ops.kernel_code[idx]]
    return []


def kernel_actions(
    run: RunArrays, hw: HardwareProfile, cf: Counterfactual, base: OpCost
) -> list[Action]:
    """Pin or retune the tuned kernel for shapes that fell back to a generic one."""
    ops = run.ops
    if not ops.fallback.any():
        return []
    tuned = replace(run, ops=replace(ops, fallback=np.zeros_like(ops.fallback)))
    saved = _op_saving(run, hw, ops.fallback, tuned, base)
    g95, g99 = cf.gain(saved)
    kernels = sorted(set(_kernel_names(ops, np.flatnonzero(ops.fallback)[:10_000])))
    n = int(ops.fallback.sum())
    return [
        Action(
            kind="pin_kernel",
            target=", ".join(kernels[:5]) or "fallback ops",
            text=(
                f"pin / retune the tuned kernel for the {n} ops that fell back "
                f"({float(ops.observed_us[ops.fallback].sum()) / 1e3:.1f} ms observed)"
            ),
            predicted_p95_gain_us=g95,
            predicted_p99_gain_us=g99,
            priority=float(saved.sum()) * float(np.mean(saved > 0)),
            evidence={"query": "fallback_kernels", "fallback_ops": n, "kernels": kernels[:20]},
        )
    ]


def _capped_batches(batch_id: np.ndarray, cap: int) -> np.ndarray:
    """New batch ids when no batch may hold more than `cap` requests (in arrival order)."""
    order = np.argsort(batch_id, kind="stable")  # requests are in arrival order already
    sorted_ids = batch_id[order]
    new = np.empty_like(batch_id)
    new[order] = sorted_ids * (sorted_ids.size + 1) + rank_in_runs(sorted_ids) // cap
    return np.where(batch_id >= 0, new, -1)


def batch_actions(run: RunArrays, cf: Counterfactual) -> list[Action]:
    """Cap the batch size: smaller batches fill sooner and serve faster. A member's service is
    scaled by (new size / old size)^alpha, alpha the log-log slope of service on batch size."""
    bid = run.requests.batch_id
    if bid is None or not np.any(bid >= 0):
        return []
    ids, size_of = np.unique(bid[bid >= 0], return_counts=True)
    size = np.ones(bid.size)
    size[bid >= 0] = size_of[np.searchsorted(ids, bid[bid >= 0])]
    ok = (cf.service_us > 0) & cf.steady
    if np.unique(size[ok]).size < 2:
        return []  # no spread of batch sizes to learn how service scales with them
    alpha = float(np.polyfit(np.log(size[ok]), np.log(cf.service_us[ok]), 1)[0])
    alpha = min(max(alpha, 0.0), 1.0)
    best: tuple[float, float, int] | None = None
    for cap in sorted({int(x) for x in size_of if 1 <= x < size_of.max()}):
        new_bid = _capped_batches(bid, cap)
        new_size = np.minimum(size, cap)
        saved = cf.service_us * (1.0 - (new_size / size) ** alpha)
        g95, g99 = cf.gain(saved, new_bid)
        if best is None or g99 > best[1]:
            best = (g95, g99, cap)
    if best is None:
        return []
    g95, g99, cap = best
    share = float(np.mean(size > cap))
    return [
        Action(
            kind="batch_policy",
            target=f"max batch size {cap}",
            text=(
                f"cap the batch size at {cap} (now up to {int(size_of.max())}; "
                f"{share:.0%} of requests ride in bigger batches; service ~ size^{alpha:.2f})"
            ),
            predicted_p95_gain_us=g95,
            predicted_p99_gain_us=g99,
            priority=share * max(g99, 0.0),
            evidence={"query": "batch_impact", "alpha": alpha, "max_batch": int(size_of.max())},
        )
    ]


def fusion_actions(
    run: RunArrays, hw: HardwareProfile, cf: Counterfactual, base: OpCost
) -> list[Action]:
    """Split fusion groups whose working set exceeds on-chip memory (spill traffic)."""
    ops = run.ops
    fused = ops.fusion_group >= 0
    if not fused.any():
        return []
    cost = base
    spilled = fused & (cost.spill_bytes > 0)
    if not spilled.any():
        return []
    split = replace(run, ops=replace(ops, fusion_group=np.where(spilled, -1, ops.fusion_group)))
    saved = _op_saving(run, hw, spilled, split, base)
    g95, g99 = cf.gain(saved)
    spilled_groups = ops.fusion_group[spilled]  # all >= 0
    if int(spilled_groups.max()) <= 4 * spilled_groups.size + 1024:
        groups = np.flatnonzero(np.bincount(spilled_groups))  # no sort of millions of ids
    else:
        groups = np.unique(spilled_groups)
    return [
        Action(
            kind="split_fusion",
            target=f"{groups.size} fusion groups",
            text=(
                f"split {groups.size} fusion groups whose working set exceeds on-chip memory "
                f"({hw.onchip_bytes / 2**20:.0f} MiB on {hw.name}); "
                f"{float(cost.spill_bytes[spilled].sum()) / 2**20:.0f} MiB of spill traffic"
            ),
            predicted_p95_gain_us=g95,
            predicted_p99_gain_us=g99,
            priority=float(saved.sum()) * float(np.mean(saved > 0)),
            evidence={
                "query": "fusion_effect",
                "fusion_groups": [int(g) for g in groups[:20]],
                "spill_bytes": float(cost.spill_bytes[spilled].sum()),
            },
        )
    ]


def propose(
    run: RunArrays,
    warm: Warmup,
    buckets: list[dict[str, Any]],
    hw: HardwareProfile,
    *,
    op_cost: OpCost | None = None,
) -> list[Action]:
    """Every action with a predicted gain, highest priority first; op_cost: op_times(run.ops,
    hw) when the caller has it already."""
    cf = Counterfactual.of(run, warm)
    actions = shape_actions(run, warm, buckets, cf) + batch_actions(run, cf)
    if run.ops.fallback.any() or (run.ops.fusion_group >= 0).any():
        base = op_times(run.ops, hw) if op_cost is None else op_cost
        actions += kernel_actions(run, hw, cf, base) + fusion_actions(run, hw, cf, base)
    useful = [
        a for a in actions if max(a.predicted_p95_gain_us, a.predicted_p99_gain_us) > MIN_GAIN_US
    ]
    return sorted(useful, key=lambda a: (-a.priority, a.kind, a.target))
