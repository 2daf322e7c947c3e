"""Direct evidence: time the cost model does not predict, compared between the runs as observed.

Sync, barrier, compile and post-processing spans carry no flops or bytes, so the replay copies
their observed time and their residual is zero by construction; core imbalance sits between
the ops. Both are compared here directly, per kind, tail first: per request, the kind's time;
its counterfactual gives each failing request the comparator's time at the same rank (saved
time goes through the queue re-run); the tail share is the kind's mean time in the failing
tail (latency >= its p95) minus the comparator tail's, over the p95 gap.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np

from accel.grouping import dense_ids
from accel.localize.confidence import Candidate
from accel.localize.requeue import (
    QueueState,
    arrival_gaps,
    arrival_rate,
    burstier,
    requeue,
    same_arrival_rate,
    stretched,
    with_arrivals,
)
from accel.ops import F64, I64, OpArrays, RequestArrays, joint_name_codes, name_codes, nan_as_zero
from accel.stages import STAGE_CODE, STAGES
from accel.stats import (
    gap_dispersion,
    mann_whitney_u,
    proportion_diff_ci,
    quantile,
    rate_diff_ci,
)

EXEC = STAGE_CODE["execution"]
SCHED = STAGE_CODE["scheduling"]
IMBALANCE = "core_imbalance"  # the kind name of per-core imbalance (stage scheduling)
ARRIVALS = "arrival_rate"  # the kind name of the load evidence (stage ingress)
BURSTS = "arrival_burstiness"  # and of the arrival process' shape at an unchanged rate
TAIL_ALPHA = 0.002  # level of the tail-excess interval (five stages, a few kinds each)
_DIGITS = re.compile(r"\d+")


@dataclass(frozen=True)
class KindTimes:
    """Per-request time of each kind of evidence, for one run."""

    stage: dict[str, str]  # kind -> stage it belongs to
    us: dict[str, F64]  # kind -> (n_requests,) time
    # (n_requests, 5): modelled op time per stage, what waits like a barrier's grow with
    modelled_us: F64 = field(default_factory=lambda: np.zeros((0, len(STAGES))))


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
    hl_us: float  # shift of the medians, failing - comparator
    p_value: float
    # Tail first: share of failing requests above the comparator's p95 of this kind, minus the
    # comparator's own share there, with the lower bound of its (1 - TAIL_ALPHA) interval.
    tail_excess: float
    tail_excess_lo: float
    saved_us: F64  # per failing request: time its counterfactual saves (>= 0)

    def grew(self, alpha: float) -> bool:
        """The kind grew: a significant upward shift of the whole, or more failing requests
        past the comparator's tail than the comparator has (a stall in a few requests)."""
        shift = self.p_value < alpha and (
            self.hl_us > 0 or self.failing_p95_us > self.comparator_p95_us
        )
        return shift or self.tail_excess_lo > 0


def kind_names(
    ops: OpArrays, other: OpArrays, codes: tuple[I64, I64, list[str]] | None = None
) -> tuple[I64, I64, list[str]]:
    """Kind code per op of both runs (kernel name, else op name with digits folded: one kind
    for every layer's barrier), over one vocabulary; `codes`: joint_name_codes(ops, other,
    kernel_fallback=True) when the caller has them."""
    a, b, vocab = codes or joint_name_codes(ops, other, kernel_fallback=True)
    remap, uniq = _folded(vocab)
    return _renumbered(a, remap), _renumbered(b, remap), uniq


def _folded(vocab: list[str]) -> tuple[I64, list[str]]:
    """Code of each name's kind (digits folded) into the sorted kinds, and those kinds."""
    folded = [_DIGITS.sub("#", v) for v in vocab]
    uniq = sorted(set(folded))
    index = {v: i for i, v in enumerate(uniq)}
    return np.array([index[v] for v in folded], dtype=np.int64), uniq


def _renumbered(code: I64, remap: I64) -> I64:
    """remap[code], or code itself when remap changes nothing (names without digits): a
    gather over millions of ops saved."""
    if not code.size or np.array_equal(remap, np.arange(remap.size)):
        return code
    return remap[code]


def run_kinds(ops: OpArrays, n_req: int) -> KindTimes:
    """kind_times of one run on its own vocabulary (kinds are compared by name, so each run's
    can be made alone, beside its replay)."""
    code, vocab = name_codes(ops, kernel_fallback=True)
    remap, uniq = _folded(vocab)
    return kind_times(ops, _renumbered(code, remap), uniq, n_req)


def unmodelled(ops: OpArrays) -> np.ndarray:
    """Ops the cost model cannot predict: no flops and no bytes."""
    # NaN > 0 is False: unknown counts as none.
    return np.asarray(~(ops.flops > 0) & ~(ops.bytes > 0), dtype=bool)


