"""The localization bench's report: accuracy tables, confusions, misses and reliability of its
rows (one per pair, method and look), and the JSON figures of each reading.

A fault pair's row may carry `in_sample` (bench/localize.py adds it): whether the injected
fault moved the failing run's p95 or p99 past the trigger's practical threshold on the
failing run's own traffic, against its fault-free twin (the same reality and traffic seed
without the fault: common random numbers). A pair whose fault did not show on its traffic
has no regression to find at that size; its accuracy is reported apart as well as in the whole.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from pathlib import Path
from typing import Any

from accel.localize import METHODS
from accel.stages import STAGES
from accel.stats import wilson_interval
from accel.synth import FAULTS, TRUTH_TABLE
from generators import profsim

Row = dict[str, object]
CELLS = (("synth", "store"), ("synth", "events"), ("profsim", "store"), ("profsim", "events"))
BINS = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)


def reliability(rows: list[Row]) -> tuple[list[dict[str, float]], float]:
    """Bins of confidence: n, mean confidence, share with the right origin; and the expected
    calibration error (bin-size-weighted |accuracy - confidence|)."""
    out: list[dict[str, float]] = []
    ece = 0.0
    for lo, hi in itertools.pairwise(BINS):
        rs = [
            r
            for r in rows
            if lo <= float(str(r["confidence"])) < hi or (hi == 1.0 and r["confidence"] == 1.0)
        ]
        if not rs:
            continue
        conf = sum(float(str(r["confidence"])) for r in rs) / len(rs)
        acc = sum(r["origin"] == r["truth_origin"] for r in rs) / len(rs)
        out.append({"lo": lo, "hi": hi, "n": len(rs), "confidence": conf, "accuracy": acc})
        ece += len(rs) / max(len(rows), 1) * abs(acc - conf)
    return out, ece


def confusion(rows: list[Row], truth: str, pred: str, labels: list[str]) -> str:
    counts = Counter((str(r[truth]), str(r[pred])) for r in rows)
    width = max(len(x) for x in labels) + 1
    head = "truth \\ got".ljust(width) + "".join(x[:10].rjust(11) for x in labels)
    lines = [head]
    for a in labels:
        if not any(str(r[truth]) == a for r in rows):
            continue
        lines.append(a.ljust(width) + "".join(str(counts[(a, b)]).rjust(11) for b in labels))
    return "\n".join(lines)


def accuracy(rows: list[Row], key: str) -> tuple[float, float, float, int]:
    n = len(rows)
    k = sum(1 for r in rows if r[key] == r[f"truth_{key}"])
    share, lo, hi = wilson_interval(k, n)
    return share, lo, hi, n


def is_miss(r: Row) -> bool:
    """The pair's verdict is not its truth (origin and mechanism)."""
    return (r["origin"], r["mechanism"]) != (r["truth_origin"], r["truth_mechanism"])


def pair_key(r: Row) -> tuple[object, ...]:
    return (r["generator"], r["layout"], r["profile"], r["fault"], r.get("batching"), r["seed"])


def accuracy_figures(faulty: list[Row]) -> dict[str, Any]:
    """Origin and mechanism accuracy of the fault rows `faulty` with their 95% Wilson
    intervals, and n."""
    o, olo, ohi, n = accuracy(faulty, "origin")
    k, klo, khi, _ = accuracy(faulty, "mechanism")
    return {
        "origin_accuracy": o,
        "origin_ci": [olo, ohi],
        "mechanism_accuracy": k,
        "mechanism_ci": [klo, khi],
        "n": n,
    }


def _shares(f: dict[str, Any]) -> str:
    """accuracy_figures as the tables' two columns."""
    (olo, ohi), (klo, khi) = f["origin_ci"], f["mechanism_ci"]
    return (
        f"{f['origin_accuracy']:>9.1%} ({olo:.0%}..{ohi:.0%})"
        f"{f['mechanism_accuracy']:>10.1%} ({klo:.0%}..{khi:.0%})"
    )


