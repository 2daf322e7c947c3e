"""The project's statistics, once: quantiles, bootstrap CIs, Mann-Whitney, Hodges-Lehmann, PSI.

Every function takes plain array-likes, drops NaN values (a missing measurement is not a zero)
and is deterministic for a given seed. numpy only; the tests check them against scipy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Final

import numpy as np
from numpy.typing import ArrayLike, NDArray

F64 = NDArray[np.float64]

QUANTILE_METHOD: Final = "linear"  # Hyndman & Fan type 7, numpy's and R's default
_HL_MAX_PAIRS: Final[int] = 4_000_000


def clean(x: ArrayLike) -> F64:
    """1-d float64 copy of `x` without NaN values."""
    a = np.asarray(x, dtype=np.float64).ravel()
    return a[~np.isnan(a)]


def quantile(x: ArrayLike, q: float | Sequence[float]) -> float | F64:
    """Sample quantile(s) by linear interpolation between order statistics (H&F type 7).

    NaN values are dropped; an empty sample gives NaN.
    """
    a = clean(x)
    qs = np.asarray(q, dtype=np.float64)
    out = np.quantile(a, qs, method=QUANTILE_METHOD) if a.size else np.full(qs.shape, np.nan)
    return float(out) if out.ndim == 0 else np.asarray(out, dtype=np.float64)


def normal_sf(z: float) -> float:
    """Upper tail of the standard normal, P(Z > z)."""
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def normal_ppf(p: float) -> float:
    """Inverse standard normal CDF by bisection on erfc (accurate to ~1e-12 in z)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"normal_ppf needs 0 < p < 1, got {p}")
    if p > 0.5:  # 1 - p is exact here; searching the lower tail keeps full precision
        return -normal_ppf(1.0 - p)
    lo, hi = -40.0, 40.0
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if normal_sf(-mid) < p:  # P(Z <= mid), without cancellation in the lower tail
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def _resampled_quantiles(a: F64, q: float, n_boot: int, rng: np.random.Generator) -> F64:
    """The q-quantile (type 7) of each of n_boot resamples with replacement of `a`, in O(n_boot).

    A resample's value is x_(ceil(n U)) for U uniform, so its k-th order statistic is
    x_(ceil(n U_(k))) with U_(k) the k-th of n uniform order statistics: U_(k) ~ Beta(k, n-k+1),
    and given it the next one is U_(k) + (1 - U_(k)) * Beta(1, n-k). Drawing just the two
    order statistics the interpolation needs is exact in distribution and needs no resample.
    """
    xs = np.sort(a)
    n = xs.size
    h = (n - 1) * q
    k = math.floor(h) + 1  # 1-based rank of the lower order statistic
    frac = h - (k - 1)
    u_lo = rng.beta(k, n - k + 1, size=n_boot)
    lo = xs[np.clip(np.ceil(n * u_lo).astype(np.int64) - 1, 0, n - 1)]
    if k >= n or frac == 0.0:
        return np.asarray(lo, dtype=np.float64)
    u_hi = u_lo + (1.0 - u_lo) * rng.beta(1, n - k, size=n_boot)
    hi = xs[np.clip(np.ceil(n * u_hi).astype(np.int64) - 1, 0, n - 1)]
    return np.asarray(lo + frac * (hi - lo), dtype=np.float64)


def bootstrap_quantile(
    x: ArrayLike, q: float, n_boot: int = 2000, seed: int = 0, alpha: float = 0.05
) -> tuple[float, float, float]:
    """(estimate, lo, hi): q-quantile of x with a percentile-bootstrap (1 - alpha) interval."""
    a = clean(x)
    if a.size == 0:
        return (math.nan, math.nan, math.nan)
    rng = np.random.default_rng(seed)
    boot = _resampled_quantiles(a, q, n_boot, rng)
    lo, hi = np.quantile(boot, [alpha / 2, 1 - alpha / 2])
    return (float(np.quantile(a, q, method=QUANTILE_METHOD)), float(lo), float(hi))


def bootstrap_quantile_diff(
    x: ArrayLike, y: ArrayLike, q: float, n_boot: int = 2000, seed: int = 0, alpha: float = 0.05
) -> tuple[float, float, float]:
    """(diff, lo, hi) of quantile_q(x) - quantile_q(y), percentile bootstrap.

    x and y are resampled independently n_boot times (each resample's quantile drawn from the
    exact order-statistic distribution, see _resampled_quantiles); the interval is the alpha/2
    and 1 - alpha/2 quantiles of the resampled differences. NaN everywhere if a sample is empty.
    """
    a, b = clean(x), clean(y)
    if a.size == 0 or b.size == 0:
        return (math.nan, math.nan, math.nan)
    rng = np.random.default_rng(seed)
    boot = _resampled_quantiles(a, q, n_boot, rng) - _resampled_quantiles(b, q, n_boot, rng)
    lo, hi = np.quantile(boot, [alpha / 2, 1 - alpha / 2])
    diff = np.quantile(a, q, method=QUANTILE_METHOD) - np.quantile(b, q, method=QUANTILE_METHOD)
    return (float(diff), float(lo), float(hi))


