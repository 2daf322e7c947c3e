"""Which incident and screen the app showed last, per store: a reconnect resumes exactly there."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from workbench.incident.incident import Incident

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


def resume_choice(state_dir: Path, store: Path) -> tuple[Incident | None, str | None]:
    """The incident and screen a start resumes at: where this store was left last; else the open
    incident updated last, else the last closed one (to export it again), at its status's step."""
    from workbench.incident.incident import list_incidents, load_incident
    from workbench.tui.steps import SCREENS, resume_step

    found = list_incidents(store)
    place = last_place(state_dir, store)
    if place is not None and place[0] in {s.id for s in found} and place[1] in SCREENS:
        return load_incident(store, place[0]), place[1]
    open_ones = [s for s in found if s.status != "closed"] or found
    inc = load_incident(store, open_ones[0].id) if open_ones else None
    return inc, resume_step(inc)
