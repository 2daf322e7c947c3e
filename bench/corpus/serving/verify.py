"""Checks a recorded run's trace against its records, and its TTFT / ITL percentiles.
Standard library only, so it runs under either interpreter."""

from __future__ import annotations

import bisect
import gzip
import json
import re
from dataclasses import dataclass
from pathlib import Path

_SEQ = re.compile(r"llm\.seq#(\S+) (decode|prefill (\d+):(\d+))$")
TOL_US = 2.0  # start_times are epoch seconds as doubles: ~0.2 us resolution


@dataclass
class Span:
    name: str
    start: float  # epoch us
    end: float


def trace_spans(path: Path) -> list[Span]:
    """The llm.* spans of a run's trace, in epoch microseconds, by start."""
    with gzip.open(path, "rt") as f:
        doc = json.load(f)
    base = doc.get("baseTimeNanoseconds", 0) / 1000.0
    out = [
        Span(e["name"], base + e["ts"], base + e["ts"] + e.get("dur", 0.0))
        for e in doc["traceEvents"]
        if e.get("ph") == "X" and str(e.get("name", "")).startswith("llm.")
    ]
    return sorted(out, key=lambda s: s.start)


def token_times(run: Path) -> tuple[list[str], list[float], list[list[float]]]:
    """Request ids, arrivals and token emission times (epoch us) from vllm_bench.json."""
    doc = json.loads((run / "vllm_bench.json").read_text())
    arrivals = [s * 1e6 for s in doc["start_times"]]
    tokens = []
    for a, ttft, itl in zip(arrivals, doc["ttfts"], doc["itls"], strict=True):
        t = [a + ttft * 1e6]
        for g in itl:
            t.append(t[-1] + g * 1e6)
        tokens.append(t)
    return doc["request_ids"], arrivals, tokens


def check_run(run: Path) -> dict[str, int]:
    """SystemExit naming the first disagreement: every token must fall in a detokenize span
    of a step the request was a member of; every request's prefill chunks must cover it."""
    spans = trace_spans(run / "trace.json.gz")
    steps = [s for s in spans if s.name.startswith("llm.step#")]
    detok = [s for s in spans if s.name == "llm.detokenize"]
    members: dict[int, set[str]] = {}
    starts = [s.start for s in steps]
    n_seq = 0
    for s in spans:
        m = _SEQ.match(s.name)
        if m:
            n_seq += 1
            k = bisect.bisect_right(starts, s.start) - 1
            if not (steps[k].start <= s.start and s.end <= steps[k].end):
                raise SystemExit(f"{run}: {s.name} outside every llm.step")
            members.setdefault(k, set()).add(m.group(1))
    dstarts = [d.start for d in detok]
    ids, arrivals, tokens = token_times(run)
    otlp = json.loads((run / "otlp.json").read_text())
    spans_otlp = otlp["resourceSpans"][0]["scopeSpans"][0]["spans"]
    preempt = sum(
        int(a["value"]["intValue"]) for sp in spans_otlp for a in sp["attributes"]
        if a["key"] == "workbench.preemptions"
    )  # fmt: skip
    for rid, arr, ts in zip(ids, arrivals, tokens, strict=True):
        for i, t in enumerate(ts):
            j = bisect.bisect_right(dstarts, t + TOL_US) - 1
            if j < 0 or not (detok[j].start - TOL_US <= t <= detok[j].end + TOL_US):
                raise SystemExit(f"{run}: {rid} token {i} at {t:.1f} in no llm.detokenize span")
            k = bisect.bisect_right(starts, detok[j].start) - 1
            if rid not in members.get(k, set()):
                raise SystemExit(f"{run}: {rid} token {i} in step {k} it was not a member of")
        if ts[0] < arr:
            raise SystemExit(f"{run}: {rid} first token before arrival")
    n_pre = sum(1 for s in spans if s.name.startswith("llm.preempt#"))
    if n_pre != preempt:
        raise SystemExit(f"{run}: {n_pre} llm.preempt spans, records say {preempt} preemptions")
    return {"steps": len(steps), "seq": n_seq, "preempt": n_pre, "requests": len(ids)}


def _q(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))] if xs else float("nan")


def summary(run: Path, checked: dict[str, int] | None = None) -> str:
    """One line: requests, p50/p99 TTFT and ITL in ms, and (from check_run's counts, when the
    run was checked) steps and preemptions."""
    doc = json.loads((run / "vllm_bench.json").read_text())
    ttft = [x * 1e3 for x in doc["ttfts"]]
    itl = [x * 1e3 for g in doc["itls"] for x in g]
    counts = (f"  steps {checked['steps']} seq {checked['seq']} preempt {checked['preempt']}"
              if checked else "  (not checked)")  # fmt: skip
    return (f"n={len(ttft)} TTFT p50 {_q(ttft, .5):7.1f} p99 {_q(ttft, .99):7.1f} ms  "
            f"ITL p50 {_q(itl, .5):6.1f} p99 {_q(itl, .99):6.1f} ms" + counts)  # fmt: skip
