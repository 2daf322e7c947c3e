"""The trigger's thresholds: relative p95/p99 gaps that fault-free A/A pairs exceed rarely."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

import numpy as np

from accel.localize.gaps import QNAMES, QS, at_q
from accel.ops import F64
from accel.stats import bootstrap_quantile_diff


@dataclass(frozen=True)
class Calibration:
    """Trigger thresholds: relative p95/p99 gaps that fault-free A/A pairs exceed rarely."""

    p95_rel: float
    p99_rel: float
    alpha: float
    n_pairs: int
    source: str
    n_requests: int = 600  # requests per run of the A/A pairs the thresholds came from

    def scaled(self, n: int) -> tuple[float, float]:
        """Thresholds for runs of n requests: quantile noise shrinks as 1/sqrt(n)."""
        k = math.sqrt(self.n_requests / n) if n > 0 else math.inf
        return self.p95_rel * k, self.p99_rel * k


# From `calibrate(("h100", "tpu-v5e"), n_pairs=150, seed=1, alpha=0.03)` (re-derive with
# `bench/localize.py --calibrate`): the (1 - alpha/2) quantile of A/A relative gaps per
# quantile at 600 requests per run; alpha 0.03 keeps the A/A alarm rate under 5% with margin.
DEFAULT_CALIBRATION: Final[Calibration] = Calibration(
    p95_rel=0.088,
    p99_rel=0.434,
    alpha=0.03,
    n_pairs=300,
    source="calibrate(('h100', 'tpu-v5e'), n_pairs=150, seed=1, alpha=0.03), 600 requests/run",
)


@dataclass(frozen=True)
class TailGaps:
    """Per quantile name (QNAMES): failing - comparator gap, its bootstrap CI, the relative gap."""

    gap: dict[str, float]
    ci: dict[str, tuple[float, float]]
    rel: dict[str, float]


def tail_gaps(lf: F64, lc: F64, n_boot: int, seed: int) -> TailGaps:
    """The p95/p99 latency gaps of failing (lf) over comparator (lc), percentile bootstrap."""
    gaps: dict[str, float] = {}
    cis: dict[str, tuple[float, float]] = {}
    rel: dict[str, float] = {}
    for i, (q, name) in enumerate(zip(QS, QNAMES, strict=True)):
        d, lo, hi = bootstrap_quantile_diff(lf, lc, q, n_boot=n_boot, seed=seed + i)
        gaps[name], cis[name] = d, (lo, hi)
        base = at_q(lc, q)
        rel[name] = d / base if base > 0 else math.nan
    return TailGaps(gaps, cis, rel)


def fired(tg: TailGaps, cal: Calibration, n: int) -> list[str]:
    """The quantiles whose gap is above the calibrated threshold with its CI above zero."""
    t95, t99 = cal.scaled(n)
    limits = {"p95": t95, "p99": t99}
    return [q for q in QNAMES if tg.rel[q] > limits[q] and tg.ci[q][0] > 0]


def calibrate(
    profiles: tuple[str, ...] = ("h100", "tpu-v5e"),
    n_pairs: int = 100,
    seed: int = 1,
    alpha: float = 0.05,
    n_requests: int = 600,
) -> Calibration:
    """Trigger thresholds from generated fault-free A/A pairs (accel.synth) on `profiles`.

    Each threshold is the (1 - alpha/2) quantile of the relative gap over all pairs, so the
    two quantiles together fire on at most about alpha of A/A pairs.
    """
    from accel.profiles import get_profile
    from accel.synth import Workload, generate_pair

    r95, r99 = [], []
    for k, name in enumerate(profiles):
        hw = get_profile(name)
        for i in range(n_pairs):
            pair = generate_pair(
                hw,
                "none",
                seed=seed * 1_000_003 + k * 100_000 + i,
                workload=Workload(n_requests=n_requests),
                tables=False,
            )
            lf = pair.failing.arrays.requests.latency_us
            lc = pair.comparator.arrays.requests.latency_us
            r95.append(at_q(lf, 0.95) / at_q(lc, 0.95) - 1.0)
            r99.append(at_q(lf, 0.99) / at_q(lc, 0.99) - 1.0)
    level = 1.0 - alpha / 2.0
    return Calibration(
        p95_rel=float(np.quantile(r95, level)),
        p99_rel=float(np.quantile(r99, level)),
        alpha=alpha,
        n_pairs=len(r95),
        source=f"calibrate({profiles!r}, n_pairs={n_pairs}, seed={seed}), {n_requests} requests",
        n_requests=n_requests,
    )
