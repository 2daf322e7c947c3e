"""Closure summary export: the same dict rendered as JSON or Markdown, written atomically."""

from __future__ import annotations

from pathlib import Path

import msgspec

from workbench.errors import WorkbenchError
from workbench.triage.export_md import render_markdown
from workbench.triage.output_file import write_output
from workbench.triage.summary import build_summary

FORMATS = ("md", "json")


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
