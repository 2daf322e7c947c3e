"""`workbench ingest`: import trace files into a store, with a progress bar on a terminal."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, TextIO


def add_parser(sub: Any) -> None:
    from workbench.store.importers import describe_formats
    from workbench.store.serving.serving_ingest import describe_readers

    serving = "".join(f"\n  {name:<14} {summary}" for name, summary in describe_readers())

    p = sub.add_parser(
        "ingest",
        help="import trace files (Kineto JSON, nsys SQLite, ...) or Parquet into a store",
        description="Import trace files into a store; each file becomes one run, all-or-nothing.",
        epilog="trace formats found (recognised by content):\n"
        + describe_formats()
        + "\n  parquet        schema-v1 events Parquet, or another store (merged run by run)"
        + "\nLLM serving records (a run alone, or --records beside a trace):"
        + serving,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "files",
        nargs="+",
        type=Path,
        metavar="FILE",
        help="a trace file of a format listed below, a schema-v1 events Parquet, or a store",
    )
    p.add_argument("--store", type=Path, required=True, metavar="DIR")
    p.add_argument("--run-id", default=None, metavar="ID", help="run id (one FILE only)")
    p.add_argument("--label", default=None, metavar="TEXT")
    p.add_argument(
        "--tag", action="append", default=[], metavar="KEY=VALUE", help="run tag (repeatable)"
    )
    p.add_argument(
        "--compile-log",
        type=Path,
        default=None,
        metavar="PATH",
        help="torch.compile TORCH_TRACE log (file or directory), stored as the run's compiles",
    )
    p.add_argument(
        "--records",
        type=Path,
        default=None,
        metavar="FILE",
        help="LLM serving records of the trace's requests (vLLM bench JSON, AIPerf JSONL or "
        "OTLP JSON): token-level requests joined to its engine steps",
    )
    p.add_argument(
        "--request-pattern",
        default=None,
        metavar="REGEX",
        help="spans whose name matches are the requests (overrides annotations / steps)",
    )
    fleet = p.add_argument_group(
        "one run from many files (hosts x ranks x capture windows)",
        "With --fleet, every FILE (a file, a directory searched for *.json / *.json.gz / "
        "*.trace, or a quoted glob such as 'traces/*/rank*.json.gz') is part of ONE run, "
        "named by --run-id. Files are decoded in parallel on --workers local processes, or on a "
        "Dask cluster with --scheduler (its workers must read the FILEs at the same paths).",
    )
    fleet.add_argument("--fleet", action="store_true", help="all FILEs make one run")
    fleet.add_argument(
        "--workers", type=int, default=None, metavar="N", help="local processes (default 2)"
    )
    fleet.add_argument(
        "--scheduler",
        default=None,
        metavar="tcp://HOST:PORT",
        help="Dask distributed scheduler (default: $WORKBENCH_SCHEDULER, else local processes)",
    )
    fleet.add_argument(
        "--host-tag",
        action="append",
        default=[],
        metavar="HOST:KEY=VALUE",
        help="a tag of one host of the fleet, e.g. host07:rack=r12 (repeatable)",
    )


class Bar:
    """A one-line progress bar on a terminal: bytes read and events decoded."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.shown = False

    def __call__(self, p: Any) -> None:
        width = 24
        frac = p.bytes_done / p.bytes_total if p.bytes_total else 1.0
        fill = round(frac * width)
        name = Path(p.path).name[:32]
        events = f"  {p.events:,} events" if p.events else ""
        self.out.write(
            f"\r{name} [{'#' * fill}{'.' * (width - fill)}] "
            f"{p.bytes_done / 1e6:.1f}/{p.bytes_total / 1e6:.1f} MB {p.phase}{events}\x1b[K"
        )
        self.out.flush()
        self.shown = True

    def clear(self) -> None:
        if self.shown:
            self.out.write("\r\x1b[K")
            self.out.flush()
            self.shown = False


