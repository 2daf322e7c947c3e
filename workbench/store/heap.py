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
from contextlib import AbstractContextManager, contextmanager
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


class _ProcessWide:
    """A process-wide setting held while any block runs (triages and imports may overlap, e.g.
    in the app): the first block in applies it, the last one out undoes it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.depth = 0  # blocks open
        self._saved: Any = None  # what apply returned, for undo

    @contextmanager
    def held(self, apply: Callable[[], Any], undo: Callable[[Any], None]) -> Iterator[None]:
        with self._lock:
            if self.depth == 0:
                self._saved = apply()
            self.depth += 1
        try:
            yield
        finally:
            with self._lock:
                self.depth -= 1
                if self.depth == 0:
                    undo(self._saved)
                    self._saved = None


_HEAP = _ProcessWide()
_ARROW = _ProcessWide()


def reused_heap(release: bool = True) -> AbstractContextManager[None]:
    """Within the block: big blocks come from the heap and stay there when freed (no mmap, no
    trimming), and numpy asks for no huge pages. Process-wide, for as long as any block runs.
    `release` False: the heap's free memory is not handed back at the end (~0.1 s per GB), for
    a process that is about to exit anyway."""
    libc = _glibc()

    def keep() -> bool:
        hugepages = _set_hugepage(False)
        if libc is not None:
            libc.mallopt(_M_MMAP_MAX, 0)
            libc.mallopt(_M_TRIM_THRESHOLD, _KEEP_FREED)
        return hugepages

    def restore(hugepages: bool) -> None:
        _set_hugepage(hugepages)
        if libc is not None:
            libc.mallopt(_M_MMAP_MAX, _DEFAULT_MMAP_MAX)
            libc.mallopt(_M_TRIM_THRESHOLD, _DEFAULT_TRIM_THRESHOLD)
        if release:
            release_freed()

    return _HEAP.held(keep, restore)


def arrow_from_heap() -> AbstractContextManager[None]:
    """Within the block, new Arrow buffers come from the C heap (pyarrow's system pool) rather
    than mimalloc, which hands freed pages back within milliseconds and faults them in afresh
    for the next column: on a 2M-event nsys import the kernel's CPU went ~2.4-3.1 -> ~1.5 s
    and the peak RSS ~1010 -> ~975 MB. Buffers remember their pool, so any outlive the block
    safely. Process-wide, for as long as any block runs."""
    import pyarrow as pa

    def use_system_pool() -> Any:
        before = pa.default_memory_pool()
        pa.set_memory_pool(pa.system_memory_pool())
        return before

    return _ARROW.held(use_system_pool, pa.set_memory_pool)


def release_freed() -> None:
    """Return the heap's freed memory to the system (between the phases of an import)."""
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)
