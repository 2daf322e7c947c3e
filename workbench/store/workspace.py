"""A writable working copy of the bundled sample store, so that using it never edits the repo."""

from __future__ import annotations

import hashlib
import os
import shutil
import uuid
from pathlib import Path

from workbench.errors import WorkbenchError

MARKER = ".bundled-sha256"
_KEEP = ("incidents",)  # what the user made in the copy, carried over when the bundle changes


def state_home() -> Path:
    """Where the workbench keeps its own state: $WORKBENCH_HOME, else the XDG state directory."""
    explicit = os.environ.get("WORKBENCH_HOME")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_STATE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".local" / "state"
    return base / "incident-workbench"


def bundle_sha256(bundled: Path) -> str:
    """Content hash of the bundled store's data files (incidents and staging excluded)."""
    h = hashlib.sha256()
    for path in sorted(p for p in bundled.rglob("*") if p.is_file()):
        rel = path.relative_to(bundled)
        if rel.parts[0] in (*_KEEP, ".staging"):
            continue
        h.update(str(rel).encode() + b"\0")
        h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


def sample_workspace(bundled: Path, state_dir: Path) -> Path:
    """state_dir/sample: a copy of `bundled`, refreshed when the bundle changes, incidents kept."""
    dest = state_dir / "sample"
    digest = bundle_sha256(bundled)
    marker = dest / MARKER
    if marker.is_file() and marker.read_text(encoding="utf-8") == digest:
        return dest
    tmp = state_dir / f".sample-{uuid.uuid4().hex[:8]}"
    old = state_dir / f".sample-old-{uuid.uuid4().hex[:8]}"
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        shutil.copytree(bundled, tmp, ignore=shutil.ignore_patterns(*_KEEP, ".staging"))
        for name in _KEEP:
            if (dest / name).exists():
                shutil.copytree(dest / name, tmp / name)
        (tmp / MARKER).write_text(digest, encoding="utf-8")
        if dest.exists():
            os.rename(dest, old)
        os.rename(tmp, dest)
    except OSError as exc:
        if old.exists() and not dest.exists():
            os.rename(old, dest)
        raise WorkbenchError(
            str(dest), f"cannot prepare the sample store: {exc.strerror or exc}"
        ) from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)
    return dest
