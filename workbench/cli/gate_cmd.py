"""`workbench gate`: a candidate run against a named baseline (or a run), as a CI step.

Exit 0 pass, 1 regression, 3 inconclusive (a comparability row failed, or the data did not
decide), 2 error (unknown run or baseline, bad store, bad option): every error, foreseen or
not, exits 2 here with its one line, so that a CI script can tell "the gate could not run"
from a verdict. A signal or a closed stdout still ends the command as everywhere (130, 141).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import re
import sys
import time
from pathlib import Path
from typing import Any

_SLO = re.compile(r"^(?P<metric>[a-z0-9_]+)(?:=(?P<value>[0-9.eE+-]+)\s*(?P<unit>us|ms|s))?$")
_UNIT_US = {"us": 1.0, "ms": 1e3, "s": 1e6}
MAX_TOLERANCE = 10.0  # a gap ten times the baseline's quantile: anything larger is a typo


def _tolerance(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--tolerance {text!r} is not a number") from None
    if not math.isfinite(value) or not 0.0 <= value <= MAX_TOLERANCE:
        raise argparse.ArgumentTypeError(
            f"--tolerance {text!r}: a share of the baseline's quantile, from 0 to {MAX_TOLERANCE:g}"
        )
    return value


def parse_slo(text: str) -> tuple[str, float | None]:
    """`e2e` or `e2e=50ms` -> (metric, SLO in us or None); a one-line error for the rest."""
    from workbench.errors import WorkbenchError
    from workbench.triage.gate import SLO_METRICS

    m = _SLO.fullmatch(text.strip())
    metric = m.group("metric") if m else ""
    if m is None or metric not in SLO_METRICS:
        raise WorkbenchError(
            f"--slo {text!r}",
            f"expected {' or '.join(SLO_METRICS)}, or e2e=LATENCY(us|ms|s), e.g. e2e=50ms",
        )
    if m.group("value") is None:
        return metric, None
    if metric != "e2e":
        # The latency SLO sets the practical threshold of the e2e trigger only.
        raise WorkbenchError(f"--slo {text!r}", "a latency value applies to e2e only")
    try:
        value = float(m.group("value")) * _UNIT_US[m.group("unit")]
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise WorkbenchError(f"--slo {text!r}", "the SLO must be a positive, finite latency")
    return metric, value


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "gate",
        help="CI gate: a candidate run against a named baseline; exit 0 pass, 1 regression, "
        "3 inconclusive, 2 error",
        description="Triage the candidate against the baseline's run (the same verdict, numbers "
        "and proof as `workbench triage`) and check that the two may be compared at all: "
        "hardware, driver, compiler/runtime versions, workload shape and steady state. A failed "
        "comparability row makes the outcome inconclusive, never a pass. Exit 0 pass, "
        "1 regression, 3 inconclusive, 2 error. Reads the store, writes nothing.",
    )
    p.add_argument("--store", type=Path, required=True, metavar="DIR|s3://BUCKET/PREFIX")
    p.add_argument("--candidate", required=True, metavar="RUN", help="the run under test")
    against = p.add_mutually_exclusive_group(required=True)
    against.add_argument(
        "--against", metavar="baseline:NAME", help="a named baseline (workbench baseline tag)"
    )
    against.add_argument("--comparator", metavar="RUN", help="a run id instead of a baseline")
    p.add_argument(
        "--suspect",
        metavar="TAG",
        help="the locked tag the candidate changes on purpose (e.g. compiler_version): allowed "
        "to differ; the others must be equal",
    )
    p.add_argument(
        "--slo",
        default="e2e",
        metavar="METRIC[=LATENCY]",
        help="the metric gated on: e2e (end-to-end request latency, p95/p99); e2e=50ms also "
        "sets the SLO a gap must reach a share of (default: the runs' own SLO, if any)",
    )
    p.add_argument(
        "--tolerance",
        type=_tolerance,
        default=None,
        metavar="SHARE",
        help="practical threshold: a tail gap must exceed this share of the baseline's "
        "quantile to be a regression (triage's --min-gap; default 0.05)",
    )
    p.add_argument("--hardware", help="hardware profile to replay on (default: from run tags)")
    p.add_argument(
        "--format",
        choices=("text", "json", "junit"),
        default="text",
        help="what goes to stdout: the text report, the JSON document ({gate, triage}) or "
        "JUnit XML",
    )
    p.add_argument(
        "--junit",
        type=Path,
        metavar="FILE",
        help="also write the JUnit XML to FILE (a new regular file outside the store; also "
        "on an error, holding it)",
    )
    p.add_argument("--force", action="store_true", help="replace --junit FILE if it exists")
    p.set_defaults(command="gate")


def run(args: argparse.Namespace) -> int:
    from workbench.store import heap

    heap.one_arena()  # first: the imports below start threads
    from workbench.cli import interrupts
    from workbench.errors import WorkbenchError
    from workbench.triage.gate import EXIT_ERROR

    started = time.monotonic()
    junit = [args.junit]  # the file an error is written to: none once writing it failed
    try:
        if args.junit is not None:
            from workbench.incident.output_file import check_output_path

            junit[0] = None
            check_output_path(args.junit, args.store, args.force)
            junit[0] = args.junit
        return _gate(args, started, junit)
    except Exception as exc:
        if isinstance(exc, BrokenPipeError) or interrupts.exit_code(exc) is not None:
            raise  # a closed stdout or a signal's exit: main reports it as for every command
        if isinstance(exc, WorkbenchError):
            line = exc.one_line()
        else:
            import os

            if os.environ.get("WORKBENCH_DEBUG"):
                raise
            from workbench.cli.main import unforeseen

            line = f"gate: {unforeseen(exc)}"
        print(f"workbench: {line}", file=sys.stderr)
        _error_outputs(args, line, time.monotonic() - started, junit[0])
        return EXIT_ERROR


def _error_outputs(args: argparse.Namespace, line: str, seconds: float, junit: Path | None) -> None:
    """An error's JSON / JUnit on stdout when asked, and in the --junit file, so that a CI
    system shows the error where it shows the verdict."""
    import json

    from workbench.errors import WorkbenchError
    from workbench.triage.junit import error_report

    xml = error_report(line, seconds, {"candidate": str(args.candidate)})
    if args.format == "json":
        doc = {"gate": {"outcome": "error", "exit_code": 2, "message": line}, "triage": None}
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    elif args.format == "junit":
        sys.stdout.write(xml)
    if junit is not None:
        from workbench.incident.output_file import write_output

        # The one line already printed says what went wrong: no second error line.
        with contextlib.suppress(WorkbenchError):
            write_output(junit, xml, args.store, args.force)


def _shapes(con: Any, baseline: str, candidate: str) -> Any:
    """The workload-shape check: the incident judge's production-like-shapes test, with the
    baseline as the reference (workbench.incident.validation.replay_check)."""
    from workbench.incident.validation import load_samples, replay_check, shape_size
    from workbench.triage.gate import ShapeCheck

    ref, cand = load_samples(con, baseline), load_samples(con, candidate)
    if not any(ref.shape_key) and not any(cand.shape_key):
        return ShapeCheck(None, "neither run records request shapes (shape_key)")
    rc = replay_check(ref, cand)
    # What replay_check compared (the same test it makes): sizes when every key parses as dims.
    keys = set(ref.shape_key) | set(cand.shape_key)
    by_size = all(math.isfinite(shape_size(k)) for k in keys)
    basis = "by input size in the baseline's deciles" if by_size else "by shape key"
    facts = {
        "psi": rc.psi,
        "psi_threshold": rc.psi_threshold,
        "unseen_share": rc.unseen_share,
        "unseen_threshold": rc.unseen_threshold,
        "n_baseline": rc.n_reference,
        "n_candidate": rc.n_candidate,
        "compared": "input size" if by_size else "shape key",
    }
    reason = f"{basis}, {rc.reason} (n={rc.n_candidate}/{rc.n_reference})"
    return ShapeCheck(rc.passed, reason, facts)


def _gate(args: argparse.Namespace, started: float, junit: list[Path | None]) -> int:
    import json

    from workbench.api.workspace import Workspace, trigger_policy
    from workbench.errors import WorkbenchError
    from workbench.store import baselines, db
    from workbench.store.layout import check_run_id
    from workbench.triage import gate
    from workbench.triage.context import load_present
    from workbench.triage.junit import gate_report
    from workbench.triage.report_text import render
    from workbench.triage.triage import profile_for

    metric, sla_us = parse_slo(args.slo)
    if args.suspect is not None and args.suspect not in gate.SUSPECTABLE:
        raise WorkbenchError(
            f"--suspect {args.suspect!r}",
            f"the change under test is one of {', '.join(gate.SUSPECTABLE)}; hardware, "
            "device_count and thermal_state must be equal for a gate",
        )
    if args.hardware:
        profile_for(None, args.hardware)  # an unknown profile is an error before any work
    candidate = check_run_id(args.candidate)
    baseline = baselines.resolve(args.store, args.against) if args.against else None
    comparator = baseline.run_id if baseline else check_run_id(args.comparator)
    if comparator == candidate:
        what = f"baseline {baseline.name} points to" if baseline else "the comparator is"
        raise WorkbenchError(repr(candidate), f"{what} the candidate run itself")
    policy = trigger_policy(min_gap=args.tolerance, slo_share=None, slo_us=sla_us)
    subject = gate.Subject(
        candidate, comparator, baseline, policy.min_rel_gap, metric, sla_us, args.suspect
    )

    con = db.connect(args.store)
    try:
        present = load_present(con, candidate, comparator)  # damaged files: an error, here
        for rid, role in ((candidate, "candidate"), (comparator, "comparator")):
            if rid not in present:
                raise WorkbenchError(repr(rid), f"{role} run is not in the store")
        found = gate.mismatches(con, candidate, comparator)
        c_row, b_row = present[candidate].row, present[comparator].row
        rows = gate.tag_rows(found, c_row, args.suspect)
        rows.append(gate.workload_row(c_row, b_row, _shapes(con, comparator, candidate)))
    finally:
        con.close()

    try:
        result = (
            Workspace(args.store)
            .compare(
                candidate,
                None if baseline else comparator,
                against=baseline,
                hardware=args.hardware,
                suspect=args.suspect,
                min_gap=args.tolerance,
                slo_us=sla_us,
                slo=metric,
                release_heap=False,
            )
            .result
        )
    except WorkbenchError as exc:
        if all(r.passed for r in rows):
            raise  # comparable runs triage refused: the gate could not run
        # Not comparable whatever triage said: inconclusive, with its refusal as the reason.
        refusal = exc.one_line()
        rows.append(gate.steady_row(None, found, refusal))
        outcome = gate.decide(subject, rows, None, refusal)
        triage_text = f"TRIAGE  refused: {refusal}\n"
    else:
        rows.append(gate.steady_row(result, found))
        outcome = gate.decide(subject, rows, result)
        triage_text = render(result)
    text = gate.render(outcome, triage_text)
    seconds = time.monotonic() - started
    xml = gate_report(outcome, text, seconds)
    if junit[0] is not None:
        from workbench.incident.output_file import write_output

        path, junit[0] = junit[0], None  # a failed write is not tried again for the error
        write_output(path, xml, args.store, args.force)
    if args.format == "json":
        sys.stdout.write(json.dumps(outcome.to_json(), indent=2, allow_nan=False) + "\n")
    elif args.format == "junit":
        sys.stdout.write(xml)
    else:
        sys.stdout.write(text)
    return outcome.exit_code
