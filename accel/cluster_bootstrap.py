"""Cluster bootstrap of quantiles for units that come in groups (a request's tokens).

The gaps between one request's tokens share its batch mates, its preemptions and its prompt, so
they are not independent draws: resampling tokens one by one makes the interval of a token
quantile far too narrow, and two runs of the same build then differ "significantly". Resampling
whole requests (each drawn with all its tokens) keeps that dependence. A resample's quantile is
read exactly off the weighted order statistics (a token's weight is how often its request was
drawn), so no resample is materialised.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Final

import numpy as np
from numpy.typing import ArrayLike, NDArray

from accel.stats import QUANTILE_METHOD

F64 = NDArray[np.float64]
I64 = NDArray[np.int64]

# Resample rows x units per chunk: bounds the weight and running-sum arrays (~64 MB each).
_CHUNK_CELLS: Final[int] = 8_000_000
# Total rows x units over all resamples: past it the resample count shrinks (never below
# _MIN_BOOT), so a run of a million tokens costs seconds, not minutes.
_MAX_CELLS: Final[int] = 400_000_000
_MIN_BOOT: Final[int] = 200


def _clean(x: ArrayLike, groups: ArrayLike) -> tuple[F64, I64]:
    """Finite values and their groups renumbered 0..R-1."""
    a = np.asarray(x, dtype=np.float64)
    g = np.asarray(groups)
    if a.shape != g.shape:
        raise ValueError(f"values {a.shape} and groups {g.shape} differ in shape")
    keep = np.isfinite(a)
    _, codes = np.unique(g[keep], return_inverse=True)
    return a[keep], np.asarray(codes, dtype=np.int64).reshape(-1)


def boot_count(n_units: int, n_boot: int) -> int:
    """The resamples drawn for n_units: n_boot, fewer when the work would pass _MAX_CELLS."""
    if n_units <= 0:
        return n_boot
    return int(min(n_boot, max(_MIN_BOOT, _MAX_CELLS // n_units)))


def resampled_quantiles(
    a: F64, codes: I64, qs: Sequence[float], n_boot: int, rng: np.random.Generator
) -> F64:
    """(n_boot, len(qs)): type-7 quantiles of n_boot cluster resamples (groups drawn with
    replacement, each with all its units)."""
    order = np.argsort(a, kind="stable")
    values, owner = a[order], codes[order]
    n_groups = int(codes.max()) + 1
    sizes = np.bincount(codes, minlength=n_groups).astype(np.int64)
    q = np.asarray(qs, dtype=np.float64)
    out = np.empty((n_boot, q.size), dtype=np.float64)
    rows = max(1, _CHUNK_CELLS // max(1, a.size))
    p = np.full(n_groups, 1.0 / n_groups)
    for s in range(0, n_boot, rows):
        m = min(rows, n_boot - s)
        counts = rng.multinomial(n_groups, p, size=m).astype(np.int64)
        total = counts @ sizes  # units in each resample
        running = np.cumsum(counts[:, owner], axis=1)  # units at or below each sorted value
        h = (total[:, None] - 1) * q  # (m, len(qs)): type 7's fractional 0-based rank
        k_lo = np.floor(h).astype(np.int64)
        k_hi = np.minimum(k_lo + 1, total[:, None] - 1)
        # The value of 0-based rank k in a resample: the first sorted value whose running
        # count passes k (each row's running count is sorted, so one search per row).
        lo = np.empty_like(h)
        hi = np.empty_like(h)
        for r in range(m):
            lo[r] = values[np.searchsorted(running[r], k_lo[r], side="right")]
            hi[r] = values[np.searchsorted(running[r], k_hi[r], side="right")]
        out[s : s + m] = lo + (h - k_lo) * (hi - lo)
    return out


def cluster_quantile_intervals(
    x: ArrayLike,
    groups: ArrayLike,
    qs: Sequence[float],
    n_boot: int = 2000,
    seed: int = 0,
    alpha: float = 0.05,
) -> list[tuple[float, float, float]]:
    """Per q: (estimate, lo, hi) of quantile_q(x), percentile interval of a cluster bootstrap
    over `groups` (one label per value); NaN when x has no finite value."""
    a, codes = _clean(x, groups)
    if a.size == 0:
        return [(math.nan, math.nan, math.nan) for _ in qs]
    rng = np.random.default_rng(seed)
    boot = resampled_quantiles(a, codes, qs, boot_count(a.size, n_boot), rng)
    return _percentile_intervals(np.quantile(a, list(qs), method=QUANTILE_METHOD), boot, alpha)


def cluster_quantile_diffs(
    x: ArrayLike,
    gx: ArrayLike,
    y: ArrayLike,
    gy: ArrayLike,
    qs: Sequence[float],
    n_boot: int = 2000,
    seed: int = 0,
    alpha: float = 0.05,
) -> list[tuple[float, float, float]]:
    """Per q: (diff, lo, hi) of quantile_q(x) - quantile_q(y), each run's groups resampled
    apart (cluster bootstrap), percentile interval; NaN when a side is empty."""
    a, ca = _clean(x, gx)
    b, cb = _clean(y, gy)
    if a.size == 0 or b.size == 0:
        return [(math.nan, math.nan, math.nan) for _ in qs]
    rng = np.random.default_rng(seed)
    n = boot_count(max(a.size, b.size), n_boot)
    boot = resampled_quantiles(a, ca, qs, n, rng) - resampled_quantiles(b, cb, qs, n, rng)
    diff = np.quantile(a, list(qs), method=QUANTILE_METHOD) - np.quantile(
        b, list(qs), method=QUANTILE_METHOD
    )
    return _percentile_intervals(diff, boot, alpha)


def _percentile_intervals(
    estimates: F64, boot: F64, alpha: float
) -> list[tuple[float, float, float]]:
    """Per column of boot (one per quantile): (estimate, lo, hi), the percentile interval."""
    bounds = np.quantile(boot, [alpha / 2, 1 - alpha / 2], axis=0)
    return [(float(e), float(lo), float(hi)) for e, lo, hi in zip(estimates, *bounds, strict=True)]
