"""Score the verdict on the recorded real-fault corpus (bench/corpus/record.py), half by half.

    uv run python bench/real_corpus.py --corpus /work/corpus            # both halves
    uv run python bench/real_corpus.py --corpus /work/corpus --half tuning

Each pair is ingested with `workbench ingest` (its compile log beside it) into a store kept in
the corpus folder (built once; a run already there is not ingested again) and triaged with
`workbench triage --json`, the commands an on-call engineer runs. A pair counts as right on
origin when the outcome is a regression and the origin stage is the recorded fault's (A/A
pairs: when it is not a regression); on mechanism when, besides, the mechanism is the fault's.
Confidence is scored as a probability: the reliability of the origin against it, in bins, and
the expected calibration error (ECE). Used by bench/localize.py, which leads with the blind half.
Ends with one JSON line of the figures.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BINS = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0001)


def _workbench(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "workbench", *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, check=False)


def _ingested(store: Path) -> set[str]:
    runs = store / "runs"
    return (
        {p.name.removeprefix("run_id=") for p in runs.glob("run_id=*")} if runs.exists() else set()
    )


def ingest(corpus: Path, store: Path, pairs: list[dict[str, Any]]) -> None:
    """Every run of `pairs` into `store`, once."""
    have = _ingested(store)
    for pair in pairs:
        for role in ("failing", "comparator"):
            stem = f"{pair['pair_id']}.{role}"
            if stem in have:
                continue
            trace = corpus / f"{stem}.pt.trace.json.gz"
            log = corpus / f"{stem}.torch_trace"
            args = ["ingest", str(trace), "--store", str(store), "--run-id", stem]
            if log.is_dir():
                args += ["--compile-log", str(log)]
            done = _workbench(*args)
            if done.returncode != 0:
                raise SystemExit(f"{stem}: ingest failed: {done.stderr.strip()[-400:]}")


def triage_pair(store: Path, pair: dict[str, Any]) -> dict[str, Any]:
    """The triage document of one pair, cut to the figures the bench scores."""
    pid = pair["pair_id"]
    done = _workbench(
        "triage", "--store", str(store), "--failing", f"{pid}.failing",
        "--comparator", f"{pid}.comparator", "--json",
    )  # fmt: skip
    if done.returncode != 0:
        return {"pair_id": pid, "error": done.stderr.strip()[-300:]}
    doc = json.loads(done.stdout)
    verdict = doc.get("verdict") or {}
    return {
        "pair_id": pid,
        "half": pair["half"],
        "kind": pair["kind"],
        "truth_stage": pair["stage"],
        "truth_mechanism": pair["mechanism"],
        "outcome": verdict.get("outcome"),
        "origin": doc.get("origin_stage"),
        "mechanism": doc.get("mechanism"),
        "confidence": doc.get("confidence"),
        "decided_by": verdict.get("decided_by"),
        "stability": verdict.get("stability"),
        "reason": (verdict.get("reason") or "")[:200],
        "fidelity": verdict.get("fidelity"),
    }


def right(row: dict[str, Any]) -> tuple[bool, bool]:
    """(origin right, mechanism right) of a scored row."""
    if row.get("error"):
        return False, False
    if row["truth_stage"] == "none":
        ok = row["outcome"] != "regression"
        return ok, ok
    origin = row["outcome"] == "regression" and row["origin"] == row["truth_stage"]
    return origin, origin and row["mechanism"] == row["truth_mechanism"]


def calibration_bins(points: list[tuple[float, bool]]) -> tuple[list[dict[str, float]], float]:
    """Bins of (stated confidence, right) points: each bin's mean confidence against how often
    it was right, and the expected calibration error (NaN without points)."""
    out: list[dict[str, float]] = []
    ece = 0.0
    for lo, hi in itertools.pairwise(BINS):
        inside = [(c, ok) for c, ok in points if lo <= c < hi]
        if not inside:
            continue
        conf = statistics.fmean(c for c, _ in inside)
        acc = statistics.fmean(1.0 if ok else 0.0 for _, ok in inside)
        out.append(
            {"lo": lo, "hi": min(hi, 1.0), "n": len(inside), "confidence": conf, "accuracy": acc}
        )
        ece += len(inside) / len(points) * abs(conf - acc)
    return out, ece if points else float("nan")


def reliability(rows: list[dict[str, Any]]) -> tuple[list[dict[str, float]], float]:
    """Bins of stated confidence against how often the origin was right, and the ECE, over
    the fault pairs that were called regressions."""
    called = [r for r in rows if r["truth_stage"] != "none" and r.get("outcome") == "regression"]
    return calibration_bins([(float(r["confidence"] or 0.0), right(r)[0]) for r in called])


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    faults = [r for r in rows if r["truth_stage"] != "none"]
    aa = [r for r in rows if r["truth_stage"] == "none"]
    bins, ece = reliability(rows)
    wrong = [
        float(r["confidence"] or 0.0)
        for r in faults
        if r.get("outcome") == "regression" and not right(r)[0]
    ]
    per_stage: dict[str, str] = {}
    for s in sorted({r["truth_stage"] for r in faults}):
        mine = [r for r in faults if r["truth_stage"] == s]
        per_stage[s] = f"{sum(right(r)[0] for r in mine)}/{len(mine)}"
    fid = [
        (r["fidelity"][role]["ratio_p99"], r["fidelity"][role]["modelled_share"])
        for r in rows
        for role in ("failing", "comparator")
        if isinstance(r.get("fidelity"), dict) and role in r["fidelity"]
        and r["fidelity"][role].get("ratio_p99") is not None
    ]  # fmt: skip
    return {
        # the model's predicted p99 over the observed, and the share of op time it predicted
        "fidelity_p99_median": statistics.median(f for f, _ in fid) if fid else None,
        "modelled_share_median": statistics.median(m for _, m in fid) if fid else None,
        "pairs": len(rows),
        "fault_pairs": len(faults),
        "aa_pairs": len(aa),
        "origin": sum(right(r)[0] for r in faults) / len(faults) if faults else float("nan"),
        "mechanism": sum(right(r)[1] for r in faults) / len(faults) if faults else float("nan"),
        "origin_by_stage": per_stage,
        "aa_false_alarms": sum(1 for r in aa if r.get("outcome") == "regression"),
        "ece": ece,
        "reliability": bins,
        "median_confidence_wrong_origin": statistics.median(wrong) if wrong else None,
        "errors": sum(1 for r in rows if r.get("error")),
    }


def score(corpus: Path, halves: list[str], workers: int = 2) -> dict[str, dict[str, Any]]:
    """Ingest and triage the corpus' pairs; per half: its rows and summary."""
    manifest = json.loads((corpus / "manifest.json").read_text())
    store = corpus / "store"
    out: dict[str, dict[str, Any]] = {}
    for half in halves:
        pairs = [p for p in manifest["pairs"] if p["half"] == half]
        if not pairs:
            continue
        ingest(corpus, store, pairs)
        with ThreadPoolExecutor(workers) as pool:
            rows = list(pool.map(lambda p: triage_pair(store, p), pairs))
        out[half] = {"rows": rows, "summary": summarize(rows)}
    return out


