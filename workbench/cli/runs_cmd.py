"""`workbench runs`: the runs of a store with request counts and latency tails."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "runs", help="list the runs of a store (n, p99/p95/p50 latency, TTFT/ITL p99, tags)"
    )
    p.add_argument("--store", type=Path, required=True, metavar="DIR")
    p.add_argument("--json", action="store_true", help="one JSON array instead of a table")


def _ms(us: float | None) -> str:
    return "-" if us is None else f"{us / 1000:.3f}"


def run(args: argparse.Namespace) -> int:
    from workbench.store.runs import list_runs
    from workbench.terminal_text import for_terminal

    runs = list_runs(args.store)
    if args.json:
        print(json.dumps([r.to_json() for r in runs], indent=1))
        return 0
    header = (
        "run_id",
        "label",
        "hardware",
        "workload",
        "compiler",
        "runtime",
        "n",
        "p99 ms",
        "p95 ms",
        "p50 ms",
        "ttft p99",
        "itl p99",
        "tags",
    )
    rows = [
        (
            r.run_id,
            r.label or "-",
            r.hardware or "-",
            r.workload or "-",
            " ".join(x for x in (r.compiler, r.compiler_version) if x) or "-",
            " ".join(x for x in (r.runtime, r.runtime_version) if x) or "-",
            str(r.n_requests),
            _ms(r.p99_us),
            _ms(r.p95_us),
            _ms(r.p50_us),
            _ms(r.ttft_p99_us),
            _ms(r.itl_p99_us),
            ",".join(f"{k}={v}" for k, v in sorted(r.tags.items())) or "-",
        )
        for r in runs
    ]
    # Labels, tags and names come from traces and users: escaped before they are measured.
    rows = [tuple(for_terminal(x) for x in row) for row in rows]
    widths = [max(len(x) for x in col) for col in zip(header, *rows, strict=True)]
    for line in (header, *rows):
        print("  ".join(x.ljust(w) for x, w in zip(line, widths, strict=True)).rstrip())
    if not runs:
        print(f"(no runs in {for_terminal(args.store)})")
    return 0
