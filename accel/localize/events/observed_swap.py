"""Observed-stage swaps: where the cost model predicts none of a stage's ops, its own time.

On a CPU-recorded trace (ops named, no sizes, no cores) the cost model predicts nothing: every
residual is zero and per-kind direct evidence splits a slower stage into dozens of op kinds, none
of which alone explains the gap, while the queue that slower service builds shows up first, in
ingress, and is blamed. Here a stage's own observed time per request is compared between runs
as a whole (Mann-Whitney + the shift of the medians) and, where it grew, the failing run gets
the comparator's time at the same rank and its queue is re-run: the share of the tail gap that
gives back decides, as for every candidate.
"""

from __future__ import annotations

from typing import Final

import numpy as np

from accel.localize.confidence import Candidate
from accel.localize.direct import rank_matched_saving
from accel.localize.requeue import QueueState, requeue
from accel.ops import F64
from accel.stages import STAGE_CODE, STAGES
from accel.stats import mann_whitney_u

# A stage counts as unmodelled when the model predicts less than this share of its op time in
# either run.
MODELLED_BELOW: Final[float] = 0.5
SWAPPED: Final[tuple[str, ...]] = tuple(s for s in STAGES if s != "ingress")
# The share of the tail gap an observed swap must give back. Lower than a model residual's
# (0.3): the swap runs through a queue fed the failing run's own traffic, whose draw keeps part
# of the gap whatever the service (tuned on the real corpus' tuning half: a wider MLP at
# utilisation ~0.5 gave back 26% of the gap, and no wrong stage's swap passed 0.1 there).
OBSERVED_NEED: Final[float] = 0.2


def unmodelled(summary_f: dict[str, dict[str, float]], summary_c: dict[str, dict[str, float]], stage: str) -> bool:  # fmt: skip
    """Whether the replay predicted (almost) none of the stage's op time in both runs."""
    shares = [d.get(stage, {}).get("modelled_share", np.nan) for d in (summary_f, summary_c)]
    return all(not (float(s) >= MODELLED_BELOW) for s in shares)


def observed_swaps(
    f_stage: F64,
    c_stage: F64,
    summaries: tuple[dict[str, dict[str, float]], dict[str, dict[str, float]]],
    fq: QueueState,
    base_lat: F64,
    lf: F64,
    reproduced: bool,
    alpha: float,
    need: float = OBSERVED_NEED,
) -> list[Candidate]:
    """One candidate per unmodelled stage after ingress (ingress' own time is the queue's)."""
    out: list[Candidate] = []
    for stage in SWAPPED:
        if not unmodelled(*summaries, stage):
            continue
        j = STAGE_CODE[stage]
        xf = np.nan_to_num(f_stage[:, j], nan=0.0)
        xc = np.nan_to_num(c_stage[:, j], nan=0.0)
        if not xf.any():
            continue
        _, p = mann_whitney_u(xf, xc)
        grew = p < alpha and float(np.median(xf)) > float(np.median(xc))
        saved = rank_matched_saving(xf, xc)
        cf = f_stage.copy()
        cf[:, j] = np.maximum(xf - saved, 0.0)
        if reproduced:
            out.append(
                Candidate(
                    stage, "direct", f"{stage}:observed", base_lat, requeue(fq, cf), grew, need
                )
            )
        else:
            out.append(Candidate(stage, "direct", f"{stage}:observed", lf, lf - saved, grew, need))
    return out