def level_text(level: float) -> str:
    """A confidence level as a percentage, to its last digit: 0.9875 -> '98.75%'."""
    return f"{100.0 * level:g}%"


def joint_percentile_intervals(draws: ArrayLike, alpha: float = 0.05) -> F64:
    """Per column of `draws` (rows: resamples or replays, columns: quantities read together):
    (lo, median, hi), percentile intervals that hold together at 1 - alpha.

    Each column's tails are cut at the largest share a (alpha/m <= a <= alpha, m columns; m = 1
    gives alpha) at which at least 1 - alpha of the complete rows lie inside every interval at
    once: a verdict that fires on either of two quantiles has one error rate, not two.
    NaN draws are dropped per column; a column with fewer than two gives NaN.
    """
    d = np.asarray(draws, dtype=np.float64)
    if d.ndim != 2:
        raise ValueError(f"joint_percentile_intervals needs rows x columns, got {d.shape}")
    cols = [d[:, j][np.isfinite(d[:, j])] for j in range(d.shape[1])]
    usable = [j for j, c in enumerate(cols) if c.size >= 2]
    sub = d[:, usable]
    complete = sub[np.isfinite(sub).all(axis=1)]

    def bounds(a: float) -> F64:
        return np.array([np.quantile(cols[j], [a / 2, 1 - a / 2]) for j in usable])

    def coverage(a: float) -> float:
        b = bounds(a)
        inside = (complete >= b[:, 0]) & (complete <= b[:, 1])
        return float(inside.all(axis=1).mean()) if complete.shape[0] else 1.0

    m = len(usable)
    share = alpha
    if m > 1 and coverage(alpha) < 1 - alpha:
        # coverage falls as the share grows: bisect for the largest share that keeps it
        lo, hi = alpha / m, alpha
        for _ in range(30):
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if coverage(mid) >= 1 - alpha else (lo, mid)
        share = lo
    out = np.full((d.shape[1], 3), np.nan)
    for j in usable:
        lo_q, mid_q, hi_q = np.quantile(cols[j], [share / 2, 0.5, 1 - share / 2])
        out[j] = (lo_q, mid_q, hi_q)
    return out


def rankdata(x: ArrayLike) -> F64:
    """Ranks 1..n of x with ties given their average rank."""
    a = np.asarray(x, dtype=np.float64).ravel()
    order = np.argsort(a, kind="stable")
    s = a[order]
    # Start of each run of equal values; a tie run of positions i..j gets rank (i + j) / 2 + 1.
    new = np.concatenate(([True], s[1:] != s[:-1]))
    run_id = np.cumsum(new) - 1
    starts = np.flatnonzero(new)
    ends = np.concatenate((starts[1:], [s.size])) - 1
    avg = (starts + ends) / 2.0 + 1.0
    ranks = np.empty(a.size, dtype=np.float64)
    ranks[order] = avg[run_id]
    return ranks


def _tie_term(sorted_values: F64) -> float:
    """sum(t^3 - t) over tie runs of a sorted sample."""
    if sorted_values.size == 0:
        return 0.0
    new = np.concatenate(([True], sorted_values[1:] != sorted_values[:-1]))
    t = np.diff(np.concatenate((np.flatnonzero(new), [sorted_values.size]))).astype(np.float64)
    return float(np.sum(t**3 - t))


def mann_whitney_u(x: ArrayLike, y: ArrayLike) -> tuple[float, float]:
    """(U of x, two-sided p): normal approximation with tie correction and continuity correction.

    Same definition as scipy.stats.mannwhitneyu(x, y, method="asymptotic"). NaN on an empty sample.
    """
    a, b = clean(x), clean(y)
    n1, n2 = a.size, b.size
    if n1 == 0 or n2 == 0:
        return (math.nan, math.nan)
    both = np.concatenate((a, b))
    ranks = rankdata(both)
    u1 = float(ranks[:n1].sum() - n1 * (n1 + 1) / 2.0)
    n = n1 + n2
    mu = n1 * n2 / 2.0
    tie = _tie_term(np.sort(both))
    var = n1 * n2 / 12.0 * ((n + 1) - tie / (n * (n - 1))) if n > 1 else 0.0
    if var <= 0.0:
        return (u1, 1.0)  # every value tied: no evidence of a shift
    u_big = max(u1, n1 * n2 - u1)
    z = (u_big - mu - 0.5) / math.sqrt(var)
    return (u1, float(min(1.0, 2.0 * normal_sf(z))))


