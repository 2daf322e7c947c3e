"""Localization accuracy on generated faults: confusion matrices, A/A false alarms, ablation.

    uv run python bench/localize.py                 # 40 trials per fault class and profile
    uv run python bench/localize.py --trials 10     # quicker

Every trial draws a fresh mis-calibrated hardware "reality", a fault with a random magnitude
(accel.synth) and independent traffic for the failing and the comparator run; the localizer sees
only the two RunArrays and the nominal hardware profile. Fault "none" is the A/A control.
Methods compared: naive (first stage whose raw time moved), no_swap (residual shift only),
full (DESIGN §5). Ends with one JSON line of the figures.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from accel.localize import METHODS, localize
from accel.profiles import get_profile
from accel.stages import STAGES
from accel.stats import wilson_interval
from accel.synth import FAULTS, TRUTH_TABLE, Workload, generate_pair

Row = dict[str, object]


def _trials(job: tuple[str, str, int, int, int, float]) -> list[Row]:
    """Run `trials` pairs of one (profile, fault) with every method."""
    profile, fault, trials, n_requests, seed, severity = job
    hw = get_profile(profile)
    rows: list[Row] = []
    for t in range(trials):
        pair = generate_pair(
            hw,
            fault,
            seed=seed + 7919 * t,
            workload=Workload(n_requests=n_requests),
            tables=False,
            severity=severity,
        )
        for method in METHODS:
            t0 = time.perf_counter()
            loc = localize(pair.failing.arrays, pair.comparator.arrays, hw, method=method)
            rows.append(
                {
                    "profile": profile,
                    "fault": fault,
                    "method": method,
                    "truth_origin": pair.truth.origin_stage or "none",
                    "truth_mechanism": pair.truth.mechanism,
                    "origin": loc.origin_stage or "none",
                    "mechanism": loc.mechanism,
                    "triggered": loc.triggered,
                    "seconds": time.perf_counter() - t0,
                }
            )
    return rows


def _confusion(rows: list[Row], truth: str, pred: str, labels: list[str]) -> str:
    counts = Counter((str(r[truth]), str(r[pred])) for r in rows)
    width = max(len(x) for x in labels) + 1
    head = "truth \\ got".ljust(width) + "".join(x[:10].rjust(11) for x in labels)
    lines = [head]
    for a in labels:
        if not any(str(r[truth]) == a for r in rows):
            continue
        lines.append(a.ljust(width) + "".join(str(counts[(a, b)]).rjust(11) for b in labels))
    return "\n".join(lines)


def _accuracy(rows: list[Row], key: str) -> tuple[float, float, float, int]:
    n = len(rows)
    k = sum(1 for r in rows if r[key] == r[f"truth_{key}"])
    share, lo, hi = wilson_interval(k, n)
    return share, lo, hi, n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=40, help="trials per fault class and profile")
    ap.add_argument("--profiles", default="h100,tpu-v5e")
    ap.add_argument("--requests", type=int, default=600, help="requests per run")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes")
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument(
        "--severity", type=float, default=1.0, help="fault magnitude scale (1: full, 0: none)"
    )
    args = ap.parse_args()
    profiles = [p.strip() for p in args.profiles.split(",") if p.strip()]

    t0 = time.perf_counter()
    jobs = [
        (p, f, args.trials, args.requests, args.seed + 1000 * i + 100_000 * j, args.severity)
        for j, p in enumerate(profiles)
        for i, f in enumerate(FAULTS)
    ]
    rows: list[Row] = []
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for part in pool.map(_trials, jobs):
            rows.extend(part)
    wall = time.perf_counter() - t0

    by = {m: [r for r in rows if r["method"] == m] for m in METHODS}
    full = by["full"]
    faulty = [r for r in full if r["fault"] != "none"]
    aa = [r for r in full if r["fault"] == "none"]
    stages = [*STAGES, "none"]
    mechs = [TRUTH_TABLE[f][2] for f in FAULTS]
    mechs += sorted({str(r["mechanism"]) for r in full} - set(mechs))
    n_trials = len(full)
    print(
        f"localization bench: {args.trials} trials x {len(FAULTS)} classes x {len(profiles)} "
        f"profiles ({', '.join(profiles)}), {args.requests} requests per run, "
        f"severity {args.severity:g}; "
        f"{n_trials} pairs, {wall:.0f} s wall on {args.jobs} workers"
    )
    print("\norigin stage, full method (rows: truth, columns: verdict; n per cell)")
    print(_confusion(full, "truth_origin", "origin", stages))
    print("\nmechanism, full method")
    print(_confusion(full, "truth_mechanism", "mechanism", mechs))
    fa = sum(1 for r in aa if r["triggered"])
    fa_share, fa_lo, fa_hi = wilson_interval(fa, len(aa))
    print(f"\nA/A false alarms: {fa}/{len(aa)} = {fa_share:.1%} (95% CI {fa_lo:.1%}..{fa_hi:.1%})")
    missed = sum(1 for r in faulty if not r["triggered"])
    print(f"fault trials not triggered: {missed}/{len(faulty)}")

    figures: dict[str, object] = {
        "trials_per_class": args.trials,
        "profiles": profiles,
        "requests_per_run": args.requests,
        "severity": args.severity,
        "pairs": n_trials,
        "aa_false_alarm_rate": fa_share,
        "aa_false_alarm_ci": [fa_lo, fa_hi],
        "faults_not_triggered": missed,
    }
    print("\nablation on the fault trials (A/A controls excluded; 95% Wilson CI)")
    print(f"{'method':<10}{'origin acc':>24}{'mechanism acc':>24}{'s/pair':>9}")
    for m in METHODS:
        rs = [r for r in by[m] if r["fault"] != "none"]
        o, olo, ohi, n = _accuracy(rs, "origin")
        k, klo, khi, _ = _accuracy(rs, "mechanism")
        sec = sum(float(str(r["seconds"])) for r in rs) / max(len(rs), 1)
        print(
            f"{m:<10}{o:>10.1%} ({olo:.1%}..{ohi:.1%}){k:>10.1%} ({klo:.1%}..{khi:.1%}){sec:>9.3f}"
        )
        figures[f"{m}_origin_accuracy"] = o
        figures[f"{m}_mechanism_accuracy"] = k
        figures[f"{m}_seconds_per_pair"] = sec
        figures[f"{m}_n"] = n
    print("\nper class, full method: origin / mechanism correct")
    for prof in profiles:
        cells = []
        for f in FAULTS:
            rs = [r for r in full if r["fault"] == f and r["profile"] == prof]
            o = sum(r["origin"] == r["truth_origin"] for r in rs)
            k = sum(r["mechanism"] == r["truth_mechanism"] for r in rs)
            cells.append(f"{f}={o}/{k}/{len(rs)}")
        print(f"  {prof}: " + "  ".join(cells))
    figures["wall_seconds"] = wall
    figures["targets_met"] = bool(
        figures["full_origin_accuracy"] >= 0.95  # type: ignore[operator]
        and figures["full_mechanism_accuracy"] >= 0.90  # type: ignore[operator]
        and fa_share <= 0.05
    )
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
