"""Readers of per-request serving records (vLLM bench, AIPerf, OTLP spans): the
hand-written fixtures read to the microsecond, recognition by content, and hostile input."""

from __future__ import annotations

import gzip
import itertools
import pathlib
from collections.abc import Callable
from types import ModuleType

import pytest

from workbench.errors import WorkbenchError
from workbench.sample.llm import RECORDED_PAIR
from workbench.store.serving import aiperf, otlp, vllm_bench
from workbench.store.serving.records import ServingRecord, ServingRecords

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
HERE = FIXTURES / "serving_records"
VLLM = HERE / "vllm_bench_detailed.json"
AIPERF = HERE / "aiperf_profile_export.jsonl"
VLLM_OURS = HERE / "vllm_bench_recorder.json"
OTLP = HERE / "otlp_vllm_spans.json"
OTLP_LINES = HERE / "otlp_collector_file.jsonl"
OTLP_OURS = HERE / "otlp_recorder_spans.json"

OWN: dict[ModuleType, list[pathlib.Path]] = {
    vllm_bench: [VLLM, VLLM_OURS],
    aiperf: [AIPERF],
    otlp: [OTLP, OTLP_LINES, OTLP_OURS],
}
US = 0.5  # "to the microsecond": epoch microseconds as float64 are exact to 0.25 us


def by_id(recs: ServingRecords) -> dict[str, ServingRecord]:
    return {r.request_id: r for r in recs.records}


def gaps(rec: ServingRecord) -> tuple[float, list[float]]:
    """TTFT and the inter-token latencies the record implies, in microseconds."""
    t = rec.token_us
    return t[0] - rec.arrival_us, [b - a for a, b in itertools.pairwise(t)]


def assert_times(rec: ServingRecord, ttft_us: float, itls_us: list[float]) -> None:
    ttft, itls = gaps(rec)
    assert ttft == pytest.approx(ttft_us, abs=US)
    assert len(itls) == len(itls_us)
    for got, want in zip(itls, itls_us, strict=True):
        assert got == pytest.approx(want, abs=US)


# ---- the fixtures, each value computed here from the file's literal numbers


