"""Closure summary export: the same dict rendered as JSON or Markdown, written atomically."""

from __future__ import annotations

from pathlib import Path

import msgspec

from workbench.errors import WorkbenchError
from workbench.incident.export_md import render_markdown
from workbench.incident.output_file import write_output
from workbench.incident.summary import build_summary
from workbench.store.workspace import state_home

FORMATS = ("md", "json")


def export_dir() -> Path:
    """Where exports go by default: $WORKBENCH_HOME/exports (else the state directory's)."""
    return state_home() / "exports"


def default_export_path(incident_id: str, fmt: str) -> Path:
    """export_dir()/<incident id>.<fmt>: one file per incident and format, replaced on re-export."""
    return export_dir() / f"{incident_id}.{fmt}"


def make_folders(path: Path) -> list[Path]:
    """Make the missing folders above path; returns them, outermost first (to undo on failure)."""
    missing = [p for p in reversed(path.parents) if not p.exists()]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        remove_folders(missing)
        raise WorkbenchError(str(path), f"cannot write export: {exc.strerror or exc}") from exc
    return missing


def remove_folders(made: list[Path]) -> None:
    """Undo make_folders: remove the folders it made, innermost first, if still empty."""
    for folder in reversed(made):
        try:
            folder.rmdir()
        except OSError:
            return


def export_text(store: Path, incident_id: str, fmt: str) -> str:
    """The closure summary of incident_id in `fmt` (md or json)."""
    if fmt not in FORMATS:
        raise WorkbenchError(repr(fmt), f"unknown export format (one of {', '.join(FORMATS)})")
    doc = build_summary(store, incident_id)
    if fmt == "json":
        return msgspec.json.format(msgspec.json.encode(doc), indent=2).decode() + "\n"
    return render_markdown(doc)


def write_export(path: Path, text: str, store: Path | None = None, replace: bool = True) -> None:
    """Write the export to a regular file, all or nothing (output_file.write_output): never
    through a symlink, into a FIFO or device, or into the store; `replace` an existing file."""
    write_output(path, text, store, replace)
