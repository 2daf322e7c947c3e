"""Score the LLM-serving verdict on recorded pairs (bench/corpus/serving/record.py output),
each half (blind first) apart and within it each paging SLO apart.

    uv run python bench/serving_corpus.py --corpus /work/serving_corpus [--half tuning] [--rows]

Each run is ingested once (trace + vLLM-bench records) into a store kept in the corpus folder
and triaged with `workbench triage --slo S --json`, the command an on-call engineer runs with
the SLO that paged them: a fault pair in its truth's SLO (and once more with the SLO left to
the triage, the "auto" line), an A/A pair in each of TTFT, ITL and TPOT, each counted in that
SLO's false alarms. A fault pair is right on origin when the outcome is a regression and the
origin stage is the fault's; on mechanism when, besides, the mechanism is. The confidence is
scored as a probability: ECE over the fault pairs called regressions, and the median confidence
of the wrong origins. bench/localize.py --serving-corpus reports the same. Ends with one JSON
line.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from real_corpus import _ingested, calibration_bins  # one reliability binning for both

ROOT = Path(__file__).resolve().parents[1]
AA_SLOS = ("ttft", "itl", "tpot")
ROLES = ("failing", "comparator")


def _workbench(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "workbench", *argv], capture_output=True,
                          text=True, cwd=ROOT, check=False)  # fmt: skip


def pairs_of(corpus: Path, halves: list[str]) -> list[Path]:
    """The corpus' recorded pairs of those halves (a pair name leads with its half)."""
    return sorted(
        p
        for p in corpus.iterdir()
        if (p / "truth.json").is_file() and p.name.split("-", 1)[0] in halves
    )


def ingest(store: Path, pairs: list[Path]) -> dict[str, str]:
    """Both runs of each pair into `store`, once; the pairs whose ingest failed, with why."""
    have = _ingested(store)
    failed: dict[str, str] = {}
    for pair in pairs:
        for role in ROLES:
            run_id = f"{pair.name}-{role}"
            if run_id in have:
                continue
            got = _workbench("ingest", str(pair / role / "trace.json.gz"), "--records",
                             str(pair / role / "vllm_bench.json"), "--store", str(store),
                             "--run-id", run_id)  # fmt: skip
            if got.returncode != 0:
                failed[pair.name] = got.stderr.strip()[-300:]
    return failed


def triage_row(store: Path, pair: Path, slo: str | None) -> dict[str, Any]:
    """One triage of a pair in `slo` (None: the triage's own pick), cut to what is scored."""
    truth = json.loads((pair / "truth.json").read_text())
    aa = truth["mechanism"] == "none"
    base: dict[str, Any] = {
        "pair": pair.name,
        "half": pair.name.split("-", 1)[0],
        "aa": aa,
        "truth": f"{truth['origin_stage']}/{truth['mechanism']}",
        # the SLO the row is counted in: the asked one, or the fault's for the auto pick
        "scored_slo": slo or truth.get("slo"),
        "asked": slo or "auto",
    }
    argv = ["triage", "--store", str(store), "--failing", f"{pair.name}-failing",
            "--comparator", f"{pair.name}-comparator", "--json"]  # fmt: skip
    got = _workbench(*argv, *(["--slo", slo] if slo else []))
    if got.returncode != 0:
        return {**base, "error": got.stderr.strip()[-300:], "origin_ok": False,
                "mechanism_ok": False}  # fmt: skip
    doc = json.loads(got.stdout)
    verdict = doc.get("verdict") or {}
    called = verdict.get("outcome") == "regression"
    conf = doc.get("confidence")
    origin_ok = (not called) if aa else called and doc["origin_stage"] == truth["origin_stage"]
    return {
        **base,
        "slo": doc.get("primary_slo"),
        "outcome": verdict.get("outcome"),
        "called": f"{doc['origin_stage']}/{doc['mechanism']}" if called else verdict.get("outcome"),
        "confidence": conf if isinstance(conf, int | float) and math.isfinite(conf) else None,
        "origin_ok": origin_ok,
        "mechanism_ok": (not called)
        if aa
        else origin_ok and doc["mechanism"] == truth["mechanism"],
        "reason": (verdict.get("reason") or "")[:160],
    }


def score(
    corpus: Path, halves: list[str] | None = None, workers: int = 2, store: Path | None = None
) -> dict[str, list[dict[str, Any]]]:
    """Every pair of those halves (default both) scored, ingested into `store` (default the
    corpus' own); per half its rows."""
    pairs = pairs_of(corpus, halves or ["blind", "tuning"])
    store = store or corpus / "store"
    failed = ingest(store, pairs)
    jobs: list[tuple[Path, str | None]] = []
    for pair in pairs:
        if pair.name in failed:
            continue
        truth = json.loads((pair / "truth.json").read_text())
        if truth["mechanism"] == "none":
            jobs += [(pair, s) for s in AA_SLOS]
        else:
            jobs += [(pair, truth["slo"]), (pair, None)]
    with ThreadPoolExecutor(workers) as pool:
        rows = list(pool.map(lambda j: triage_row(store, *j), jobs))
    for name, why in failed.items():
        truth = json.loads((corpus / name / "truth.json").read_text())
        rows.append({"pair": name, "half": name.split("-", 1)[0], "error": why,
                     "aa": truth["mechanism"] == "none", "scored_slo": truth.get("slo"),
                     "asked": "ingest", "origin_ok": False, "mechanism_ok": False})  # fmt: skip
    out: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        out.setdefault(str(row["half"]), []).append(row)
    return out


