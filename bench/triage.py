"""Triage a store of >= 10M events: seconds and peak RSS per triage, medians of several runs.

    uv run python bench/triage.py [--events 10000000] [--repeat 3] [--store DIR]

Builds the store once (two synthetic serving runs from tests/triage_stores.py, failing with
recompiles on drifted shapes, committed as an ingest commits them) in a temporary directory
unless --store points at one, then triages it in a fresh process per repeat so peak RSS is the
triage's own. The first triage runs on an empty op-table cache (its own state directory) and
makes the tables (store/op_table.py): it is reported apart as "cold"; the repeats map them.
The last line is one JSON object with the figures; "op_tables" counts the cached tables,
"store_bytes" is the store on disk (the record) and "cache_bytes" the cache beside it,
"integrity_share" is the share of the triage spent checking the pair's files against their
content hashes (issue 11's goal: at most 5%).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

OPS_PER_REQUEST = 7 * 72  # 504 events per request: an LLM request is hundreds of kernels


def build(store: Path, events: int) -> int:
    from triage_stores import RunSpec, write_run

    per_run = events // 2
    n_requests = -(-per_run // OPS_PER_REQUEST)
    common = {"n_requests": n_requests, "ops_per_request": OPS_PER_REQUEST, "drift_share": 0.3}
    write_run(store, RunSpec("comparator", seed=1, **common))  # type: ignore[arg-type]
    write_run(
        store,
        RunSpec(
            "failing",
            seed=2,
            recompile_us=15_000.0,
            recompile_share=0.02,
            start_offset_s=3600,
            **common,  # type: ignore[arg-type]
        ),
    )
    return 2 * n_requests * OPS_PER_REQUEST


def measure(store: Path) -> dict[str, object]:
    """One triage in this process: seconds, peak RSS, and what it found."""
    from workbench.store import heap

    heap.one_arena()  # as `workbench triage` does, before the imports that start threads
    from workbench.triage.triage import triage

    marks: list[tuple[str, float]] = []
    t0, c0 = time.perf_counter(), time.process_time()
    result = triage(  # as `workbench triage` calls it
        store,
        "failing",
        "comparator",
        progress=lambda m, _: marks.append((m, time.perf_counter())),
        release_heap=False,
    )
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    # seconds spent in each step: from its progress mark to the next one
    steps = {name: round(end - start, 3) for (name, start), (_, end) in itertools.pairwise(marks)}
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    return {
        "seconds": seconds,
        "cpu_seconds": cpu,
        "steps": steps,
        "peak_rss_mb": rss_mb,
        "origin": result.origin_stage,
        "mechanism": result.mechanism,
    }


def _count_events(store: Path) -> int:
    """Event rows in the store, from the Parquet footers."""
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(p).metadata.num_rows for p in (store / "events").rglob("*.parquet"))


def _bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--store", type=Path, default=None)
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure)))
        return
    with tempfile.TemporaryDirectory(prefix="bench_triage_") as tmp:
        store = args.store or Path(tmp) / "store"
        n_events = None
        if not (store / "runs").is_dir():
            t0 = time.perf_counter()
            n_events = build(store, args.events)
            print(f"built {n_events:,} events in {time.perf_counter() - t0:.1f} s", flush=True)
        if n_events is None:
            n_events = _count_events(store)
        home = Path(tmp) / "home"  # the op-table cache starts empty
        env = {**os.environ, "WORKBENCH_HOME": str(home)}
        runs = []
        cold: dict[str, object] = {}
        for i in range(args.repeat + 1):
            started = time.perf_counter()
            out = (
                subprocess.run(
                    [sys.executable, __file__, "--measure", str(store)],
                    check=True,
                    capture_output=True,
                    text=True,
                    env=env,
                )
                .stdout.strip()
                .splitlines()[-1]
            )
            fig = json.loads(out)
            # Start to exit: the process also waits for the op tables it hands to the cache.
            fig["process_seconds"] = time.perf_counter() - started
            if i == 0:
                cold = fig
                print(f"cold (makes the op tables): {fig['seconds']:.2f} s "
                      f"({fig['cpu_seconds']:.2f} s CPU; the process {fig['process_seconds']:.2f} "
                      f"s to its exit), peak RSS {fig['peak_rss_mb']:.0f} MB",
                      flush=True)  # fmt: skip
                continue
            runs.append(fig)
            print(
                f"run {i}: {fig['seconds']:.2f} s ({fig['cpu_seconds']:.2f} s CPU), "
                f"peak RSS {fig['peak_rss_mb']:.0f} MB, "
                f"origin {fig['origin']}, mechanism {fig['mechanism']}",
                flush=True,
            )
        seconds = [float(r["seconds"]) for r in runs]
        rss = [float(r["peak_rss_mb"]) for r in runs]
        figures = {
            "bench": "triage",
            "events": n_events,
            "op_tables": len(list(home.glob("cache/op_tables/*.arrow"))),
            "store_bytes": _bytes(store),
            "cache_bytes": _bytes(home / "cache"),
            "cold_seconds": cold["seconds"],
            "cold_process_seconds": cold["process_seconds"],
            "median_process_seconds": statistics.median(float(r["process_seconds"]) for r in runs),
            "cold_peak_rss_mb": cold["peak_rss_mb"],
            "repeat": args.repeat,
            "median_seconds": statistics.median(seconds),
            "min_seconds": min(seconds),
            "max_seconds": max(seconds),
            "median_cpu_seconds": statistics.median(float(r["cpu_seconds"]) for r in runs),
            "median_peak_rss_mb": statistics.median(rss),
            "goal_seconds": 3.0,
            "goal_peak_rss_mb": 2048.0,
            "seconds_vs_goal": statistics.median(seconds) / 3.0,
            "median_step_seconds": {
                k: statistics.median(float(r["steps"][k]) for r in runs) for k in runs[0]["steps"]
            },
            # The content-hash check of the pair's files (integrity.verify_run), as a share of
            # the triage: from its progress mark to the next one, per run, median.
            "integrity_share": statistics.median(
                float(r["steps"]["checking the runs' files"]) / float(r["seconds"]) for r in runs
            ),
            "origin": runs[-1]["origin"],
            "mechanism": runs[-1]["mechanism"],
        }
        print(json.dumps(figures))


if __name__ == "__main__":
    main()
