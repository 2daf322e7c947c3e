"""`workbench sample --out DIR`: write the bundled sample incident store (deterministic)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "sample",
        help="write the sample store (two incidents with known causes: a fusion memory burst, and a recorded LLM KV-cache cut)",
    )
    p.add_argument("--out", type=Path, required=True, metavar="DIR", help="new or empty directory")


def run(args: argparse.Namespace) -> int:
    from workbench.sample.synthetic import write_sample_store

    ids = write_sample_store(args.out)
    print(f"wrote {len(ids)} runs to {args.out}: {', '.join(ids)}")
    return 0
