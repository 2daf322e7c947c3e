"""Chunked decoding gives the same store as one chunk, whatever the chunk boundaries hit."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from ingest_helpers import HANDMADE, TORCH
from workbench.errors import WorkbenchError
from workbench.store.importers.kineto import chrome_trace
from workbench.store.ingest import ingest


def _tables(store: Path, run_id: str) -> dict[str, list[dict[str, object]]]:
    return {
        name: pq.read_table(store / name / f"run_id={run_id}" / "part-0.parquet").to_pylist()
        for name in ("events", "requests")
    }


def _hostile(tmp_path: Path) -> Path:
    """The hand-made trace plus args whose text looks like event boundaries."""
    doc = json.loads(HANDMADE.read_text())
    doc["traceEvents"].insert(
        3,
        {"ph": "X", "cat": "cpu_op", "name": "aten::cat", "pid": 100, "tid": 1, "ts": 1020,
         "dur": 5, "args": {"note": "}, {\"ph\": \"X\"}", "parts": [{"a": 1}, {"b": 2}],
                            "Input Dims": [[2, 3], [2, 3]]}},
    )  # fmt: skip
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(doc, indent=2))
    return path


@pytest.mark.parametrize("chunk", [1, 97, 500, 4096])
def test_small_chunks_same_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    src = _hostile(tmp_path)
    ingest(tmp_path / "one", src, run_id="r")
    monkeypatch.setattr(chrome_trace, "DECODE_CHUNK", chunk)
    ingest(tmp_path / "many", src, run_id="r")
    a, b = _tables(tmp_path / "one", "r"), _tables(tmp_path / "many", "r")
    assert a == b
    cat = next(e for e in a["events"] if e["name"] == "aten::cat")
    assert json.loads(str(cat["args"]))["parts"] == [{"a": 1}, {"b": 2}]
    assert cat["shape"] == "[[2,3],[2,3]]"


def test_real_trace_in_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = TORCH / "serving_static_rerun.pt.trace.json.gz"
    ingest(tmp_path / "one", src, run_id="r")
    monkeypatch.setattr(chrome_trace, "DECODE_CHUNK", 64 << 10)
    ingest(tmp_path / "many", src, run_id="r")
    assert _tables(tmp_path / "one", "r") == _tables(tmp_path / "many", "r")


@pytest.mark.parametrize("chunk", [64, 8 << 20])
def test_cut_off_array_in_chunks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    events = json.loads(HANDMADE.read_text())["traceEvents"]
    text = json.dumps(events, indent=1)
    cut = text[: text.index('"request#1"')]
    src = tmp_path / "cut.json"
    src.write_text(cut)
    monkeypatch.setattr(chrome_trace, "DECODE_CHUNK", chunk)
    report = ingest(tmp_path / "s", src)
    whole = [e for e in events if events.index(e) < 20]  # events before request#1
    assert report.events_read == len(whole)
    assert any("cut off" in w for w in report.warnings)


def test_cancel_between_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from workbench.store.progress import ImportCancelled, IngestProgress

    monkeypatch.setattr(chrome_trace, "DECODE_CHUNK", 500)
    cancel = __import__("threading").Event()
    seen: list[IngestProgress] = []

    def progress(p: IngestProgress) -> None:
        seen.append(p)
        if p.phase == "decode":
            cancel.set()

    with pytest.raises(ImportCancelled):
        ingest(tmp_path / "s", HANDMADE, progress=progress, cancel=cancel)
    decode = [p for p in seen if p.phase == "decode"]
    assert len(decode) == 1 and 0 < decode[0].bytes_done < decode[0].bytes_total
    assert not (tmp_path / "s").exists()


def test_cli_bar_shows_bytes_and_events() -> None:
    import io

    from workbench.cli.ingest_cmd import Bar
    from workbench.store.progress import IngestProgress

    out = io.StringIO()
    bar = Bar(out)
    bar(IngestProgress("/x/trace.json", "decode", 5_000_000, 10_000_000, 1234))
    text = out.getvalue()
    assert "trace.json" in text and "5.0/10.0 MB" in text and "1,234 events" in text
    assert "#" * 12 + "." * 12 in text
    bar.clear()
    assert out.getvalue().endswith("\r\x1b[K")


@pytest.mark.parametrize("chunk", [64, 8 << 20])
def test_damage_in_a_bare_array_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    events = json.loads(HANDMADE.read_text())["traceEvents"]
    text = json.dumps(events, indent=1)
    at = text.index('"name": "request#1"')
    src = tmp_path / "bad.json"
    src.write_text(text[:at] + "@" + text[at + 1 :])
    monkeypatch.setattr(chrome_trace, "DECODE_CHUNK", chunk)
    with pytest.raises(WorkbenchError, match="malformed JSON"):
        ingest(tmp_path / "s", src)
    assert not (tmp_path / "s").exists()
