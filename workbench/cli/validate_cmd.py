"""`workbench validate --incident ID --candidate RUN`: judge a candidate against the guardrails."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from workbench.cli.incident_cmd import actor_of, add_common, store_of


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "validate",
        help="judge a rollback / fix candidate on guardrails and production-like shapes "
        "(exit 0: PASS, 1: FAIL, REFUSED or INCONCLUSIVE, 2: error)",
    )
    p.add_argument("--incident", required=True, metavar="ID")
    p.add_argument("--candidate", required=True, metavar="RUN")
    p.add_argument(
        "--guardrails",
        type=Path,
        default=None,
        metavar="FILE",
        help="TOML guardrail set ([[guardrail]] tables); default: the built-in set",
    )
    add_common(p)


def run(args: argparse.Namespace) -> int:
    from workbench.cli.incident_cmd import describe
    from workbench.incident.guardrails import load_guardrails
    from workbench.incident.validation import validate_incident

    rails = load_guardrails(args.guardrails) if args.guardrails else None
    inc = validate_incident(store_of(args), args.incident, args.candidate, actor_of(args), rails)
    from workbench.incident.verdict import PASS, incident_verdict

    print(describe(inc))
    verdict = incident_verdict(inc)
    ok = verdict is not None and verdict.verdict == PASS
    # Exit 1 (not 2: nothing went wrong) lets a CI job gate on the verdict.
    return 0 if ok else 1
