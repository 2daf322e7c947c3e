"""`workbench triage`: evidence, replay and localization of a failing run in one report."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "triage",
        help="triage a failing run against a comparator (text, or JSON with --json)",
        description="Pair, gather tail-first evidence, replay on the accelerator model and "
        "localize the regression's origin stage and mechanism. Reads the store, writes nothing "
        "(except the incident record with --incident).",
    )
    p.add_argument("--store", type=Path, required=True, help="store directory")
    p.add_argument("--failing", required=True, help="failing run id")
    against = p.add_mutually_exclusive_group()
    against.add_argument("--comparator", help="comparator run id (default: best ranked candidate)")
    against.add_argument(
        "--against", metavar="baseline:NAME", help="compare against a named baseline's run"
    )
    p.add_argument("--hardware", help="hardware profile to replay on (default: from run tags)")
    p.add_argument("--suspect", help="the locked tag under suspicion, allowed to differ")
    p.add_argument("--fixed", help="pinned fixed-metadata run: locked tags checked against it")
    p.add_argument("--incident", help="attach the result to this incident record")
    p.add_argument("--actor", help="who attaches the result (default: login name)")
    p.add_argument(
        "--candidates",
        action="store_true",
        help="only rank the comparator candidates for --failing and say why",
    )
    p.add_argument(
        "--lens",
        metavar="RUN,RUN,...",
        help="bandwidth lens: place these runs (tuning order, --failing first) in zones",
    )
    p.add_argument(
        "--min-gap",
        type=float,
        metavar="SHARE",
        help="practical threshold: a tail gap must exceed this share of the comparator's "
        "quantile to be a regression (default 0.05)",
    )
    p.add_argument(
        "--slo-share",
        type=float,
        metavar="SHARE",
        help="with an SLO (requests' sla_us): the gap must also reach this share of it "
        "(default 0.02)",
    )
    p.add_argument(
        "--slo",
        choices=("ttft", "itl", "tpot", "e2e"),
        default=None,
        help="LLM-serving runs: the SLO that paged (time to first token, inter-token latency, "
        "time per output token, end-to-end); default: the one that regressed most",
    )
    p.add_argument("--json", action="store_true", help="print the JSON document")
    p.set_defaults(command="triage")


def _actor(given: str | None) -> str:
    if given:
        return given
    import getpass

    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "cli"


def _candidates(args: argparse.Namespace) -> int:
    from workbench.store import db
    from workbench.store.layout import check_run_id
    from workbench.terminal_text import for_terminal
    from workbench.triage.pairing import rank_comparators

    con = db.connect(args.store)
    try:
        ranked = rank_comparators(
            con, check_run_id(args.failing), suspect=args.suspect, fixed=args.fixed
        )
    finally:
        con.close()
    if args.json:
        doc = [
            {
                "rank": c.rank,
                "run_id": c.run_id,
                "eligible": c.eligible,
                "n_requests": c.n_requests,
                "seconds_apart": c.seconds_apart,
                "mismatches": [m.__dict__ for m in c.mismatches],
                "reasons": c.reasons,
            }
            for c in ranked
        ]
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        return 0
    for c in ranked:
        mark = " " if c.eligible else "x"
        line = f"{c.rank:>3} {mark} {c.run_id:<24} {'; '.join(c.reasons)}"
        sys.stdout.write(for_terminal(line) + "\n")
    return 0


def _lens(args: argparse.Namespace) -> int:
    from accel.profiles import get_profile
    from workbench.errors import WorkbenchError
    from workbench.store import db
    from workbench.store.layout import check_run_id
    from workbench.triage.evidence import bandwidth_lens

    series = [check_run_id(args.failing)] + [
        check_run_id(r.strip()) for r in args.lens.split(",") if r.strip()
    ]
    try:
        hw = get_profile(args.hardware or "h100")
    except ValueError as exc:
        raise WorkbenchError(repr(args.hardware), str(exc)) from exc
    con = db.connect(args.store)
    try:
        rows = bandwidth_lens(con, series, hw).rows()
    finally:
        con.close()
    if args.json:
        sys.stdout.write(json.dumps(rows, indent=2, default=str) + "\n")
        return 0
    sys.stdout.write(
        f"BANDWIDTH LENS on {hw.name} (on-chip {hw.onchip_bytes / 2**20:.0f} MiB, "
        f"HBM {hw.hbm_bw / 1e12:.2f} TB/s)\n"
        f"  {'run':<24}{'n':>6}{'pressure':>10}{'bw use':>8}{'p50 ms':>9}{'p99 ms':>9}  zone\n"
    )
    for r in rows:
        sys.stdout.write(
            f"  {r['run_id']:<24}{r['n_requests']:>6}{_f(r['pressure'], '.2f'):>10}"
            f"{_f(r['bandwidth_util'], '.0%'):>8}{_f(r['p50_us'], '.2f', 1e3):>9}"
            f"{_f(r['p99_us'], '.2f', 1e3):>9}  {r['zone']}\n"
        )
    return 0


def _f(x: float | None, fmt: str, div: float = 1.0) -> str:
    return "n/a" if x is None else format(x / div, fmt)


def run(args: argparse.Namespace) -> int:
    if args.candidates:
        return _candidates(args)
    if args.lens:
        return _lens(args)
    from workbench.store import heap

    heap.one_arena()  # first: the imports below start threads
    from workbench.api.workspace import Workspace

    cmp = Workspace(args.store).compare(
        args.failing,
        args.comparator,
        against=args.against,
        hardware=args.hardware,
        suspect=args.suspect,
        fixed=args.fixed,
        min_gap=args.min_gap,
        slo_share=args.slo_share,
        slo=args.slo,
        release_heap=False,  # the command exits next: no time spent handing memory back
    )
    if args.incident:
        cmp.attach(args.incident, _actor(args.actor))
    if args.json:
        sys.stdout.write(json.dumps(cmp.to_json(), indent=2, allow_nan=False) + "\n")
    else:
        sys.stdout.write(cmp.text())
    return 0
