"""Reader of `vllm bench serve --save-result --save-detailed` result JSON: parallel per-request
lists (ttfts, itls, latencies, start_times in seconds; input_lens, output_lens; errors)."""

from __future__ import annotations

import math
import pathlib
from typing import Final

from workbench.errors import WorkbenchError
from workbench.store.serving.records import (
    ServingRecord,
    ServingRecords,
    as_float,
    as_int,
    check_records,
    decode_json,
    record_error,
)

NAME: Final[str] = "vllm-bench-json"
SUMMARY: Final[str] = (
    "vllm bench serve --save-result --save-detailed result JSON (per-request TTFT, ITLs)"
)
FORMAT: Final[str] = NAME  # the ServingRecords.source_format
_US: Final[float] = 1e6  # the file's times are seconds
# Upstream start_times are time.perf_counter() (seconds since boot on Linux); our recorder writes
# epoch seconds. Anything from 2001-09-09 on is taken as epoch: no host is up for 31 years.
_EPOCH_MIN_S: Final[float] = 1e9

# Written by `--save-detailed` (serve.py deletes them without it).
_DETAILED: Final[tuple[str, ...]] = ("ttfts", "itls", "input_lens", "output_lens", "errors")
# Setup keys that become runs-row fields / run metadata.
_META: Final[dict[str, str]] = {
    "model_id": "model",
    "backend": "backend",
    "label": "label",
    "tokenizer_id": "tokenizer",
    "date": "date",
    "num_prompts": "num_prompts",
    "request_rate": "request_rate",
    "max_concurrency": "max_concurrency",
}


def recognise(head: bytes) -> bool:
    """True for a vLLM bench result: a JSON object with the per-request `ttfts` or the setup
    keys serve.py writes first (endpoint_type / backend with num_prompts and model_id)."""
    text = head.lstrip()
    if not text.startswith(b"{") or b'"traceEvents"' in head or b'"resourceSpans"' in head:
        return False
    if b'"ttfts"' in head and b'"itls"' in head:
        return True
    return b'"num_prompts"' in head and b'"model_id"' in head and b'"backend"' in head


def _where(i: int) -> str:
    return f"per-request entry {i}"


def _series(path: str, doc: dict[str, object], key: str, n: int | None) -> list[object] | None:
    """The per-request list `key`, or None when the file lacks it; its length must match."""
    value = doc.get(key)
    if value is None:
        return None
    if not isinstance(value, list):
        raise WorkbenchError(path, f"{key!r} is not a list")
    if n is not None and len(value) != n:
        raise WorkbenchError(path, f"{key!r} has {len(value)} entries for {n} requests")
    return value


def _seconds(path: str, i: int, rid: str, value: object, what: str) -> float:
    t = as_float(value)
    if t is None:
        raise record_error(path, _where(i), rid, f"{what} is not a number ({value!r:.40})")
    if not math.isfinite(t):
        raise record_error(path, _where(i), rid, f"{what} is NaN or infinite")
    return t * _US


def _count(path: str, i: int, rid: str, value: object, what: str) -> int | None:
    if value is None:
        return None
    n = as_int(value)
    if n is None:
        raise record_error(path, _where(i), rid, f"{what} is not an integer ({value!r:.40})")
    return n


def _ids(path: str, doc: dict[str, object], n: int) -> list[str]:
    # Not written by upstream vLLM; a recorder may add it so records join traces by id.
    given = _series(path, doc, "request_ids", n)
    if given is None:
        return [str(i) for i in range(n)]
    ids: list[str] = []
    for i, rid in enumerate(given):
        if isinstance(rid, int) and not isinstance(rid, bool):
            rid = str(rid)
        if not isinstance(rid, str) or not rid:
            raise record_error(path, _where(i), None, "missing request id in 'request_ids'")
        ids.append(rid)
    return ids


def _meta(doc: dict[str, object]) -> dict[str, str]:
    meta: dict[str, str] = {}
    for key, name in _META.items():
        value = doc.get(key)
        if isinstance(value, (str, int, float)) and not isinstance(value, bool) and value != "":
            meta[name] = str(value)
    if "backend" not in meta and isinstance(doc.get("endpoint_type"), str):
        meta["backend"] = str(doc["endpoint_type"])
    return meta


