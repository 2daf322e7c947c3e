"""Import speed and memory: a real-shaped trace of ~200 MB / ~500k events into a store, vs HTA.

Builds the trace (bench/real_shaped.py: an eager serving capture with the shape, stack and
memory args PyTorch's profiler records, ~430 bytes per event) or takes one (--trace), then
imports it --repeat times with `workbench ingest` (its main(), in a fresh interpreter each
time, after one warm-up run so that bytecode is cached as on a user's second run), and reports
medians of: the ingest() call's seconds, the whole process's wall and CPU seconds (start to exit,
imports included), its peak RSS and the peak summed over its process tree. With --hta-python,
HTA's TraceAnalysis(trace_dir=...) loads the same file as many times (after its own warm-up),
each a whole process measured the same way, and the ratios are whole process against whole process: HTA's wall seconds over
ours, our tree's peak over HTA's. Without it the in-process ratios use --hta-json (the output
of bench/hta_reference.py) or else the figures quoted in the issue (labelled so). MB and MB/s
are of the JSON text (uncompressed, also for a .gz trace). A trace this big has its args
decoded on a second process (store/importers/kineto/args_process.py): the tree's peak and CPU include it, and
WORKBENCH_ARGS_PROCESS=0 in the environment measures the import on one process instead.
Beside each import, as a whole process too, the floor of any import that keeps the events
(FLOOR): the traceEvents array split at an event boundary into one half per core, each half
decoded by msgspec into the columns a store keeps of every event (ph, cat, name, pid, tid, ts,
dur; the rest parsed and dropped) on its own process, and one zstd Parquet write of them; no
attribution, requests or args. `floor_ratio` is our whole process over the floor's. Ends with
one JSON line.

    uv run python bench/ingest.py [--trace PATH] [--mb 209] [--repeat 3] [--profile]
        [--hta-python /work/venvs/hta-fleet/bin/python | --hta-json HTA_OUTPUT]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

# bench/ is not a package. Its other modules (and statistics, psutil...) are imported where the
# measuring process uses them: the measured import process (--child) loads only what
# `workbench ingest` itself loads, besides this file.
sys.path.insert(0, str(Path(__file__).resolve().parent))
# HTA's load of the 209 MB trace as the issue quotes it: used only without --hta-json, and
# labelled "quoted" (bench/hta_reference.py measured ~24-27 s and 1158 MB on this machine).
QUOTED_HTA_SECONDS = 18.4
QUOTED_HTA_RSS_MB = 1360.0

# Runs in HTA's interpreter: one whole load, timed apart from HTA's imports.
HTA_LOAD = r"""
import json, resource, sys, time
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
t1 = time.perf_counter()
a = TraceAnalysis(trace_dir=sys.argv[1])
load_s = time.perf_counter() - t1
me = resource.getrusage(resource.RUSAGE_SELF)
kids = resource.getrusage(resource.RUSAGE_CHILDREN)
from importlib.metadata import version
print(json.dumps({"import_s": t1 - t0, "load_s": load_s, "ranks": len(a.t.traces),
                  "rows": sum(len(df) for df in a.t.traces.values()),
                  "self_peak_mb": max(me.ru_maxrss, kids.ru_maxrss) / 1024,
                  "versions": {k: version(k) for k in ("HolisticTraceAnalysis", "pandas")}}))
"""


# Runs as its own process (see the docstring). The split point: the top-level boundary between
# two events nearest the middle; json.dumps(indent=2) layouts (the built trace, the serving
# captures it copies) put one there as "},\n" then "{" at the events' indentation.
FLOOR = r"""
import json, os, sys, time
from concurrent.futures import ProcessPoolExecutor
import msgspec, pyarrow as pa, pyarrow.parquet as pq

class Event(msgspec.Struct):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: int | str = 0
    tid: int | str = 0
    ts: float = 0.0
    dur: float = 0.0

def half(job):
    path, a, b = job
    with open(path, "rb") as f:
        f.seek(a)
        body = f.read(b - a)
    events = msgspec.json.decode(b"[" + body + b"]", type=list[Event])
    return pa.table({
        "ph": [e.ph for e in events], "cat": [e.cat for e in events],
        "name": [e.name for e in events], "pid": [str(e.pid) for e in events],
        "tid": [str(e.tid) for e in events], "ts": [e.ts for e in events],
        "dur": [e.dur for e in events]})

