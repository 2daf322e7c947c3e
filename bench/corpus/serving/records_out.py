"""The loop's own per-request measurements written as vLLM-style OTLP request spans, as a
`vllm bench serve --save-detailed` result and as an AIPerf profile_export.jsonl (see
/work/helpers/FORMATS.md)."""

from __future__ import annotations

import hashlib
import itertools
import json
import time
from pathlib import Path

from .faults import RunConfig
from .workload import Request

MODEL = "workbench/tiny-serving-lm"


def _attr(key: str, value: str | int | float) -> dict[str, object]:
    if isinstance(value, str):
        return {"key": key, "value": {"stringValue": value}}
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    return {"key": key, "value": {"doubleValue": value}}


def _ns(us: float) -> str:
    return str(round(us * 1000))


def _hex(text: str, n: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:n]


def _span(r: Request) -> dict[str, object]:
    assert r.finish_us is not None and r.first_scheduled_us is not None and r.token_us
    first, last = r.token_us[0], r.token_us[-1]
    attrs = [
        _attr("gen_ai.request.id", r.rid),
        _attr("gen_ai.response.model", MODEL),
        _attr("gen_ai.usage.prompt_tokens", len(r.prompt)),
        _attr("gen_ai.usage.completion_tokens", len(r.outputs)),
        _attr("gen_ai.request.max_tokens", r.max_tokens),
        _attr("gen_ai.latency.time_in_queue", (r.first_scheduled_us - r.arrival_us) / 1e6),
        _attr("gen_ai.latency.time_to_first_token", (first - r.arrival_us) / 1e6),
        _attr("gen_ai.latency.e2e", (r.finish_us - r.arrival_us) / 1e6),
        _attr("gen_ai.latency.time_in_model_prefill", (first - r.first_scheduled_us) / 1e6),
        _attr("gen_ai.latency.time_in_model_decode", (last - first) / 1e6),
        _attr("gen_ai.latency.time_in_model_inference", (last - r.first_scheduled_us) / 1e6),
        # Not a vLLM attribute: the engine's count of recompute preemptions.
        _attr("workbench.preemptions", r.preemptions),
    ]
    # OTLP spans carry no per-token times: each token's emission is a span event.
    events = [{"timeUnixNano": _ns(t), "name": "token"} for t in r.token_us]
    return {
        "traceId": _hex(r.rid, 32),
        "spanId": _hex(r.rid + "/span", 16),
        "name": "llm_request",
        "kind": 2,
        "startTimeUnixNano": _ns(r.arrival_us),
        "endTimeUnixNano": _ns(r.finish_us),
        "attributes": attrs,
        "events": events,
        "status": {},
    }


def write_otlp(path: Path, reqs: list[Request], cfg: RunConfig) -> None:
    """One ExportTraceServiceRequest with one llm_request span per request."""
    resource = {
        "attributes": [
            _attr("service.name", "workbench-serving-loop"),
            _attr("workbench.fault", cfg.fault),
        ]
    }
    doc = {
        "resourceSpans": [
            {
                "resource": resource,
                "scopeSpans": [
                    {"scope": {"name": "vllm.llm_engine"}, "spans": [_span(r) for r in reqs]}
                ],
            }
        ]
    }
    path.write_text(json.dumps(doc, separators=(",", ":")))


def write_vllm_bench(path: Path, reqs: list[Request], cfg: RunConfig, wall_s: float) -> None:
    """The --save-detailed result. start_times are epoch seconds (upstream: perf_counter), and
    request_ids is ours too: both let the records join the trace."""
    ttfts = [(r.token_us[0] - r.arrival_us) / 1e6 for r in reqs]
    itls = [[(b - a) / 1e6 for a, b in zip(r.token_us, r.token_us[1:], strict=False)]
            for r in reqs]  # fmt: skip
    lat = [((r.finish_us or r.arrival_us) - r.arrival_us) / 1e6 for r in reqs]
    doc = {
        "date": time.strftime("%Y%m%d-%H%M%S"),
        "endpoint_type": "workbench-loop",
        "backend": "workbench-loop",
        "label": cfg.fault,
        "model_id": MODEL,
        "tokenizer_id": "workbench/bpe-512",
        "num_prompts": len(reqs),
        "request_rate": cfg.rate_per_s,
        "burstiness": 1.0,
        "max_concurrency": None,
        "duration": wall_s,
        "completed": len(reqs),
        "failed": 0,
        "total_input_tokens": sum(len(r.prompt) for r in reqs),
        "total_output_tokens": sum(len(r.outputs) for r in reqs),
        "input_lens": [len(r.prompt) for r in reqs],
        "output_lens": [len(r.outputs) for r in reqs],
        "ttfts": ttfts,
        "itls": itls,
        "latencies": lat,
        "start_times": [r.arrival_us / 1e6 for r in reqs],
        "generated_texts": ["".join(r.streamed) for r in reqs],
        "errors": ["" for _ in reqs],
        "request_ids": [r.rid for r in reqs],
    }
    path.write_text(json.dumps(doc, separators=(",", ":")))


