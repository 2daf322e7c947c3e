"""Record serving-loop fault pairs: the continuous-batching loop of this package, profiled.

Needs the PyTorch CPU wheel (not a project dependency; run outside the project venv):
    python3 -m venv /tmp/torchvenv && /tmp/torchvenv/bin/pip install torch==2.13.0 numpy
    /tmp/torchvenv/bin/python bench/corpus/serving/record.py --out /work/serving_corpus --nice 10
    /tmp/torchvenv/bin/python bench/corpus/serving/record.py --out tests/fixtures/serving_pairs \
        --half fixtures

Writes DIR/<pair>/{failing,comparator}/{trace.json.gz, otlp.json, vllm_bench.json} and
DIR/<pair>/truth.json. A pair's two runs are two live processes that serve their workload's
segments in turns (A B, B A, A B, ...), so machine noise falls on both alike.
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # bench/corpus: this package imports as `serving`

from serving.faults import Pair, RunConfig, fixture_pairs, plan, smoke_pair  # noqa: E402
from serving.records_out import drop_token_events  # noqa: E402
from serving.verify import check_run, summary  # noqa: E402

# The real-fault corpus recorder's worker protocol (marked stdout lines) and its fixtures'
# gzip (zero mtime). Loaded by path: this file is also named record.py.
_spec = importlib.util.spec_from_file_location("corpus_record", HERE.parent / "record.py")
assert _spec is not None and _spec.loader is not None
corpus_record = importlib.util.module_from_spec(_spec)
sys.modules["corpus_record"] = corpus_record  # its dataclasses look their module up
_spec.loader.exec_module(corpus_record)
from make_torch_fixtures import gzip_to  # noqa: E402  (on sys.path via corpus_record)

ROLES = ("failing", "comparator")


def _set_nice(n: int) -> None:
    if not n:
        return
    try:
        Path("/proc/self/autogroup").write_text(f"{n}\n")
    except OSError:
        os.nice(n)


def worker(out: Path, cfg: RunConfig) -> None:
    """One run: warm up, then serve each segment on the driver's "go" under the profiler."""
    from torch.profiler import ProfilerActivity, profile

    from serving.engine import Engine
    from serving.records_out import write_aiperf, write_otlp, write_vllm_bench
    from serving.workload import build

    reqs = build(cfg)
    engine = Engine(cfg)
    engine.warm_up()
    busy = 0.0
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        corpus_record._say("ready")
        for seg in range(cfg.segments):
            if sys.stdin.readline().strip() != "go":
                raise SystemExit("worker: the driver went away")
            t0 = time.perf_counter()
            engine.serve([r for r in reqs if r.segment == seg])
            busy += time.perf_counter() - t0
            corpus_record._say("done")
    with tempfile.TemporaryDirectory(prefix="serving_trace_") as tmp:
        raw = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(raw))
        gzip_to(raw, out / "trace.json.gz")
    write_otlp(out / "otlp.json", reqs, cfg)
    write_vllm_bench(out / "vllm_bench.json", reqs, cfg, busy)
    write_aiperf(out / "aiperf.jsonl", reqs)
    (out / "run.json").write_text(json.dumps(asdict(cfg), indent=1))


def _start(cfg: RunConfig, out: Path, nice: int, name: str) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONHASHSEED="0")
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", str(out),
           "--run", json.dumps(asdict(cfg)), "--autogroup-nice", str(nice)]  # fmt: skip
    proc = subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, start_new_session=True)  # fmt: skip
    corpus_record._await(proc, "ready", name)
    return proc