def main(path, out, sep):
    data = open(path, "rb").read()
    start = data.index(b"[", data.index(b'"traceEvents"')) + 1
    end = data.rindex(b"]")
    mid = data.find(sep, (start + end) // 2)
    cut = mid + sep.index(b",")
    jobs = [(path, start, cut), (path, cut + 1, end)]
    del data
    with ProcessPoolExecutor(2) as pool:
        parts = list(pool.map(half, jobs))
    table = pa.concat_tables(parts)
    pq.write_table(table, out, compression="zstd")
    print(json.dumps({"floor_events": table.num_rows}))

if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], json.loads(sys.argv[3]).encode())
"""
FLOOR_SEP = "\n    },\n    {"


def floor_sample(trace: Path, work: Path) -> dict[str, Any] | None:
    """FLOOR as a whole process on `trace` (plain JSON only: None for a .gz trace)."""
    if trace.suffix == ".gz":
        return None
    from whole_process import bytecode_env, run_tree

    script = work / "floor.py"
    script.write_text(FLOOR, encoding="utf-8")
    out = work / "floor.parquet"
    r = run_tree([sys.executable, str(script), str(trace), str(out), json.dumps(FLOOR_SEP)],
                 bytecode_env(work))  # fmt: skip
    out.unlink(missing_ok=True)
    return r


def build_trace(path: Path, mb: float) -> tuple[int, int]:
    """bench/real_shaped.py's trace of about `mb` MB at `path`: (bytes, events)."""
    from real_shaped import build_trace as build

    return build(path, mb)


def child(trace: Path, store: Path, profile: bool) -> None:
    """`workbench ingest TRACE --store STORE` once in this fresh process, as the CLI runs it
    (the CLI's own output goes to stderr); print the figures as one JSON line."""
    import contextlib

    from workbench.cli.main import main

    # The report the CLI prints carries ingest()'s own seconds. Caught as the CLI prints it:
    # importing workbench.store.ingest here, before main() runs, would load the store's
    # modules ahead of what main() sets up for them (its environment for the ingest command).
    from workbench.store.report import ImportReport

    seen: list[ImportReport] = []
    real_lines = ImportReport.lines

    def lines(self: ImportReport) -> list[str]:
        seen.append(self)
        return real_lines(self)

    ImportReport.lines = lines  # type: ignore[method-assign]
    argv = ["ingest", str(trace), "--store", str(store), "--run-id", "bench"]
    with contextlib.redirect_stdout(sys.stderr):
        if profile:
            import cProfile
            import pstats

            prof = cProfile.Profile()
            prof.enable()
            code = main(argv)
            prof.disable()
            pstats.Stats(prof, stream=sys.stderr).sort_stats(
                os.environ.get("PSORT", "cumulative")
            ).print_stats(45)
        else:
            code = main(argv)
    if code != 0 or not seen:
        raise SystemExit(f"workbench ingest exited with {code}")
    report = seen[-1]
    seconds = report.seconds
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(
        json.dumps(
            {
                "seconds": seconds,
                "events": report.events_read,
                "kept": report.events_kept,
                "requests": report.requests,
                "json_bytes": report.bytes_read,
                "self_peak_mb": max(me.ru_maxrss, kids.ru_maxrss) / 1024,
            }
        )
    )


def sample(trace: Path, work: Path, profile: bool) -> dict[str, Any]:
    """One import as a whole process: its figures, wall and CPU seconds, and peak memory."""
    import shutil

    from whole_process import ROOT, bytecode_env, run_tree

    store = work / "store"
    shutil.rmtree(store, ignore_errors=True)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(trace), str(store)]
    env = {"PYTHONPATH": str(ROOT), **bytecode_env(work)}
    r = run_tree(cmd + (["--profile"] if profile else []), env)
    if profile:
        sys.stderr.write(r["stderr"])
    shutil.rmtree(store, ignore_errors=True)
    # The process's own maxrss catches a peak between two samples.
    r["rss_mb"] = max(r["largest_process_mb"], r["self_peak_mb"])
    r["tree_mb"] = max(r["tree_peak_mb"], r["rss_mb"])
    return r


