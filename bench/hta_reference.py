"""Reference figures: HolisticTraceAnalysis 0.5.0 loading one Kineto trace, on this machine.

HTA is not a project dependency: it runs in its own interpreter (--hta-python, e.g. a throwaway
venv with `pip install HolisticTraceAnalysis==0.5.0`). Each repeat is a fresh child of that
interpreter which times `TraceAnalysis(trace_dir=...)` (parse + align + filter, HTA's default
ParserConfig and JSON backend); its peak RSS comes from os.wait4. Without --trace, builds the
ingest bench's trace (bench/ingest.py build_trace) of --mb MB. Ends with one JSON line.

    uv run python bench/hta_reference.py [--trace PATH.json[.gz]] [--mb 209]
        --hta-python /tmp/htavenv/bin/python [--repeat 3]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

INGEST_BENCH = Path(__file__).resolve().parent / "ingest.py"

# Runs inside the HTA interpreter. Imports are timed apart from the load so that the load figure
# compares with the ingest bench's (which times only the ingest() call).
CHILD = r"""
import json, resource, sys, time
t0 = time.perf_counter()
import hta
from hta.trace_analysis import TraceAnalysis
import_s = time.perf_counter() - t0
rss_before_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t1 = time.perf_counter()
analysis = TraceAnalysis(trace_dir=sys.argv[1])
load_s = time.perf_counter() - t1
trace = analysis.t
rows = sum(len(df) for df in trace.traces.values())
out = {
    "hta_version": getattr(hta, "__version__", "?"),
    "import_s": import_s,
    "load_s": load_s,
    "rss_after_import_mb": rss_before_kib / 1024.0,
    "ranks": sorted(trace.traces),
    "df_rows": rows,
    "iterations": len(trace.get_iterations()),
}
with open(sys.argv[2], "w", encoding="utf-8") as fh:
    json.dump(out, fh)
"""

COUNT = r"""
import gzip, json, sys
path = sys.argv[1]
opener = gzip.open if path.endswith(".gz") else open
with opener(path, "rb") as fh:
    raw = fh.read()
doc = json.loads(raw)
events = doc["traceEvents"] if isinstance(doc, dict) else doc
print(len(raw), len(events), sum(1 for e in events if e.get("ph") == "X"))
"""


def hta_name(trace: Path) -> str:
    """HTA 0.5.0 takes every *.json / *.gz in trace_dir and reads the rank from the content."""
    return "rank0.json.gz" if trace.name.endswith(".gz") else "rank0.json"


def count_events(trace: Path) -> tuple[int, int, int]:
    """(JSON bytes, events, complete 'X' events) of the trace, counted in a child of ours."""
    done = subprocess.run(
        [sys.executable, "-c", COUNT, str(trace)], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"{trace}: cannot count events: {done.stderr.strip().splitlines()[-1]}")
    raw, total, complete = done.stdout.split()
    return int(raw), int(total), int(complete)


def sample(trace: Path, hta_python: str, work: Path) -> dict[str, Any]:
    """One HTA load in a fresh interpreter: its figures plus that process's peak RSS."""
    trace_dir = work / "trace_dir"
    trace_dir.mkdir()
    os.symlink(trace.resolve(), trace_dir / hta_name(trace))
    out = work / "figures.json"
    log = work / "hta.log"
    load0 = os.getloadavg()[0]
    with open(log, "wb") as log_fh:
        wall0 = time.perf_counter()
        proc = subprocess.Popen(
            [hta_python, "-c", CHILD, str(trace_dir), str(out)],
            stdin=subprocess.DEVNULL,
            stdout=log_fh,
            stderr=subprocess.STDOUT,
            cwd=work,
        )
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - wall0
    code = os.waitstatus_to_exitcode(status)
    if code != 0 or not out.exists():
        tail = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-3:]
        raise SystemExit(f"{trace}: HTA child failed ({code}): " + " | ".join(tail))
    figures: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    figures["peak_rss_mb"] = usage.ru_maxrss / 1024.0  # Linux: KiB
    figures["process_s"] = wall
    figures["load1_before"] = load0
    figures["load1_after"] = os.getloadavg()[0]
    return figures


def build(path: Path, mb: float, seed: int) -> tuple[int, int]:
    """The ingest bench's trace builder, loaded from its file (bench/ is not a package)."""
    spec = importlib.util.spec_from_file_location("bench_ingest", INGEST_BENCH)
    if spec is None or spec.loader is None:
        raise SystemExit(f"{INGEST_BENCH}: cannot load build_trace")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    size, events = module.build_trace(path, mb, seed)
    return int(size), int(events)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--trace", type=Path, default=None, help="Kineto .json or .json.gz")
    parser.add_argument("--mb", type=float, default=209.0, help="size of the built trace")
    parser.add_argument("--seed", type=int, default=7, help="seed of the built trace")
    parser.add_argument("--hta-python", default="/tmp/htavenv/bin/python")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if not Path(args.hta_python).exists():
        raise SystemExit(f"{args.hta_python}: no such interpreter (see this script's docstring)")
    with tempfile.TemporaryDirectory(prefix="bench_hta_") as tmp:
        root = Path(tmp)
        trace = args.trace
        if trace is None:
            trace = root / "kineto_bench.json"
            t0 = time.perf_counter()
            size, n = build(trace, args.mb, args.seed)
            print(
                f"built {trace.name}: {size / 1e6:.1f} MB, {n} events "
                f"in {time.perf_counter() - t0:.1f} s"
            )
        if not trace.exists():
            raise SystemExit(f"{trace}: no such trace")
        size, events, complete = count_events(trace)
        file_size = trace.stat().st_size
        runs = []
        for i in range(args.repeat):
            work = root / f"run{i}"
            work.mkdir()
            runs.append(sample(trace, args.hta_python, work))
    for i, r in enumerate(runs, 1):
        print(
            f"run {i}: HTA {r['hta_version']} load {r['load_s']:.2f} s "
            f"(import {r['import_s']:.2f} s, process {r['process_s']:.2f} s), "
            f"peak RSS {r['peak_rss_mb']:.0f} MB (after import {r['rss_after_import_mb']:.0f}), "
            f"{r['df_rows']} df rows, {r['iterations']} iterations, "
            f"load avg {r['load1_before']:.1f}->{r['load1_after']:.1f}"
        )
    sec = statistics.median(r["load_s"] for r in runs)
    rss = statistics.median(r["peak_rss_mb"] for r in runs)
    # MB and MB/s are of the JSON text (uncompressed), as for the ingest bench.
    figures = {
        "trace": str(args.trace) if args.trace else f"built --mb {args.mb} --seed {args.seed}",
        "trace_mb": round(size / 1e6, 1),
        "file_mb": round(file_size / 1e6, 1),
        "events": events,
        "complete_events": complete,
        "repeat": len(runs),
        "hta_seconds_median": round(sec, 3),
        "hta_seconds_min": round(min(r["load_s"] for r in runs), 3),
        "hta_peak_rss_mb_median": round(rss),
        "mb_per_s": round(size / 1e6 / sec, 2),
        "events_per_s": round(events / sec),
        "runs": [
            {
                "load_s": round(r["load_s"], 3),
                "import_s": round(r["import_s"], 3),
                "process_s": round(r["process_s"], 3),
                "peak_rss_mb": round(r["peak_rss_mb"]),
                "df_rows": r["df_rows"],
                "iterations": r["iterations"],
                "load1": [round(r["load1_before"], 2), round(r["load1_after"], 2)],
            }
            for r in runs
        ],
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
