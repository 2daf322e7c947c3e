"""The runs list as the app last read it, reused while the store's run and request files are
unchanged: a start then fills the runs table without loading duckdb. Any change to those files
(an ingest, a removal, a rewrite) changes the fingerprint and the store is read again."""

from __future__ import annotations

import hashlib
import json
import os
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workbench.store.runs import RunSummary

FOLDER = "runs-cache"
TABLES = ("runs", "requests", "tokens")  # what run_summary.sql reads


def fingerprint(store: Path) -> list[list[Any]]:
    """(relative path, size, mtime ns) of every file the runs list is computed from."""
    out: list[list[Any]] = []
    for table in TABLES:
        root = store / table
        for folder, dirs, files in os.walk(root):
            dirs.sort()
            for name in sorted(files):
                path = Path(folder) / name
                try:
                    st = path.stat()
                except OSError:
                    continue
                out.append([str(path.relative_to(store)), st.st_size, st.st_mtime_ns])
    return out


def _file(state_dir: Path, store: Path) -> Path:
    key = hashlib.sha256(str(store.resolve()).encode()).hexdigest()[:24]
    return state_dir / FOLDER / f"{key}.json"


def cached_runs(state_dir: Path, store: Path, prints: list[list[Any]]) -> list[RunSummary] | None:
    """The cached runs list when it was made from files with exactly these fingerprints."""
    try:
        doc = json.loads(_file(state_dir, store).read_text(encoding="utf-8"))
        if doc.get("store") != str(store.resolve()) or doc.get("fingerprint") != prints:
            return None
        return [_run(d) for d in doc["runs"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None  # never written, stale layout or damaged: read the store


def _run(d: dict[str, Any]) -> RunSummary:
    from workbench.store.runs import RunSummary  # a dataclass; no data stack

    at = d.get("imported_at")
    return RunSummary(**{**d, "imported_at": datetime.fromisoformat(at) if at else None})


def remember_runs(
    state_dir: Path, store: Path, prints: list[list[Any]], runs: list[RunSummary]
) -> None:
    """Write the cache atomically (a reader sees the old one or the new one)."""
    path = _file(state_dir, store)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "store": str(store.resolve()),
        "fingerprint": prints,
        "runs": [r.to_json() for r in runs],
    }
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(doc), encoding="utf-8")
    os.replace(tmp, path)
