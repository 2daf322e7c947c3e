"""Direct evidence of lowering read off the events themselves: compilations while serving
(recompiles) and a compiled graph split with eager ops between its regions (graph breaks).

Both are witnessed by events the comparator's configuration does not produce, so their test is
structural, not a rank test: a rank test of four requests that recompiled for seconds against a
comparator that never did has no power at n = 80, and the queue those seconds build is blamed on
ingress. The share of the tail gap their removal gives back (through the queue) still decides,
as for every candidate.
"""

from __future__ import annotations

import re
from typing import Final

import numpy as np

from accel.localize.confidence import Candidate
from accel.localize.events.witness import named
from accel.localize.graph_break import graph_break
from accel.localize.requeue import QueueState, requeue
from accel.ops import F64, OpArrays, RunArrays
from accel.stages import STAGE_CODE

LOW: Final[int] = STAGE_CODE["lowering"]
EXEC: Final[int] = STAGE_CODE["execution"]
RECOMPILE: Final[str] = "lowering:recompile"
GRAPH_BREAK: Final[str] = "lowering:graph_break"
# The spans torch.compile wraps each compiled region's call in (the profiler's names).
REGION_GLUE: Final[re.Pattern[str]] = re.compile(
    r"^## Call CompiledFxGraph|AOTDispatcher|Pregraph bytecode|^Torch-Compiled Region|"
    r"TorchDynamo Cache Lookup|^CompiledFunction|Runtime Wrapper"
)
# Fisher's one-sided p of requests that recompiled, failing over comparator, below which a
# recompile rate that both runs share is told from a new one (a comparator with none passes).
RECOMPILE_ALPHA: Final[float] = 0.01


def _per_request(run: RunArrays, mask: np.ndarray, stage: int | None = None) -> F64:
    ops, n = run.ops, run.requests.size
    sel = mask if stage is None else mask & (ops.stage == stage)
    t = np.nan_to_num(ops.observed_us[sel], nan=0.0)
    return np.bincount(ops.req[sel], t, n).astype(np.float64)


def split_ops(ops: OpArrays) -> np.ndarray:
    """Ops a split graph adds per region or runs eagerly: eager fallback ops, and the compiled
    regions' own entry and wrapper spans (their time is outside the compiled kernels)."""
    return (ops.fallback & ~ops.recompile) | named(ops, REGION_GLUE)


def _count_per_request(run: RunArrays, mask: np.ndarray) -> F64:
    return np.bincount(run.ops.req[mask], minlength=run.requests.size).astype(np.float64)


def fisher_greater(kf: int, nf: int, kc: int, nc: int) -> float:
    """Fisher's exact one-sided p that failing's share kf/nf exceeds comparator's kc/nc."""
    from math import comb

    k, n = kf + kc, nf + nc
    if k == 0:
        return 1.0
    total = comb(n, k)
    return float(sum(comb(nf, i) * comb(nc, k - i) for i in range(kf, min(k, nf) + 1)) / total)


def recompile_candidate(
    failing: RunArrays, comparator: RunArrays, f_stage: F64, c_stage: F64, fq: QueueState,
    base_lat: F64, lf: F64, reproduced: bool, need: float,
) -> Candidate | None:  # fmt: skip
    """The failing run without its compilations while serving, when it has more of them."""
    tf = _count_per_request(failing, failing.ops.recompile)
    tc = _count_per_request(comparator, comparator.ops.recompile)
    kf, kc = int(np.count_nonzero(tf > 0)), int(np.count_nonzero(tc > 0))
    if kf == 0:
        return None
    ok = kc == 0 or fisher_greater(kf, tf.size, kc, tc.size) < RECOMPILE_ALPHA
    # A compilation is many nested spans (Dynamo, AOT, Inductor) and only the outermost is
    # flagged: the request's lowering time beyond the comparator's typical one is what it cost.
    extra = np.maximum(f_stage[:, LOW] - float(np.median(c_stage[:, LOW])), 0.0)
    saved = np.where(tf > 0, extra, 0.0)
    return _candidate(RECOMPILE, f_stage, saved, None, fq, base_lat, lf, reproduced, ok, need)


def graph_break_candidate(
    failing: RunArrays, comparator: RunArrays, f_stage: F64, c_stage: F64, fq: QueueState,
    base_lat: F64, lf: F64, reproduced: bool, need: float,
) -> Candidate | None:  # fmt: skip
    """The failing run with its split graph's cost taken out: the eager ops between regions
    beyond the comparator's typical request, and the lowering glue (guards, region entry) its
    extra regions add."""
    if not graph_break(failing, comparator, {}):
        return None
    f_eager = _per_request(failing, split_ops(failing.ops))
    c_eager = _per_request(comparator, split_ops(comparator.ops))
    eager = np.maximum(f_eager - float(np.median(c_eager)), 0.0)
    eager = np.minimum(eager, np.maximum(f_stage[:, EXEC], 0.0))
    glue = np.maximum(f_stage[:, LOW] - float(np.median(c_stage[:, LOW])), 0.0)
    return _candidate(GRAPH_BREAK, f_stage, glue, eager, fq, base_lat, lf, reproduced, True, need)


def _candidate(
    label: str, f_stage: F64, low: F64, ex: F64 | None, fq: QueueState, base_lat: F64,
    lf: F64, reproduced: bool, ok: bool, need: float,
) -> Candidate:  # fmt: skip
    cf = f_stage.copy()
    cf[:, LOW] = np.maximum(cf[:, LOW] - low, 0.0)
    saved = low.copy()
    if ex is not None:
        cf[:, EXEC] = np.maximum(cf[:, EXEC] - ex, 0.0)
        saved = saved + ex
    if reproduced:
        return Candidate("lowering", "direct", label, base_lat, requeue(fq, cf), ok, need)
    return Candidate("lowering", "direct", label, lf, lf - saved, ok, need)
