"""Freed memory handed back to the system between the phases of a large import (glibc only).

glibc's malloc raises its mmap threshold to the size of the largest block freed (up to 32 MB),
so after the first multi-MB numpy array is freed, later ones come from the heap, and the heap
keeps the holes they leave: a 200 MB import's peak RSS grew by ~90 MB of freed memory. Fixing
the threshold keeps such arrays mapped (returned on free), and trimming between phases returns
the freed holes of the heap. Elsewhere (musl, macOS) both are no-ops.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from functools import cache

_M_MMAP_THRESHOLD = -3
_MAPPED_FROM = 1 << 20  # blocks of 1 MiB and more: every column buffer of a large import


@cache
def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    if libc is None or not hasattr(libc, "malloc_trim") or not hasattr(libc, "mallopt"):
        return None
    libc.mallopt(_M_MMAP_THRESHOLD, _MAPPED_FROM)
    return libc


def release_freed() -> None:
    """Return freed heap memory to the system (and, the first time, map large blocks)."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)