def hta_measured(trace: Path, hta_python: str, work: Path, repeat: int) -> dict[str, Any]:
    """HTA loading the same trace, `repeat` whole processes: medians, kind "measured-now"."""
    import statistics

    from whole_process import bytecode_env, run_tree

    if not Path(hta_python).exists():
        raise SystemExit(f"{hta_python}: no such interpreter (a venv with HolisticTraceAnalysis)")
    trace_dir = work / "hta_dir"
    trace_dir.mkdir()
    # HTA 0.5 takes every *.json / *.gz in trace_dir and reads the rank from the content.
    os.symlink(
        trace.resolve(), trace_dir / ("rank0.json.gz" if trace.suffix == ".gz" else "rank0.json")
    )
    argv = [hta_python, "-c", HTA_LOAD, str(trace_dir)]
    env = bytecode_env(work)
    run_tree(argv, env)  # warm-up: HTA's bytecode cached, as for ours
    runs = [run_tree(argv, env) for _ in range(repeat)]
    for i, r in enumerate(runs, 1):
        print(
            f"HTA run {i}: load {r['load_s']:.2f} s (process {r['wall_s']:.2f} s, "
            f"CPU {r['tree_cpu_s']:.1f} s, load avg {r['load1_start']:.1f}), largest process "
            f"{max(r['largest_process_mb'], r['self_peak_mb']):.0f} MB, tree "
            f"{r['tree_peak_mb']:.0f} MB over {r['processes']} processes, {r['rows']} rows"
        )
    med = statistics.median
    return {
        "kind": "measured-now",
        "source": f"{hta_python} TraceAnalysis(trace_dir=...) on this trace, {repeat} runs",
        "seconds": med(r["load_s"] for r in runs),
        "rss_mb": med(max(r["largest_process_mb"], r["self_peak_mb"]) for r in runs),
        "process_s": med(r["wall_s"] for r in runs),
        "process_cpu_s": med(r["tree_cpu_s"] for r in runs),
        "tree_mb": med(max(r["tree_peak_mb"], r["self_peak_mb"]) for r in runs),
        "load1_at_runs": [round(r["load1_start"], 1) for r in runs],
        # HTA's speed depends on pandas': its whole process on the 209 MB trace took 10.9 s
        # with pandas 2.3.3 and 11.3 s with 3.1.1 on one machine, 13.6 s with 3.1 on another.
        "versions": runs[0]["versions"],
    }


def hta_reference(path: Path | None) -> dict[str, Any]:
    """HTA's seconds and peak RSS: measured (the last JSON line of bench/hta_reference.py's
    output in `path`) or, without a path, the issue's quoted figures."""
    if path is None:
        return {
            "kind": "quoted",
            "source": "the issue's figures, not measured here",
            "seconds": QUOTED_HTA_SECONDS,
            "rss_mb": QUOTED_HTA_RSS_MB,
        }
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SystemExit(f"{path}: cannot read HTA figures: {exc}") from exc
    # The script's figures are its last line that is a JSON object (a saved log may go on).
    lines = [ln for ln in text.splitlines() if ln.lstrip().startswith("{")]
    try:
        doc = json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError as exc:
        raise SystemExit(f"{path}: last JSON line is malformed ({exc})") from exc
    if not isinstance(doc, dict):
        raise SystemExit(f"{path}: no JSON line of bench/hta_reference.py's figures")
    figures: dict[str, Any] = {"kind": "measured", "source": str(path)}
    for key, name in (("hta_seconds_median", "seconds"), ("hta_peak_rss_mb_median", "rss_mb")):
        value = doc.get(key)
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise SystemExit(f"{path}: {key} missing or not a positive number")
        figures[name] = float(value)
    if isinstance(doc.get("trace_mb"), int | float):
        figures["trace_mb"] = float(doc["trace_mb"])
    return figures


