"""Score the LLM-serving verdict on recorded pairs (bench/corpus/serving/record.py output):
each pair's two runs ingested with their OTLP records, triaged, and the primary SLO's origin
and mechanism compared with truth.json; each half (blind first) reported apart.

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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, required=True)
    args = ap.parse_args()
    halves: dict[str, list[dict[str, object]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for pair in sorted(p for p in args.corpus.iterdir() if (p / "truth.json").is_file()):
            half = pair.name.split("-", 1)[0]
            row = score_pair(pair, Path(tmp) / "store")
            halves.setdefault(half, []).append(row)
            print(json.dumps(row), flush=True)
    summary: dict[str, object] = {}
    for half in sorted(halves, key=lambda h: (h != "blind", h)):  # the untuned half leads
        rows = halves[half]
        faults = [r for r in rows if not r.get("aa")]
        aas = [r for r in rows if r.get("aa")]
        s = {
            "origin": f"{sum(bool(r.get('origin_ok')) for r in faults)}/{len(faults)}",
            "mechanism": f"{sum(bool(r.get('mechanism_ok')) for r in faults)}/{len(faults)}",
            "aa_false_alarms": f"{sum(not r.get('origin_ok') for r in aas)}/{len(aas)}",
        }
        print(f"{half}: origin {s['origin']}  mechanism {s['mechanism']}  "
              f"A/A false alarms {s['aa_false_alarms']}")  # fmt: skip
        summary[half] = s
    print(json.dumps({"bench": "serving_corpus", **summary}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
