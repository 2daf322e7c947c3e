"""Content hashes of a run's files: recorded at commit in its runs file, checked on load.

The runs file's Parquet metadata holds, under FILES_KEY, the xxh3-128 of every other file the
run committed (events, requests, compiles and the op table), relative to the store. A load for
triage or validation rehashes them first, so damaged bytes are an error naming the file, not a
number computed from garbage. xxh3 hashes at memory speed: a 5M-event run (~0.6 GB with its
op table) costs a few tens of ms. Runs committed before hashes were recorded load unverified.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Final

import pyarrow as pa
import pyarrow.parquet as pq
import xxhash

from workbench.errors import WorkbenchError

FILES_KEY: Final[bytes] = b"workbench.files"
_ALGO: Final[str] = "xxh3-128"
# Read in blocks, not mapped: a mapped file's pages count in the process's resident memory, so
# hashing a run's files at commit made a fleet import's peak grow with the run's size.
_BLOCK: Final[int] = 4 * 2**20
# Files already found whole in this process, by identity and stat (the app loads runs again
# and again); a rewrite changes the stat, so it is hashed anew.
_verified: set[tuple[str, int, int, int, int]] = set()
_lock = threading.Lock()


def digest(path: Path) -> str:
    """The file's content hash as recorded ("xxh3-128:<hex>")."""
    h = xxhash.xxh3_128()
    buf = bytearray(_BLOCK)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as fh:
        while n := fh.readinto(buf):
            h.update(view[:n])
    return f"{_ALGO}:{h.hexdigest()}"


def manifest(files: Mapping[str, Path]) -> dict[bytes, bytes]:
    """Parquet key-value metadata recording each file (path relative to the store -> where it
    is now) by content hash."""
    hashes = {rel: digest(path) for rel, path in sorted(files.items())}
    return {FILES_KEY: json.dumps(hashes, sort_keys=True).encode()}


def recorded(run_file: Path) -> dict[str, str] | None:
    """The hashes in a runs file, by path relative to the store; None for a run committed
    before hashes were recorded."""
    try:
        meta = pq.read_schema(run_file).metadata or {}
    except (OSError, pa.ArrowException) as exc:
        raise WorkbenchError(str(run_file), f"damaged runs file: {_first_line(exc)}") from exc
    raw = meta.get(FILES_KEY)
    if raw is None:
        return None
    try:
        hashes = json.loads(raw)
    except ValueError:
        hashes = None
    if not isinstance(hashes, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in hashes.items()
    ):
        raise WorkbenchError(str(run_file), "damaged runs file: unreadable content hashes")
    return hashes


def derived(rel: str) -> bool:
    """Whether a recorded file is derived data (an op table, named with a leading "_"), which a
    reader can rebuild from the run's Parquet files: damaged, it is passed over, not an error."""
    return Path(rel).name.startswith("_")


def verify_run(store: Path, run_file: Path) -> frozenset[str] | None:
    """Check the files a runs file records against their hashes: None for a run committed
    before hashes were recorded (unverified), else the derived files (by recorded name) that
    are missing or differ and must not be used. A Parquet file that is missing or differs is
    a WorkbenchError naming it."""
    return verify_recorded(store, run_file, recorded(run_file))


def verify_recorded(
    store: Path, run_file: Path, hashes: Mapping[str, str] | None
) -> frozenset[str] | None:
    """verify_run given the runs file's recorded(run_file), read by the caller."""
    if hashes is None:
        return None
    unusable: set[str] = set()
    for rel, want in sorted(hashes.items()):
        if ".." in Path(rel).parts or Path(rel).is_absolute():
            raise WorkbenchError(str(run_file), f"damaged runs file: bad file name {rel!r}")
        path = store / rel
        problem = _check(path, want)
        if problem is None:
            continue
        if derived(rel):
            unusable.add(rel)
        else:
            raise WorkbenchError(str(path), problem)
    return frozenset(unusable)


def _check(path: Path, want: str) -> str | None:
    """What is wrong with the file at path, or None when its hash is `want`."""
    try:
        st = path.stat()
        key = (str(path), st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        with _lock:
            if key in _verified:
                return None
        got = digest(path)
    except FileNotFoundError:
        return "missing: the run was committed with this file (the store is damaged)"
    except OSError as exc:
        return f"cannot read: {exc.strerror or exc}"
    if got != want:
        return (
            "damaged: its content differs from what was committed (content hash mismatch); "
            "re-import the run's source"
        )
    with _lock:
        _verified.add(key)
    return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