def _aiperf_line(
    i: int, rid: str, arrival_us: float, token_us: list[float], end_us: float, isl: int, osl: int
) -> str:
    """One profile_export.jsonl record (AIPerf's MetricRecordInfo): epoch ns metadata, metrics
    in ms; one response per token, so inter_chunk_latency has osl - 1 gaps."""
    start_ns, end_ns = round(arrival_us * 1000), round(end_us * 1000)
    ns = [round(t * 1000) for t in token_us]

    def ms(n: int) -> float:
        return round(n * 1e-6, 6)  # whole ns: no float tail

    metrics: dict[str, dict[str, object]] = {
        "input_sequence_length": {"value": isl, "unit": "tokens"},
        "time_to_first_token": {"value": ms(ns[0] - start_ns), "unit": "ms"},
        "request_latency": {"value": ms(end_ns - start_ns), "unit": "ms"},
        "output_sequence_length": {"value": osl, "unit": "tokens"},
        "output_token_count": {"value": osl, "unit": "tokens"},
    }  # fmt: skip
    if len(ns) > 1:
        metrics["inter_chunk_latency"] = {
            "value": [ms(b - a) for a, b in itertools.pairwise(ns)],
            "unit": "ms",
        }
        metrics["time_to_second_token"] = {"value": ms(ns[1] - ns[0]), "unit": "ms"}
        metrics["inter_token_latency"] = {
            "value": round((end_ns - ns[0]) * 1e-6 / (osl - 1), 6), "unit": "ms"}  # fmt: skip
    meta = {
        "session_num": i, "x_request_id": rid, "x_correlation_id": _uuid(rid),
        "conversation_id": f"c{i}", "turn_index": 0, "request_start_ns": start_ns,
        "request_ack_ns": None, "request_end_ns": end_ns, "worker_id": "worker_0",
        "record_processor_id": "record_processor_0", "benchmark_phase": "profiling",
        "was_cancelled": False, "cancellation_time_ns": None,
    }  # fmt: skip
    return json.dumps({"metadata": meta, "metrics": metrics, "error": None}, separators=(",", ":"))


def _uuid(rid: str) -> str:
    h = _hex(rid + "/correlation", 32)
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def write_aiperf(path: Path, reqs: list[Request]) -> None:
    """One line per request in arrival order (x_request_id = the engine's request id)."""
    lines = []
    for i, r in enumerate(reqs):
        assert r.finish_us is not None and r.token_us
        lines.append(_aiperf_line(i, r.rid, r.arrival_us, r.token_us, r.finish_us,
                                  len(r.prompt), len(r.outputs)))  # fmt: skip
    path.write_text("\n".join(lines) + "\n")


def aiperf_from_otlp(run: Path) -> None:
    """aiperf.jsonl of a run recorded before the loop wrote it, from the same measurements in
    its otlp.json (arrival, finish, the per-token events, the token counts)."""
    doc = json.loads((run / "otlp.json").read_text())
    lines = []
    for i, sp in enumerate(doc["resourceSpans"][0]["scopeSpans"][0]["spans"]):
        attrs = {a["key"]: next(iter(a["value"].values())) for a in sp["attributes"]}
        tokens = [int(e["timeUnixNano"]) / 1000 for e in sp["events"] if e["name"] == "token"]
        lines.append(_aiperf_line(
            i, str(attrs["gen_ai.request.id"]), int(sp["startTimeUnixNano"]) / 1000, tokens,
            int(sp["endTimeUnixNano"]) / 1000, int(attrs["gen_ai.usage.prompt_tokens"]),
            int(attrs["gen_ai.usage.completion_tokens"])))  # fmt: skip
    (run / "aiperf.jsonl").write_text("\n".join(lines) + "\n")


def drop_token_events(run: Path) -> None:
    """otlp.json without the per-token span events (as vLLM writes it), for the small fixtures:
    their token times are in aiperf.jsonl and vllm_bench.json."""
    doc = json.loads((run / "otlp.json").read_text())
    for sp in doc["resourceSpans"][0]["scopeSpans"][0]["spans"]:
        sp.pop("events", None)
    (run / "otlp.json").write_text(json.dumps(doc, separators=(",", ":")))