def _clock(path: str, starts: list[object] | None, ids: list[str]) -> str:
    """ "epoch" when every start time is epoch seconds (our recorder), else "relative"."""
    if not starts:
        return "relative"
    # A start time that is not a finite number is left for its record's own error.
    values = [(i, as_float(t)) for i, t in enumerate(starts)]
    big = [(i, v >= _EPOCH_MIN_S) for i, v in values if v is not None and math.isfinite(v)]
    if not big or all(b for _, b in big):
        return "epoch" if big else "relative"
    if any(b for _, b in big):
        # A file mixing the clocks cannot be placed on either; name the first odd one out.
        i = next(i for i, b in big if b != big[0][1])
        raise record_error(path, _where(i), ids[i], "start time is on another clock than the first")
    return "relative"


def read(path: pathlib.Path) -> ServingRecords:
    """The requests of one result file; times on the benchmark's perf_counter clock, or epoch
    when the start times are epoch seconds."""
    source = str(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise WorkbenchError(source, exc.strerror or str(exc)) from None
    doc = decode_json(source, data)
    if not isinstance(doc, dict):
        raise WorkbenchError(source, "not a vLLM bench result (the JSON is not an object)")
    missing = [k for k in _DETAILED if k not in doc]
    if "ttfts" in missing:
        raise WorkbenchError(
            source,
            "no per-request lists (ttfts, itls, ...): run vllm bench serve with "
            "--save-result --save-detailed",
        )
    if missing:
        raise WorkbenchError(source, f"per-request list {missing[0]!r} missing")
    ttfts = _series(source, doc, "ttfts", None)
    assert ttfts is not None
    n = len(ttfts)
    itls = _series(source, doc, "itls", n)
    input_lens = _series(source, doc, "input_lens", n)
    output_lens = _series(source, doc, "output_lens", n)
    errors = _series(source, doc, "errors", n)
    assert itls is not None and input_lens is not None
    assert output_lens is not None and errors is not None
    latencies = _series(source, doc, "latencies", n)
    starts = _series(source, doc, "start_times", n)
    queues = _series(source, doc, "queue_times", n)
    ids = _ids(source, doc, n)
    warnings: list[str] = []
    if starts is None:
        warnings.append("no start_times (vLLM before they were saved): every request starts at 0")
    clock = _clock(source, starts, ids)

    records: list[ServingRecord] = []
    for i in range(n):
        rid = ids[i]
        err = errors[i]
        if err is not None and not isinstance(err, str):
            raise record_error(source, _where(i), rid, "its error is not a string")
        ttft = _seconds(source, i, rid, ttfts[i], "ttft")
        # serve.py leaves ttft at 0.0 for a request that never streamed a chunk (a negative
        # one is kept, for check_records to reject as a token before arrival).
        ok = not err and ttft != 0
        arrival = _seconds(source, i, rid, starts[i], "start time") if starts else 0.0
        gaps = itls[i]
        if not isinstance(gaps, list):
            raise record_error(source, _where(i), rid, "its itls entry is not a list")
        tokens: list[float] = []
        if ok:
            t = arrival + ttft
            tokens.append(t)
            for k, gap in enumerate(gaps):
                t += _seconds(source, i, rid, gap, f"itl {k}")
                tokens.append(t)
        if latencies is not None:
            end = arrival + _seconds(source, i, rid, latencies[i], "latency")
        else:
            end = tokens[-1] if tokens else arrival
        extra: dict[str, str] = {}
        if err:
            extra["error"] = " ".join(err.split())[:200]
        if queues is not None and queues[i] is not None:
            # Client-side wait for the concurrency limit, before the request was sent.
            extra["client_queue_us"] = repr(_seconds(source, i, rid, queues[i], "queue time"))
        records.append(
            ServingRecord(
                request_id=rid,
                arrival_us=arrival,
                end_us=end,
                token_us=tokens,
                input_tokens=_count(source, i, rid, input_lens[i], "input_lens"),
                output_tokens=_count(source, i, rid, output_lens[i], "output_lens"),
                ok=ok,
                where=_where(i),
                extra=extra,
            )
        )
    recs = ServingRecords(
        records=records,
        clock=clock,
        source_format=FORMAT,
        meta=_meta(doc),
        warnings=warnings,
    )
    check_records(source, recs)
    return recs