def print_half(name: str, doc: dict[str, Any]) -> None:
    s = doc["summary"]
    print(f"== real-{name}: {s['fault_pairs']} fault pairs, {s['aa_pairs']} A/A pairs")
    print(
        f"   origin {s['origin']:.0%}  mechanism {s['mechanism']:.0%}  A/A false alarms "
        f"{s['aa_false_alarms']}/{s['aa_pairs']}  ECE {s['ece']:.2f}  median confidence of wrong "
        f"origins {s['median_confidence_wrong_origin']}  errors {s['errors']}"
    )
    print(f"   origin by stage: {s['origin_by_stage']}")
    print(
        f"   model fidelity: predicted/observed p99 median {s['fidelity_p99_median']} with "
        f"{s['modelled_share_median']} of op time modelled (0: copied as observed)"
    )
    for b in s["reliability"]:
        print(
            f"   confidence {b['lo']:.1f}-{b['hi']:.1f}: n={b['n']} stated {b['confidence']:.2f} right {b['accuracy']:.2f}"
        )
    for r in doc["rows"]:
        o, m = right(r)
        mark = "ok " if o and m else ("o  " if o else "x  ")
        print(
            f"   {mark}{r['pair_id']:<42} truth {r['truth_stage']}/{r['truth_mechanism']}  got "
            f"{r.get('outcome')} {r.get('origin')}/{r.get('mechanism')} {r.get('confidence')}"
            + (f"  ERROR {r['error']}" if r.get("error") else "")
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--half", action="append", choices=("tuning", "blind"))
    parser.add_argument("--rows", action="store_true", help="print every pair's row")
    args = parser.parse_args()
    halves = args.half or ["blind", "tuning"]
    found = score(args.corpus, halves)
    for half in halves:
        if half in found:
            print_half(half, found[half]) if args.rows else print_half(
                half, {**found[half], "rows": []}
            )
    print(json.dumps({f"real_{h}": d["summary"] for h, d in found.items()}))


if __name__ == "__main__":
    main()
