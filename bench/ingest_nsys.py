"""Nsight Systems SQLite import speed on a generated large export (goal: >= 1M kernel rows/s).

Writes a current-schema export with --kernels kernel rows (each with its launch call; requests
of --per-request kernels in NVTX ranges, two processes) using the fixture generator, then,
--repeat times, in a fresh interpreter each: decodes it (read_nsys: SQLite -> attribution
columns) and imports it whole (ingest: decode + attribution + Parquet commit). Reports medians
of kernel rows/s for both, and the decode share. Ends with one JSON line.

    uv run python bench/ingest_nsys.py [--kernels 1000000] [--per-request 1000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "nsys"))

from make_nsys_export import write_export  # noqa: E402 - the generator lives with the fixture

CHILD = """
import json, sys, time
from pathlib import Path
from workbench.store.importers.nsys_sqlite import read_nsys
from workbench.store.ingest import ingest
path, store = Path(sys.argv[1]), Path(sys.argv[2])
t = time.perf_counter()
decoded = read_nsys(path)
decode_s = time.perf_counter() - t
n = decoded.cols.n
del decoded
t = time.perf_counter()
report = ingest(store, path, run_id="big")
ingest_s = time.perf_counter() - t
print(json.dumps({"decode_s": decode_s, "ingest_s": ingest_s, "events": n,
                  "requests": report.requests}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", type=int, default=1_000_000)
    ap.add_argument("--per-request", type=int, default=1_000)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-nsys-") as tmp:
        path = Path(tmp) / "large.sqlite"
        t = time.perf_counter()
        per_process = max(1, a.kernels // (2 * a.per_request))
        kernels = write_export(path, per_process, 2, a.per_request)
        print(f"generated {path.stat().st_size / 1e6:.0f} MB export with {kernels:,} kernels "
              f"in {time.perf_counter() - t:.1f} s")  # fmt: skip
        runs = []
        for i in range(a.repeat):
            store = Path(tmp) / f"store{i}"
            out = subprocess.run(
                [sys.executable, "-c", CHILD, str(path), str(store)],
                capture_output=True, text=True, check=True, cwd=ROOT,
            )  # fmt: skip
            runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
            r = runs[-1]
            print(f"run {i + 1}: decode {r['decode_s']:.2f} s "
                  f"({kernels / r['decode_s'] / 1e6:.2f} M kernel rows/s), "
                  f"ingest {r['ingest_s']:.2f} s ({kernels / r['ingest_s'] / 1e6:.2f} M kernel "
                  f"rows/s), {r['events']:,} events, {r['requests']} requests")  # fmt: skip
    decode = statistics.median(r["decode_s"] for r in runs)
    whole = statistics.median(r["ingest_s"] for r in runs)
    figures = {
        "kernels": kernels,
        "events": runs[0]["events"],
        "repeat": a.repeat,
        "decode_s_median": round(decode, 3),
        "ingest_s_median": round(whole, 3),
        "decode_kernel_rows_per_s": round(kernels / decode),
        "ingest_kernel_rows_per_s": round(kernels / whole),
        "ingest_events_per_s": round(runs[0]["events"] / whole),
        "decode_share_of_ingest": round(decode / whole, 3),
        "goal_kernel_rows_per_s": 1_000_000,
    }
    print(f"median of {a.repeat}: decode {figures['decode_kernel_rows_per_s'] / 1e6:.2f} M "
          f"kernel rows/s, whole import {figures['ingest_kernel_rows_per_s'] / 1e6:.2f} M kernel "
          f"rows/s (goal 1.00 M)")  # fmt: skip
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
