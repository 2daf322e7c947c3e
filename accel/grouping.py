"""Ids and positions of groups of equal keys over millions of ops, in O(n) where the keys
allow (a small range, or already in order), and the chunking that keeps per-op temporaries in
cache. numpy only."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from accel.ops import I64

CHUNK = 1 << 16


def dense_ids(key: I64) -> tuple[I64, int]:
    """Ids 0..k-1 numbering the distinct values of `key` in ascending order, and k.

    Uses a bincount table when the key range is small, a running count of changes when the
    keys are already in order (ops keyed by request usually are), both O(n); a sort otherwise.
    """
    if key.size == 0:
        return np.zeros(0, dtype=np.int64), 0
    lo, hi = int(key.min()), int(key.max())
    if hi - lo <= 4 * key.size + 1024:
        shifted = key - lo if lo else key  # one temporary of the size of key, or none
        present = np.bincount(shifted, minlength=hi - lo + 1) > 0
        table = np.cumsum(present, dtype=np.int64) - 1
        return table[shifted], int(present.sum())
    if bool(np.all(key[1:] >= key[:-1])):
        ids = np.zeros(key.size, dtype=np.int64)
        np.cumsum(key[1:] != key[:-1], out=ids[1:])
        return ids, int(ids[-1]) + 1
    uniq, inv = np.unique(key, return_inverse=True)
    return inv.ravel().astype(np.int64), int(uniq.size)


def run_starts(x: NDArray[Any]) -> I64:
    """Positions where a run of equal values begins in `x` (values sorted or grouped)."""
    if not x.size:
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero(np.concatenate(([True], x[1:] != x[:-1])))


def rank_in_runs(x: NDArray[Any]) -> I64:
    """Each position's rank within its run of equal values in `x`: 0, 1, 2, ... per run."""
    starts = run_starts(x)
    return np.arange(x.size) - np.repeat(starts, np.diff(np.append(starts, x.size)))


def first_index(ids: I64, k: int) -> I64:
    """Position of the first occurrence of each id 0..k-1 in `ids` (len(ids) where absent)."""
    first = np.full(k, ids.size, dtype=np.int64)
    if ids.size and bool(np.all(ids[1:] >= ids[:-1])):
        # Ids in order (ops keyed by request usually are): the first is where the id changes.
        starts = run_starts(ids)
        first[ids[starts]] = starts
    else:
        np.minimum.at(first, ids, np.arange(ids.size))
    return first


def chunks(n: int, size: int = CHUNK) -> list[slice]:
    """Slices of at most `size` ops: temporaries of one chunk stay in cache and are recycled by
    the allocator, where whole-run temporaries would page-fault on every fresh 8 MB array."""
    return [slice(lo, min(n, lo + size)) for lo in range(0, n, size)]
