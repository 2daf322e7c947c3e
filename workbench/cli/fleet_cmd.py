"""`workbench fleet`: where in a fleet of runs the latency tail lives (per host, per rank)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "fleet",
        help="fleet triage: per-host / per-rank tails, outlier hosts and their shared tags",
        description=(
            "Fleet triage of a failing cohort of runs (by id or by tag), optionally against a "
            "comparator cohort: p95/p99 per host and per rank with 95%% intervals, the hosts "
            "whose tail differs from the rest of their cohort (with n), the tags those hosts "
            "share, and a pooled verdict. Runs are loaded on --workers local processes or on a "
            "Dask cluster (--scheduler); the numbers are the same either way."
        ),
    )
    p.add_argument("--store", type=Path, required=True, metavar="DIR|s3://BUCKET/PREFIX")
    p.add_argument("--failing", action="append", default=[], metavar="RUN", help="repeatable")
    p.add_argument(
        "--failing-tag", action="append", default=[], metavar="KEY=VALUE",
        help="every run with these tags (repeatable: all must match)",
    )  # fmt: skip
    p.add_argument("--comparator", action="append", default=[], metavar="RUN")
    p.add_argument("--comparator-tag", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--workers", type=int, default=1, metavar="N", help="local processes")
    p.add_argument("--scheduler", default=None, metavar="tcp://HOST:PORT", help="Dask scheduler")
    p.add_argument("--json", action="store_true", help="print the fleet view as JSON")


def run(args: argparse.Namespace) -> int:
    from workbench.store.fleet.engine import open_engine
    from workbench.store.ingest import parse_tags
    from workbench.triage.fleet import fleet_view, select_runs, text_lines

    failing = select_runs(
        args.store, args.failing, parse_tags(args.failing_tag, "--failing-tag"), "failing"
    )
    comparator = select_runs(
        args.store,
        args.comparator,
        parse_tags(args.comparator_tag, "--comparator-tag"),
        "comparator",
    )
    with open_engine(args.workers, args.scheduler) as engine:
        view = fleet_view(args.store, failing, comparator, engine=engine)
    if args.json:
        print(json.dumps(view.to_json(), indent=1, sort_keys=True))
    else:
        print("\n".join(text_lines(view)))
    return 0
