"""Freed memory handed back to the system between the phases of a large import (glibc only).

glibc's malloc raises its mmap threshold to the size of the largest block freed (up to 32 MB),
so after the first multi-MB numpy array is freed, later ones come from the heap, and the heap
keeps the holes they leave. Trimming between phases returns those holes: the 209 MB real-shaped
trace's peak went 479 -> ~425 MB. (Fixing the threshold at 1 MiB took it to ~395 MB, but every
large block was then mapped and faulted in afresh: +0.5-0.8 s of kernel time, so not done.)
Elsewhere (musl, macOS) this is a no-op.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from functools import cache


@cache
def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    return libc if libc is not None and hasattr(libc, "malloc_trim") else None


def release_freed() -> None:
    """Return the heap's freed memory to the system."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)
