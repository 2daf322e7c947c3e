"""The origin decision over the evidence, and how often it holds when the requests are resampled.

Each piece of evidence is a candidate: a stage, its kind (plan swap, residual shift, direct
evidence), a base and a counterfactual latency per failing request, whether its shift test
passed, and the share of the tail gap it must remove. The origin is the first stage in pipeline
order with a candidate that passes, else the manifest stage (manifest_index: the largest p95
own-time growth beyond its noise, or the largest gap when none is). The
confidence reported is the share of bootstrap resamples of the requests of both runs that give
the same origin (the tests' verdicts are taken from the full runs; the shares, the gaps and the
manifest are recomputed on each resample).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

import numpy as np

from accel.block_bootstrap import block_bootstrap_quantile_diff
from accel.ops import F64, I64
from accel.stages import STAGES

N_RESAMPLES: Final[int] = 60
SOURCES: Final[tuple[str, ...]] = ("plan_swap", "residual", "direct")


@dataclass(frozen=True)
class Candidate:
    """One piece of evidence that can name its stage as the origin."""

    stage: str
    source: str  # one of SOURCES
    label: str  # e.g. "lowering", "execution:barrier"
    base: F64  # per failing request: latency the counterfactual is compared with
    cf: F64  # per failing request: latency without what this evidence blames
    eligible: bool  # its shift test passed (plan swaps: always)
    need: float  # share of the tail gap it must remove


@dataclass(frozen=True)
class Decision:
    origin: str
    decided_by: str  # a SOURCES entry or "manifest"
    candidate: int  # index into the candidates, -1 for the manifest
    shares: list[float]  # per candidate: mean share of the p95/p99 gaps removed


_QS = np.array([0.95, 0.99])
# A stage's p95 own-time growth counts as beyond noise at this many standard errors; each run's
# is at least a trace's timer resolution, so a constant stage moving by a microsecond is not.
MANIFEST_Z: Final[float] = 2.0
RESOLUTION_US: Final[float] = 1.0
# The quantiles either side of p95 whose spread gives the density there (manifest_index).
_AROUND = np.array([0.92, 0.95, 0.98])


def manifest_index(own_f: F64, own_c: F64) -> int:
    """The manifest stage's column of own_f / own_c ((n, 5) own time per request): the largest
    p95 gap among the stages whose growth is beyond noise, else the largest p95 gap.

    A sample p95's standard error is sqrt(0.95 * 0.05 / n) over the density there, read off the
    p92..p98 spread: a wide stage (execution) moves by hundreds of us between two draws of the
    same service, where a narrow one (post-processing) that grows by half is no draw."""
    qf = np.quantile(own_f, _AROUND, axis=0)
    qc = np.quantile(own_c, _AROUND, axis=0)
    gap = qf[1] - qc[1]
    width = float(_AROUND[2] - _AROUND[0])
    var = sum(
        np.maximum((q[2] - q[0]) / width * math.sqrt(0.95 * 0.05 / max(m.shape[0], 1)),
                   RESOLUTION_US) ** 2
        for q, m in ((qf, own_f), (qc, own_c))
    )  # fmt: skip
    beyond = gap > MANIFEST_Z * np.sqrt(var)
    return int(np.argmax(np.where(beyond, gap, -np.inf)) if beyond.any() else np.argmax(gap))


def _quantiles(rows: list[F64], idx: I64 | None) -> F64:
    """(len(rows), 2): p95 and p99 of each row, on the resampled requests `idx`."""
    m = np.stack(rows) if rows else np.zeros((0, 1))
    if idx is not None:
        m = m[:, idx]
    return np.asarray(np.quantile(m, _QS, axis=1).T, dtype=np.float64)


def decide(
    cands: list[Candidate],
    lf: F64,
    lc: F64,
    own_f: F64,
    own_c: F64,
    fi: I64 | None = None,
    ci: I64 | None = None,
) -> Decision:
    """The origin on the requests fi of failing and ci of comparator (None: all of them);
    own_f / own_c: (n, 5) per-stage own time, whose p95 gap names the manifest stage."""
    # Rows: lf, each distinct base array (most candidates share one), each counterfactual.
    rows: list[F64] = [lf]
    base_row: list[int] = []
    seen: dict[int, int] = {}
    for c in cands:
        if id(c.base) not in seen:
            seen[id(c.base)] = len(rows)
            rows.append(c.base)
        base_row.append(seen[id(c.base)])
    first_cf = len(rows)
    rows.extend(c.cf for c in cands)
    qf = _quantiles(rows, fi)
    qc = _quantiles([lc], ci)[0]
    gap = qf[0] - qc
    shares = []
    for j in range(len(cands)):
        removed = qf[base_row[j]] - qf[first_cf + j]
        s = np.where(gap > 0, removed / np.where(gap > 0, gap, 1.0), 0.0)
        shares.append(float(np.clip(s, -1.0, 1.5).mean()))
    for stage in STAGES:
        for source in SOURCES:
            for j, c in enumerate(cands):
                if c.stage == stage and c.source == source and c.eligible and shares[j] >= c.need:
                    return Decision(stage, source, j, shares)
    mf = own_f if fi is None else own_f[fi]
    mc = own_c if ci is None else own_c[ci]
    return Decision(STAGES[manifest_index(mf, mc)], "manifest", -1, shares)


def manifest_share(stage_gap_us: float, tail_gap_us: float) -> float:
    """Share of the tail gap a manifest stage's own-time gap (same quantile) accounts for, in
    [0, 1]; 0 when either is not a positive finite number."""
    if not (math.isfinite(stage_gap_us) and math.isfinite(tail_gap_us) and tail_gap_us > 0):
        return 0.0
    return min(max(stage_gap_us / tail_gap_us, 0.0), 1.0)


def manifest_cap(
    own_f: F64, own_c: F64, stage_gap_us: float, tail_gap_us: float, seed: int
) -> tuple[float, tuple[float, float]]:
    """The cap on a manifest-decided origin's confidence (NaN: none) and the 95% interval of
    its stage's p95 own-time growth (own_f, own_c: that stage's own time per request, in
    arrival order). No evidence explained the gap; when the stage's own p95 did not grow beyond
    noise either, a stable argmax of small own-time gaps says nothing about the cause (A/A
    false alarms named a stage this way at 0.87), so the cap is the share of the tail gap the
    growth accounts for. A real growth gets none: near saturation the queue makes a small one
    most of the gap."""
    _, lo, hi = block_bootstrap_quantile_diff(own_f, own_c, 0.95, seed=seed)
    cap = math.nan if lo > 0 else manifest_share(stage_gap_us, tail_gap_us)
    return cap, (lo, hi)


def origin_agreement(
    cands: list[Candidate],
    lf: F64,
    lc: F64,
    own_f: F64,
    own_c: F64,
    origin: str,
    n_resamples: int = N_RESAMPLES,
    seed: int = 0,
) -> float:
    """Share of bootstrap resamples (requests of both runs, with replacement) whose decision
    names `origin`."""
    rng = np.random.default_rng(seed)
    cands = [c for c in cands if c.eligible]  # the others can never name a stage
    same = 0
    for _ in range(n_resamples):
        fi = rng.integers(0, lf.size, lf.size)
        ci = rng.integers(0, lc.size, lc.size)
        same += decide(cands, lf, lc, own_f, own_c, fi, ci).origin == origin
    return same / n_resamples if n_resamples else float("nan")