def imbalance_us(ops: OpArrays, code: I64, n_req: int) -> F64:
    """Per request: sum over its op kinds of (busiest core - mean core) of the kind's time on
    each core, execution ops on known cores only. A core slower on every op, by a factor
    (slope) or by a constant (intercept), raises it alike."""
    sel = np.flatnonzero((ops.stage == EXEC) & (ops.core >= 0) & np.isfinite(ops.observed_us))
    if not sel.size:
        return np.zeros(n_req)
    n_core = int(ops.core[sel].max()) + 1
    nk = int(code.max(initial=0)) + 1
    # Each temporary over the ops is dropped once used: on millions of kernel ops they are
    # tens of MB each, made beside the other lane's work (a triage's memory high-water mark).
    group = ops.req[sel] * nk + code[sel]  # (request, kind)
    key = group * n_core
    key += ops.core[sel]
    cell, n_cells = dense_ids(key)
    del key
    busy = np.bincount(cell, ops.observed_us[sel], n_cells)
    del sel
    first = np.full(n_cells, -1, dtype=np.int64)
    first[cell] = np.arange(cell.size)  # any op of the cell gives its group
    del cell
    g_of_cell = group[first]
    del group, first
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
    cannot, staged = unmodelled(ops), ops.stage >= 0
    um = np.flatnonzero(cannot & staged)
    if um.size:
        key = ops.stage[um].astype(np.int64) * (len(vocab) + 1) + code[um]
        kinds, inv = np.unique(key, return_inverse=True)
        # One bincount over (kind, request) instead of a mask per kind.
        table = np.bincount(
            inv.ravel() * n_req + ops.req[um],
            nan_as_zero(ops.observed_us[um], own=True),
            kinds.size * n_req,
        ).reshape(kinds.size, n_req)
        for j, k in enumerate(kinds.tolist()):
            s, c = divmod(int(k), len(vocab) + 1)
            kind = f"{STAGES[s]}:{vocab[c] if c < len(vocab) else '?'}"
            stage[kind] = STAGES[s]
            us[kind] = np.asarray(table[j], dtype=np.float64)
    stage[IMBALANCE] = STAGES[SCHED]
    us[IMBALANCE] = imbalance_us(ops, code, n_req)
    mask = ~cannot & staged
    # Every op modelled (the usual run): the columns themselves, not copies of millions of ops.
    mod: slice | I64 = slice(None) if mask.all() else np.flatnonzero(mask)
    del cannot, staged, mask
    modelled = np.bincount(
        ops.req[mod] * len(STAGES) + ops.stage[mod],
        nan_as_zero(ops.observed_us[mod], own=True),
        n_req * len(STAGES),
    ).reshape(n_req, len(STAGES))
    return KindTimes(stage, us, np.asarray(modelled, dtype=np.float64))


def rank_matched_saving(x_f: F64, x_c: F64) -> F64:
    """Per failing request: x_f minus the comparator's value at the same rank, where positive."""
    if not x_c.size or not x_f.size:
        return np.zeros(x_f.size)
    rank = np.empty(x_f.size)
    rank[np.argsort(x_f, kind="stable")] = (np.arange(x_f.size) + 0.5) / x_f.size
    matched = np.quantile(np.sort(x_c), rank)
    return np.asarray(np.maximum(x_f - matched, 0.0), dtype=np.float64)


def _conditioned(xf: F64, xc: F64, mf: F64, mc: F64) -> tuple[F64, F64]:
    """The kind's time less what the modelled work of its stage explains, fitted on the
    comparator (x = a + b m, b >= 0): a barrier waits for the kernels before it, so slower
    kernels alone lengthen it; a stall does not follow them."""
    if mf.size != xf.size or mc.size != xc.size or np.ptp(mc) <= 0 or not xc.any():
        return xf, xc
    b, a = np.polyfit(mc, xc, 1)
    b = max(float(b), 0.0)
    a = float(np.mean(xc) - b * np.mean(mc))
    return np.asarray(xf - (a + b * mf), dtype=np.float64), np.asarray(
        xc - (a + b * mc), dtype=np.float64
    )