class FleetBar(Bar):
    """The bar of a fleet import: files and bytes done."""

    def __call__(self, p: Any) -> None:
        width = 24
        frac = p.bytes_done / p.bytes_total if p.bytes_total else 1.0
        fill = round(frac * width)
        self.out.write(
            f"\r[{'#' * fill}{'.' * (width - fill)}] {p.files_done}/{p.files_total} files "
            f"{p.bytes_done / 1e6:.1f}/{p.bytes_total / 1e6:.1f} MB  {p.events:,} events\x1b[K"
        )
        self.out.flush()
        self.shown = True


def _run_fleet(args: argparse.Namespace, tags: dict[str, str]) -> int:
    from workbench.errors import WorkbenchError
    from workbench.store import objstore
    from workbench.store.fleet.engine import open_engine
    from workbench.store.fleet.fleet_ingest import ingest_fleet, parse_host_tags

    if args.run_id is None:
        raise WorkbenchError("--fleet", "name the run with --run-id")
    if args.compile_log is not None or args.records is not None:
        raise WorkbenchError("--compile-log/--records", "apply to one trace file, not to --fleet")
    host_tags = parse_host_tags(args.host_tag)
    bar = FleetBar(sys.stderr) if sys.stderr.isatty() else None
    workers = args.workers if args.workers is not None else 2
    try:
        with open_engine(workers, args.scheduler) as engine:
            report = ingest_fleet(
                args.store,
                [str(f) for f in args.files],
                run_id=args.run_id,
                engine=engine,
                label=args.label,
                tags=tags,
                host_tags=host_tags,
                request_pattern=args.request_pattern,
                progress=bar,
            )
    finally:
        if bar is not None:
            bar.clear()
    if report.status == "imported":
        objstore.publish_run_or_undo(args.store, report.run_id, f"run {report.run_id}")
    print("\n".join(report.lines()))
    return 0


def run(args: argparse.Namespace) -> int:
    from workbench.cli import interrupts
    from workbench.errors import WorkbenchError
    from workbench.store import objstore
    from workbench.store.ingest import ingest, parse_tags

    if args.run_id is not None and len(args.files) > 1:
        raise WorkbenchError("--run-id", "can name only one FILE's run; give one FILE")
    tags = parse_tags(args.tag)
    if args.fleet:
        return _run_fleet(args, tags)
    if args.host_tag or args.scheduler or args.workers:
        raise WorkbenchError("--host-tag/--workers/--scheduler", "apply to --fleet imports")
    bar = Bar(sys.stderr) if sys.stderr.isatty() else None
    before: set[str] | None = None
    current: Path | None = None
    try:
        before = _committed(args.store)
        for current in args.files:
            try:
                report = ingest(
                    args.store,
                    current,
                    run_id=args.run_id,
                    label=args.label,
                    tags=tags,
                    compile_log=args.compile_log,
                    records=args.records,
                    request_pattern=args.request_pattern,
                    progress=bar,
                )
            finally:
                if bar is not None:
                    bar.clear()
            if report.status == "imported":
                for rid in report.run_ids:
                    objstore.publish_run_or_undo(args.store, rid, str(current))
            print("\n".join(report.lines()), flush=True)
    except BaseException as exc:
        code = interrupts.exit_code(exc)
        if code is None:
            raise  # an error or an exit that no signal caused
        print(_interrupted(code, args.store, before, current), file=sys.stderr, flush=True)
        interrupts.reported()
        return code
    return 0


def _committed(store: Path) -> set[str]:
    from workbench.store.layout import run_ids

    return set(run_ids(store))


def _interrupted(code: int, store: Path, before: set[str] | None, current: Path | None) -> str:
    """One line that says what a signal left: which runs were committed, or that none was.

    A commit's renames finish before a signal is handled (layout.commit_run), so the store
    holds each run whole or not at all, and its runs say which.
    """
    import signal

    try:
        name = signal.Signals(code - 128).name
    except ValueError:
        name = f"signal {code - 128}"
    where = f" while importing {current}" if current is not None else ""
    new = sorted(_committed(store) - before) if before is not None else []
    if new:
        done = f"committed run{'s' if len(new) > 1 else ''} {', '.join(new)}; nothing else written"
    else:
        done = "nothing was written; the store is as it was"
    return f"workbench: interrupted by {name}{where}: {done}"