def summary(rows: list[Row], title: str) -> dict[str, object]:
    """Print the accuracy tables, confusions, misses, reliability and A/A rate of `rows`
    (one row per pair and method); return their figures."""
    full = [r for r in rows if r["method"] == "full"]
    stages = [*STAGES, "none"]
    cells: dict[str, dict[str, object]] = {}
    print(f"\n=== {title} ===")
    print("accuracy on the fault trials (A/A controls excluded; 95% Wilson CI), side by side")
    print(
        f"{'generator/layout':<18}{'method':<9}{'origin':>22}{'mechanism':>22}"
        f"{'A/A false alarms':>26}{'s/pair':>8}"
    )
    for cell in CELLS:
        name = "/".join(cell)
        in_cell = [r for r in rows if (r["generator"], r["layout"]) == cell]
        out: dict[str, object] = {}
        for m in METHODS:
            rs = [r for r in in_cell if r["method"] == m]
            faulty = [r for r in rs if r["fault"] != "none"]
            aa = [r for r in rs if r["fault"] == "none"]
            acc = accuracy_figures(faulty)
            fa = sum(1 for r in aa if r["triggered"])
            fa_share, fa_lo, fa_hi = wilson_interval(fa, len(aa))
            sec = sum(float(str(r["seconds"])) for r in rs) / max(len(rs), 1)
            print(
                f"{name:<18}{m:<9}{_shares(acc)}"
                f"{fa:>5}/{len(aa):<3}{fa_share:>6.1%} ({fa_lo:.0%}..{fa_hi:.0%}){sec:>8.3f}"
            )
            out[m] = {
                **acc,
                "aa_false_alarms": fa,
                "aa_n": len(aa),
                "aa_false_alarm_rate": fa_share,
                "aa_false_alarm_ci": [fa_lo, fa_hi],
                "seconds_per_pair": sec,
            }
        faulty_full = [r for r in in_cell if r["method"] == "full" and r["fault"] != "none"]
        bins, ece = reliability(faulty_full)
        out["ece"] = ece
        if any("in_sample" in r for r in faulty_full):
            out["in_sample"] = in_sample_figures(faulty_full)
        out["faults_not_triggered"] = sum(1 for r in faulty_full if not r["triggered"])
        # regression / no regression / inconclusive, on the fault trials and on the A/A pairs
        out["outcomes"] = dict(
            Counter(
                f"{'aa' if r['fault'] == 'none' else 'fault'}: {r['outcome']}"
                for r in in_cell
                if r["method"] == "full"
            )
        )
        cells[name] = out

    shown = {n: c["in_sample"] for n, c in cells.items() if "in_sample" in c}
    if shown:
        print(
            "\nfull method on the fault pairs whose fault showed on their own traffic (p95 or p99 "
            "past the practical threshold against the fault-free twin); the others apart"
        )
        print(f"{'generator/layout':<18}{'origin':>22}{'mechanism':>22}{'not in sample':>15}")
        for name, f in shown.items():
            print(f"{name:<18}{_shares(f)}{f['not_in_sample']:>6} {f['not_in_sample_outcomes']}")

    for cell in CELLS:
        name = "/".join(cell)
        rs = [r for r in full if (r["generator"], r["layout"]) == cell]
        gen_faults = FAULTS if cell[0] == "synth" else profsim.FAULTS
        mechs = [
            profsim.TRUTH[f][2] if cell[0] == "profsim" else TRUTH_TABLE[f][2] for f in gen_faults
        ]
        mechs += sorted({str(r["mechanism"]) for r in rs} - set(mechs))
        print(f"\n{name}: origin stage, full method (rows: truth, columns: verdict)")
        print(confusion(rs, "truth_origin", "origin", stages))
        print(f"{name}: mechanism, full method")
        print(confusion(rs, "truth_mechanism", "mechanism", mechs))

    misses = [r for r in full if is_miss(r)]
    print(
        f"\nfull method's misses ({len(misses)}): cell, profile, fault, batching, seed -> verdict"
    )
    for r in misses:
        print(
            f"  {r['generator']}/{r['layout']} {r['profile']} {r['fault']} "
            f"{r.get('batching', '-')} seed {r['seed']} -> {r['outcome']}: {r['origin']} / "
            f"{r['mechanism']} (confidence {float(str(r['confidence'])):.2f}, decided by "
            f"{r['decided_by']}, look {r['look']} at {r['requests']} requests)"
        )

    faulty = [r for r in full if r["fault"] != "none"]
    bins, ece = reliability(faulty)
    print("\nreliability of the full method's confidence (fault trials, all cells)")
    print(f"{'confidence':<14}{'n':>6}{'mean conf':>11}{'origin right':>14}")
    for b in bins:
        print(
            f"[{b['lo']:.1f}, {b['hi']:.1f}){'':<4}{int(b['n']):>6}{b['confidence']:>11.2f}"
            f"{b['accuracy']:>14.2f}"
        )
    print(f"expected calibration error: {ece:.3f} (n={len(faulty)})")

    aa_all = [r for r in full if r["fault"] == "none"]
    fa_all = sum(1 for r in aa_all if r["triggered"])
    fa_share, fa_lo, fa_hi = wilson_interval(fa_all, len(aa_all))
    print(f"A/A false alarms, all cells: {fa_all}/{len(aa_all)} = {fa_share:.1%} "
          f"(95% CI {fa_lo:.1%}..{fa_hi:.1%})")  # fmt: skip

    def met(c: dict[str, object], over: str) -> bool:
        """The cell's targets, accuracy read from c[over] ("full" or "in_sample"), its A/A
        rate from the full method's."""
        f, acc = c["full"], c.get(over)
        assert isinstance(f, dict)
        return bool(
            isinstance(acc, dict)
            and acc["origin_accuracy"] >= 0.95
            and acc["mechanism_accuracy"] >= 0.90
            and f["aa_false_alarm_rate"] <= 0.05
        )

    return {
        "cells": cells,
        "reliability": bins,
        "ece": ece,
        "aa_false_alarm_rate": fa_share,
        "aa_false_alarm_ci": [fa_lo, fa_hi],
        "targets_met": bool(all(met(c, "full") for c in cells.values()) and ece <= 0.1),
        # the same targets over the fault pairs whose fault showed on their own traffic
        "targets_met_in_sample": bool(
            all(met(c, "in_sample") for c in cells.values()) and ece <= 0.1
        ),
    }


