"""Confidence in the origin: how strongly the deciding evidence points at it."""

from __future__ import annotations

import numpy as np

from accel.localize.gaps import mean_share


def origin_confidence(
    origin: str,
    decided_by: str,
    explained: dict[str, dict[str, float]],
    residual_shift: dict[str, dict[str, float]],
) -> float:
    """The share of the gap the deciding swap removes; 0.9 x the residual shift's share; 0.4
    for the manifest fallback."""
    if decided_by == "plan_swap":
        conf = min(1.0, mean_share(explained[origin]))
    elif decided_by == "residual":
        r = residual_shift[origin]
        conf = min(1.0, (r["p95_share"] + r["p99_share"]) / 2) * 0.9
    else:
        conf = 0.4
    return float(np.clip(conf, 0.0, 1.0))
