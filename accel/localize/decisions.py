"""Lowering decisions as a profiler shows them: kernels the failing run ran that the comparator
never did (a generic fallback, a new fused kernel), and what they cost.

A plan swap needs the comparator's op of the same name to time a decision against; when a
fallback or a fused kernel replaces the op under another name, there is none. Here each run's
execution ops are summed per (request, kernel) with the cost model's prediction; a kernel the
comparator never ran is a changed decision, and its counterfactual time is its prediction with
the tuned kernel (fallback flag off) at the comparator's own efficiency (observed / predicted over the comparator's kernels): the
comparator calibrates the model, so the model's error is not graded.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from accel.cost import OpCost, retimed
from accel.grouping import dense_ids
from accel.ops import F64, I64, B, OpArrays, name_codes, nan_as_zero
from accel.profiles import HardwareProfile
from accel.stages import STAGE_CODE

EXEC = STAGE_CODE["execution"]


@dataclass(frozen=True)
class KernelTable:
    """Per (request, kernel) of one run's modelled execution ops: observed and predicted us."""

    req: I64
    kernel: I64  # code into vocab
    observed_us: F64
    predicted_us: F64  # as the ops ran, at the model's rates
    tuned_us: F64  # the same, had its fallback ops run the tuned kernel
    fallback: B  # any op of the row ran a fallback kernel
    fused: B  # any op of the row was fused
    vocab: list[str]


def kernel_table(ops: OpArrays, cost: OpCost, hw: HardwareProfile) -> KernelTable:
    """The run's modelled execution ops grouped by (request, op name and fallback flag): a
    name that now runs a fallback kernel is a changed decision too."""
    sel = np.flatnonzero((ops.stage == EXEC) & cost.modelled)
    name_at, names = name_codes(ops, kernel_fallback=True)
    code = name_at[sel] * 2 + ops.fallback[sel]
    vocab = [v + suffix for v in names for suffix in ("", " [fallback]")]
    nk = max(len(vocab), 1)
    key = ops.req[sel] * nk + code
    del code
    gid, ng = dense_ids(key)
    del key
    first = np.zeros(ng, dtype=np.int64)
    first[gid] = sel
    kcode = (name_at[first] * 2 + ops.fallback[first]).astype(np.int64)
    obs = np.bincount(gid, nan_as_zero(ops.observed_us[sel], own=True), ng).astype(np.float64)
    pred = np.bincount(gid, cost.predicted_us[sel], ng).astype(np.float64)
    fb_at = np.flatnonzero(ops.fallback[sel])
    tuned = pred  # no fallback op: the tuned kernels are the ones that ran
    if fb_at.size:
        tuned_op = cost.predicted_us[sel]  # a copy (fancy index), retimed where it fell back
        tuned_op[fb_at] = next(retimed(ops, cost, sel[fb_at], hw, fallback=False))
        tuned = np.bincount(gid, tuned_op, ng).astype(np.float64)
    # "Any op of the row": marks scattered from the flagged ops, not float sums over all.
    fb = np.zeros(ng, dtype=np.bool_)
    fb[gid[fb_at]] = True
    fu = np.zeros(ng, dtype=np.bool_)
    fu[gid[ops.fusion_group[sel] >= 0]] = True
    return KernelTable(ops.req[first], kcode, obs, pred, tuned, fb, fu, vocab)


@dataclass(frozen=True)
class Novel:
    """The failing run's kernels the comparator never ran, and what they cost per request."""

    kernels: list[str]
    observed_us: F64  # per failing request: time in novel kernels
    saved_us: F64  # per failing request: that time minus its prediction at comparator efficiency
    share_fallback: float  # of the novel time: in fallback kernels
    share_fused: float  # of the novel time: in fused kernels


def novel_kernels(f: KernelTable, c: KernelTable, n_req: int) -> Novel | None:
    """None when every failing kernel also ran in the comparator."""
    c_names = {c.vocab[k] for k in np.unique(c.kernel).tolist()}
    novel_codes = [k for k, v in enumerate(f.vocab) if v not in c_names]
    if not novel_codes or not c.predicted_us.sum() > 0:
        return None
    rows = np.isin(f.kernel, np.array(novel_codes, dtype=np.int64))
    if not rows.any():
        return None
    # The comparator's efficiency against the model: observed / predicted over its kernels.
    eff = float(c.observed_us.sum() / c.predicted_us.sum())
    obs = np.bincount(f.req[rows], f.observed_us[rows], n_req)
    saved = np.bincount(
        f.req[rows], np.maximum(f.observed_us[rows] - eff * f.tuned_us[rows], 0.0), n_req
    )
    total = float(f.observed_us[rows].sum()) or 1.0
    return Novel(
        kernels=sorted(f.vocab[k] for k in novel_codes if (f.kernel[rows] == k).any()),
        observed_us=np.asarray(obs, dtype=np.float64),
        saved_us=np.asarray(saved, dtype=np.float64),
        share_fallback=float(f.observed_us[rows & f.fallback].sum()) / total,
        share_fused=float(f.observed_us[rows & f.fused].sum()) / total,
    )


def novel_mechanism(nv: Novel) -> str:
    """Fallback kernels: mapping_fallback; new fused kernels: fusion_memory_burst; a new kernel
    named as a fallback or as fused (e.g. 'generic', 'fused_') when the flags are absent."""
    if nv.share_fallback > nv.share_fused:
        return "mapping_fallback"
    if nv.share_fused > 0:
        return "fusion_memory_burst"
    names = " ".join(nv.kernels).lower()
    if "fused" in names and not any(w in names for w in ("generic", "fallback")):
        return "fusion_memory_burst"
    return "mapping_fallback"