def test_vllm_bench_reads_ttft_itls_and_meta() -> None:
    recs = vllm_bench.read(VLLM)
    assert recs.clock == "relative" and recs.source_format == vllm_bench.NAME == "vllm-bench-json"
    assert recs.meta["model"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert recs.meta["backend"] == "vllm"
    r = by_id(recs)
    assert list(r) == ["0", "1", "2"]
    assert r["0"].arrival_us == pytest.approx(1000.25e6, abs=US)
    assert_times(r["0"], 0.0215e6, [0.0081e6, 0.0079e6, 0.0102e6])
    assert r["0"].end_us - r["0"].arrival_us == pytest.approx(0.0477e6, abs=US)
    assert (r["0"].input_tokens, r["0"].output_tokens, r["0"].ok) == (32, 4, True)
    # 5 tokens in 3 chunks: the chunk times are what the file gives.
    assert_times(r["1"], 0.0342e6, [0.0095e6, 0.0088e6])
    assert r["1"].output_tokens == 5
    assert r["1"].extra["client_queue_us"] == repr(0.0015 * 1e6)
    assert not r["2"].ok and r["2"].token_us == []
    assert "ClientConnectorError" in r["2"].extra["error"]


def test_aiperf_reads_ms_and_us_units_and_skips_warmup() -> None:
    recs = aiperf.read(AIPERF)
    assert recs.clock == "epoch" and recs.source_format == aiperf.NAME == "aiperf-jsonl"
    assert recs.warnings == ["1 warm-up requests skipped"]
    r = by_id(recs)
    assert "c35e4b1b-0000-4750-b875-000000000000" not in r  # the warm-up line
    a = r["7609a2e7-aa53-4ab1-98f4-f35ecafefd25"]
    assert a.arrival_us == pytest.approx(1759813207532900363 / 1000, abs=US)
    assert_times(a, 255.886568e3, [4.898437e3, 5.316006e3, 4.801489e3])
    assert a.end_us - a.arrival_us == pytest.approx(270.9025e3, abs=US)
    assert (a.input_tokens, a.output_tokens) == (550, 4)
    b = r["0b1c2d3e-4f50-4617-8899-aabbccddeeff"]
    assert_times(b, 120.5e3, [6250.0, 7125.0, 5000.0, 6000.0])  # this one's ICL is in "us"
    assert b.output_tokens == 6  # output_sequence_length: output + reasoning tokens
    c = r["c35e4b1b-6775-4750-b875-94cd68e5ec15"]
    assert not c.ok and c.token_us == [] and c.input_tokens == 550
    want = (1759879161119772754 - 1759879161119147826) / 1e3
    assert c.end_us - c.arrival_us == pytest.approx(want, abs=US)


def test_vllm_bench_recorder_epoch_starts_and_ids() -> None:
    recs = vllm_bench.read(VLLM_OURS)
    assert recs.clock == "epoch" and recs.warnings == []
    r = by_id(recs)
    assert list(r) == ["req-7", "req-8"]
    assert r["req-7"].arrival_us == pytest.approx(1765101600.5e6, abs=US)
    assert_times(r["req-7"], 0.018e6, [0.006e6, 0.0065e6])
    assert r["req-8"].arrival_us == pytest.approx(1765101600.625e6, abs=US)
    assert_times(r["req-8"], 0.0215e6, [0.007e6])
    assert r["req-8"].end_us - r["req-8"].arrival_us == pytest.approx(0.029e6, abs=US)


def test_otlp_reads_vllm_spans_and_skips_others() -> None:
    recs = otlp.read(OTLP)
    assert recs.clock == "epoch" and recs.source_format == otlp.NAME == "otlp-json"
    assert recs.meta == {"backend": "vllm", "model": "meta-llama/Llama-3.1-8B-Instruct"}
    r = by_id(recs)
    assert list(r) == ["cmpl-a1", "cmpl-b2"]  # the HTTP span is not a request
    a = r["cmpl-a1"]
    assert a.arrival_us == pytest.approx(1735732800000000000 / 1000, abs=US)
    assert_times(a, 0.025e6, [])
    assert a.end_us - a.arrival_us == pytest.approx(0.148e6, abs=US)
    assert a.queue_us == pytest.approx(2000.0) and a.prefill_us == pytest.approx(20000.0)
    assert a.decode_us == pytest.approx(120000.0)
    assert (a.input_tokens, a.output_tokens) == (12, 8)  # intValue as a string and a number
    b = r["cmpl-b2"]
    assert not b.ok and b.extra["error"] == "aborted by client"
    assert b.arrival_us == pytest.approx(1735732800050000000 / 1000, abs=US)


def test_otlp_json_lines_of_exports() -> None:
    recs = otlp.read(OTLP_LINES)
    r = by_id(recs)
    assert list(r) == ["chatcmpl-c3", "chatcmpl-d4"]
    assert_times(r["chatcmpl-c3"], 0.0125e6, [])
    assert r["chatcmpl-c3"].queue_us == 0.0
    d = r["chatcmpl-d4"]  # no e2e attribute: the span's end is the request's end
    assert d.end_us - d.arrival_us == pytest.approx(
        (1735732801070000000 - 1735732801020000000) / 1e3, abs=US
    )
    assert d.ok and d.output_tokens == 1


def test_otlp_recorder_token_events() -> None:
    recs = otlp.read(OTLP_OURS)
    r = by_id(recs)
    a = r["r0"]
    start = 1765101600123456000
    tokens = [1765101600143456000, 1765101600151456500, 1765101600160000000]  # not "preempted"
    assert a.arrival_us == pytest.approx(start / 1e3, abs=US)
    assert_times(
        a, (tokens[0] - start) / 1e3, [(tokens[1] - tokens[0]) / 1e3, (tokens[2] - tokens[1]) / 1e3]
    )
    assert a.end_us - a.arrival_us == pytest.approx(0.037544e6, abs=US)
    assert (a.preemptions, a.queue_us, a.output_tokens) == (1, pytest.approx(4000.0), 3)
    b = r["r1"]  # integer times, no e2e: the span's end
    assert_times(b, (1765101600212500000 - 1765101600200000000) / 1e3, [16500.0])
    assert b.end_us == pytest.approx(1765101600230000000 / 1e3, abs=US)
    assert recs.meta["model"] == "workbench/tiny-serving-lm"


# ---- recognition


def _head(path: pathlib.Path) -> bytes:
    if path.name.endswith(".gz"):
        with gzip.open(path) as f:
            return f.read(4096)
    return path.read_bytes()[:4096]


def test_recognise_own_fixtures_and_not_the_others() -> None:
    for module in OWN:
        for other, files in OWN.items():
            for path in files:
                assert module.recognise(_head(path)) is (other is module), (module, path)


def test_recognise_no_kineto_trace() -> None:
    files = [
        p
        for p in FIXTURES.rglob("*")
        if p.name.endswith((".json", ".json.gz")) and HERE not in p.parents
    ]
    traces = [p for p in files if b'"traceEvents"' in _head(p)]
    assert traces
    for path in traces:
        head = _head(path)
        for module in OWN:
            assert not module.recognise(head), (module, path)
    assert not any(m.recognise(b'{"traceEvents": [], "backend": "nccl"}') for m in OWN)


# ---- real files: the serving loop's own records, written both ways (bench/corpus/serving)

PAIRS = sorted(
    [*(FIXTURES / "serving_pairs").glob("*/*/otlp.json"), *RECORDED_PAIR.glob("*/otlp.json")]
)


@pytest.mark.skipif(not PAIRS, reason="no serving_pairs fixtures")
@pytest.mark.parametrize(
    "otlp_path", PAIRS, ids=lambda p: f"{p.parent.parent.name}/{p.parent.name}"
)
def test_real_recorder_files_agree(otlp_path: pathlib.Path) -> None:
    bench_path = otlp_path.parent / "vllm_bench.json"
    for module, path in ((otlp, otlp_path), (vllm_bench, bench_path)):
        head = _head(path)
        assert [m for m in OWN if m.recognise(head)] == [module], path
    spans, bench = otlp.read(otlp_path), vllm_bench.read(bench_path)
    assert spans.clock == bench.clock == "epoch"
    a, b = by_id(spans), by_id(bench)
    assert sorted(a) == sorted(b) and len(a) > 1
    for rid, rec in a.items():
        other = b[rid]
        assert len(other.token_us) == rec.output_tokens, rid
        assert rec.arrival_us == pytest.approx(other.arrival_us, abs=1.0)
        ttft, itls = gaps(other)
        # Spans without token events (the fixtures are slimmed) state the first token only.
        assert_times(rec, ttft, itls if len(rec.token_us) > 1 else [])
        assert rec.end_us == pytest.approx(other.end_us, abs=1.0)


# ---- hostile input: each error names the file and the record


def _mutated(tmp_path: pathlib.Path, src: pathlib.Path, old: str, new: str) -> pathlib.Path:
    text = src.read_text()
    assert old in text, old
    out = tmp_path / src.name
    out.write_text(text.replace(old, new, 1))
    return out


BAD: list[tuple[str, Callable[[], ModuleType], pathlib.Path, str, str, list[str]]] = [
    (
        "vllm NaN literal",
        lambda: vllm_bench,
        VLLM,
        "[0.0215, 0.0342, 0.0]",
        "[0.0215, NaN, 0.0]",
        ["per-request entry 1", "NaN"],
    ),
    (
        "vllm negative start",
        lambda: vllm_bench,
        VLLM,
        "[1000.25, 1000.5,",
        "[1000.25, -1000.5,",
        ["per-request entry 1", "negative"],
    ),
    (
        "vllm negative ttft",
        lambda: vllm_bench,
        VLLM,
        "[0.0215, 0.0342, 0.0]",
        "[-0.0215, 0.0342, 0.0]",
        ["per-request entry 0", "before arrival"],
    ),
    (
        "vllm too many itls",
        lambda: vllm_bench,
        VLLM,
        '"output_lens": [4, 5, 0]',
        '"output_lens": [3, 5, 0]',
        ["per-request entry 0", "inter-token latencies for 3"],
    ),
    (
        "vllm ends before start",
        lambda: vllm_bench,
        VLLM,
        "[0.0477, 0.0525, 0.0]",
        "[0.0477, -0.0525, 0.0]",
        ["per-request entry 1", "finishes before it arrives"],
    ),
    (
        "vllm huge number",
        lambda: vllm_bench,
        VLLM,
        "[0.0215, 0.0342, 0.0]",
        "[0.0215, 1e400, 0.0]",
        ["per-request entry 1", "NaN or infinite"],
    ),
    (
        "vllm wrong type",
        lambda: vllm_bench,
        VLLM,
        "[[0.0081, 0.0079, 0.0102],",
        '["fast",',
        ["per-request entry 0", "itls entry is not a list"],
    ),
    (
        "vllm length mismatch",
        lambda: vllm_bench,
        VLLM,
        "[32, 17, 25]",
        "[32, 17]",
        ["'input_lens' has 2 entries for 3 requests"],
    ),
    (
        "aiperf missing id",
        lambda: aiperf,
        AIPERF,
        '"session_num":1,"x_request_id":"7609a2e7-aa53-4ab1-98f4-f35ecafefd25",',
        "",
        ["line 2", "missing request id"],
    ),
    (
        "aiperf NaN",
        lambda: aiperf,
        AIPERF,
        '"value":255.886568',
        '"value":NaN',
        ["line 2", "7609a2e7-aa53-4ab1-98f4-f35ecafefd25", "NaN"],
    ),
    (
        "aiperf negative latency",
        lambda: aiperf,
        AIPERF,
        '"value":144.875',
        '"value":-144.875',
        ["line 3", "0b1c2d3e-4f50-4617-8899-aabbccddeeff", "finishes before it arrives"],
    ),
    (
        "aiperf ends before start",
        lambda: aiperf,
        AIPERF,
        '"request_end_ns":1759879161119772754',
        '"request_end_ns":1759879161000000000',
        ["line 4", "c35e4b1b-6775-4750-b875-94cd68e5ec15", "finishes before it arrives"],
    ),
    (
        "aiperf negative itl",
        lambda: aiperf,
        AIPERF,
        "[6250.0,7125.0",
        "[6250.0,-7125.0",
        ["line 3", "backwards"],
    ),
    (
        "aiperf unknown unit",
        lambda: aiperf,
        AIPERF,
        '"value":120.5,"unit":"ms"',
        '"value":120.5,"unit":"fortnights"',
        ["line 3", "unknown unit"],
    ),
    (
        "otlp missing id",
        lambda: otlp,
        OTLP,
        '{"key": "gen_ai.request.id", "value": {"stringValue": "cmpl-a1"}},',
        "",
        ["spans[0]", "missing request id"],
    ),
    (
        "otlp negative ttft",
        lambda: otlp,
        OTLP,
        '{"doubleValue": 0.025}',
        '{"doubleValue": -0.025}',
        ["spans[0]", "cmpl-a1", "before arrival"],
    ),
    (
        "otlp NaN double",
        lambda: otlp,
        OTLP,
        '{"doubleValue": 0.031}',
        '{"doubleValue": "NaN"}',
        ["spans[1]", "cmpl-b2", "NaN"],
    ),
    (
        "otlp huge time",
        lambda: otlp,
        OTLP,
        '"startTimeUnixNano": 1735732800050000000',
        '"startTimeUnixNano": 1' + "0" * 400,
        ["spans[1]", "cmpl-b2", "startTimeUnixNano"],
    ),
    (
        "otlp ends before start",
        lambda: otlp,
        OTLP_LINES,
        '"endTimeUnixNano":"1735732801070000000"',
        '"endTimeUnixNano":"1735732801010000000"',
        ["line 2", "chatcmpl-d4", "finishes before"],
    ),
    (
        "vllm mixed clocks",
        lambda: vllm_bench,
        VLLM_OURS,
        "[1765101600.5, 1765101600.625]",
        "[1765101600.5, 600.625]",
        ["per-request entry 1", "req-8", "another clock"],
    ),
    (
        "vllm empty request id",
        lambda: vllm_bench,
        VLLM_OURS,
        '"request_ids": ["req-7", "req-8"]',
        '"request_ids": ["req-7", ""]',
        ["per-request entry 1", "missing request id"],
    ),
    (
        "vllm epoch itls beyond output tokens",
        lambda: vllm_bench,
        VLLM_OURS,
        '"output_lens": [3, 2]',
        '"output_lens": [3, 1]',
        ["per-request entry 1", "req-8", "inter-token latencies for 1"],
    ),
    (
        "otlp token events backwards",
        lambda: otlp,
        OTLP_OURS,
        '"1765101600151456500"',
        '"1765101600141456500"',
        ["spans[0]", "r0", "backwards"],
    ),
    (
        "otlp more token events than tokens",
        lambda: otlp,
        OTLP_OURS,
        '{"key":"gen_ai.usage.completion_tokens","value":{"intValue":"2"}}',
        '{"key":"gen_ai.usage.completion_tokens","value":{"intValue":"1"}}',
        ["spans[1]", "r1", "inter-token latencies for 1"],
    ),
    (
        "otlp bad event time",
        lambda: otlp,
        OTLP_OURS,
        '{"timeUnixNano":1765101600229000000,',
        '{"timeUnixNano":"soon",',
        ["spans[1].events[1]", "r1", "timeUnixNano"],
    ),
    (
        "otlp token after end",
        lambda: otlp,
        OTLP_OURS,
        "1765101600229000000",
        "1765101600239000000",
        ["spans[1]", "r1", "after the request finished"],
    ),
    (
        "otlp repeated id",
        lambda: otlp,
        OTLP,
        '"cmpl-b2"',
        '"cmpl-a1"',
        ["spans[1]", "cmpl-a1", "appears twice"],
    ),
]


@pytest.mark.parametrize(
    ("module", "src", "old", "new", "words"),
    [pytest.param(m, s, o, n, w, id=name) for name, m, s, o, n, w in BAD],
)
def test_bad_record_names_file_and_record(
    tmp_path: pathlib.Path,
    module: Callable[[], ModuleType],
    src: pathlib.Path,
    old: str,
    new: str,
    words: list[str],
) -> None:
    path = _mutated(tmp_path, src, old, new)
    with pytest.raises(WorkbenchError) as info:
        module().read(path)
    message = str(info.value)
    assert info.value.subject == str(path)
    assert "\n" not in info.value.problem
    for word in words:
        assert word in message, (word, message)


@pytest.mark.parametrize(
    "src", [VLLM, VLLM_OURS, AIPERF, OTLP, OTLP_LINES, OTLP_OURS], ids=lambda p: p.name
)
def test_truncated_file(tmp_path: pathlib.Path, src: pathlib.Path) -> None:
    data = src.read_bytes()
    cut = data[: len(data) * 2 // 3]
    path = tmp_path / src.name
    path.write_bytes(cut)
    module = next(m for m, files in OWN.items() if src in files)
    with pytest.raises(WorkbenchError) as info:
        module.read(path)
    assert info.value.subject == str(path)
    assert "not valid JSON" in info.value.problem
    if src.suffix == ".jsonl":
        # The record that is cut is the last line present.
        lines = cut.count(b"\n") + 1
        assert f"line {lines}" in info.value.problem


@pytest.mark.parametrize("module", [vllm_bench, aiperf, otlp], ids=lambda m: m.__name__)
@pytest.mark.parametrize(
    "data",
    [b"[" * 200_000 + b"]" * 200_000, b"", b"null", b'{"a": 1}', b"\xff\xfe{", b"[1, 2]"],
    ids=["deep", "empty", "null", "object", "binary", "list"],
)
def test_hostile_whole_files(tmp_path: pathlib.Path, module: ModuleType, data: bytes) -> None:
    path = tmp_path / "hostile.json"
    path.write_bytes(data)
    with pytest.raises(WorkbenchError) as info:
        module.read(path)
    assert info.value.subject == str(path)


def test_vllm_without_save_detailed_says_how(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "summary.json"
    path.write_text('{"date": "x", "backend": "vllm", "model_id": "m", "num_prompts": 1}')
    assert vllm_bench.recognise(path.read_bytes())
    with pytest.raises(WorkbenchError, match="--save-detailed"):
        vllm_bench.read(path)


def test_otlp_without_request_spans(tmp_path: pathlib.Path) -> None:
    path = tmp_path / OTLP_LINES.name
    text = OTLP_LINES.read_text().replace("llm_request", "other").replace("gen_ai.", "x.")
    path.write_text(text)
    with pytest.raises(WorkbenchError, match="no span is a vLLM llm_request span"):
        otlp.read(path)