def _pairwise_diffs(a: F64, b: F64, max_pairs: int) -> tuple[F64, float]:
    """All x_i - y_j, or those of evenly spaced order statistics when n*m exceeds max_pairs.

    Returns the differences and the thinning factor (pairs represented per kept pair), so
    that rank-based interval positions can be rescaled.
    """
    n, m = a.size, b.size
    if n * m > max_pairs:
        # Deterministic thinning: keep k evenly spaced order statistics of each sample (the
        # midpoints of k equal-probability strata), which preserves both distributions' shape.
        scale = math.sqrt(max_pairs / (n * m))
        kn, km = max(1, int(n * scale)), max(1, int(m * scale))
        a = np.quantile(a, (np.arange(kn) + 0.5) / kn, method=QUANTILE_METHOD)
        b = np.quantile(b, (np.arange(km) + 0.5) / km, method=QUANTILE_METHOD)
        return (a[:, None] - b[None, :]).ravel(), (n * m) / (kn * km)
    return (a[:, None] - b[None, :]).ravel(), 1.0


def hodges_lehmann_shift(x: ArrayLike, y: ArrayLike, max_pairs: int = _HL_MAX_PAIRS) -> float:
    """Median of all pairwise differences x_i - y_j (positive when x is larger).

    Exact up to max_pairs pairs; beyond that, computed on evenly spaced order statistics of each
    sample (deterministic). NaN on an empty sample.
    """
    a, b = clean(x), clean(y)
    if a.size == 0 or b.size == 0:
        return math.nan
    d, _ = _pairwise_diffs(a, b, max_pairs)
    return float(np.median(d))


def hodges_lehmann_ci(
    x: ArrayLike, y: ArrayLike, alpha: float = 0.05, max_pairs: int = _HL_MAX_PAIRS
) -> tuple[float, float, float]:
    """(shift, lo, hi): Hodges-Lehmann shift with its distribution-free (Moses) interval.

    The bounds are the C-th smallest and C-th largest pairwise differences, with
    C = floor(nm/2 - z_{1-alpha/2} * sqrt(nm(n+m+1)/12)) from the normal approximation of the
    Mann-Whitney null (no tie correction). Thinned as in hodges_lehmann_shift for large n*m.
    """
    a, b = clean(x), clean(y)
    n, m = a.size, b.size
    if n == 0 or m == 0:
        return (math.nan, math.nan, math.nan)
    d, thin = _pairwise_diffs(a, b, max_pairs)
    nm = n * m
    c = math.floor(nm / 2.0 - normal_ppf(1 - alpha / 2) * math.sqrt(nm * (n + m + 1) / 12.0))
    # On thinned pairs each kept difference stands for `thin` pairs: rescale the rank.
    k = min(max(round(c / thin), 1), d.size)
    # One partition gives the bounds and the median's middle pair (of millions of pairs); in
    # place, as d is this call's own: np.partition would copy it first (a third of the time).
    mid = ((d.size - 1) // 2, d.size // 2)
    d.partition(sorted({k - 1, d.size - k, *mid}))
    median = 0.5 * (float(d[mid[0]]) + float(d[mid[1]]))
    return (median, float(d[k - 1]), float(d[d.size - k]))


def psi(expected_counts: ArrayLike, actual_counts: ArrayLike, eps: float = 1e-4) -> float:
    """Population stability index sum((a - e) * ln(a / e)) over matching buckets.

    Counts become shares of their totals; shares are floored at eps so empty buckets count
    as strongly shifted instead of infinite. Rule of thumb: < 0.1 stable, > 0.25 shifted.
    """
    e = np.asarray(expected_counts, dtype=np.float64).ravel()
    a = np.asarray(actual_counts, dtype=np.float64).ravel()
    if e.shape != a.shape:
        raise ValueError(f"psi needs matching buckets, got {e.size} and {a.size}")
    if e.sum() <= 0 or a.sum() <= 0:
        return math.nan
    pe = np.maximum(e / e.sum(), eps)
    pa = np.maximum(a / a.sum(), eps)
    return float(np.sum((pa - pe) * np.log(pa / pe)))


def quantile_bucket_counts(
    expected: ArrayLike, actual: ArrayLike, n_buckets: int = 10
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Counts of both samples in buckets bounded by the expected sample's deciles (by default).

    Feeds psi() for numeric drift (e.g. token counts); categorical drift counts by category.
    """
    e, a = clean(expected), clean(actual)
    if e.size == 0:
        z = np.zeros(n_buckets, dtype=np.int64)
        return z, z.copy()
    inner = np.unique(np.quantile(e, np.arange(1, n_buckets) / n_buckets))
    ce = np.bincount(np.searchsorted(inner, e, side="right"), minlength=inner.size + 1)
    ca = np.bincount(np.searchsorted(inner, a, side="right"), minlength=inner.size + 1)
    return ce.astype(np.int64), ca.astype(np.int64)


def wilson_interval(successes: int, n: int, alpha: float = 0.05) -> tuple[float, float, float]:
    """(share, lo, hi): proportion with its Wilson score interval; NaN when n == 0."""
    if n <= 0:
        return (math.nan, math.nan, math.nan)
    p = successes / n
    z = normal_ppf(1 - alpha / 2)
    den = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    # Clamp so rounding never puts the estimate outside its own interval (k = 0 or k = n).
    return (p, max(0.0, min(p, centre - half)), min(1.0, max(p, centre + half)))


def proportion_diff_ci(
    k1: int, n1: int, k2: int, n2: int, alpha: float = 0.05
) -> tuple[float, float, float]:
    """(p1 - p2, lo, hi): Newcombe's hybrid score interval (1998, method 10) from two Wilson ones."""
    p1, l1, u1 = wilson_interval(k1, n1, alpha)
    p2, l2, u2 = wilson_interval(k2, n2, alpha)
    d = p1 - p2
    lo = d - math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2)
    hi = d + math.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2)
    return (d, lo, hi)


