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

# The sorted units are cut into about sqrt(n) blocks (at most _MAX_BLOCKS): a resample's
# count per block is one matrix product (requests drawn x units of each request per block),
# and only the block holding a wanted rank is counted unit by unit.
_MAX_BLOCKS: Final[int] = 512
# Resamples x groups x blocks per chunk: bounds the count and product arrays (~64 MB each).
_CHUNK_CELLS: Final[int] = 8_000_000
# Total resamples x groups x blocks: past it the resample count shrinks (never below
# _MIN_BOOT), so a run of a hundred thousand requests costs seconds, not minutes.
_MAX_CELLS: Final[int] = 4_000_000_000
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


def _blocks(n: int) -> int:
    return int(min(_MAX_BLOCKS, max(1, math.isqrt(n))))


def boot_count(n_units: int, n_groups: int, n_boot: int) -> int:
    """The resamples drawn for n_units in n_groups: n_boot, fewer when the work would pass
    _MAX_CELLS."""
    cells = max(1, n_groups) * _blocks(max(1, n_units))
    return int(min(n_boot, max(_MIN_BOOT, _MAX_CELLS // cells)))


def resampled_quantiles(
    a: F64, codes: I64, qs: Sequence[float], n_boot: int, rng: np.random.Generator
) -> F64:
    """(n_boot, len(qs)): type-7 quantiles of n_boot cluster resamples (groups drawn with
    replacement, each with all its units), read exactly off each resample's weighted order
    statistics."""
    order = np.argsort(a, kind="stable")
    values, owner = a[order], codes[order]
    n, n_groups = a.size, int(codes.max()) + 1
    n_blocks = _blocks(n)
    starts = (np.arange(n_blocks + 1) * n) // n_blocks  # block j: sorted units starts[j]..
    block_of = np.repeat(np.arange(n_blocks), np.diff(starts))
    # per_block[g, j]: units of group g in block j (so a resample's sizes are a product)
    per_block = np.bincount(owner * n_blocks + block_of, minlength=n_groups * n_blocks)
    per_block = per_block.reshape(n_groups, n_blocks).astype(np.float64)
    q = np.asarray(qs, dtype=np.float64)
    out = np.empty((n_boot, q.size), dtype=np.float64)
    rows = max(1, _CHUNK_CELLS // (n_groups * n_blocks))
    p = np.full(n_groups, 1.0 / n_groups)
    for s in range(0, n_boot, rows):
        m = min(rows, n_boot - s)
        counts = rng.multinomial(n_groups, p, size=m)
        # Units at or below the end of each block, per resample (exact: integers < 2**53).
        upto = np.cumsum(counts.astype(np.float64) @ per_block, axis=1)
        total = upto[:, -1]
        h = (total[:, None] - 1) * q  # (m, len(qs)): type 7's fractional 0-based rank
        k_lo = np.floor(h)
        k_hi = np.minimum(k_lo + 1, total[:, None] - 1)
        lo = _at_rank(values, owner, starts, counts, upto, k_lo)
        hi = _at_rank(values, owner, starts, counts, upto, k_hi)
        out[s : s + m] = lo + (h - k_lo) * (hi - lo)
    return out


def _at_rank(values: F64, owner: I64, starts: I64, counts: I64, upto: F64, ranks: F64) -> F64:
    """(rows, len(qs)): each resample's value at 0-based weighted rank `ranks`: the block whose
    running count first passes the rank, then the unit inside it whose running count does."""
    out = np.empty_like(ranks)
    for r in range(ranks.shape[0]):
        blocks = np.searchsorted(upto[r], ranks[r], side="right")
        for j, (blk, k) in enumerate(zip(blocks.tolist(), ranks[r].tolist(), strict=True)):
            before = upto[r, blk - 1] if blk else 0.0
            lo, hi = int(starts[blk]), int(starts[blk + 1])
            inside = np.cumsum(counts[r, owner[lo:hi]])
            out[r, j] = values[lo + int(np.searchsorted(inside, k - before, side="right"))]
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
    n = boot_count(a.size, int(codes.max()) + 1, n_boot)
    boot = resampled_quantiles(a, codes, qs, n, rng)
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
    n = min(boot_count(a.size, int(ca.max()) + 1, n_boot),
            boot_count(b.size, int(cb.max()) + 1, n_boot))  # fmt: skip
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
