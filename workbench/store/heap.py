"""glibc's allocator tuned for the two big jobs: an import that should give memory back, and a
triage of millions of ops that should reuse it (glibc only; elsewhere no-ops).

Triage: hundreds of temporaries of one value per op (40 MB each at 5M ops). glibc hands every
block over 32 MB to mmap and unmaps it on free, so each temporary faults in (and the kernel
zeroes) all its pages again; numpy's MADV_HUGEPAGE advice adds page compaction on top.
Measured on the 10M-event bench: 4.6 s of the 10 s CPU was the kernel's (page faults); with
the heap kept and no huge-page advice (reused_heap), 1.0 s. The settings hold for the `with`
block only; afterwards the heap's free memory goes back to the system.

Import: glibc raises its mmap threshold to the size of the largest block freed (up to 32 MB),
so after the first multi-MB array is freed, later ones come from the heap, which keeps the
holes they leave. Trimming between phases (release_freed) returns them: the 209 MB
real-shaped trace's peak went 479 -> ~425 MB. (Fixing the threshold at 1 MiB took it to ~395
MB, but every large block was then mapped and faulted in afresh: +0.5-0.8 s of kernel time.)
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any, Final

# mallopt parameters and glibc's defaults for them (malloc.h)
_M_TRIM_THRESHOLD: Final[int] = -1
_M_MMAP_MAX: Final[int] = -4
_M_ARENA_MAX: Final[int] = -8
_DEFAULT_TRIM_THRESHOLD: Final[int] = 128 * 1024
_DEFAULT_MMAP_MAX: Final[int] = 65536
_KEEP_FREED: Final[int] = 2**31 - 1  # the largest trim threshold mallopt takes (an int)


@cache
def _glibc() -> ctypes.CDLL | None:
    """The C library when it is glibc (mallopt and malloc_trim exist), else None."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        libc.mallopt  # noqa: B018 - musl and macOS have no mallopt: no tuning there
        libc.malloc_trim  # noqa: B018
    except (OSError, AttributeError):
        return None
    return libc


def _set_hugepage(enabled: bool) -> bool:
    """Set numpy's MADV_HUGEPAGE advice for new array data; the previous setting (True when
    this numpy has no such switch)."""
    import numpy._core.multiarray as multiarray  # here: one_arena must run before numpy loads

    switch: Callable[[bool], bool] | None = getattr(multiarray, "_set_madvise_hugepage", None)
    return True if switch is None else bool(switch(enabled))


def one_arena() -> None:
    """Have every thread allocate from the main heap, where reused_heap keeps freed blocks: a
    worker thread's own arena maps each block over 64 MB afresh and faults it in again. glibc
    fixes its arena count once threads start (numpy, pyarrow and polars start some on import),
    so a command calls this before it imports them."""
    libc = _glibc()
    if libc is not None:
        libc.mallopt(_M_ARENA_MAX, 1)


_lock = threading.Lock()
_depth = 0  # blocks open (triages may overlap, e.g. in the app): the last one out restores
_hugepages = True


@contextmanager
def reused_heap(release: bool = True) -> Iterator[None]:
    """Within the block: big blocks come from the heap and stay there when freed (no mmap, no
    trimming), and numpy asks for no huge pages. Process-wide, for as long as any block runs.
    `release` False: the heap's free memory is not handed back at the end (~0.1 s per GB), for
    a process that is about to exit anyway."""
    global _depth, _hugepages
    libc = _glibc()
    with _lock:
        if _depth == 0:
            _hugepages = _set_hugepage(False)
            if libc is not None:
                libc.mallopt(_M_MMAP_MAX, 0)
                libc.mallopt(_M_TRIM_THRESHOLD, _KEEP_FREED)
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                _set_hugepage(_hugepages)
                if libc is not None:
                    libc.mallopt(_M_MMAP_MAX, _DEFAULT_MMAP_MAX)
                    libc.mallopt(_M_TRIM_THRESHOLD, _DEFAULT_TRIM_THRESHOLD)
                if release:
                    release_freed()


_arrow_lock = threading.Lock()
_arrow_depth = 0
_arrow_pool: Any = None  # the default pool before the outermost block


@contextmanager
def arrow_from_heap() -> Iterator[None]:
    """Within the block, new Arrow buffers come from the C heap (pyarrow's system pool) rather
    than mimalloc, which hands freed pages back within milliseconds and faults them in afresh
    for the next column: on a 2M-event nsys import the kernel's CPU went ~2.4-3.1 -> ~1.5 s
    and the peak RSS ~1010 -> ~975 MB. Buffers remember their pool, so any outlive the block
    safely. Process-wide, for as long as any block runs."""
    import pyarrow as pa

    global _arrow_depth, _arrow_pool
    with _arrow_lock:
        if _arrow_depth == 0:
            _arrow_pool = pa.default_memory_pool()
            pa.set_memory_pool(pa.system_memory_pool())
        _arrow_depth += 1
    try:
        yield
    finally:
        with _arrow_lock:
            _arrow_depth -= 1
            if _arrow_depth == 0:
                pa.set_memory_pool(_arrow_pool)
                _arrow_pool = None


def release_freed() -> None:
    """Return the heap's freed memory to the system (between the phases of an import)."""
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)
