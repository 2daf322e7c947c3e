"""`workbench export --incident ID --format md|json -o FILE`: the closure summary."""

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
        required=True,
        metavar="FILE",
        help="a new regular file outside the store; '-' = stdout",
    )
    p.add_argument("--force", action="store_true", help="replace FILE if it is a regular file")
    add_common(p)


def run(args: argparse.Namespace) -> int:
    import sys

    from workbench.terminal_text import for_terminal
    from workbench.triage.export import export_text, write_export
    from workbench.triage.output_file import check_output_path

    store = store_of(args)
    if str(args.output) != "-":  # refuse a bad target before the work of building the text
        check_output_path(args.output, store, args.force)
    text = export_text(store, args.incident, args.format)
    if str(args.output) == "-":
        sys.stdout.write(text)
    else:
        write_export(args.output, text, store, replace=args.force)
        print(f"wrote {for_terminal(args.output)} ({len(text.encode())} bytes)")
    return 0
