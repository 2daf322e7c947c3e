"""`workbench export --incident ID [--format md|json] [-o FILE]`: the closure summary;
`--perfetto FILE` instead: the failing and comparator runs as one trace for Perfetto UI."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from workbench.cli.incident_cmd import add_common, store_of


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "export", help="export the closure summary as Markdown or JSON, or an A/B trace"
    )
    p.add_argument("--incident", required=True, metavar="ID")
    p.add_argument("--format", choices=("md", "json"), default="md")
    out = p.add_mutually_exclusive_group()
    out.add_argument(
        "-o",
        "--output",
        type=Path,
        default=None,
        metavar="FILE",
        help="a new regular file outside the store ('-' = stdout); default "
        "$WORKBENCH_HOME/exports/ID.md|json, replaced on re-export; missing folders are made",
    )
    out.add_argument(
        "--perfetto",
        type=Path,
        default=None,
        metavar="FILE",
        help="write the incident's failing and comparator runs as one Chrome-trace JSON file "
        "for Perfetto UI (the tail request and its twin aligned, the verdict and findings "
        "annotated; the pair is triaged again); a new file outside the store",
    )
    p.add_argument("--force", action="store_true", help="replace FILE if it is a regular file")
    add_common(p)


def run(args: argparse.Namespace) -> int:
    import sys

    from workbench.errors import WorkbenchError
    from workbench.incident.export import (
        default_export_path,
        export_file,
        export_text,
        make_folders,
        remove_folders,
    )
    from workbench.incident.output_file import check_output_path
    from workbench.terminal_text import for_terminal

    store = store_of(args)
    if args.perfetto is not None:
        return _perfetto(store, args)
    if str(args.output) == "-":
        sys.stdout.write(export_text(store, args.incident, args.format))
        return 0
    # The default file is the workbench's own: a re-export replaces it.
    out = args.output or default_export_path(args.incident, args.format)
    replace = args.force or args.output is None
    made = make_folders(out)
    try:
        check_output_path(out, store, replace)  # refuse a bad target before building the text
        text = export_file(out, store, args.incident, args.format, replace)  # + images beside
    except WorkbenchError:
        remove_folders(made)  # a refusal leaves no trace, not even an empty folder
        raise
    if made:
        print(f"created folder {for_terminal(made[-1])}")
    print(f"wrote {for_terminal(out)} ({len(text.encode())} bytes)")
    return 0


def _perfetto(store: Path, args: argparse.Namespace) -> int:
    from workbench.errors import WorkbenchError
    from workbench.incident.export import make_folders, remove_folders
    from workbench.incident.perfetto_export import incident_perfetto
    from workbench.terminal_text import for_terminal

    if str(args.perfetto) == "-":
        raise WorkbenchError("--perfetto -", "the trace goes to a file; name one")
    made = make_folders(args.perfetto)
    try:
        written = incident_perfetto(store, args.incident, args.perfetto, replace=args.force)
    except WorkbenchError:
        remove_folders(made)  # a refusal leaves no trace, not even an empty folder
        raise
    if made:
        print(f"created folder {for_terminal(made[-1])}")
    print(for_terminal(written.line()))
    return 0
