"""Reader of NVIDIA AIPerf's per-request export (profile_export.jsonl: one MetricRecordInfo per
line: metadata with the request id and epoch-ns times, metrics as {value, unit})."""

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

NAME: Final[str] = "aiperf-jsonl"
SUMMARY: Final[str] = (
    "NVIDIA AIPerf per-request export (profile_export.jsonl: TTFT, chunk latencies)"
)
FORMAT: Final[str] = NAME  # the ServingRecords.source_format

# AIPerf's display units (MetricTimeUnit tags) in microseconds.
_UNIT_US: Final[dict[str, float]] = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "sec": 1e6, "s": 1e6}


def recognise(head: bytes) -> bool:
    """True for an AIPerf JSON-lines export: the first line an object with metadata holding
    request_start_ns / session_num, and metrics."""
    text = head.lstrip()
    if not text.startswith(b"{") or b'"traceEvents"' in head or b'"resourceSpans"' in head:
        return False
    first = text.split(b"\n", 1)[0]
    return (
        b'"metadata"' in first
        and b'"metrics"' in head
        and (b'"request_start_ns"' in first or b'"session_num"' in first)
    )


def read(path: pathlib.Path) -> ServingRecords:
    """The requests of an AIPerf profile_export.jsonl (warm-up requests skipped)."""
    source = str(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise WorkbenchError(source, exc.strerror or str(exc)) from None
    recs = _read_aiperf(source, data)
    check_records(source, recs)
    return recs


# ---- AIPerf profile_export.jsonl


def _metric_us(
    source: str, where: str, rid: str, metrics: dict[str, object], tag: str
) -> float | list[float] | None:
    """The time metric `tag` in microseconds (a list for inter_chunk_latency), None if absent."""
    entry = metrics.get(tag)
    if entry is None:
        return None
    if not isinstance(entry, dict):
        raise record_error(source, where, rid, f"metric {tag} is not a {{value, unit}} object")
    unit = entry.get("unit")
    scale = _UNIT_US.get(unit) if isinstance(unit, str) else None
    if scale is None:
        raise record_error(source, where, rid, f"metric {tag} has unknown unit {unit!r:.20}")
    value = entry.get("value")
    if isinstance(value, list):
        return [_finite(source, where, rid, v, f"{tag}[{k}]") * scale for k, v in enumerate(value)]
    return _finite(source, where, rid, value, tag) * scale


def _finite(source: str, where: str, rid: str, value: object, what: str) -> float:
    x = as_float(value)
    if x is None:
        raise record_error(source, where, rid, f"{what} is not a number ({value!r:.40})")
    if not math.isfinite(x):
        raise record_error(source, where, rid, f"{what} is NaN or infinite")
    return x


def _tokens(
    source: str, where: str, rid: str, metrics: dict[str, object], *tags: str
) -> int | None:
    for tag in tags:
        entry = metrics.get(tag)
        if entry is None:
            continue
        value = entry.get("value") if isinstance(entry, dict) else entry
        n = as_int(value)
        if n is None:
            raise record_error(source, where, rid, f"metric {tag} is not a token count")
        return n
    return None


def _epoch_us(source: str, where: str, rid: str, meta: dict[str, object], key: str) -> float:
    ns = as_int(meta.get(key))
    if ns is None:
        raise record_error(source, where, rid, f"metadata.{key} is missing or not an integer")
    return _ns_us(source, where, rid, ns, f"metadata.{key}")


def _request_id(source: str, where: str, meta: dict[str, object]) -> str:
    rid = meta.get("x_request_id")
    if isinstance(rid, str) and rid:
        return rid
    if rid is not None:
        raise record_error(source, where, None, "metadata.x_request_id is not a string")
    # Without the X-Request-ID the session and turn identify the request within the run.
    session = as_int(meta.get("session_num"))
    if session is None:
        raise record_error(source, where, None, "missing request id (no x_request_id, session_num)")
    turn = as_int(meta.get("turn_index"))
    return f"s{session}.{turn or 0}"


def _one(source: str, where: str, line: dict[str, object]) -> ServingRecord | None:
    """The record of one line, or None for a warm-up request."""
    meta = line.get("metadata")
    if not isinstance(meta, dict):
        raise record_error(source, where, None, "no metadata object")
    rid = _request_id(source, where, meta)
    if meta.get("benchmark_phase") == "warmup":
        return None
    metrics = line.get("metrics")
    if metrics is None:
        metrics = {}
    if not isinstance(metrics, dict):
        raise record_error(source, where, rid, "metrics is not an object")
    error = line.get("error")
    if error is not None and not isinstance(error, dict):
        raise record_error(source, where, rid, "error is not an object")
    ok = error is None and meta.get("was_cancelled") is not True
    arrival = _epoch_us(source, where, rid, meta, "request_start_ns")
    ttft = _metric_us(source, where, rid, metrics, "time_to_first_token")
    icl = _metric_us(source, where, rid, metrics, "inter_chunk_latency")
    latency = _metric_us(source, where, rid, metrics, "request_latency")
    if isinstance(ttft, list) or isinstance(latency, list):
        raise record_error(source, where, rid, "time_to_first_token or request_latency is a list")
    if icl is not None and not isinstance(icl, list):
        icl = [icl]  # one chunk gap exported as a scalar
    tokens: list[float] = []
    if ok and ttft is not None:
        t = arrival + ttft
        tokens.append(t)
        for gap in icl or []:
            t += gap
            tokens.append(t)
    # request_latency is on the same perf clock as the token gaps; request_end_ns is a
    # separate wall-clock read, so it is the fallback only.
    if latency is not None:
        end = arrival + latency
    else:
        end = _epoch_us(source, where, rid, meta, "request_end_ns")
    extra: dict[str, str] = {}
    for key in ("x_correlation_id", "conversation_id", "worker_id"):
        value = meta.get(key)
        if isinstance(value, str) and value:
            extra[key] = value[:200]
    if error is not None:
        extra["error"] = " ".join(f"{error.get('code')} {error.get('type')}".split())[:200]
    return ServingRecord(
        request_id=rid,
        arrival_us=arrival,
        end_us=end,
        token_us=tokens,
        input_tokens=_tokens(source, where, rid, metrics, "input_sequence_length", "error_isl"),
        output_tokens=_tokens(source, where, rid, metrics, "output_sequence_length"),
        ok=ok,
        where=where,
        extra=extra,
    )


def _read_aiperf(source: str, data: bytes) -> ServingRecords:
    records: list[ServingRecord] = []
    warmups = 0
    for number, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        where = f"line {number}"
        line = decode_json(source, raw, where)
        if not isinstance(line, dict):
            raise record_error(source, where, None, "not a JSON object")
        rec = _one(source, where, line)
        if rec is None:
            warmups += 1
        else:
            records.append(rec)
    warnings = [f"{warmups} warm-up requests skipped"] if warmups else []
    return ServingRecords(records, clock="epoch", source_format=FORMAT, warnings=warnings)


def _ns_us(source: str, where: str, rid: str, value: object, what: str) -> float:
    ns = as_int(value)
    if ns is None:
        raise record_error(source, where, rid, f"{what} is missing or not integer nanoseconds")
    try:
        # int / int rounds once, where float(ns) would already lose up to 128 ns.
        return ns / 1000
    except OverflowError:
        raise record_error(source, where, rid, f"{what} is out of range") from None
