"""The trace files a fleet run is built from: a list of files, directories and globs."""

from __future__ import annotations

import glob
from pathlib import Path

from workbench.errors import WorkbenchError
from workbench.store import objstore

TRACE_SUFFIXES = (".json", ".json.gz", ".trace")
_GLOB_CHARS = frozenset("*?[")


def _has_glob(text: str) -> bool:
    return any(c in text for c in _GLOB_CHARS)


def _is_trace(name: str) -> bool:
    return name.lower().endswith(TRACE_SUFFIXES)


def expand_sources(items: list[str]) -> list[tuple[str, str | None]]:
    """Files named by a list of files, directories (searched recursively for *.json,
    *.json.gz, *.trace) or globs, as (path, host hint), in path order, each once."""
    found: dict[str, str | None] = {}
    for item in items:
        if objstore.is_remote(item):
            raise WorkbenchError(item, "trace files are read from local disk; copy them first")
        path = Path(item)
        if _has_glob(item):
            matches = sorted(glob.glob(item, recursive=True))
            files = [Path(m) for m in matches if Path(m).is_file()]
        elif path.is_dir():
            files = sorted(p for p in path.rglob("*") if p.is_file() and _is_trace(p.name))
        elif path.is_file():
            files = [path]
        else:
            raise WorkbenchError(item, "no such file or directory")
        if not files:
            raise WorkbenchError(item, "names no trace files (*.json, *.json.gz, *.trace)")
        for f in files:
            found.setdefault(str(f), f.parent.name or None)
    return sorted(found.items())
