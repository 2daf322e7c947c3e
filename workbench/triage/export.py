"""Closure summary export: the same dict rendered as JSON or Markdown, written atomically."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import msgspec

from workbench.errors import WorkbenchError
from workbench.triage.export_md import render_markdown
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


def write_export(path: Path, text: str) -> None:
    """Write text to path via a temporary file and a rename: never a half-written export."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise WorkbenchError(str(path), f"cannot write export: {exc.strerror or exc}") from exc
