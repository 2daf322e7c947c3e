"""Fit the verdict's confidence (accel/localize/calibration.py) and measure its calibration.

    uv run python bench/localize.py --rows /tmp/rows.jsonl          # the generators' pairs
    uv run python bench/calibrate.py --rows /tmp/rows.jsonl --corpus /work/corpus --write

The fit reads the pairs the method was tuned on: the generators' (accel.synth, profsim) and the
real corpus' tuning half. Each pair the trigger called a regression is one example, right when
its origin is the truth's (A/A pairs called regressions: wrong). A logistic model of the
stability score, what decided the origin and whether a mechanism was witnessed, ridge-
penalised, each corpus weighted equally. The real corpus' blind half is never fitted: its
reliability and ECE are printed first, then each fitted corpus'. --write stores the
coefficients in accel/localize/calibration.json. Ends with one JSON line of the figures.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np
import real_corpus

from accel.localize.calibration import FEATURES, features

BINS = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0001)
RIDGE = 1.0
FIT = Path(__file__).resolve().parents[1] / "accel" / "localize" / "calibration.json"


def examples(rows: list[dict[str, Any]], corpus: str) -> list[tuple[list[float], float, str]]:
    """(features, right, corpus) of every pair called a regression."""
    out = []
    for r in rows:
        # Rows written before the confidence was calibrated carry the stability as it.
        stability = r.get("stability", r.get("confidence"))
        if r.get("outcome") != "regression" or stability is None:
            continue
        truth = r.get("truth_origin") or r.get("truth_stage") or "none"
        right = 1.0 if truth != "none" and r.get("origin") == truth else 0.0
        x = features(float(stability), str(r.get("decided_by")), str(r.get("mechanism")))
        out.append((x, right, corpus))
    return out


def generator_rows(path: Path) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in rows if r.get("look") == 1]


def fit(data: list[tuple[list[float], float, str]]) -> np.ndarray:
    """Ridge logistic regression by Newton's method, each corpus carrying equal weight."""
    x = np.array([d[0] for d in data], dtype=np.float64)
    y = np.array([d[1] for d in data], dtype=np.float64)
    corpora = [d[2] for d in data]
    count = {c: corpora.count(c) for c in set(corpora)}
    w = np.array([len(data) / (len(count) * count[c]) for c in corpora], dtype=np.float64)
    beta = np.zeros(x.shape[1])
    penalty = RIDGE * np.eye(x.shape[1])
    penalty[0, 0] = 0.0  # no penalty on the bias
    for _ in range(50):
        p = 1.0 / (1.0 + np.exp(-(x @ beta)))
        grad = x.T @ (w * (y - p)) - penalty @ beta
        hess = (x * (w * p * (1 - p))[:, None]).T @ x + penalty
        step = np.linalg.solve(hess, grad)
        beta = beta + step
        if float(np.abs(step).max()) < 1e-9:
            break
    return beta


def reliability(probs: np.ndarray, right: np.ndarray) -> tuple[list[dict[str, float]], float]:
    bins: list[dict[str, float]] = []
    ece = 0.0
    for lo, hi in itertools.pairwise(BINS):
        inside = (probs >= lo) & (probs < hi)
        if not inside.any():
            continue
        conf, acc, n = float(probs[inside].mean()), float(right[inside].mean()), int(inside.sum())
        bins.append({"lo": lo, "hi": min(hi, 1.0), "n": n, "confidence": conf, "accuracy": acc})
        ece += n / probs.size * abs(conf - acc)
    return bins, ece if probs.size else float("nan")


def report(
    name: str, data: list[tuple[list[float], float, str]], beta: np.ndarray
) -> dict[str, Any]:
    if not data:
        print(f"== {name}: no pairs called regressions")
        return {"n": 0}
    x = np.array([d[0] for d in data])
    y = np.array([d[1] for d in data])
    p = 1.0 / (1.0 + np.exp(-(x @ beta)))
    stab = x[:, FEATURES.index("stability")]
    bins, ece = reliability(p, y)
    _, ece_stab = reliability(stab, y)
    wrong = p[y == 0]
    print(
        f"== {name}: n={len(data)} called regressions, {int(y.sum())} right; ECE {ece:.3f} "
        f"(stability as confidence: {ece_stab:.3f}); median confidence of wrong origins "
        f"{float(np.median(wrong)) if wrong.size else float('nan'):.2f} (n={wrong.size})"
    )
    for b in bins:
        print(
            f"   {b['lo']:.1f}-{b['hi']:.1f}: n={b['n']} stated {b['confidence']:.2f} right {b['accuracy']:.2f}"
        )
    return {
        "n": len(data),
        "right": int(y.sum()),
        "ece": ece,
        "ece_stability": ece_stab,
        "median_confidence_wrong": float(np.median(wrong)) if wrong.size else None,
        "reliability": bins,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=Path, required=True, help="bench/localize.py --rows output")
    ap.add_argument("--corpus", type=Path, default=None, help="the recorded real-fault corpus")
    ap.add_argument("--write", action="store_true", help="store the fit in calibration.json")
    ap.add_argument(
        "--real-rows",
        type=Path,
        default=None,
        help="the corpus' triage rows: read from FILE when it exists, else triaged and saved there "
        "(a refit after a generator run then needs no second pass over the corpus)",
    )
    args = ap.parse_args()
    gen = generator_rows(args.rows)
    train: list[tuple[list[float], float, str]] = []
    by: dict[str, list[tuple[list[float], float, str]]] = {}
    for r in gen:
        by.setdefault(f"{r['generator']}/{r['layout']}", []).extend(examples([r], r["generator"]))
    blind: list[tuple[list[float], float, str]] = []
    if args.corpus is not None:
        if args.real_rows is not None and args.real_rows.exists():
            found = json.loads(args.real_rows.read_text())
        else:
            found = real_corpus.score(args.corpus, ["tuning", "blind"])
            if args.real_rows is not None:
                args.real_rows.write_text(json.dumps(found, default=str))
        for half in ("blind", "tuning"):  # the half the method was not tuned on first
            if half in found:
                sm = found[half]["summary"]
                print(
                    f"== real-{half}: origin {sm['origin']:.0%} mechanism {sm['mechanism']:.0%} "
                    f"of {sm['fault_pairs']} fault pairs, A/A false alarms "
                    f"{sm['aa_false_alarms']}/{sm['aa_pairs']}, by stage {sm['origin_by_stage']}, "
                    f"p99 predicted/observed median {sm['fidelity_p99_median']}"
                )
        if "tuning" in found:
            by["real-tuning"] = examples(found["tuning"]["rows"], "real-tuning")
        if "blind" in found:
            blind = examples(found["blind"]["rows"], "real-blind")
    for rows in by.values():
        train.extend(rows)
    beta = fit(train)
    counts = {name: len(rows) for name, rows in by.items()}
    fitted_on = (
        f"{len(train)} pairs called regressions ("
        + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
        + ")"
    )
    print(f"fit: {fitted_on}")
    print(
        "coefficients: " + ", ".join(f"{f} {b:+.3f}" for f, b in zip(FEATURES, beta, strict=True))
    )
    figures: dict[str, Any] = {"real_blind": report("real-blind (not fitted)", blind, beta)}
    for name, rows in sorted(by.items()):
        figures[name] = report(f"{name} (fitted)", rows, beta)
    if args.write:
        doc = {
            "coefficients": [round(float(b), 4) for b in beta],
            "features": list(FEATURES),
            "fitted_on": fitted_on,
        }
        FIT.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"wrote {FIT}")
    print(json.dumps({"fitted_on": fitted_on, "coefficients": beta.tolist(), **figures}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