def in_sample_figures(faulty: list[Row]) -> dict[str, object]:
    """Accuracy of the fault pairs `faulty` (one method's rows) whose fault showed on their own
    traffic, and how the others were called."""
    shown = [r for r in faulty if r.get("in_sample") is True]
    hidden = [r for r in faulty if r.get("in_sample") is False]
    return {
        **accuracy_figures(shown),
        "not_in_sample": len(hidden),
        "not_in_sample_outcomes": dict(Counter(str(r["outcome"]) for r in hidden)),
    }


def write_misses(path: Path, rows: list[Row]) -> None:
    """The full method's rows of every pair it missed at look 1, every look of it, with a
    class for the look-1 miss: inconclusive (power: too few requests, its own advice), no
    fire (called no regression), wrong origin, or wrong mechanism (right origin). A/A pairs
    that fired count as misses too (class "false alarm")."""
    full = [r for r in rows if r["method"] == "full"]
    missed = {pair_key(r) for r in full if r["look"] == 1 and is_miss(r)}
    with path.open("w") as out:
        for r in sorted(
            (r for r in full if pair_key(r) in missed),
            key=lambda r: (*map(str, pair_key(r)), r["look"]),
        ):
            if r["fault"] == "none":
                kind = "false alarm"
            elif r["outcome"] == "inconclusive":
                kind = "inconclusive"
            elif not r["triggered"]:
                kind = "no fire"
            elif r["origin"] != r["truth_origin"]:
                kind = "wrong origin"
            else:
                kind = "wrong mechanism"
            out.write(json.dumps({**r, "miss": kind if is_miss(r) else "right"}) + "\n")
