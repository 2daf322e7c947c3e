"""A tail-exceedance test: a few failing requests far beyond anything the comparator did.

Quantile intervals spend their power on the bulk: at n = 80, four requests thirty times slower
than the comparator's slowest leave the p99 interval's lower bound below zero. This test asks
instead how many failing requests exceed a level beyond the comparator's maximum, against what
the comparator's own tail allows there. The tail is peaks over a threshold (its top tenth, at
least MIN_TAIL requests): excesses over it fit an exponential, whose mean is taken at its upper
(1 - alpha) bound, so a heavier tail than the sample shows is allowed for. The chance of one
request exceeding the level is then share_above x exp(-(level - threshold) / mean); the count
of failing requests past it is exact binomial. Each failing value above the comparator's
maximum is tried as the level (at least MIN_EXCEED requests at or past it: a lone hiccup is not
a regression; runs of consecutive requests past it count once), and the smallest tail probability, times the number of levels tried
(Bonferroni), is the p-value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

import numpy as np

from accel.ops import F64
from accel.stats import normal_ppf

MIN_EXCEED: Final[int] = 3  # requests at or past the level
MIN_TAIL: Final[int] = 8  # comparator requests the tail fit reads
TAIL_SHARE: Final[float] = 0.1
MAX_LEVELS: Final[int] = 20


@dataclass(frozen=True)
class Exceedance:
    """The test's figures: the level, the counts past it and what the comparator allows."""

    p_value: float
    level_us: float
    exceed_failing: int
    n_failing: int
    exceed_comparator: int
    n_comparator: int
    expected: float  # failing requests past the level that the comparator's tail allows
    comparator_max_us: float
    tail_mean_us: float  # the exponential tail's mean, at its upper bound
    levels: int

    def text(self) -> str:
        return (
            f"{self.exceed_failing} of {self.n_failing} failing requests exceed "
            f"{self.level_us:.0f} us (the comparator's slowest of {self.n_comparator}: "
            f"{self.comparator_max_us:.0f} us), where its tail allows {self.expected:.2g}: "
            f"exact binomial p={self.p_value:.2g} over {self.levels} levels"
        )


def chi2_ppf(p: float, dof: float) -> float:
    """Chi-square quantile (Wilson-Hilferty; within 1% for dof >= 8)."""
    z = normal_ppf(p)
    a = 2.0 / (9.0 * dof)
    return float(dof * max(1.0 - a + z * math.sqrt(a), 1e-9) ** 3)


def binom_sf(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p), exactly (log-space terms)."""
    if k <= 0:
        return 1.0
    if p <= 0.0:
        return 0.0
    if p >= 1.0 or k > n:
        return 1.0 if p >= 1.0 and k <= n else 0.0
    lp, lq = math.log(p), math.log1p(-p)
    terms = [
        math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * lp + (n - i) * lq
        for i in range(k, n + 1)
    ]
    top = max(terms)
    return float(min(1.0, math.exp(top) * sum(math.exp(t - top) for t in terms)))


def clusters_at_or_past(values: F64, level: float) -> int:
    """Runs of consecutive values (in arrival order) at or past `level`: one queue excursion,
    many requests in a row late behind one slow job, is one event, not many."""
    hit = values >= level
    return int(np.count_nonzero(hit[1:] & ~hit[:-1]) + (1 if hit.size and hit[0] else 0))


def exceedance(lf: F64, lc: F64, alpha: float) -> Exceedance | None:
    """The test on failing (lf) and comparator (lc) latencies in arrival order (or, where the
    queue model holds, their queue-free latencies); None when it cannot be read. Exceedances
    are counted as clusters (clusters_at_or_past), so a queue's run of late requests counts once."""
    f = np.asarray(lf, dtype=np.float64)
    c = np.asarray(lc, dtype=np.float64)
    f, c = f[np.isfinite(f)], c[np.isfinite(c)]
    m = max(MIN_TAIL, math.ceil(TAIL_SHARE * c.size))
    if c.size < 2 * m or f.size < MIN_EXCEED:
        return None
    cs = np.sort(c)
    u = float(cs[-m - 1])
    excess = cs[-m:] - u
    mean = float(excess.mean())
    if not mean > 0:
        return None
    # Upper bound of an exponential mean from m excesses: 2 m mean / chi2(alpha, 2m).
    cmax = float(cs[-1])
    # Upper bound of an exponential mean from m excesses: 2 m mean / chi2(alpha, 2m); and at
    # least the comparator's own top excess (its maximum over the threshold), which a heavier
    # tail than exponential stretches: a Pareto-like comparator then does not alarm.
    mean_hi = max(2.0 * m * mean / chi2_ppf(alpha, 2.0 * m), cmax - u)
    above = np.sort(f[f > cmax])[::-1]
    if above.size < MIN_EXCEED:
        return None
    levels = above[MIN_EXCEED - 1 :][:MAX_LEVELS]
    share = m / c.size
    best: tuple[float, float, int, float] | None = None
    for level in levels.tolist():
        k = clusters_at_or_past(f, level)
        if k < MIN_EXCEED:
            continue
        p0 = share * math.exp(-(level - u) / mean_hi)
        pv = binom_sf(k, f.size, p0)
        if best is None or pv < best[0]:
            best = (pv, level, k, p0)
    if best is None:
        return None
    pv, level, k, p0 = best
    return Exceedance(
        p_value=min(1.0, pv * levels.size),
        level_us=level,
        exceed_failing=k,
        n_failing=int(f.size),
        exceed_comparator=int(np.count_nonzero(c >= level)),
        n_comparator=int(c.size),
        expected=p0 * f.size,
        comparator_max_us=cmax,
        tail_mean_us=mean_hi,
        levels=int(levels.size),
    )