def _ece(called: list[dict[str, Any]]) -> float | None:
    """Expected calibration error of the stated confidence over the called fault rows; None
    when a row states none (the method gives no probability)."""
    if not called or any(r.get("confidence") is None for r in called):
        return None
    return calibration_bins([(float(r["confidence"]), bool(r["origin_ok"])) for r in called])[1]


def _tally(faults: list[dict[str, Any]], aas: list[dict[str, Any]]) -> dict[str, Any]:
    called = [r for r in faults if r.get("outcome") == "regression"]
    wrong = [
        r["confidence"] for r in called if not r["origin_ok"] and r.get("confidence") is not None
    ]
    return {
        "n_faults": len(faults),
        "origin": f"{sum(bool(r['origin_ok']) for r in faults)}/{len(faults)}",
        "mechanism": f"{sum(bool(r['mechanism_ok']) for r in faults)}/{len(faults)}",
        "aa_false_alarms": f"{sum(not r['origin_ok'] for r in aas)}/{len(aas)}",
        "ece": _ece(called),
        "median_confidence_wrong_origin": statistics.median(wrong) if wrong else None,
        "errors": sum(1 for r in faults + aas if r.get("error")),
    }


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """A half's figures in the paging SLO, over every SLO and apart per SLO (an A/A pair counts
    in each SLO it was read in), and the auto-picked SLO's figures on the fault pairs."""
    paged = [r for r in rows if r["asked"] != "auto" and not r["aa"]]
    aas = [r for r in rows if r["aa"]]
    out = _tally(paged, aas)
    out["pairs"] = len({r["pair"] for r in rows})
    slos = sorted({str(r["scored_slo"]) for r in paged if r.get("scored_slo")} | set(AA_SLOS))
    out["by_slo"] = {
        s: _tally([r for r in paged if r.get("scored_slo") == s],
                  [r for r in aas if r.get("scored_slo") == s])
        for s in slos
    }  # fmt: skip
    out["auto_slo"] = _tally([r for r in rows if r["asked"] == "auto"], [])
    return out


def print_half(half: str, s: dict[str, Any]) -> None:
    """One line for the half, then one per SLO and the auto pick."""
    print(f"== serving-{half}: {s['pairs']} pairs, {s['n_faults']} fault pairs, in the SLO that "
          f"paged: origin {s['origin']}  mechanism {s['mechanism']}  A/A false alarms "
          f"{s['aa_false_alarms']}  ECE {s['ece']}  wrong-origin confidence "
          f"{s['median_confidence_wrong_origin']}  errors {s['errors']}")  # fmt: skip
    for slo, t in s["by_slo"].items():
        print(f"   {slo:5s} faults {t['n_faults']}: origin {t['origin']}  mechanism "
              f"{t['mechanism']}  A/A false alarms {t['aa_false_alarms']}  ECE {t['ece']}  "
              f"wrong-origin confidence {t['median_confidence_wrong_origin']}")  # fmt: skip
    a = s["auto_slo"]
    print(f"   SLO left to the triage: origin {a['origin']}  mechanism {a['mechanism']}")


def print_rows(rows: list[dict[str, Any]]) -> None:
    for r in sorted(rows, key=lambda r: (r["pair"], r["asked"])):
        mark = "ok " if r["origin_ok"] and r["mechanism_ok"] else "o  " if r["origin_ok"] else "x  "
        print(f"   {mark}{r['pair']:<34} {r['asked']:5s} truth {r.get('truth')}  got "
              f"{r.get('called')} [{r.get('slo')}] {r.get('confidence')}  "
              f"{r.get('error') or r.get('reason', '')}")  # fmt: skip


def ordered(halves: dict[str, list[dict[str, Any]]]) -> list[str]:
    """The untuned (blind) half first."""
    return sorted(halves, key=lambda h: (h != "blind", h))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, required=True)
    ap.add_argument("--half", action="append", choices=("tuning", "blind", "fixture"))
    ap.add_argument("--rows", action="store_true", help="print every scored triage")
    ap.add_argument("--store", type=Path, help="the store to ingest into (default CORPUS/store)")
    args = ap.parse_args()
    halves = score(args.corpus, args.half, store=args.store)
    summary: dict[str, Any] = {}
    for half in ordered(halves):
        summary[half] = summarise(halves[half])
        print_half(half, summary[half])
        if args.rows:
            print_rows(halves[half])
    print(json.dumps({"bench": "serving_corpus", **summary}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
