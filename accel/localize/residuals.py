"""Residuals of the cost model per (request, stage), and the replay summary kept with them."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

import numpy as np

from accel.cost import OpCost
from accel.localize.decisions import KernelTable, kernel_table
from accel.localize.direct import KindTimes, run_kinds
from accel.localize.gaps import gap_share
from accel.localize.requeue import QueueState, requeue
from accel.ops import F64, I64, RunArrays
from accel.profiles import HardwareProfile
from accel.replay import COLUMNS, Replay, conditional_replay, replay
from accel.stages import STAGE_CODE, STAGES
from accel.stats import hodges_lehmann_ci, mann_whitney_u, quantile

INGRESS = STAGE_CODE["ingress"]
SUMMARY_QS: Final[tuple[float, ...]] = (0.5, 0.95, 0.99)  # quantiles of replay_summary
SUMMARY_QNAMES: Final[tuple[str, ...]] = ("p50", "p95", "p99")


def _residuals(run: RunArrays, rep: Replay, hw: HardwareProfile) -> F64:
    """(n_req, 5) observed - predicted; ingress from the conditional replay (queue re-run)."""
    res = np.asarray(rep.residual_us[:, : len(STAGES)], dtype=np.float64).copy()
    cond = conditional_replay(run, hw, "ingress", base=rep)
    res[:, INGRESS] = cond.residual_us
    return np.nan_to_num(res, nan=0.0)


@dataclass(frozen=True)
class Replayed:
    """What localization keeps of one run's replay (the replay itself, with its per-op costs,
    is dropped): residuals per (request, stage) and replay_summary."""

    run_id: str
    profile: str
    residual_us: F64  # (n_req, 5) observed - predicted, ingress from the conditional replay
    summary: dict[str, dict[str, float]]
    kinds: KindTimes  # per request: unmodelled time per kind, and core imbalance
    kernels: KernelTable  # per (request, kernel): observed and predicted execution time


def replayed(run: RunArrays, hw: HardwareProfile, cost: OpCost | None = None) -> Replayed:
    """Replay `run` on `hw` and keep what localize reads; cost: op_times(run.ops, hw) when the
    caller has it already."""
    rep = replay(run, hw, cost=cost)
    res, summary = _residuals(run, rep, hw), replay_summary(rep)
    kernels = kernel_table(run.ops, rep.ops, hw)
    del rep
    n = run.requests.size
    return Replayed(run.run_id, hw.name, res, summary, run_kinds(run.ops, n), kernels)


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


def residual_shifts(
    res: tuple[F64, F64],
    heads: tuple[I64, I64],
    f_stage: F64,
    queues: tuple[QueueState, QueueState],
    base_lat: F64,
    gaps: dict[str, float],
    ingress_own: tuple[F64, F64] | None = None,
) -> tuple[dict[str, dict[str, float]], dict[str, F64]]:
    """Per stage: the residual shift of failing over comparator (Mann-Whitney p, Hodges-Lehmann
    with CI) and the share of the tail gap that removing the shift from the stage takes away;
    and per stage the failing latency without the shift (queue re-run).

    Batch-level stages are tested once per batch (`heads`): members share them. Ingress is
    tested without its waits for the server and for batch-mates served first: those grow with
    any slower service downstream, which the queue re-run already carries. `ingress_own`: what
    ingress is tested on instead (per request of each run), and the most removed from it."""
    res_f, res_c = res
    f_heads, c_heads = heads
    fq, cq = queues
    out: dict[str, dict[str, float]] = {}
    cfs: dict[str, F64] = {}
    for i, s in enumerate(STAGES):
        if i == INGRESS and ingress_own is not None:
            a, b = ingress_own
        elif i == INGRESS:
            a = res_f[:, i] - (fq.queue_us + fq.mates_us)
            b = res_c[:, i] - (cq.queue_us + cq.mates_us)
        else:
            a, b = res_f[f_heads, i], res_c[c_heads, i]
        _, p = mann_whitney_u(a, b)
        hl, lo, hi = hodges_lehmann_ci(a, b)
        # The failing stage without its median shift, queue re-run: the share that shift holds.
        cf = f_stage.copy()
        shift = max(hl, 0.0) if math.isfinite(hl) else 0.0
        if i == INGRESS:
            most = f_stage[:, i] if ingress_own is None else ingress_own[0]
            cf_lat = base_lat - np.minimum(shift, most)
        else:
            cf[:, i] = np.maximum(f_stage[:, i] - shift, 0.0)
            cf_lat = requeue(fq, cf)
        share = gap_share(base_lat, cf_lat, gaps)
        cfs[s] = np.asarray(cf_lat, dtype=np.float64)
        out[s] = {
            "hl_us": hl,
            "hl_lo_us": lo,
            "hl_hi_us": hi,
            "p_value": p,
            "p95_share": share["p95"],
            "p99_share": share["p99"],
        }
    return out, cfs
