"""`workbench assign --incident ID [--role R --person P]`: give the involved roles their owners."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from workbench.cli.incident_cmd import actor_of, add_common, store_of


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "assign",
        help="assign owners; without --role, every involved role gets its roster's first person",
    )
    p.add_argument("--incident", required=True, metavar="ID")
    p.add_argument("--role", default=None, help='e.g. "compiler lead"')
    p.add_argument("--person", default=None)
    p.add_argument("--roster", type=Path, default=None, help="default: STORE/roster.toml")
    p.add_argument("--due-days", type=int, default=7, help="closure artifact due in N days")
    p.add_argument("--propose", action="store_true", help="only print the proposals")
    add_common(p)


def run(args: argparse.Namespace) -> int:
    from workbench.cli.incident_cmd import describe
    from workbench.errors import WorkbenchError
    from workbench.incident.incident import load_incident
    from workbench.incident.numbers import whole
    from workbench.incident.owners import load_roster, propose_owners
    from workbench.incident.workflow import MAX_DUE_DAYS, assign
    from workbench.terminal_text import for_terminal

    store, actor = store_of(args), actor_of(args)
    whole(args.due_days, "--due-days", 0, MAX_DUE_DAYS)  # before anything is read or written
    roster = load_roster(store, args.roster)
    inc = load_incident(store, args.incident)
    proposals = propose_owners(inc, roster)
    if args.propose:
        for p in proposals:
            print(
                for_terminal(
                    f"{p.role}: {p.person or '(nobody in roster)'} — {p.reason}; "
                    f"delivers {p.artifact}"
                )
            )
        if not proposals:
            print(f"{inc.id}: no roles involved yet (needs a localization)")
        return 0
    if bool(args.role) != bool(args.person):
        raise WorkbenchError("assign", "give both --role and --person, or neither")
    if args.role:
        pairs = [(args.role, args.person)]
    else:
        if not proposals:
            raise WorkbenchError(inc.id, "no roles involved yet: attach a triage result first")
        empty = [p.role for p in proposals if p.person is None]
        if empty:
            raise WorkbenchError(
                roster.source,
                f"nobody listed for {', '.join(empty)}; add people or use --role/--person",
            )
        pairs = [(p.role, str(p.person)) for p in proposals]
    for role, person in pairs:
        inc = assign(store, inc.id, role, person, actor, roster, args.due_days)
    print(describe(inc))
    return 0