def spearman(x: ArrayLike, y: ArrayLike) -> float:
    """Spearman rank correlation (Pearson on average ranks) over pairs where both are finite."""
    a = np.asarray(x, dtype=np.float64).ravel()
    b = np.asarray(y, dtype=np.float64).ravel()
    keep = np.isfinite(a) & np.isfinite(b)
    if keep.sum() < 2:
        return math.nan
    ra, rb = rankdata(a[keep]), rankdata(b[keep])
    ra -= ra.mean()
    rb -= rb.mean()
    den = math.sqrt(float(np.sum(ra * ra) * np.sum(rb * rb)))
    return float(np.sum(ra * rb) / den) if den > 0 else math.nan


def mape(predicted: ArrayLike, observed: ArrayLike) -> float:
    """Mean absolute percentage error |p - o| / |o| in percent, over pairs with finite o != 0."""
    p = np.asarray(predicted, dtype=np.float64).ravel()
    o = np.asarray(observed, dtype=np.float64).ravel()
    keep = np.isfinite(p) & np.isfinite(o) & (o != 0)
    if not keep.any():
        return math.nan
    return float(100.0 * np.mean(np.abs(p[keep] - o[keep]) / np.abs(o[keep])))


def dispersion_index(counts: ArrayLike) -> float:
    """Variance over mean of event counts per window, at least 1 (1 = Poisson; NaN-free)."""
    c = clean(counts)
    if c.size < 2 or float(c.mean()) <= 0:
        return 1.0
    return max(1.0, float(c.var(ddof=1)) / float(c.mean()))


def gap_dispersion(gaps: ArrayLike) -> float:
    """A renewal process's count dispersion from its gaps: their squared coefficient of
    variation (1 = Poisson), at least 1 (NaN-free)."""
    g = clean(gaps)
    m = float(g.mean()) if g.size else 0.0
    if g.size < 2 or m <= 0:
        return 1.0
    return max(1.0, float(g.var(ddof=1)) / (m * m))


def rate_diff_ci(
    k1: int,
    t1: float,
    k2: int,
    t2: float,
    alpha: float = 0.05,
    dispersion1: float = 1.0,
    dispersion2: float = 1.0,
) -> tuple[float, float, float]:
    """(k1/t1 - k2/t2, lo, hi): Wald interval of a difference of event rates, quasi-Poisson.

    Each count's variance is its dispersion x the count, so bursty arrivals (batches complete
    together) widen the interval instead of passing as Poisson. NaN when an exposure is not > 0.
    """
    if not (t1 > 0 and t2 > 0):
        return (math.nan, math.nan, math.nan)
    d = k1 / t1 - k2 / t2
    se = math.sqrt(dispersion1 * k1 / (t1 * t1) + dispersion2 * k2 / (t2 * t2))
    half = normal_ppf(1 - alpha / 2) * se
    return (d, d - half, d + half)
