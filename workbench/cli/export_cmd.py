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
    p.add_argument("-o", "--output", type=Path, required=True, metavar="FILE", help="'-' = stdout")
    add_common(p)


def run(args: argparse.Namespace) -> int:
    import sys

    from workbench.triage.export import export_text, write_export

    text = export_text(store_of(args), args.incident, args.format)
    if str(args.output) == "-":
        sys.stdout.write(text)
    else:
        write_export(args.output, text)
        print(f"wrote {args.output} ({len(text.encode())} bytes)")
    return 0