def compare(f: KindTimes, c: KindTimes, lf: F64, lc: F64, p95_gap: float) -> list[Direct]:
    """Every kind present in either run, compared (kinds only one run has count as zero time
    in the other); the tests and the counterfactual read the kind's time net of what its
    stage's modelled work explains (_conditioned)."""
    tail_f = lf >= float(quantile(lf, 0.95))
    tail_c = lc >= float(quantile(lc, 0.95))
    out = []
    for kind in sorted(set(f.us) | set(c.us)):
        xf = f.us.get(kind, np.zeros(lf.size))
        xc = c.us.get(kind, np.zeros(lc.size))
        if not (xf.any() or xc.any()):
            continue
        tf, tc = float(xf[tail_f].mean()), float(xc[tail_c].mean())
        col = (
            STAGE_CODE["execution"]
            if kind == IMBALANCE
            else STAGE_CODE[f.stage.get(kind) or c.stage[kind]]
        )
        mf = f.modelled_us[:, col] if f.modelled_us.shape[0] == xf.size else np.zeros(0)
        mc = c.modelled_us[:, col] if c.modelled_us.shape[0] == xc.size else np.zeros(0)
        xf, xc = _conditioned(xf, xc, mf, mc)
        _, p = mann_whitney_u(xf, xc)
        # The shift of the medians: Hodges-Lehmann's all-pairs median costs too much per kind
        # on big runs, and only its sign and size are read.
        hl = float(np.median(xf) - np.median(xc))
        cut = float(quantile(xc, 0.95))
        excess, lo, _ = proportion_diff_ci(
            int((xf > cut).sum()), xf.size, int((xc > cut).sum()), xc.size, TAIL_ALPHA
        )
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
                tail_excess=float(excess),
                tail_excess_lo=float(lo),
                saved_us=rank_matched_saving(xf, xc),
            )
        )
    return out


def direct_mechanism(kind: str, stage: str) -> str:
    """The mechanism direct evidence of `kind` points at."""
    if kind == IMBALANCE:
        return "core_imbalance"
    if kind in (ARRIVALS, BURSTS):
        return "queueing"
    if kind in ("lowering:recompile", "lowering:graph_break"):
        return kind.split(":", 1)[1]
    return {
        "ingress": "queueing",
        "lowering": "recompile",
        "scheduling": "core_imbalance",
        "execution": "barrier_stall",
        "assembly": "assembly",
    }[stage]


def load_candidate(
    fr: RequestArrays,
    cr: RequestArrays,
    fq: QueueState,
    f_stage: F64,
    base_lat: F64,
    reproduced: bool,
    alpha: float,
    need: float,
) -> Candidate | None:
    """Direct evidence on the arrival process: the failing run re-run at the comparator's
    arrival rate (arrivals spread out in time, service unchanged); eligible when the failing
    run's arrival rate is significantly higher. Needs the queue re-run."""
    if not reproduced or fr.size < 3 or cr.size < 3:
        return None
    rf, rc = arrival_rate(fr.arrival_us), arrival_rate(cr.arrival_us)
    if not (math.isfinite(rf) and math.isfinite(rc)) or rf <= rc:
        return None
    gf, gc = arrival_gaps(fr.arrival_us), arrival_gaps(cr.arrival_us)
    # A test of the rates themselves (arrivals over the span; a rank test of the gaps spends
    # its power on their shape), as quasi-Poisson counts of a renewal process.
    lo = rate_diff_ci(
        gf.size, float(gf.sum()), gc.size, float(gc.sum()), alpha,
        gap_dispersion(gf), gap_dispersion(gc),
    )[1]  # fmt: skip
    cf = requeue(stretched(fq, rf / rc), f_stage)
    return Candidate("ingress", "direct", ARRIVALS, base_lat, cf, lo > 0, need)


def burst_candidate(
    fr: RequestArrays, cr: RequestArrays, fq: QueueState, f_stage: F64, base_lat: F64,
    reproduced: bool, alpha: float, need: float,
) -> Candidate | None:  # fmt: skip
    """Direct evidence on the arrival process' shape: the failing run fed the comparator's
    arrivals (same service, the comparator's bursts); eligible when the failing run's arrivals
    are significantly burstier at a rate that does not differ. Needs the queue re-run."""
    if not reproduced or fr.size < 9 or cr.size < 9:
        return None
    fa, ca = (
        np.asarray(fr.arrival_us, dtype=np.float64),
        np.asarray(cr.arrival_us, dtype=np.float64),
    )
    if not same_arrival_rate(fa, ca, alpha) or not burstier(fa, ca, alpha):
        return None
    fed = with_arrivals(fq, ca)
    return Candidate("ingress", "direct", BURSTS, base_lat, requeue(fed, f_stage), True, need)


def direct_doc(d: Direct, share: float) -> dict[str, float | str]:
    return {
        "kind": d.kind,
        "stage": d.stage,
        "failing_p95_us": d.failing_p95_us,
        "comparator_p95_us": d.comparator_p95_us,
        "failing_tail_mean_us": d.failing_tail_mean_us,
        "comparator_tail_mean_us": d.comparator_tail_mean_us,
        "tail_share": d.tail_share,
        "counterfactual_share": share,
        "hl_us": d.hl_us,
        "p_value": d.p_value,
        "tail_excess": d.tail_excess,
        "tail_excess_lo": d.tail_excess_lo,
    }
