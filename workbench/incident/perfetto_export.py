"""The Perfetto A/B trace of an incident written to a file the user named: refused like every
export (output_file.py: never into the store, through a symlink or into a FIFO; an existing file
only with replace) before the triage runs, written all or nothing."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accel.profiles import get_profile
from workbench.errors import WorkbenchError
from workbench.incident.incident import load_incident
from workbench.incident.output_file import check_output_path, write_output
from workbench.triage.perfetto import comparison_trace, trace_text
from workbench.triage.triage import TriageResult, triage

Progress = Callable[[str, float], None]


@dataclass(frozen=True)
class Written:
    """What an incident's trace export wrote: the file, its size and the trace's summary."""

    path: Path
    size: int
    summary: dict[str, Any]  # the trace's otherData: the runs, tail, twin, requests shown

    def line(self) -> str:
        """One line for the CLI and the app: where, how big, what is aligned on what."""
        s = self.summary
        counts = ", ".join(f"{role} {r['shown']}" for role, r in s["requests"].items())
        return (
            f"wrote {self.path} ({self.size} bytes): requests {counts}; "
            f"{s['tail']['request_id']!r} of {s['failing']} aligned with "
            f"{s['twin']['request_id']!r} of {s['comparator']}"
        )


def _write(store: Path, result: TriageResult, path: Path, replace: bool) -> Written:
    check_output_path(path, store, replace)
    doc = comparison_trace(store, result)
    text = trace_text(doc)
    write_output(path, text, store, replace)
    return Written(path, len(text.encode()), doc["otherData"])


def write_perfetto(store: Path, result: TriageResult, path: Path, *, replace: bool = False) -> Path:
    """Write the triage's A/B trace (triage/perfetto.py) to `path`; returns it."""
    return _write(store, result, path, replace).path


def incident_perfetto(
    store: Path,
    incident_id: str,
    path: Path,
    *,
    replace: bool = False,
    progress: Progress | None = None,
) -> Written:
    """Triage the incident's pair again (the trace needs its requests) with the record's
    fixed-metadata run, suspect tag and hardware profile, and write its A/B trace. Reads the
    store and the record; writes only `path`."""
    inc = load_incident(store, incident_id)
    if not inc.failing or not inc.comparator:
        raise WorkbenchError(
            incident_id, "pairs no failing and comparator run yet: nothing to export as a trace"
        )
    check_output_path(path, store, replace)  # before the triage's seconds, not after
    hardware = inc.triage.get("hardware")
    result = triage(
        store,
        inc.failing,
        inc.comparator,
        hardware=_known_profile(hardware),
        suspect=inc.suspect,
        fixed=inc.fixed_metadata,
        progress=progress,
    )
    return _write(store, result, path, replace)


def _known_profile(name: Any) -> str | None:
    """The profile the attached triage replayed on, when it names one we have (else the runs'
    hardware tags choose, as the triage does)."""
    if not isinstance(name, str):
        return None
    try:
        get_profile(name)
    except ValueError:
        return None
    return name
