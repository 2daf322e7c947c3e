"""Direct evidence: time the cost model does not predict, compared between the runs as observed.

Sync, barrier, compile and post-processing spans carry no flops or bytes, so the replay copies
their observed time and their residual is zero by construction; core imbalance sits between
the ops. Both are compared here directly, per kind, tail first: per request, the kind's time;
its counterfactual gives each failing request the comparator's time at the same rank (saved
time goes through the queue re-run); the tail share is the kind's mean time in the failing
tail (latency >= its p95) minus the comparator tail's, over the p95 gap.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from accel.cost import dense_ids
from accel.ops import F64, I64, OpArrays, joint_name_codes
from accel.stages import STAGE_CODE, STAGES
from accel.stats import hodges_lehmann_ci, mann_whitney_u, quantile

EXEC = STAGE_CODE["execution"]
SCHED = STAGE_CODE["scheduling"]
IMBALANCE = "core_imbalance"  # the kind name of per-core imbalance (stage scheduling)
_DIGITS = re.compile(r"\d+")


@dataclass(frozen=True)
class KindTimes:
    """Per-request time of each kind of evidence, for one run."""

    stage: dict[str, str]  # kind -> stage it belongs to
    us: dict[str, F64]  # kind -> (n_requests,) time


@dataclass(frozen=True)
class Direct:
    """One kind compared between the runs: its tail figures, shift test and counterfactual."""

    kind: str
    stage: str
    failing_p95_us: float
    comparator_p95_us: float
    failing_tail_mean_us: float
    comparator_tail_mean_us: float
    tail_share: float  # (failing tail mean - comparator tail mean) / p95 gap
    hl_us: float
    p_value: float
    saved_us: F64  # per failing request: time its counterfactual saves (>= 0)


def kind_names(ops: OpArrays, other: OpArrays) -> tuple[I64, I64, list[str]]:
    """Kind code per op of both runs (kernel name, else op name with digits folded: one kind
    for every layer's barrier), over one vocabulary."""
    a, b, vocab = joint_name_codes(ops, other, kernel_fallback=True)
    folded = [_DIGITS.sub("#", v) for v in vocab]
    uniq = sorted(set(folded))
    index = {v: i for i, v in enumerate(uniq)}
    remap = np.array([index[v] for v in folded], dtype=np.int64)
    return remap[a] if a.size else a, remap[b] if b.size else b, uniq


def unmodelled(ops: OpArrays) -> np.ndarray:
    """Ops the cost model cannot predict: no flops and no bytes."""
    flops = np.nan_to_num(ops.flops, nan=0.0)
    nbytes = np.nan_to_num(ops.bytes, nan=0.0)
    return np.asarray((flops <= 0) & (nbytes <= 0), dtype=bool)


def imbalance_us(ops: OpArrays, code: I64, n_req: int) -> F64:
    """Per request: sum over its op kinds of (busiest core - mean core) of the kind's time on
    each core, execution ops on known cores only. A core slower on every op, by a factor
    (slope) or by a constant (intercept), raises it alike."""
    sel = np.flatnonzero((ops.stage == EXEC) & (ops.core >= 0) & np.isfinite(ops.observed_us))
    if not sel.size:
        return np.zeros(n_req)
    n_core = int(ops.core[sel].max()) + 1
    nk = int(code.max(initial=0)) + 1
    group = ops.req[sel] * nk + code[sel]  # (request, kind)
    cell, n_cells = dense_ids(group * n_core + ops.core[sel].astype(np.int64))
    busy = np.bincount(cell, ops.observed_us[sel], n_cells)
    first = np.full(n_cells, -1, dtype=np.int64)
    first[cell] = np.arange(sel.size)  # any op of the cell gives its group
    g_of_cell = group[first]
    gid, n_groups = dense_ids(g_of_cell)
    top = np.full(n_groups, -np.inf)
    np.maximum.at(top, gid, busy)
    total = np.bincount(gid, busy, n_groups)
    cores = np.bincount(gid, minlength=n_groups)
    excess = top - total / np.maximum(cores, 1)
    req_of_group = np.zeros(n_groups, dtype=np.int64)
    req_of_group[gid] = g_of_cell // nk
    return np.asarray(np.bincount(req_of_group, excess, n_req), dtype=np.float64)


def kind_times(ops: OpArrays, code: I64, vocab: list[str], n_req: int) -> KindTimes:
    """Per request: time in each unmodelled kind (by stage) and the core imbalance."""
    stage: dict[str, str] = {}
    us: dict[str, F64] = {}
    um = np.flatnonzero(unmodelled(ops) & (ops.stage >= 0))
    if um.size:
        key = ops.stage[um].astype(np.int64) * (len(vocab) + 1) + code[um]
        for k in np.unique(key).tolist():
            s, c = divmod(int(k), len(vocab) + 1)
            sel = um[key == k]
            kind = f"{STAGES[s]}:{vocab[c] if c < len(vocab) else '?'}"
            stage[kind] = STAGES[s]
            us[kind] = np.bincount(ops.req[sel], np.nan_to_num(ops.observed_us[sel]), n_req).astype(
                np.float64
            )
    stage[IMBALANCE] = STAGES[SCHED]
    us[IMBALANCE] = imbalance_us(ops, code, n_req)
    return KindTimes(stage, us)


def _rank_matched_saving(x_f: F64, x_c: F64) -> F64:
    """Per failing request: x_f minus the comparator's value at the same rank, where positive."""
    if not x_c.size or not x_f.size:
        return np.zeros(x_f.size)
    rank = np.empty(x_f.size)
    rank[np.argsort(x_f, kind="stable")] = (np.arange(x_f.size) + 0.5) / x_f.size
    matched = np.quantile(np.sort(x_c), rank)
    return np.asarray(np.maximum(x_f - matched, 0.0), dtype=np.float64)


def compare(f: KindTimes, c: KindTimes, lf: F64, lc: F64, p95_gap: float) -> list[Direct]:
    """Every kind present in either run, compared (kinds only one run has count as zero time
    in the other)."""
    tail_f = lf >= float(quantile(lf, 0.95))
    tail_c = lc >= float(quantile(lc, 0.95))
    out = []
    for kind in sorted(set(f.us) | set(c.us)):
        xf = f.us.get(kind, np.zeros(lf.size))
        xc = c.us.get(kind, np.zeros(lc.size))
        if not (xf.any() or xc.any()):
            continue
        tf, tc = float(xf[tail_f].mean()), float(xc[tail_c].mean())
        _, p = mann_whitney_u(xf, xc)
        hl = hodges_lehmann_ci(xf, xc)[0]
        out.append(
            Direct(
                kind=kind,
                stage=f.stage.get(kind) or c.stage[kind],
                failing_p95_us=float(quantile(xf, 0.95)),
                comparator_p95_us=float(quantile(xc, 0.95)),
                failing_tail_mean_us=tf,
                comparator_tail_mean_us=tc,
                tail_share=(tf - tc) / p95_gap if p95_gap > 0 else 0.0,
                hl_us=float(hl),
                p_value=float(p),
                saved_us=_rank_matched_saving(xf, xc),
            )
        )
    return out
