"""Replay of a 1M-op run (10k requests x 100 ops) on the numpy model vs the plain-Python oracle.

The vectorized replay (accel.replay.replay) is timed on the whole run, median of --repeat runs.
The oracle (tests/accel_reference.ref_replay: one op, one request at a time) is timed on a
subset of --ref-requests requests of the same shape and scaled linearly to the full run (its
work is linear in ops and requests; the queue loop is linear too). Both are timed interleaved,
in wall and in process CPU time (the CPU ratio is the steadier one on a shared machine).
Ends with one JSON line.

    uv run python bench/replay.py [--requests 10000] [--ops-per-request 100] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the oracle and the run generator live with the tests

from accel.cost import DEFAULT_PARAMS  # noqa: E402
from accel.profiles import get_profile  # noqa: E402
from accel.replay import replay  # noqa: E402
from accel_reference import random_run, ref_replay  # noqa: E402


def _timed(fn: Callable[[], object]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process) of one call."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--ops-per-request", type=int, default=100)
    ap.add_argument("--ref-requests", type=int, default=500)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--profile", default="h100")
    args = ap.parse_args()

    hw = get_profile(args.profile)
    # Observed durations are always present in real traces; flops/bytes/shapes often are not.
    run = random_run(1, args.requests, args.ops_per_request, batched=True, nan_observed=False)
    sub = random_run(2, args.ref_requests, args.ops_per_request, batched=True, nan_observed=False)
    n_ops, n_sub = run.ops.size, sub.ops.size

    replay(run, hw)  # warm-up: first-touch page faults and lazy numpy imports
    ref_replay(sub, hw, DEFAULT_PARAMS)
    # Interleaved, so that load from other processes hits both sides alike.
    vec: list[tuple[float, float]] = []
    ref: list[tuple[float, float]] = []
    for _ in range(args.repeat):
        vec.append(_timed(lambda: replay(run, hw)))
        ref.append(_timed(lambda: ref_replay(sub, hw, DEFAULT_PARAMS)))
    vec_s = statistics.median(w for w, _ in vec)
    vec_cpu = statistics.median(c for _, c in vec)
    scale = n_ops / n_sub
    ref_sub_s = statistics.median(w for w, _ in ref)
    ref_s = ref_sub_s * scale
    ref_cpu = statistics.median(c for _, c in ref) * scale
    vec_min = min(w for w, _ in vec)
    # Ratio of each interleaved pair: load that hits one run tends to hit its partner too.
    per_run = [round(r * scale / v, 1) for (r, _), (v, _) in zip(ref, vec, strict=True)]

    print(f"ops: {n_ops:,} in {args.requests:,} requests; profile {hw.name}")
    print(
        f"vectorized replay: {vec_s:.3f} s wall, {vec_cpu:.3f} s CPU "
        f"(medians of {args.repeat}), min {vec_min:.3f} s, {n_ops / vec_s:,.0f} ops/s"
    )
    print(
        f"plain-Python reference: {ref_sub_s:.3f} s wall on {n_sub:,} ops, scaled linearly "
        f"to {ref_s:.1f} s wall / {ref_cpu:.1f} s CPU for {n_ops:,} ops"
    )
    print(
        f"speed-up: {ref_s / vec_s:.0f}x wall, {ref_cpu / vec_cpu:.0f}x CPU; per run (wall): "
        + ", ".join(f"{r:.0f}x" for r in per_run)
    )
    figures = {
        "bench": "replay",
        "ops": n_ops,
        "requests": args.requests,
        "profile": hw.name,
        "repeat": args.repeat,
        "vectorized_s_median": round(vec_s, 4),
        "vectorized_cpu_s_median": round(vec_cpu, 4),
        "vectorized_s_min": round(vec_min, 4),
        "ops_per_s": round(n_ops / vec_s),
        "reference_subset_ops": n_sub,
        "reference_subset_s": round(ref_sub_s, 4),
        "reference_scaled_s": round(ref_s, 2),
        "reference_scaled_cpu_s": round(ref_cpu, 2),
        "speedup": round(ref_s / vec_s, 1),
        "speedup_cpu": round(ref_cpu / vec_cpu, 1),
        "speedup_per_run": per_run,
    }
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
