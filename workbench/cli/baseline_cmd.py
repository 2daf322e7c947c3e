"""`workbench baseline tag|list|show|rm`: named baselines (NAME -> run) kept in the store,
for `--against baseline:NAME` on `workbench gate` and `workbench triage`."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "baseline",
        help="name a run as a baseline (tag), list, show or remove baselines",
        description="Named baselines live in the store (STORE/baselines.json, or the bucket's "
        "object for s3://): two people tagging at once both land. Re-pointing a name needs "
        "--force and keeps the run it pointed to, who tagged it and when.",
    )
    sub = p.add_subparsers(dest="baseline_command", metavar="ACTION", required=True)
    store = {"type": Path, "required": True, "metavar": "DIR|s3://BUCKET/PREFIX"}

    tag = sub.add_parser("tag", help="point NAME at RUN (an existing name moves with --force)")
    tag.add_argument("name", metavar="NAME")
    tag.add_argument("run_id", metavar="RUN")
    tag.add_argument("--store", **store)
    tag.add_argument("--force", action="store_true", help="move NAME if it points elsewhere")
    tag.add_argument("--actor", default=None, help="who tags (default: $USER)")

    lst = sub.add_parser("list", help="every baseline: name, run, who tagged it and when")
    lst.add_argument("--store", **store)
    lst.add_argument("--json", action="store_true")

    show = sub.add_parser("show", help="one baseline and the runs it pointed to before")
    show.add_argument("name", metavar="NAME")
    show.add_argument("--store", **store)
    show.add_argument("--json", action="store_true")

    rm = sub.add_parser("rm", help="remove a baseline (the log keeps what it pointed to)")
    rm.add_argument("name", metavar="NAME")
    rm.add_argument("--store", **store)
    rm.add_argument("--actor", default=None, help="who removes it (default: $USER)")
    p.set_defaults(command="baseline")


def _dump(doc: object) -> None:
    sys.stdout.write(json.dumps(doc, indent=2) + "\n")


def run(args: argparse.Namespace) -> int:
    import msgspec

    from workbench.cli.incident_cmd import actor_of
    from workbench.store import baselines
    from workbench.terminal_text import for_terminal

    action = args.baseline_command
    if action == "tag":
        change = baselines.tag(args.store, args.name, args.run_id, actor_of(args), force=args.force)
        after, before = change.after, change.before
        assert after is not None
        if not change.written:
            line = f"baseline {after.name} already points to run {after.run_id}: nothing written"
        elif before is None:
            line = f"tagged baseline {after.name} -> run {after.run_id} (by {after.tagged_by})"
        else:
            line = (
                f"moved baseline {after.name}: run {before.run_id} -> {after.run_id} (by "
                f"{after.tagged_by}; it pointed to {before.run_id} since {before.tagged_at}, "
                f"tagged by {before.tagged_by})"
            )
        print(for_terminal(line))
        return 0
    if action == "rm":
        change = baselines.remove(args.store, args.name, actor_of(args))
        assert change.before is not None
        print(
            for_terminal(f"removed baseline {args.name} (it pointed to run {change.before.run_id})")
        )
        return 0
    if action == "show":
        found = baselines.get(args.store, args.name)
        if args.json:
            _dump(msgspec.to_builtins(found))
            return 0
        print(for_terminal(found.describe()))
        for p in found.previous:
            print(
                for_terminal(f"  before: run {p.run_id}, tagged by {p.tagged_by} at {p.tagged_at}")
            )
        return 0
    doc = baselines.load(args.store)
    if args.json:
        _dump([msgspec.to_builtins(b) for b in doc.baselines.values()])
        return 0
    if not doc.baselines:
        print("no baselines yet (workbench baseline tag NAME RUN --store ...)")
        return 0
    print(f"{'name':<24} {'run':<24} {'tagged at':<26} tagged by")
    for b in doc.baselines.values():
        line = f"{b.name:<24} {b.run_id:<24} {b.tagged_at:<26} {b.tagged_by}"
        if b.previous:
            line += f"  (moved {len(b.previous)}x)"
        print(for_terminal(line))
    return 0
