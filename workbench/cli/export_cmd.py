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
        default=None,
        metavar="FILE",
        help="'-' = stdout; default $WORKBENCH_HOME/exports/ID.md|json (missing folders are made)",
    )
    add_common(p)


def run(args: argparse.Namespace) -> int:
    import sys

    from workbench.triage.export import (
        default_export_path,
        export_text,
        missing_parents,
        write_export,
    )

    text = export_text(store_of(args), args.incident, args.format)
    if str(args.output) == "-":
        sys.stdout.write(text)
        return 0
    out = args.output or default_export_path(args.incident, args.format)
    made = missing_parents(out)
    write_export(out, text, create_folders=True)
    if made:
        print(f"created folder {made[-1]}")
    print(f"wrote {out} ({len(text.encode())} bytes)")
    return 0
