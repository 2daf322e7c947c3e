"""Score the LLM-serving verdict on recorded pairs (bench/corpus/serving/record.py output):
each pair's two runs ingested (trace + vLLM-bench records), triaged, and the primary SLO's
origin and mechanism compared with truth.json; each half (blind first) reported apart, and
within it each paging SLO apart. bench/localize.py --serving-corpus reports the same.

    uv run python bench/serving_corpus.py --corpus /work/serving_corpus
Ends with one JSON line.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path


def _workbench(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "workbench", *argv], capture_output=True,
                          text=True, check=False)  # fmt: skip


def score_pair(pair: Path, store: Path) -> dict[str, object]:
    truth = json.loads((pair / "truth.json").read_text())
    for role in ("failing", "comparator"):
        got = _workbench("ingest", str(pair / role / "trace.json.gz"), "--records",
                         str(pair / role / "vllm_bench.json"), "--store", str(store),
                         "--run-id", f"{pair.name}-{role}")  # fmt: skip
        if got.returncode != 0:
            return {"pair": pair.name, "error": got.stderr.strip()}
    got = _workbench("triage", "--store", str(store), "--failing", f"{pair.name}-failing",
                     "--comparator", f"{pair.name}-comparator", "--json")  # fmt: skip
    if got.returncode != 0:
        return {"pair": pair.name, "error": got.stderr.strip()}
    doc = json.loads(got.stdout)
    aa = truth["mechanism"] == "none"
    called = doc["verdict"].get("outcome") == "regression"
    return {
        "pair": pair.name,
        "truth": f"{truth['origin_stage']}/{truth['mechanism']}",
        "truth_slo": truth.get("slo"),
        "slo": doc["primary_slo"],
        "called": f"{doc['origin_stage']}/{doc['mechanism']}"
        if called
        else doc["verdict"].get("outcome"),
        "origin_ok": (not called)
        if aa
        else called and doc["origin_stage"] == truth["origin_stage"],
        "mechanism_ok": (not called) if aa else called and doc["mechanism"] == truth["mechanism"],
        "aa": aa,
    }


def score(corpus: Path) -> dict[str, list[dict[str, object]]]:
    """Every pair of the corpus scored, by half (the pair name's prefix)."""
    halves: dict[str, list[dict[str, object]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for pair in sorted(p for p in corpus.iterdir() if (p / "truth.json").is_file()):
            row = score_pair(pair, Path(tmp) / "store")
            halves.setdefault(pair.name.split("-", 1)[0], []).append(row)
            print(json.dumps(row), flush=True)
    return halves


def _tally(rows: list[dict[str, object]]) -> dict[str, object]:
    faults = [r for r in rows if not r.get("aa")]
    aas = [r for r in rows if r.get("aa")]
    return {
        "n_faults": len(faults),
        "origin": f"{sum(bool(r.get('origin_ok')) for r in faults)}/{len(faults)}",
        "mechanism": f"{sum(bool(r.get('mechanism_ok')) for r in faults)}/{len(faults)}",
        "aa_false_alarms": f"{sum(not r.get('origin_ok') for r in aas)}/{len(aas)}",
    }


def summarise(rows: list[dict[str, object]]) -> dict[str, object]:
    """A half's figures over every pair, and apart per paging SLO (the truth's: TTFT, ITL,
    TPOT), so a method right on TTFT faults cannot hide being wrong on ITL ones."""
    out = _tally(rows)
    slos = sorted({str(r.get("truth_slo")) for r in rows if not r.get("aa")})
    out["by_slo"] = {s: _tally([r for r in rows if r.get("truth_slo") == s]) for s in slos}
    return out


def print_half(half: str, s: dict[str, object]) -> None:
    """One line for the half, then one per SLO."""
    print(f"serving {half}: origin {s['origin']}  mechanism {s['mechanism']}  "
          f"A/A false alarms {s['aa_false_alarms']}")  # fmt: skip
    by_slo = s["by_slo"]
    assert isinstance(by_slo, dict)
    for slo, t in by_slo.items():
        print(f"  {slo:5s} faults: origin {t['origin']}  mechanism {t['mechanism']}")


def ordered(halves: dict[str, list[dict[str, object]]]) -> list[str]:
    """The untuned (blind) half first."""
    return sorted(halves, key=lambda h: (h != "blind", h))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, required=True)
    args = ap.parse_args()
    halves = score(args.corpus)
    summary: dict[str, object] = {}
    for half in ordered(halves):
        summary[half] = summarise(halves[half])
        print_half(half, summary[half])  # type: ignore[arg-type]
    print(json.dumps({"bench": "serving_corpus", **summary}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
