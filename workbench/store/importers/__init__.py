"""The importer protocol: one small contract per trace format, and the table that holds them.

A format recognises a file by its first bytes, and reads it into the columns the attribution
rules take (TraceColumns + ArgColumns) plus the runs-row fields the file states. `ingest` does
the rest (requests, stages, commit) the same way for every format. Outside packages add
formats through the `workbench.importers` entry-point group; the entry point names an Importer
instance or a zero-argument callable returning one.
"""

from __future__ import annotations

from importlib.metadata import entry_points
from pathlib import Path

from workbench.errors import WorkbenchError
from workbench.store.importers.protocol import HEAD_BYTES, Decoded, Importer, Opened

# The protocol's names are re-exported: outside formats import them from here.
__all__ = [
    "GROUP",
    "HEAD_BYTES",
    "Decoded",
    "Importer",
    "Opened",
    "builtin",
    "describe_formats",
    "importer_for",
    "plugins",
    "read_head",
    "registry",
]

GROUP = "workbench.importers"


def builtin() -> list[Importer]:
    """The formats this package ships, in the order they are asked."""
    from workbench.store.importers.kineto.kineto_json import KINETO_JSON
    from workbench.store.importers.nsys.nsys_sqlite import NSYS_SQLITE

    return [NSYS_SQLITE, KINETO_JSON]


def plugins() -> tuple[list[Importer], list[str]]:
    """Importers from installed distributions (entry-point group GROUP), and load problems."""
    found: list[Importer] = []
    problems: list[str] = []
    for ep in sorted(entry_points(group=GROUP), key=lambda e: e.name):
        try:
            obj = ep.load()
            make = isinstance(obj, type) or (callable(obj) and not isinstance(obj, Importer))
            imp = obj() if make else obj
        except Exception as exc:  # a broken plugin must not break ingest of other formats
            problems.append(f"importer {ep.name!r} ({ep.value}) failed to load: {exc}")
            continue
        if not isinstance(imp, Importer):
            problems.append(f"importer {ep.name!r} ({ep.value}) is not an Importer")
            continue
        found.append(imp)
    return found, problems


def registry() -> list[Importer]:
    """Every format, outside ones first: a team's format may claim files a built-in also takes."""
    found, _ = plugins()
    return found + builtin()


def read_head(path: Path) -> bytes:
    """The first HEAD_BYTES bytes of a file; a one-line error when it cannot be read."""
    try:
        with open(path, "rb") as fh:
            return fh.read(HEAD_BYTES)
    except OSError as exc:
        raise WorkbenchError(str(path), f"cannot read file: {exc.strerror or exc}") from exc


def importer_for(path: Path, formats: list[Importer] | None = None) -> Importer:
    """The first registered format (of `formats`, if given: a registry() read once) that
    recognises the file, else a one-line error."""
    head = read_head(path)
    if formats is None:
        formats = registry()
    for imp in formats:
        if imp.recognise(path, head):
            return imp
    names = ", ".join(imp.name for imp in formats)
    raise WorkbenchError(str(path), f"no importer recognises this file (formats: {names})")


def describe_formats() -> str:
    """The formats found, one per line, for `workbench ingest --help`."""
    found, problems = plugins()
    lines = [f"  {imp.name:<14} {imp.summary}" for imp in builtin()]
    lines += [f"  {imp.name:<14} {imp.summary} (plugin)" for imp in found]
    lines += [f"  ! {p}" for p in problems]
    return "\n".join(lines)
