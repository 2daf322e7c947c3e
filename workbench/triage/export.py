"""Closure summary export: the same dict rendered as JSON or Markdown, written atomically."""

from __future__ import annotations

import contextlib
import os
import uuid
from pathlib import Path

import msgspec

from workbench.errors import WorkbenchError
from workbench.store.workspace import state_home
from workbench.triage.export_md import render_markdown
from workbench.triage.summary import build_summary

FORMATS = ("md", "json")


def export_dir() -> Path:
    """Where exports go by default: $WORKBENCH_HOME/exports (else the state directory's)."""
    return state_home() / "exports"


def default_export_path(incident_id: str, fmt: str) -> Path:
    """export_dir()/<incident id>.<fmt>: one file per incident and format, replaced on re-export."""
    return export_dir() / f"{incident_id}.{fmt}"


def export_text(store: Path, incident_id: str, fmt: str) -> str:
    """The closure summary of incident_id in `fmt` (md or json)."""
    if fmt not in FORMATS:
        raise WorkbenchError(repr(fmt), f"unknown export format (one of {', '.join(FORMATS)})")
    doc = build_summary(store, incident_id)
    if fmt == "json":
        return msgspec.json.format(msgspec.json.encode(doc), indent=2).decode() + "\n"
    return render_markdown(doc)


def missing_parents(path: Path) -> list[Path]:
    """The folders above path that do not exist yet, outermost first."""
    return [p for p in reversed(path.parents) if not p.exists()]


def write_export(path: Path, text: str, create_folders: bool = False) -> None:
    """Write text to path via a temporary file and a rename: never a half-written export.
    With create_folders, missing folders above it are made first; else they are an error."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        if create_folders:
            path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):  # e.g. the "folder" is a file: no temporary either
            tmp.unlink(missing_ok=True)
        raise WorkbenchError(str(path), f"cannot write export: {exc.strerror or exc}") from exc
