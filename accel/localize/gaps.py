"""Tail gaps: the quantiles compared and the share of a gap a counterfactual removes."""

from __future__ import annotations

from typing import Final

import numpy as np

from accel.ops import F64
from accel.stats import quantile

QS: Final[tuple[float, ...]] = (0.95, 0.99)
QNAMES: Final[tuple[str, ...]] = ("p95", "p99")


def at_q(x: F64, q: float) -> float:
    return float(quantile(x, q))


def gap_share(base: F64, cf: F64, gaps: dict[str, float]) -> dict[str, float]:
    """Share of each tail gap that a counterfactual latency removes (clipped to [-1, 1.5])."""
    out = {}
    for q, name in zip(QS, QNAMES, strict=True):
        g = gaps[name]
        s = (at_q(base, q) - at_q(cf, q)) / g if g > 0 else 0.0
        out[name] = float(np.clip(s, -1.0, 1.5))
    return out


def mean_share(share: dict[str, float]) -> float:
    return float(np.mean([share[n] for n in QNAMES]))
