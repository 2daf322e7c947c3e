"""Moving-block bootstrap of quantile differences for series in time order (requests by arrival).

A queue makes slow requests come in runs; resampling blocks of consecutive requests keeps the
runs, so the interval is not too narrow. The tail quantiles of each resample are read from the
order statistics of the few requests near the tail, which keeps 2000 resamples of 10k requests
cheap in time and memory; the result is the same as sorting every resample.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Final

import numpy as np
from numpy.typing import ArrayLike, NDArray

from accel.stats import QUANTILE_METHOD, _resampled_quantiles, clean, joint_percentile_intervals

F64 = NDArray[np.float64]
I64 = NDArray[np.int64]

# Resamples handled at once by the dense path: bounds its (rows x n) working arrays.
_DENSE_ROWS: Final[int] = 128
# The sparse path keeps ranks at or above (lowest order statistic needed - this many standard
# deviations of that order statistic's rank under resampling); rows that fall below go dense.
# Either path gives the same answer: the margin only trades histogram width against rows
# redone (none at 3 SD on the 10M bench's six calls; 4 SD keeps a wide berth, 6 SD cost 25%).
_MARGIN_SD: Final[float] = 4.0


def block_length(x: ArrayLike, max_share: float = 0.1) -> int:
    """Block length for a moving-block bootstrap of a series in time order: twice the first lag
    at which the autocorrelation falls below 2/sqrt(n) (noise); 1 when lag 1 is already below.
    Bounded by max_share of the series."""
    a = clean(x)
    n = a.size
    if n < 8:
        return 1
    d = a - a.mean()
    var = float(d @ d)
    if var <= 0:
        return 1
    cap = max(1, int(n * max_share))
    # Autocorrelation by FFT (lags 0..cap), the series zero-padded to avoid wrap-around.
    size = 1 << int(np.ceil(np.log2(2 * n)))
    f = np.fft.rfft(d, size)
    acf = np.fft.irfft(f * np.conj(f), size)[: cap + 1] / var
    below = np.flatnonzero(acf[1:] < 2.0 / math.sqrt(n))
    lag = int(below[0]) + 1 if below.size else cap
    return int(min(cap, 1 if lag == 1 else 2 * lag))


def _dense_order_stats(ranks: NDArray[np.int32], starts: I64, length: int, need: I64) -> I64:
    """(rows, len(need)): ranks of the order statistics `need` of each resample, by partition."""
    n = ranks.size
    k = starts.shape[1]
    out = np.empty((starts.shape[0], need.size), dtype=np.int64)
    step = np.arange(length)
    for s in range(0, starts.shape[0], _DENSE_ROWS):
        rows = starts[s : s + _DENSE_ROWS]
        idx = (rows[:, :, None] + step).reshape(rows.shape[0], k * length)[:, :n]
        out[s : s + rows.shape[0]] = np.partition(ranks[idx], need, axis=1)[:, need]
    return out


def _sparse_order_stats(
    ranks: NDArray[np.int32], starts: I64, length: int, need: I64, cut: int
) -> tuple[I64, NDArray[np.bool_]]:
    """Ranks of the order statistics `need` (all >= cut) of each resample, counting only the
    values ranked >= cut; and the rows where fewer than n - need.min() values are that high,
    whose answer is wrong and must be recomputed densely."""
    n, (n_boot, k) = ranks.size, starts.shape
    pos = np.flatnonzero(ranks >= cut)  # ascending positions of the high values
    high = ranks[pos].astype(np.int64) - cut
    width = n - cut
    ends = starts + length
    ends[:, -1] = starts[:, -1] + (n - (k - 1) * length)  # the last block is cut to n
    # How many high values lie before each position: a table, as starts are only 0..n.
    before = np.searchsorted(pos, np.arange(n + 1))
    lo = before[starts.ravel()]
    counts = before[ends.ravel()] - lo
    total = int(counts.sum())
    # Expand each block to the high values it holds: offsets into `pos` by repeat + arange,
    # each keyed by its row (row * width + value) for one histogram of all rows.
    at = np.repeat(lo - (np.cumsum(counts) - counts), counts)
    at += np.arange(total)
    key = np.repeat(np.arange(n_boot * k, dtype=np.int64) // k * width, counts)
    key += high[at]
    del at
    hist = np.bincount(key, minlength=n_boot * width).reshape(n_boot, width)
    del key
    below = n - counts.reshape(n_boot, k).sum(axis=1)  # the row's values below cut
    # Row r's running counts, shifted by r * (n + 1): every row's lie above the previous row's
    # (they run from below to n), so one sorted array answers every row's "how many values
    # <= o" by a binary search instead of a pass over all rows per order statistic.
    shift = np.arange(n_boot, dtype=np.int64) * (n + 1)
    cum = np.cumsum(hist, axis=1)
    cum += (below + shift)[:, None]
    rows_before = np.arange(n_boot, dtype=np.int64) * width
    out = np.column_stack(
        [cut + np.searchsorted(cum.ravel(), shift + o, side="right") - rows_before for o in need]
    )
    return out.astype(np.int64), below > int(need.min())


def _block_resampled_quantiles(
    a: F64, qs: Sequence[float], n_boot: int, length: int, rng: np.random.Generator
) -> F64:
    """(n_boot, len(qs)): the quantiles of n_boot moving-block resamples of the series `a`
    (blocks of `length` consecutive values, random starts, cut to len(a)); length 1: the
    order-statistic draw of each quantile."""
    n = a.size
    if length <= 1:
        return np.column_stack([_resampled_quantiles(a, q, n_boot, rng) for q in qs])
    k = -(-n // length)
    starts = rng.integers(0, n - length + 1, size=(n_boot, k))
    order = np.argsort(a, kind="stable")
    ranks = np.empty(n, dtype=np.int32)
    ranks[order] = np.arange(n, dtype=np.int32)
    h = (n - 1) * np.asarray(qs, dtype=np.float64)  # type 7: between order stats floor(h), +1
    below_h = np.floor(h).astype(np.int64)
    above_h = np.minimum(below_h + 1, n - 1)
    need = np.unique(np.concatenate([below_h, above_h]))
    q_low = float(need.min()) / n
    spread = math.sqrt(n * length * q_low * (1.0 - q_low))
    cut = int(need.min() - _MARGIN_SD * spread - length)
    if cut > 0:
        stats, redo = _sparse_order_stats(ranks, starts, length, need, cut)
        if redo.any():
            stats[redo] = _dense_order_stats(ranks, starts[redo], length, need)
    else:
        stats = _dense_order_stats(ranks, starts, length, need)
    values = a[order][stats]  # (n_boot, len(need)) sample values of the order statistics
    col = {int(o): j for j, o in enumerate(need)}
    out = np.empty((n_boot, len(qs)), dtype=np.float64)
    for j in range(len(qs)):
        v0, v1 = values[:, col[int(below_h[j])]], values[:, col[int(above_h[j])]]
        out[:, j] = v0 + (h[j] - below_h[j]) * (v1 - v0)
    return out


def block_bootstrap_quantile_diffs(
    x: ArrayLike,
    y: ArrayLike,
    qs: Sequence[float],
    n_boot: int = 400,
    seed: int = 0,
    alpha: float = 0.05,
    lengths: tuple[int, int] | None = None,
) -> list[tuple[float, float, float]]:
    """Per q in qs: (diff, lo, hi) of quantile_q(x) - quantile_q(y) for two series in time
    order (requests by arrival), by a moving-block bootstrap, so that a queue's run of slow
    requests is resampled as a run; block lengths from each series' autocorrelation
    (block_length) unless given. One resample serves every quantile; the intervals hold
    together at 1 - alpha (joint_percentile_intervals)."""
    a, b = clean(x), clean(y)
    if a.size == 0 or b.size == 0:
        return [(math.nan, math.nan, math.nan) for _ in qs]
    la, lb = lengths or (block_length(a), block_length(b))
    rng = np.random.default_rng(seed)
    boot = _block_resampled_quantiles(a, qs, n_boot, la, rng) - _block_resampled_quantiles(
        b, qs, n_boot, lb, rng
    )
    joint = joint_percentile_intervals(boot, alpha)
    out = []
    for j, q in enumerate(qs):
        lo, _, hi = joint[j]
        diff = np.quantile(a, q, method=QUANTILE_METHOD) - np.quantile(b, q, method=QUANTILE_METHOD)
        out.append((float(diff), float(lo), float(hi)))
    return out


def block_bootstrap_quantile_diff(
    x: ArrayLike,
    y: ArrayLike,
    q: float,
    n_boot: int = 400,
    seed: int = 0,
    alpha: float = 0.05,
    lengths: tuple[int, int] | None = None,
) -> tuple[float, float, float]:
    """block_bootstrap_quantile_diffs for one quantile."""
    return block_bootstrap_quantile_diffs(x, y, (q,), n_boot, seed, alpha, lengths)[0]