def slim_trace(path: Path) -> None:
    """Drop aten ops nested in another aten op (their parents stay, and every annotation and
    compile event), the args of the rest, and time below 0.1 us, so the repo's fixtures stay
    small. Rewrites path in place; idempotent."""
    with gzip.open(path, "rt") as f:
        doc = json.load(f)
    ops = sorted(
        (e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "cpu_op"
         and str(e.get("name", "")).startswith("aten::")),
        key=lambda e: (e["tid"], e["ts"], -e.get("dur", 0.0)),
    )  # fmt: skip
    nested: set[int] = set()
    stack: list[dict[str, Any]] = []
    for e in ops:
        while stack and (stack[-1]["tid"] != e["tid"]
                         or stack[-1]["ts"] + stack[-1].get("dur", 0.0) <= e["ts"]):  # fmt: skip
            stack.pop()
        if stack:
            nested.add(id(e))
        stack.append(e)
    doc["traceEvents"] = [e for e in doc["traceEvents"] if id(e) not in nested]
    for e in doc["traceEvents"]:
        if e.get("ph") != "X":
            continue
        if e.get("cat") == "cpu_op":
            e.pop("args", None)  # input metadata and correlation ids: no GPU to correlate
        # 0.1 us: both ends rounded (monotone), so nesting and order survive.
        end = round(e["ts"] + e.get("dur", 0.0), 1)
        e["ts"] = round(e["ts"], 1)
        e["dur"] = round(end - e["ts"], 1)
    with tempfile.TemporaryDirectory(prefix="serving_slim_") as tmp:
        raw = Path(tmp) / "trace.json"
        raw.write_text(json.dumps(doc, separators=(",", ":")))
        gzip_to(raw, path)


def record_pair(pair: Pair, root: Path, nice: int, slim: bool, check: bool = True) -> None:
    """Both runs live at once, serving their segments in ABBA turns; then checked (about a
    minute a run of 240 requests: pure-Python reading of the whole trace)."""
    runs = {"failing": pair.failing, "comparator": pair.comparator}
    if pair.failing.segments != pair.comparator.segments:
        raise SystemExit(f"{pair.pair_id}: both runs must have as many segments")
    procs = {}
    for role in ROLES:
        (root / pair.pair_id / role).mkdir(parents=True, exist_ok=True)
        procs[role] = _start(runs[role], root / pair.pair_id / role, nice, f"{pair.pair_id}.{role}")
    for seg in range(pair.failing.segments):
        for role in ROLES if seg % 2 == 0 else ROLES[::-1]:
            proc = procs[role]
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
            corpus_record._await(proc, "done", f"{pair.pair_id}.{role}")
    for role, proc in procs.items():
        if proc.wait() != 0:
            raise SystemExit(f"{pair.pair_id}.{role}: the worker failed (exit {proc.returncode})")
    truth = pair.truth()
    (root / pair.pair_id / "truth.json").write_text(json.dumps(truth, indent=1) + "\n")
    for role in ROLES:
        d = root / pair.pair_id / role
        if slim:
            slim_trace(d / "trace.json.gz")
            drop_token_events(d)
        checked = check_run(d) if check else None
        print(f"  {pair.pair_id:34s} {role:10s} {summary(d, checked)}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--out", type=Path)
    parser.add_argument("--half", action="append", choices=("tuning", "blind", "fixtures", "smoke"))
    parser.add_argument("--only", action="append", help="record only pairs whose id holds this")
    parser.add_argument("--nice", type=int, default=0, help="autogroup niceness of the runs")
    parser.add_argument(
        "--no-check",
        action="store_true",
        help="skip the trace-vs-records check of each run (half the time)",
    )
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--run", help=argparse.SUPPRESS)
    parser.add_argument("--autogroup-nice", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        _set_nice(args.autogroup_nice)
        raw = json.loads(args.run)
        for key, value in raw.items():
            if isinstance(value, list):
                raw[key] = tuple(value)
        worker(args.worker, RunConfig(**raw))
        return
    if args.out is None:
        parser.error("--out is required")
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    for half in args.half or ["tuning", "blind"]:
        pairs = {"fixtures": fixture_pairs, "smoke": lambda: [smoke_pair()]}.get(half)
        for pair in pairs() if pairs else plan(half):
            if args.only and not any(o in pair.pair_id for o in args.only):
                continue
            if (args.out / pair.pair_id / "truth.json").exists():
                continue  # recorded already: rerunning resumes
            record_pair(
                pair,
                args.out,
                args.nice,
                slim=half in ("fixtures", "smoke"),
                check=not args.no_check,
            )
            print(f"{time.perf_counter() - t0:7.1f}s  {pair.pair_id}", flush=True)


if __name__ == "__main__":
    main()
