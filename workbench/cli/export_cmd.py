"""`workbench export --incident ID [--format md|json] [-o FILE]`: the closure summary."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from workbench.cli.incident_cmd import add_common, store_of


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("export", help="export the closure summary as Markdown or JSON")
    p.add_argument("--incident", required=True, metavar="ID")
    p.add_argument("--format", choices=("md", "json"), default="md")
    p.add_argument(
        "-o",
        "--output",
        type=Path,
        default=None,
        metavar="FILE",
        help="a new regular file outside the store ('-' = stdout); default "
        "$WORKBENCH_HOME/exports/ID.md|json, replaced on re-export; missing folders are made",
    )
    p.add_argument("--force", action="store_true", help="replace FILE if it is a regular file")
    add_common(p)


def run(args: argparse.Namespace) -> int:
    import sys

    from workbench.errors import WorkbenchError
    from workbench.incident.export import (
        default_export_path,
        export_text,
        make_folders,
        remove_folders,
        write_export,
    )
    from workbench.incident.output_file import check_output_path
    from workbench.terminal_text import for_terminal

    store = store_of(args)
    if str(args.output) == "-":
        sys.stdout.write(export_text(store, args.incident, args.format))
        return 0
    # The default file is the workbench's own: a re-export replaces it.
    out = args.output or default_export_path(args.incident, args.format)
    replace = args.force or args.output is None
    made = make_folders(out)
    try:
        check_output_path(out, store, replace)  # refuse a bad target before building the text
        text = export_text(store, args.incident, args.format)
        write_export(out, text, store, replace=replace)
    except WorkbenchError:
        remove_folders(made)  # a refusal leaves no trace, not even an empty folder
        raise
    if made:
        print(f"created folder {for_terminal(made[-1])}")
    print(f"wrote {for_terminal(out)} ({len(text.encode())} bytes)")
    return 0
