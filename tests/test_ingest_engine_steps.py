"""Serving-engine steps (SGLang / vLLM annotations) as the request unit."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from workbench.store.attribution.rules import DEFAULT_RULES
from workbench.store.ingest import ingest

STAGES = ["ingress_us", "lowering_us", "scheduling_us", "execution_us", "assembly_us", "other_us"]


def _requests(store: Path, run_id: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = pq.read_table(
        store / "requests" / f"run_id={run_id}" / "part-0.parquet"
    ).to_pylist()
    for r in rows:
        assert sum(r[s] for s in STAGES) == pytest.approx(r["latency_us"], abs=1e-6)
    return rows


def test_sglang_decode_step(shared_traces: Path, tmp_path: Path) -> None:
    store = tmp_path / "s"
    report = ingest(store, shared_traces / "serving" / "sglang_qwen3_8b_decode_mi300x.json.gz",
                    run_id="sglang")  # fmt: skip
    assert report.request_unit == "engine_step"
    (step,) = _requests(store, "sglang")
    # execute_32_context_0(...)_generation_32(sq32...) holds step[DECODE bs=32]: one step.
    assert step["name"].startswith("execute_32_context_0(")
    assert (step["batch_size"], step["shape_key"]) == (32, "decode bs=32 toks=32")
    assert step["latency_us"] == pytest.approx(465716.634, abs=0.01)
    # The decode step replays a HIP graph whose 544 kernels carry the launch's correlation id.
    assert (report.graph_launches, report.graph_kernels, report.graph_unlinked) == (1, 544, 0)
    run = pq.read_table(store / "runs" / "sglang.parquet").to_pylist()[0]
    assert run["workload"] == "engine steps: decode bs=32 toks=32 x1"


def test_vllm_graph_capture(shared_traces: Path, tmp_path: Path) -> None:
    store = tmp_path / "s"
    report = ingest(store, shared_traces / "serving" / "vllm_decode_full_capture_mi300x.json.gz",
                    run_id="vllm")  # fmt: skip
    (step,) = _requests(store, "vllm")
    # The compiled-graph calls inside the capture are not steps of their own.
    assert step["name"] == "capture_32_FULL" and step["shape_key"] == "capture bs=32"
    assert step["batch_size"] == 32 and report.request_unit == "engine_step"


def _span(name: str, ts: float, dur: float, cat: str = "user_annotation", **args: Any) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": 1,
            "args": args}  # fmt: skip


def _serving_trace(path: Path) -> list[tuple[str, int, int | None]]:
    """An SGLang-shaped trace: extend (prefill) and decode steps, each launching a kernel."""
    steps = [("EXTEND", 4, 2048), ("DECODE", 4, None), ("DECODE", 4, None),
             ("EXTEND", 2, 512), ("DECODE", 6, None), ("DECODE", 6, None)]  # fmt: skip
    events: list[dict] = []
    t = 1000.0
    for i, (phase, bs, toks) in enumerate(steps):
        name = f"step[{phase} bs={bs}" + (f" toks={toks}]" if toks else "]")
        dur = 900.0 if phase == "EXTEND" else 150.0 + 10 * bs
        events.append(_span(name, t, dur))
        events.append(_span("hipLaunchKernel", t + 5, 5, cat="cuda_runtime", correlation=i + 1))
        events.append({**_span("gemm", t + 12, dur - 20, cat="kernel", correlation=i + 1),
                       "pid": 0, "tid": 7})  # fmt: skip
        t += dur + 50
    path.write_text(json.dumps({"traceEvents": events}))
    return [(p.lower(), bs, toks) for p, bs, toks in steps]


def test_steps_carry_phase_batch_and_tokens(tmp_path: Path) -> None:
    trace = tmp_path / "engine.json"
    expected = _serving_trace(trace)
    store = tmp_path / "s"
    ingest(store, trace, run_id="engine")
    rows = sorted(_requests(store, "engine"), key=lambda r: r["start_us"])
    got = [(r["shape_key"], r["batch_size"], r["batch_id"]) for r in rows]
    want = [
        (f"{ph} bs={bs}" + (f" toks={tk}" if tk else ""), bs, i)
        for i, (ph, bs, tk) in enumerate(expected)
    ]
    assert got == want
    assert all(r["execution_us"] > 0 for r in rows)
    out = subprocess.run(
        [sys.executable, "-m", "workbench", "runs", "--store", str(store)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    line = next(x for x in out.splitlines() if x.startswith("engine"))
    assert "engine steps: decode bs=4 x2, decode bs=6 x2, extend bs=2 toks=512 x1" in line
    assert " 6 " in line  # n: six steps


def test_step_names_are_rules_not_code(tmp_path: Path) -> None:
    trace = tmp_path / "engine.json"
    _serving_trace(trace)
    text = DEFAULT_RULES.read_text()
    cut = text.index("[[requests.engine_step]]")
    end = text.index("# A request's shape_key is its input:")
    rules = tmp_path / "rules.toml"
    rules.write_text(text[:cut] + text[end:])
    store = tmp_path / "s"
    report = ingest(store, trace, run_id="plain", rules_path=rules)
    # Without the engine_step rules the steps are plain annotations: no batch or phase.
    assert report.request_unit == "annotation"
    assert {r["batch_size"] for r in _requests(store, "plain")} == {None}
