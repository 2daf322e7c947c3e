"""`workbench incident new|show|list|pair|classify|action|rollback|close|reopen|repair`."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workbench.incident.incident import Incident


def add_common(p: argparse.ArgumentParser) -> None:
    """--store and --actor, shared by every incident-changing command."""
    p.add_argument("--store", type=Path, default=None, help="store directory (default: sample)")
    p.add_argument("--actor", default=None, help="who makes the change (default: $USER)")


def store_of(args: argparse.Namespace) -> Path:
    from workbench.cli.main import default_store

    return Path(args.store) if args.store else default_store()


def actor_of(args: argparse.Namespace) -> str:
    return str(args.actor or os.environ.get("USER") or "unknown")


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("incident", help="create, inspect and move incident records")
    sub = p.add_subparsers(dest="incident_command", metavar="ACTION", required=True)

    new = sub.add_parser("new", help="declare an incident")
    new.add_argument("--title", required=True)
    new.add_argument("--severity", default="sev2", help="sev1..sev4 (default sev2)")
    new.add_argument("--id", dest="incident_id", default=None, help="default INC-YYYYMMDD-NN")
    new.add_argument("--failing", default=None)
    new.add_argument("--comparator", default=None)
    new.add_argument("--fixed-metadata", default=None)
    new.add_argument("--suspect", default=None, help="the locked tag allowed to differ")
    add_common(new)

    edit = sub.add_parser("edit", help="change the title and / or the severity")
    edit.add_argument("incident_id")
    edit.add_argument("--title", default=None)
    edit.add_argument("--severity", default=None, help="sev1..sev4")
    add_common(edit)

    show = sub.add_parser("show", help="print one incident and what it still lacks")
    show.add_argument("incident_id")
    show.add_argument("--json", action="store_true", help="the raw record")
    add_common(show)

    lst = sub.add_parser("list", help="list incidents, most recently updated first")
    lst.add_argument("--json", action="store_true")
    add_common(lst)

    pair = sub.add_parser("pair", help="set the failing / comparator (/ fixed-metadata) runs")
    pair.add_argument("incident_id")
    pair.add_argument("--failing", required=True)
    pair.add_argument("--comparator", required=True)
    pair.add_argument("--fixed-metadata", default=None)
    pair.add_argument("--suspect", default=None, help="the locked tag allowed to differ")
    add_common(pair)

    cls = sub.add_parser("classify", help="confirm (or override) the mechanism")
    cls.add_argument("incident_id")
    cls.add_argument("--mechanism", default=None)
    cls.add_argument("--secondary", default=None)
    add_common(cls)

    act = sub.add_parser("action", help="add a follow-up action or change its status")
    act.add_argument("incident_id")
    act.add_argument("--add", metavar="TEXT", default=None)
    act.add_argument("--owner", default=None)
    act.add_argument("--due", default=None, help="YYYY-MM-DD")
    act.add_argument("--done", type=int, metavar="N", default=None)
    act.add_argument("--drop", type=int, metavar="N", default=None)
    add_common(act)

    rb = sub.add_parser("rollback", help="add or clear rollback criteria")
    rb.add_argument("incident_id")
    rb.add_argument(
        "--add",
        nargs=4,
        metavar=("METRIC", "OP", "THRESHOLD", "UNIT"),
        default=None,
        help="e.g. e2e_p99 '>' 1200 us",
    )
    rb.add_argument("--window", type=int, default=1000, help="requests per watch window")
    rb.add_argument("--clear", action="store_true")
    add_common(rb)

    close = sub.add_parser("close", help="close; refused naming every missing piece")
    close.add_argument("incident_id")
    close.add_argument("--note", default="")
    add_common(close)

    reopen = sub.add_parser("reopen", help="reopen a closed incident")
    reopen.add_argument("incident_id")
    reopen.add_argument("--reason", required=True)
    add_common(reopen)

    repair = sub.add_parser(
        "repair",
        help="make an unreadable record loadable: bad pieces move to its audit log",
    )
    repair.add_argument("incident_id")
    add_common(repair)
    p.set_defaults(parser=p)


def describe(inc: Incident) -> str:
    """A plain-text view of an incident for the terminal."""
    from datetime import UTC, datetime

    from workbench.incident.lifecycle import missing_for, next_status
    from workbench.incident.owners import overdue_actions
    from workbench.incident.verdict import incident_verdict
    from workbench.terminal_text import for_terminal

    lines = [
        f"{inc.id}  [{inc.severity}]  {inc.title}",
        f"  status {inc.status}  (version {inc.version}, updated {inc.updated_at})",
        f"  failing {inc.failing or '-'}  comparator {inc.comparator or '-'}  "
        f"fixed-metadata {inc.fixed_metadata or '-'}  candidate {inc.candidate or '-'}",
    ]
    lines += [f"  ! {w}" for w in inc.pair_warnings]
    if inc.localization:
        loc = inc.localization
        lines.append(
            f"  origin {loc.origin}  manifest {loc.manifest}  mechanism {loc.mechanism}"
            + (f" + {loc.secondary_mechanism}" if loc.secondary_mechanism else "")
            + (f"  confidence {loc.confidence:.2f}" if loc.confidence is not None else "")
        )
    for c in inc.claims:
        lines.append(f"  claim: {c.text}  [{c.query or 'no artifact'}]")
    for o in inc.owners:
        lines.append(f"  owner {o.role}: {o.person} (since {o.assumed_at}; delivers {o.artifact})")
    late = {a.id for a in overdue_actions(inc, datetime.now(UTC).date())}
    for a in inc.actions:
        flag = "  OVERDUE" if a.id in late else ""
        lines.append(f"  action #{a.id} [{a.status}] {a.owner} due {a.due}: {a.text}{flag}")
    verdict = incident_verdict(inc)
    if inc.validation and verdict:
        v = inc.validation
        lines.append(f"  validation of {v.candidate} vs {v.baseline_role} {v.baseline}:")
        lines.append(f"    verdict {verdict.headline}")
        lines += [f"    - {r}" for r in verdict.reasons[1:]]
        for cell, cv in zip(v.cells, verdict.cells, strict=True):
            lines.append(
                f"    {cv.outcome.upper():<15} {cell.label}: {cv.why} "
                f"(n {cell.n_baseline}/{cell.n_candidate})"
            )
    if inc.replay_check:
        rc = inc.replay_check
        lines.append(
            f"  shapes: {'production-like' if rc.passed else 'NOT production-like'}: {rc.reason}"
        )
    for rc_ in inc.rollback_criteria:
        edge = (
            f"{100 * rc_.threshold:.2f}%"
            if rc_.unit == "share"
            else f"{rc_.threshold:,.4g} {'µs' if rc_.unit == 'us' else rc_.unit}"
        )
        lines.append(
            f"  roll back if {rc_.label} {rc_.op} {edge} over {rc_.window_requests} requests"
        )
    nxt = next_status(inc)
    if nxt:
        missing = missing_for(inc, nxt)
        lines.append(
            f"  next: {nxt}" + (f" — missing {'; '.join(missing)}" if missing else " — ready")
        )
    # Each line holds fields from the record: a title with ESC or a newline stays on its line.
    return "\n".join(for_terminal(line) for line in lines)


def run(args: argparse.Namespace) -> int:
    import msgspec

    from workbench.incident.incident import load_incident, scan_incidents
    from workbench.incident.incident_record import encode_record
    from workbench.terminal_text import for_terminal

    store, actor = store_of(args), actor_of(args)
    cmd = args.incident_command
    if cmd == "list":
        items, unreadable = scan_incidents(store)
        if args.json:
            sys.stdout.write(msgspec.json.encode(items).decode() + "\n")
        else:
            for s in items:
                print(
                    for_terminal(
                        f"{s.id:<20} {s.severity:<5} {s.status:<11} v{s.version:<3} "
                        f"{s.verdict or '-':<8} {s.updated_at}  {s.title}"
                        + (f"  ({s.overdue_actions} overdue)" if s.overdue_actions else "")
                    )
                )
            if not items and not unreadable:
                print(f"no incidents in {for_terminal(store)}")
        # The readable ones are listed; each unreadable one is named, and the exit says so.
        for bad in unreadable:
            print(f"workbench: {bad.problem}", file=sys.stderr)
        return 1 if unreadable else 0
    if cmd == "show":
        inc = load_incident(store, args.incident_id)
        if args.json:
            sys.stdout.write(encode_record(inc).decode() + "\n")
        else:
            print(describe(inc))
        return 0
    if cmd == "repair":
        from workbench.incident.repair import repair_incident

        inc, changes = repair_incident(store, args.incident_id, actor)
        if not changes:
            print(f"{inc.id}: the record loads; nothing to repair")
            return 0
        for change in changes:
            print(for_terminal(f"{inc.id}: {change}"))
        print(describe(inc))
        return 0
    # The commands above only read; the ones below change the record through the workflow,
    # whose imports (duckdb, numpy) cost a second that `show` and `list` need not pay.
    from workbench.errors import WorkbenchError
    from workbench.incident import workflow
    from workbench.incident.guardrails import MAX_WINDOW_REQUESTS, check_criterion
    from workbench.incident.incident import RollbackCriterion
    from workbench.incident.numbers import parse_finite, whole

    if cmd == "new":
        inc = workflow.declare(
            store,
            args.title,
            args.severity,
            actor,
            args.incident_id,
            failing=args.failing or None,
            comparator=args.comparator or None,
            fixed_metadata=args.fixed_metadata,
            suspect=args.suspect,
        )
    elif cmd == "edit":
        inc = workflow.edit_header(store, args.incident_id, actor, args.title, args.severity)
    elif cmd == "pair":
        inc = workflow.pair(
            store,
            args.incident_id,
            args.failing,
            args.comparator,
            actor,
            args.fixed_metadata,
            suspect=args.suspect,
        )
    elif cmd == "classify":
        inc = workflow.classify(store, args.incident_id, actor, args.mechanism, args.secondary)
    elif cmd == "action":
        chosen = [x is not None for x in (args.add, args.done, args.drop)]
        if sum(chosen) != 1:
            raise WorkbenchError("incident action", "give exactly one of --add, --done, --drop")
        if args.add is not None:
            if not args.owner or not args.due:
                raise WorkbenchError("incident action", "--add needs --owner and --due")
            inc = workflow.add_action(
                store, args.incident_id, args.add, args.owner, args.due, actor
            )
        else:
            num, status = (args.done, "done") if args.done is not None else (args.drop, "dropped")
            inc = workflow.set_action_status(store, args.incident_id, num, status, actor)
    elif cmd == "rollback":
        current = load_incident(store, args.incident_id)
        criteria = [] if args.clear else list(current.rollback_criteria)
        if args.add:
            metric, op, threshold, unit = args.add
            whole(args.window, "--window", 1, MAX_WINDOW_REQUESTS)
            criteria.append(
                check_criterion(
                    RollbackCriterion(
                        metric=metric,
                        label=metric,
                        op=op,
                        threshold=parse_finite(threshold, "--add threshold"),
                        unit=unit,
                        window_requests=args.window,
                        source="manual",
                    ),
                    "--add",
                )
            )
        if not args.add and not args.clear:
            raise WorkbenchError("incident rollback", "give --add or --clear")
        inc = workflow.set_rollback_criteria(
            store, args.incident_id, criteria, actor, expected_version=current.version
        )
    elif cmd == "close":
        inc = workflow.close(store, args.incident_id, actor, args.note)
    elif cmd == "reopen":
        inc = workflow.reopen(store, args.incident_id, actor, args.reason)
    else:  # argparse restricts the choices; kept for the type checker
        raise WorkbenchError("incident", f"unknown action {cmd!r}")
    print(describe(inc))
    return 0
