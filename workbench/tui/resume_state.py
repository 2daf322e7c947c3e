"""Which incident and screen the app showed last, per store: a reconnect resumes exactly there."""

from __future__ import annotations

import json
import os
from pathlib import Path

FILE = "tui-resume.json"


def _read(state_dir: Path) -> dict[str, dict[str, str]]:
    try:
        data = json.loads((state_dir / FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}  # never written, or damaged: resume falls back to the incident's status
    return data if isinstance(data, dict) else {}


def last_place(state_dir: Path, store: Path) -> tuple[str, str] | None:
    """(incident id, screen) left last on `store`, or None."""
    entry = _read(state_dir).get(str(store.resolve()))
    if not isinstance(entry, dict):
        return None
    iid, screen = entry.get("incident"), entry.get("screen")
    return (iid, screen) if isinstance(iid, str) and isinstance(screen, str) else None


def remember(state_dir: Path, store: Path, incident_id: str, screen: str) -> None:
    """Record the place atomically (a crash mid-write leaves the previous place)."""
    data = _read(state_dir)
    data[str(store.resolve())] = {"incident": incident_id, "screen": screen}
    state_dir.mkdir(parents=True, exist_ok=True)
    tmp = state_dir / f".{FILE}.{os.getpid()}"
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True), encoding="utf-8")
    os.replace(tmp, state_dir / FILE)
