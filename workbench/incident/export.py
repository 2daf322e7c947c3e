"""Closure summary export: the same dict rendered as JSON or Markdown, written atomically; the
Markdown written to a file gets its images in a folder beside it (plots.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from workbench.errors import WorkbenchError
from workbench.incident.export_md import render_markdown
from workbench.incident.output_file import write_output
from workbench.incident.output_folder import check_folder, write_with_folder
from workbench.incident.plot_render import render_png  # imports matplotlib when it draws
from workbench.incident.plots import IMAGE_NAMES, collect_plots, image_folder, plot_entries
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


def _check_format(fmt: str) -> None:
    if fmt not in FORMATS:
        raise WorkbenchError(repr(fmt), f"unknown export format (one of {', '.join(FORMATS)})")


def _render(doc: dict[str, Any], fmt: str) -> str:
    if fmt == "json":
        return msgspec.json.format(msgspec.json.encode(doc), indent=2).decode() + "\n"
    return render_markdown(doc)


def export_text(store: Path, incident_id: str, fmt: str) -> str:
    """The closure summary of incident_id in `fmt` (md or json), without images: text with no
    file of its own (stdout, the app's preview) has no folder beside it."""
    _check_format(fmt)
    return _render(build_summary(store, incident_id), fmt)


def export_file(path: Path, store: Path, incident_id: str, fmt: str, replace: bool) -> str:
    """Write the closure summary to `path` and return its text. The JSON names the images and
    the Markdown links them, in <stem>.files/ beside `path` (paths relative to it); the Markdown
    export writes them there too, all or nothing with the file (output_folder.py)."""
    _check_format(fmt)
    folder = image_folder(path)
    if fmt == "md":  # the folder is the Markdown's too: refuse it before building anything
        check_folder(folder, store, replace, IMAGE_NAMES)
    doc = build_summary(store, incident_id)
    plots = collect_plots(store, incident_id, version=doc["header"]["version"])
    doc["plots"] = plot_entries(plots, folder.name)
    text = _render(doc, fmt)
    if fmt != "md":
        write_export(path, text, store, replace)
        return text
    images = {f"{p.kind}.png": render_png(p) for p in plots}
    write_with_folder(
        folder,
        images,
        store,
        replace,
        lambda: write_export(path, text, store, replace),
        IMAGE_NAMES,
    )
    return text


def write_export(path: Path, text: str, store: Path | None = None, replace: bool = True) -> None:
    """Write the export to a regular file, all or nothing (output_file.write_output): never
    through a symlink, into a FIFO or device, or into the store; `replace` an existing file."""
    write_output(path, text, store, replace)
