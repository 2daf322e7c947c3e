"""The packed args text: PackedText round trips, and an import that holds the args packed writes
the same events file, byte for byte, as one that holds them as an Arrow column."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from workbench.store import layout, schema
from workbench.store.attribution.rules import DEFAULT_RULES, load_rules
from workbench.store.attribution.trace_import import attribute
from workbench.store.columns.packed_text import PackedText
from workbench.store.importers import importer_for
from workbench.store.importers.kineto import chrome_trace
from workbench.store.ingest import ingest

TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces"
if not TRACES.is_dir():
    TRACES = Path("/work/shared/traces")


def _chunks(seed: int) -> list[pa.StringArray]:
    rng = random.Random(seed)
    out = []
    for size in (0, 1, 17, 300, 5, 1000):
        values = [
            None if rng.random() < 0.2 else "".join(rng.choices('ab{}",:é ', k=rng.randint(0, 40)))
            for _ in range(size)
        ]
        out.append(pa.array(values, pa.string()))
    out.append(pa.array([""] * 4, pa.string()))  # characters of no length at all
    return out


def test_rows_give_back_every_range() -> None:
    chunks = _chunks(1)
    whole = pa.chunked_array(chunks, pa.string()).to_pylist()
    packed = PackedText()
    for c in chunks:
        packed.add(c)
    packed.close()
    assert len(packed) == len(whole)
    assert packed.nbytes < sum(c.nbytes for c in chunks)  # packed is smaller than plain
    cuts = [0, 1, 17, 18, 300, 318, 319, 700, len(whole)]
    for a in cuts:
        for b in cuts:
            if a <= b:
                assert packed.rows(a, b).to_pylist() == whole[a:b], (a, b)


def test_filter_keeps_rows_across_chunks_and_twice() -> None:
    chunks = _chunks(2)
    whole = pa.chunked_array(chunks, pa.string()).to_pylist()
    packed = PackedText()
    for c in chunks:
        packed.add(c)  # filter closes it (waits for the packing) itself
    rng = np.random.default_rng(3)
    keep = rng.random(len(whole)) < 0.6
    once = packed.filter(keep)
    kept = [v for v, k in zip(whole, keep, strict=True) if k]
    assert once.rows(0, len(once)).to_pylist() == kept
    keep2 = rng.random(len(kept)) < 0.5
    twice = once.filter(keep2)
    assert twice.rows(0, len(twice)).to_pylist() == [
        v for v, k in zip(kept, keep2, strict=True) if k
    ]
    with pytest.raises(ValueError, match="rows"):
        packed.filter(keep[:-1])
    with pytest.raises(RuntimeError, match="closed"):
        packed.add(chunks[1])


def _reference_events(trace: Path) -> pa.Table:
    """The events table as attribution builds it from an unpacked decode."""
    opened = importer_for(trace).open(trace, None, None)
    dec = opened.decode()
    assert not isinstance(dec.args.text, PackedText)
    att = attribute(dec.cols, dec.args, load_rules(DEFAULT_RULES), None)
    assert att.packed_args is None
    return att.events


def _same_events_file(trace: Path, tmp_path: Path) -> None:
    ingest(tmp_path / "store", trace, run_id="r")
    got = tmp_path / "store" / "events" / "run_id=r" / layout.PART_FILE
    ref = tmp_path / "ref.parquet"
    layout.write_table(_reference_events(trace), schema.EVENTS_FILE, ref)
    assert pq.ParquetFile(got).metadata.num_row_groups > 2
    assert got.read_bytes() == ref.read_bytes()


def test_ingest_writes_the_same_file_as_unpacked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """B/E pairs (kept rows filtered after decoding), several decode chunks and row groups
    that cut through them: the store's events file is byte-identical to the plain write."""
    events: list[dict[str, object]] = [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "py"}},
    ]
    for i in range(3000):
        t = i * 10.0
        events.append({"ph": "B", "name": f"op{i % 7}", "pid": 1, "tid": 1, "ts": t,
                       "args": {"Input Dims": [[i % 5, 3]], "note": "x" * (i % 50)}})  # fmt: skip
        events.append({"ph": "X", "name": "k", "cat": "kernel", "pid": 1, "tid": 2, "ts": t + 1,
                       "dur": 2.0, "args": {"correlation": i, "stream": 7}})  # fmt: skip
        if i % 3:
            events.append({"ph": "E", "pid": 1, "tid": 1, "ts": t + 5})
    trace = tmp_path / "be.json"
    trace.write_text(json.dumps({"traceEvents": events}))
    monkeypatch.setattr(chrome_trace, "DECODE_CHUNK", 40_000)
    monkeypatch.setattr(layout, "ROW_GROUP", 1_500)
    _same_events_file(trace, tmp_path)


def test_real_trace_writes_the_same_file_as_unpacked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = TRACES / "rank0.json.gz"
    if not trace.exists():
        pytest.skip(f"needs {TRACES} (the shared real traces)")
    monkeypatch.setattr(layout, "ROW_GROUP", 30_000)
    _same_events_file(trace, tmp_path)
