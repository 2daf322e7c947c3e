"""The streamed Kineto reader stores exactly what the whole-text reader stores.

Each trace is imported twice, once streamed (the default) and once with the stream refused so
that the whole-text reader (source.read_source + chrome_trace.split_events) does the work; the events,
requests, compiles and runs rows must be equal. Small decode chunks exercise many cuts.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ingest_helpers import HANDMADE, RANK0, TORCH, TRACES, assert_same_run, run_tables
from workbench.store.importers.kineto import chrome_stream, chrome_trace
from workbench.store.ingest import ingest

SERVING = TRACES / "serving"


class _Count:
    def __init__(self) -> None:
        self.streamed = 0


@pytest.fixture
def streamed(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Count]:
    """Counts the chunk iterations that ran to the end on the stream."""
    count = _Count()
    real = chrome_stream.EventStream.chunks

    def chunks(self: chrome_stream.EventStream, file_type: Any) -> Any:
        yield from real(self, file_type)
        count.streamed += 1

    monkeypatch.setattr(chrome_stream.EventStream, "chunks", chunks)
    yield count


def _whole_text(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(self: chrome_stream.EventStream, path: Path) -> None:
        raise chrome_stream.Fallback("refused by the test")

    monkeypatch.setattr(chrome_stream.EventStream, "__init__", refuse)


def _both(tmp_path: Path, src: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    a = ingest(tmp_path / "streamed", src, run_id="r")
    with monkeypatch.context() as m:
        _whole_text(m)
        b = ingest(tmp_path / "whole", src, run_id="r")
    assert (a.events_read, a.events_kept, a.requests, a.warnings, a.bytes_read) == (
        b.events_read, b.events_kept, b.requests, b.warnings, b.bytes_read,
    )  # fmt: skip
    return run_tables(tmp_path / "streamed", "r"), run_tables(tmp_path / "whole", "r")


@pytest.mark.parametrize("chunk", [4096, 8 << 20])
@pytest.mark.parametrize(
    "src",
    [
        HANDMADE,
        TORCH / "serving_static_failing.pt.trace.json.gz",
        TORCH / "graph_break_failing.pt.trace.json.gz",
    ],
    ids=lambda p: p.name,
)
def test_fixtures_store_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, streamed: _Count, src: Path, chunk: int
) -> None:
    monkeypatch.setattr(chrome_trace, "DECODE_CHUNK", chunk)
    got, want = _both(tmp_path, src, monkeypatch)
    assert streamed.streamed == 1
    assert_same_run(got, want)


@pytest.mark.parametrize(
    "name",
    ["rank0.json.gz", "serving/bert_small_h100.json.gz", "serving/bert_small_mi300x.json.gz"],
)
def test_real_traces_store_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, streamed: _Count, name: str
) -> None:
    src = TRACES / name
    # rank0 in 1 MB chunks: many cuts; the bert captures keep deviceProperties after the events.
    monkeypatch.setattr(chrome_trace, "DECODE_CHUNK", 1 << 20 if src == RANK0 else 4096)
    got, want = _both(tmp_path, src, monkeypatch)
    assert streamed.streamed == 1
    assert_same_run(got, want)


def _events(n: int) -> list[dict[str, Any]]:
    doc = json.loads(HANDMADE.read_text())
    events: list[dict[str, Any]] = doc["traceEvents"]
    return (events * n)[: len(events) * n]


class _Scans:
    """Counts the last chunk's scans for the array's close (chrome_stream._SCAN)."""

    def __init__(self) -> None:
        self.n = 0
        self.real = chrome_stream._SCAN

    def decode(self, data: bytes) -> Any:
        self.n += 1
        return self.real.decode(data)


# Layouts whose array close is found only by scanning the last chunk: the keys after the
# array end in a "]" (deviceProperties, or the array again). Everywhere else the close is the
# last "]" after which the object decodes, and the last chunk decodes in place.
SCANNED = {"keys_after", "duplicate_key"}


@pytest.mark.parametrize(
    "layout",
    [
        "keys_after", "duplicate_key", "bare_array", "gzip_members", "trailing_garbage",
        "no_close", "array_last", "plain_keys_after", "bracket_in_last_key", "bare_array_blanks",
        "last_event_ends_in_bracket",
    ],
)  # fmt: skip
def test_odd_layouts_as_the_whole_text_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: str
) -> None:
    """Keys after the array (with `},` and `]` in them, or none), a second traceEvents key, a
    bare array, concatenated gzip members, damage after the document, an array never closed,
    a "]" in a string after the array or at the end of the last event: the streamed import
    ends exactly as the whole-text one (same tables, or the same error), scanning the last
    chunk for the array's close only where the keys after it end in a "]"."""
    monkeypatch.setattr(chrome_trace, "DECODE_CHUNK", 2048)
    scans = _Scans()
    monkeypatch.setattr(chrome_stream, "_SCAN", scans)
    events = _events(4)
    body = json.dumps(events, indent=1)
    dev = '"deviceProperties": [{"id": 0, "name": "A", "dims": [1, 2]}, {"id": 1, "name": "B"}]'
    texts = {
        "keys_after": '{"schemaVersion": 1, "traceEvents": ' + body + ", " + dev + "}",
        "duplicate_key": '{"traceEvents": ' + body + ', "traceEvents": ' + body[:-1] + "]}",
        "bare_array": body,
        "gzip_members": '{"traceEvents": ' + body + "}",
        "trailing_garbage": '{"traceEvents": ' + body + "} x",
        "no_close": '{"traceEvents": ' + body,
        "array_last": '{"schemaVersion": 1, "traceEvents": ' + body + "\n}\n\n",
        "plain_keys_after": '{"traceEvents": ' + body + ', "displayTimeUnit": "ms"}',
        "bracket_in_last_key": '{"traceEvents": ' + body + ', "traceName": "a]b}, ]"}',
        "bare_array_blanks": body + "\n \t\r\n",
        "last_event_ends_in_bracket": '{"traceEvents": '
        + json.dumps([*events, {"ph": "i", "name": "m]", "ts": 1, "args": {"d": [[1], []]}}])
        + ', "traceName": "t"}',
    }
    src = tmp_path / "t.json"
    data = texts[layout].encode()
    if layout == "gzip_members":
        half = len(data) // 2
        src.write_bytes(gzip.compress(data[:half]) + gzip.compress(data[half:]))
    else:
        src.write_bytes(data)
    outcome: list[Any] = []
    for whole in (False, True):
        with monkeypatch.context() as m:
            if whole:
                _whole_text(m)
            try:
                ingest(tmp_path / f"s{whole}", src, run_id="r")
                outcome.append(run_tables(tmp_path / f"s{whole}", "r"))
            except Exception as exc:  # the two readers must fail alike
                outcome.append(f"{type(exc).__name__}: {exc}")
                assert not (tmp_path / f"s{whole}" / "runs").exists()
        if not whole and layout not in ("trailing_garbage", "no_close"):
            assert (scans.n > 0) == (layout in SCANNED)
    if isinstance(outcome[1], str):
        assert outcome[0] == outcome[1]
        assert layout in ("trailing_garbage", "no_close")
    else:
        assert_same_run(outcome[0], outcome[1])