def versus_hta(seconds: float, rss_mb: float, ref: dict[str, Any]) -> dict[str, Any]:
    """speedup_vs_hta (HTA seconds / ours) and rss_ratio_vs_hta (ours / HTA), with their source."""
    return {
        "speedup_vs_hta": round(ref["seconds"] / seconds, 2),
        "rss_ratio_vs_hta": round(rss_mb / ref["rss_mb"], 3),
        "hta_reference": ref["kind"],
        "hta_source": ref["source"],
        "hta_seconds": ref["seconds"],
        "hta_peak_rss_mb": ref["rss_mb"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--trace", type=Path, default=None, help="use this trace instead")
    parser.add_argument("--mb", type=float, default=209.0, help="size of the built trace")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="cProfile one import, then exit")
    parser.add_argument(
        "--hta-python", default=None, help="HTA's interpreter: measure HTA on the same trace now"
    )
    parser.add_argument(
        "--hta-json",
        type=Path,
        default=None,
        help="output of bench/hta_reference.py (its last line is read): measured HTA figures",
    )
    parser.add_argument("--child", nargs=2, type=Path, metavar=("TRACE", "STORE"))
    args = parser.parse_args()
    if args.child:
        child(*args.child, profile=args.profile)
        return
    import statistics
    import tempfile

    ref = None if args.hta_python else hta_reference(args.hta_json)
    with tempfile.TemporaryDirectory(prefix="bench_ingest_") as tmp:
        work = Path(tmp)
        trace = args.trace
        if trace is None:
            trace = work / "serve.pt.trace.json"
            t0 = time.perf_counter()
            size, n = build_trace(trace, args.mb)
            print(
                f"built {trace.name}: {size / 1e6:.1f} MB, {n} events ({size / n:.0f} B/event) "
                f"in {time.perf_counter() - t0:.1f} s"
            )
        file_size = trace.stat().st_size
        if args.profile:
            sample(trace, work, profile=True)
            return
        sample(trace, work, profile=False)  # warm-up: bytecode cached, as after a first run
        floor_sample(trace, work)
        runs, floors = [], []
        for _ in range(args.repeat):  # ours and the floor side by side, in turns
            runs.append(sample(trace, work, profile=False))
            f = floor_sample(trace, work)
            if f is not None:
                floors.append(f)
        if args.hta_python:
            ref = hta_measured(trace, args.hta_python, work, args.repeat)
    assert ref is not None
    for i, r in enumerate(runs, 1):
        print(
            f"run {i}: import {r['seconds']:.2f} s (process {r['wall_s']:.2f} s, "
            f"CPU {r['tree_cpu_s']:.2f} s, load avg {r['load1_start']:.1f}), "
            f"peak RSS {r['rss_mb']:.0f} MB (tree {r['tree_mb']:.0f} MB), "
            f"{r['events']:.0f} events, {r['requests']:.0f} requests"
        )
    med = statistics.median
    sec = med(r["seconds"] for r in runs)
    rss = med(r["rss_mb"] for r in runs)
    events = runs[0]["events"]
    # What the importer parsed: for a .gz trace the decompressed JSON, not the file.
    size = runs[0]["json_bytes"]
    print(f"trace: {size / 1e6:.1f} MB of JSON (uncompressed), file {file_size / 1e6:.1f} MB")
    vs = versus_hta(sec, rss, ref)
    print(
        f"vs HTA ({ref['kind']}: {ref['source']}): {ref['seconds']:.1f} s, "
        f"{ref['rss_mb']:.0f} MB -> speed-up {vs['speedup_vs_hta']}x, "
        f"RSS ratio {vs['rss_ratio_vs_hta']}"
    )
    ref_mb = ref.get("trace_mb")
    if ref_mb is not None and abs(ref_mb - size / 1e6) > 0.02 * ref_mb:
        print(f"note: HTA measured a {ref_mb} MB trace, this run {size / 1e6:.1f} MB")
    process_s = med(r["wall_s"] for r in runs)
    tree_mb = med(r["tree_mb"] for r in runs)
    figures: dict[str, Any] = {
        "trace_mb": round(size / 1e6, 1),
        "file_mb": round(file_size / 1e6, 1),
        "events": int(events),
        "bytes_per_event": round(size / events),
        "repeat": len(runs),
        "bytecode": "cached (a warm-up run first, for ours and HTA alike)",
        # "auto" (a second process for traces of 64 MB or more), "0" (never) or "1" (always).
        "args_process": os.environ.get("WORKBENCH_ARGS_PROCESS") or "auto",
        "import_s_median": round(sec, 3),
        "import_s_min": round(min(r["seconds"] for r in runs), 3),
        "process_s_median": round(process_s, 3),
        "process_cpu_s_median": round(med(r["tree_cpu_s"] for r in runs), 3),
        "mb_per_s": round(size / 1e6 / sec, 2),
        "events_per_s": round(events / sec),
        "peak_rss_mb_median": round(rss),
        "tree_peak_mb_median": round(tree_mb),
        "load1_at_runs": [round(r["load1_start"], 1) for r in runs],
        **vs,
    }
    if floors:
        if any(f["floor_events"] != events for f in floors):  # the split lost or doubled some
            raise SystemExit(f"floor decoded {floors[0]['floor_events']} events, ours {events}")
        floor_s = med(f["wall_s"] for f in floors)
        figures.update(
            floor_process_s=round(floor_s, 3),
            floor_process_cpu_s=round(med(f["tree_cpu_s"] for f in floors), 3),
            floor_events=floors[0]["floor_events"],
            floor_ratio=round(
                med(r["wall_s"] / f["wall_s"] for r, f in zip(runs, floors, strict=True)), 2
            ),
        )
        print(f"floor (2-process msgspec decode + one Parquet write): {floor_s:.2f} s; ours "
              f"{figures['floor_ratio']}x it")  # fmt: skip
    if "process_s" in ref:
        # The goal's terms: whole process against whole process, memory of the process trees.
        figures.update(
            hta_process_s=round(ref["process_s"], 2),
            hta_process_cpu_s=round(ref["process_cpu_s"], 1),
            hta_tree_peak_mb=round(ref["tree_mb"]),
            hta_load1_at_runs=ref["load1_at_runs"],
            hta_versions=ref["versions"],
            process_speedup_vs_hta=round(ref["process_s"] / process_s, 2),
            process_cpu_ratio_hta_vs_ours=round(
                ref["process_cpu_s"] / figures["process_cpu_s_median"], 2
            ),
            tree_peak_ratio_vs_hta=round(tree_mb / ref["tree_mb"], 3),
        )
        print(
            f"whole process: ours {process_s:.2f} s / {tree_mb:.0f} MB, HTA "
            f"{ref['process_s']:.2f} s / {ref['tree_mb']:.0f} MB -> "
            f"{figures['process_speedup_vs_hta']}x faster at "
            f"{figures['tree_peak_ratio_vs_hta']}x the memory"
        )
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
