"""Reader of OpenTelemetry spans in OTLP JSON (one ExportTraceServiceRequest, or JSON lines of
them as the collector's file exporter writes), taking vLLM's per-request `llm_request` spans."""

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

NAME: Final[str] = "otlp-json"
SUMMARY: Final[str] = "OTLP JSON traces (or JSON lines of exports) with vLLM llm_request spans"
FORMAT: Final[str] = NAME  # the ServingRecords.source_format
_TOKEN_EVENT: Final[str] = "token"  # our recorder's per-token span events (not upstream vLLM)
_MAX_EVENTS: Final[int] = 1_000_000  # per span: more is not a request's output
_SPAN_NAME: Final[str] = "llm_request"
_STATUS_ERROR: Final[int] = 2
_MAX_DEPTH: Final[int] = 8  # arrayValue / kvlistValue nesting we look into

# vLLM's latency attributes are seconds.
_TTFT: Final[str] = "gen_ai.latency.time_to_first_token"
_E2E: Final[str] = "gen_ai.latency.e2e"
_QUEUE: Final[str] = "gen_ai.latency.time_in_queue"
_PREFILL: Final[str] = "gen_ai.latency.time_in_model_prefill"
_DECODE: Final[str] = "gen_ai.latency.time_in_model_decode"
_ID: Final[str] = "gen_ai.request.id"
_PROMPT: Final[str] = "gen_ai.usage.prompt_tokens"
_COMPLETION: Final[str] = "gen_ai.usage.completion_tokens"
_MODEL: Final[str] = "gen_ai.response.model"
_PREEMPTIONS: Final[str] = "workbench.preemptions"  # our recorder's, not vLLM's

Attr = str | int | float | bool | None


def recognise(head: bytes) -> bool:
    """True for OTLP JSON traces: an object whose first key region holds resourceSpans."""
    text = head.lstrip()
    return text.startswith(b"{") and b'"resourceSpans"' in head and b'"traceEvents"' not in head


def _any_value(value: object, depth: int = 0) -> Attr:
    """A scalar AnyValue (int64 as a decimal string or number; double possibly "NaN"); arrays,
    kvlists and bytes are not numbers or ids, so they read as None."""
    if not isinstance(value, dict) or depth > _MAX_DEPTH:
        return None
    if "stringValue" in value:
        s = value["stringValue"]
        return s if isinstance(s, str) else None
    if "intValue" in value:
        v = value["intValue"]
        if isinstance(v, str):
            try:
                return int(v, 10) if len(v) <= 40 else None
            except ValueError:
                return None
        return as_int(v)
    if "doubleValue" in value:
        v = value["doubleValue"]
        if isinstance(v, str):
            # proto3 JSON spells the special doubles as strings.
            special = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
            if v in special:
                return special[v]
            try:
                return float(v)
            except ValueError:
                return None
        return as_float(v)
    if "boolValue" in value:
        b = value["boolValue"]
        return b if isinstance(b, bool) else None
    return None


def _attributes(source: str, where: str, raw: object) -> dict[str, Attr]:
    if raw is None:
        return {}
    if not isinstance(raw, list):
        raise record_error(source, where, None, "attributes is not a list")
    out: dict[str, Attr] = {}
    for kv in raw:
        if isinstance(kv, dict) and isinstance(kv.get("key"), str):
            out[str(kv["key"])] = _any_value(kv.get("value"))
    return out


def _unix_ns(source: str, where: str, rid: str, span: dict[str, object], key: str) -> float:
    v = span.get(key)
    digits = isinstance(v, str) and v.isascii() and v.isdigit() and len(v) <= 30
    ns = int(str(v)) if digits else as_int(v)
    if ns is None:
        raise record_error(source, where, rid, f"{key} is missing or not integer nanoseconds")
    try:
        # int / int rounds once, where float(ns) would already lose up to 128 ns.
        return _finite_us(source, where, rid, ns / 1000, key)
    except OverflowError:
        raise record_error(source, where, rid, f"{key} is out of range") from None


def _finite_us(source: str, where: str, rid: str, us: float, what: str) -> float:
    if not math.isfinite(us):
        raise record_error(source, where, rid, f"{what} is out of range")
    return us


