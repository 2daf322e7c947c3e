"""One served request as its serving records state it, whatever the format, and the checks a
record must pass before anything is stored."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Final

import msgspec

from workbench.errors import WorkbenchError

# Where a record's times are measured from: "epoch" (microseconds since 1970, so records and a
# trace with a base time can be joined by time), or "relative" (the benchmark's own clock).
CLOCKS: Final[tuple[str, ...]] = ("epoch", "relative")


@dataclass
class ServingRecord:
    """One request. Times are float microseconds on the file's clock; `token_us` are the
    emission times of the output tokens (first token first), so TTFT is token_us[0] -
    arrival_us and the inter-token gaps are its differences. Optional phases are None when
    the format does not state them."""

    request_id: str
    arrival_us: float
    end_us: float
    token_us: list[float]
    input_tokens: int | None
    output_tokens: int | None
    ok: bool = True
    queue_us: float | None = None  # arrival -> first scheduled (OTLP time_in_queue)
    prefill_us: float | None = None
    decode_us: float | None = None
    preemptions: int | None = None
    # Where in the file the record is ("requests[12]", "line 40", "span 7"), for errors.
    where: str = ""
    extra: dict[str, str] = field(default_factory=dict)


@dataclass
class ServingRecords:
    """The records of one file and what it says about the run (runs-row fields)."""

    records: list[ServingRecord]
    clock: str  # one of CLOCKS
    source_format: str
    meta: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def _bad(source: str, rec: ServingRecord, problem: str) -> WorkbenchError:
    where = rec.where or f"request {rec.request_id!r}"
    return WorkbenchError(source, f"{where} (request {rec.request_id!r}): {problem}")


# Token and preemption counts are int32 in the store.
_INT32_MAX: Final[int] = 2**31 - 1


def _finite_nonneg(x: float | None) -> bool:
    return x is None or (math.isfinite(x) and x >= 0)


def check_records(source: str, recs: ServingRecords) -> None:
    """WorkbenchError naming the first bad record: a missing or repeated id, a NaN or negative
    time, tokens out of order or before arrival, more inter-token gaps than output tokens, a
    request finishing before it arrives."""
    if recs.clock not in CLOCKS:
        raise WorkbenchError(source, f"unknown clock {recs.clock!r}")
    if not recs.records:
        raise WorkbenchError(source, "no request records")
    seen: set[str] = set()
    for rec in recs.records:
        if not rec.request_id:
            raise _bad(source, rec, "missing request id")
        if rec.request_id in seen:
            raise _bad(source, rec, "request id appears twice")
        seen.add(rec.request_id)
        times = [rec.arrival_us, rec.end_us, *rec.token_us]
        if not all(math.isfinite(t) for t in times):
            raise _bad(source, rec, "a time is NaN or infinite")
        if recs.clock == "relative" and min(times) < 0:
            raise _bad(source, rec, "a negative time")
        if rec.end_us < rec.arrival_us:
            raise _bad(source, rec, "finishes before it arrives")
        for name in ("queue_us", "prefill_us", "decode_us"):
            if not _finite_nonneg(getattr(rec, name)):
                raise _bad(source, rec, f"{name[:-3]} time is negative or NaN")
        for n in (rec.input_tokens, rec.output_tokens, rec.preemptions):
            if n is not None and n < 0:
                raise _bad(source, rec, "a negative token or preemption count")
            if n is not None and n > _INT32_MAX:
                raise _bad(source, rec, f"a token or preemption count too large ({n})")
        if not rec.ok:
            continue
        if rec.token_us and rec.token_us[0] < rec.arrival_us:
            raise _bad(source, rec, "first token before arrival")
        if any(b < a for a, b in zip(rec.token_us, rec.token_us[1:], strict=False)):
            raise _bad(source, rec, "token times go backwards (a negative inter-token latency)")
        if rec.token_us and rec.token_us[-1] > rec.end_us + 1.0:
            raise _bad(source, rec, "a token after the request finished")
        if rec.output_tokens is not None and len(rec.token_us) > rec.output_tokens:
            raise _bad(
                source,
                rec,
                f"{len(rec.token_us) - 1} inter-token latencies for {rec.output_tokens} "
                "output tokens (at most one fewer than the tokens)",
            )


# Shared by the readers: decoding hostile JSON and taking typed values out of it.


def decode_json(source: str, data: bytes | str, where: str = "") -> object:
    """The JSON value of `data`; WorkbenchError (naming `where`, e.g. "line 3") when it is not
    JSON. NaN/Infinity literals (Python's json writes them) and out-of-range numbers decode to
    floats so that the record holding one is named by the caller's checks."""
    at = f"{where}: " if where else ""
    try:
        return msgspec.json.decode(data)
    except RecursionError:
        raise WorkbenchError(source, f"{at}JSON nested too deeply") from None
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        first = str(exc)
    try:
        # The slower decoder takes the non-standard NaN literals msgspec refuses.
        return json.loads(data)
    except RecursionError:
        raise WorkbenchError(source, f"{at}JSON nested too deeply") from None
    except (ValueError, UnicodeDecodeError):
        raise WorkbenchError(source, f"{at}not valid JSON ({first})") from None


def record_error(source: str, where: str, request_id: str | None, problem: str) -> WorkbenchError:
    """The one-line error for a record: where it is, its id when known, what is wrong."""
    rid = f" (request {request_id!r})" if request_id else ""
    return WorkbenchError(source, f"{where}{rid}: {problem}")


def as_float(value: object) -> float | None:
    """`value` as a finite-or-not float when it is a JSON number, else None (bool is not a
    number; an integer too large for a float is infinite)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return float(value)
    except OverflowError:
        return math.inf


def as_int(value: object) -> int | None:
    """`value` when it is a JSON integer (or an integral float such as 12.0), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None
