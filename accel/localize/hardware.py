"""Cross-hardware pairs: how much of the tail gap the hardware profiles alone predict."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from accel.localize.gaps import QNAMES, QS, at_q
from accel.ops import F64, RunArrays
from accel.profiles import HardwareProfile
from accel.replay import replay


@dataclass(frozen=True)
class HardwareGap:
    """The comparator's tail predicted on the failing run's hardware, against its own."""

    failing_hw: str
    comparator_hw: str
    predicted_gap_us: dict[str, float]  # per quantile name: what the profiles alone predict
    share_of_gap: dict[str, float]  # predicted / observed gap
    remaining_gap_us: dict[str, float]  # observed - predicted


def hardware_gap(
    comparator: RunArrays,
    failing_hw: HardwareProfile,
    comparator_hw: HardwareProfile,
    gaps: dict[str, float],
) -> HardwareGap:
    """Replay the comparator's ops on both profiles; the ratio of the predicted per-request op
    time at each quantile scales the comparator's observed quantile into the gap that the
    hardware change alone explains."""
    lc = np.asarray(comparator.requests.latency_us, dtype=np.float64)

    def service(hw: HardwareProfile) -> F64:
        rep = replay(comparator, hw)
        return np.asarray(np.nansum(rep.op_predicted_us, axis=1), dtype=np.float64)

    on_f, on_c = service(failing_hw), service(comparator_hw)
    pred: dict[str, float] = {}
    share: dict[str, float] = {}
    rest: dict[str, float] = {}
    for q, name in zip(QS, QNAMES, strict=True):
        base = at_q(on_c, q)
        ratio = at_q(on_f, q) / base if base > 0 else 1.0
        pred[name] = at_q(lc, q) * (ratio - 1.0)
        share[name] = pred[name] / gaps[name] if gaps[name] != 0 else float("nan")
        rest[name] = gaps[name] - pred[name]
    return HardwareGap(failing_hw.name, comparator_hw.name, pred, share, rest)