def _seconds(source: str, where: str, rid: str, attrs: dict[str, Attr], key: str) -> float | None:
    if key not in attrs:
        return None
    v = attrs[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise record_error(source, where, rid, f"attribute {key} is not a number")
    x = float(v) * 1e6
    if not math.isfinite(x):
        raise record_error(source, where, rid, f"attribute {key} is NaN or infinite")
    return x


def _count(source: str, where: str, rid: str, attrs: dict[str, Attr], key: str) -> int | None:
    if key not in attrs:
        return None
    n = as_int(attrs[key])
    if n is None:
        raise record_error(source, where, rid, f"attribute {key} is not an integer")
    return n


def _token_events(source: str, where: str, rid: str, span: dict[str, object]) -> list[float]:
    """The times of the span's "token" events, in file order (check_records rejects a file
    whose tokens go backwards); [] when it has none."""
    events = span.get("events")
    if events is None:
        return []
    if not isinstance(events, list):
        raise record_error(source, where, rid, "events is not a list")
    if len(events) > _MAX_EVENTS:
        raise record_error(source, where, rid, f"{len(events)} span events (too many)")
    times: list[float] = []
    for k, event in enumerate(events):
        if not isinstance(event, dict):
            raise record_error(source, where, rid, f"events[{k}] is not an object")
        if event.get("name") == _TOKEN_EVENT:
            times.append(_unix_ns(source, f"{where}.events[{k}]", rid, event, "timeUnixNano"))
    return times


def _is_request_span(span: dict[str, object], attrs: dict[str, Attr]) -> bool:
    return (
        span.get("name") == _SPAN_NAME
        or _ID in attrs
        or any(k.startswith("gen_ai.latency.") for k in attrs)
    )


def _record(
    source: str, where: str, span: dict[str, object], meta: dict[str, str]
) -> ServingRecord | None:
    """The request of a vLLM request span (None for any other span); the first model named
    goes to `meta`."""
    attrs = _attributes(source, where, span.get("attributes"))
    if not _is_request_span(span, attrs):
        return None
    model = attrs.get(_MODEL)
    if isinstance(model, str) and model:
        meta.setdefault("model", model)
    rid = attrs.get(_ID)
    if not isinstance(rid, str) or not rid:
        raise record_error(source, where, None, f"missing request id (attribute {_ID})")
    arrival = _unix_ns(source, where, rid, span, "startTimeUnixNano")
    ttft = _seconds(source, where, rid, attrs, _TTFT)
    e2e = _seconds(source, where, rid, attrs, _E2E)
    # vLLM's e2e ends at the engine step that finished the request; the span ends a little
    # later (output processing), so e2e is the request's end when stated.
    end = (
        arrival + e2e if e2e is not None else _unix_ns(source, where, rid, span, "endTimeUnixNano")
    )
    tokens = _token_events(source, where, rid, span)
    status = span.get("status")
    ok = not (isinstance(status, dict) and status.get("code") == _STATUS_ERROR)
    extra = {"span_name": str(span["name"])[:200]} if isinstance(span.get("name"), str) else {}
    if isinstance(status, dict) and isinstance(status.get("message"), str) and not ok:
        extra["error"] = " ".join(str(status["message"]).split())[:200]
    return ServingRecord(
        request_id=rid,
        arrival_us=arrival,
        end_us=end,
        # Upstream spans state the first token only (start + TTFT); our recorder's token
        # events give every token's emission time.
        token_us=tokens if tokens or not ok else ([arrival + ttft] if ttft is not None else []),
        input_tokens=_count(source, where, rid, attrs, _PROMPT),
        output_tokens=_count(source, where, rid, attrs, _COMPLETION),
        ok=ok,
        queue_us=_seconds(source, where, rid, attrs, _QUEUE),
        prefill_us=_seconds(source, where, rid, attrs, _PREFILL),
        decode_us=_seconds(source, where, rid, attrs, _DECODE),
        preemptions=_count(source, where, rid, attrs, _PREEMPTIONS),
        where=where,
        extra=extra,
    )


def _listed(source: str, where: str, obj: dict[str, object], key: str) -> list[object]:
    value = obj.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise WorkbenchError(source, f"{where}: {key} is not a list")
    return value


def _export(
    source: str, prefix: str, doc: object, records: list[ServingRecord], meta: dict[str, str]
) -> None:
    """Append the request spans of one ExportTraceServiceRequest."""
    if not isinstance(doc, dict) or "resourceSpans" not in doc:
        raise WorkbenchError(
            source, f"{prefix or 'file'}: not an OTLP traces export (no resourceSpans)"
        )
    for r, rs in enumerate(_listed(source, prefix or "file", doc, "resourceSpans")):
        at_r = f"{prefix}resourceSpans[{r}]"
        if not isinstance(rs, dict):
            raise WorkbenchError(source, f"{at_r}: not an object")
        for s, ss in enumerate(_listed(source, at_r, rs, "scopeSpans")):
            at_s = f"{at_r}.scopeSpans[{s}]"
            if not isinstance(ss, dict):
                raise WorkbenchError(source, f"{at_s}: not an object")
            scope = ss.get("scope")
            if isinstance(scope, dict) and str(scope.get("name", "")).startswith("vllm"):
                meta.setdefault("backend", "vllm")
            for k, span in enumerate(_listed(source, at_s, ss, "spans")):
                where = f"{at_s}.spans[{k}]"
                if not isinstance(span, dict):
                    raise WorkbenchError(source, f"{where}: not an object")
                rec = _record(source, where, span, meta)
                if rec is not None:
                    records.append(rec)


def read(path: pathlib.Path) -> ServingRecords:
    """The vLLM request spans of one OTLP JSON file (or JSON-lines file of exports)."""
    source = str(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise WorkbenchError(source, exc.strerror or str(exc)) from None
    records: list[ServingRecord] = []
    meta: dict[str, str] = {}
    try:
        whole: object = decode_json(source, data)
    except WorkbenchError as whole_error:
        lines = [(n, raw) for n, raw in enumerate(data.split(b"\n"), start=1) if raw.strip()]
        # JSON lines (the collector's file exporter) when the first line is a whole export.
        try:
            first_ok = len(lines) > 1 and isinstance(decode_json(source, lines[0][1]), dict)
        except WorkbenchError:
            first_ok = False
        if not first_ok:
            raise whole_error from None
        for n, raw in lines:
            where = f"line {n}"
            _export(source, f"{where} ", decode_json(source, raw, where), records, meta)
    else:
        _export(source, "", whole, records, meta)
    if not records:
        raise WorkbenchError(source, "no request records: no span is a vLLM llm_request span")
    recs = ServingRecords(records, clock="epoch", source_format=FORMAT, meta=meta)
    check_records(source, recs)
    return recs
