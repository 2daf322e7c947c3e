"""The op table a big import writes is made from the events table in memory (beside the events
file's write, for the nsys import's speed): it must hold what reading the file back gives."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ingest_helpers import HANDMADE, ROOT, TORCH, TRACES
from workbench.store import layout, op_columns, op_table
from workbench.store.attribution.rules import DEFAULT_RULES, load_rules
from workbench.store.attribution.trace_import import attribute
from workbench.store.importers import importer_for
from workbench.store.ingest import ingest

sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "nsys"))
from make_nsys_export import write_export

SAXPY = TRACES / "nsys" / "saxpy_a100.sqlite"


def source(key: str, tmp: Path) -> Path:
    if key == "saxpy_a100":
        if not SAXPY.is_file():
            pytest.skip(f"needs the real traces folder {TRACES} (nsys/saxpy_a100.sqlite)")
        return SAXPY
    if key == "generated":
        path = tmp / "generated.sqlite"
        write_export(path, 7, 2, 5)  # 7 requests per process, 2 processes, 5 kernels each
        return path
    return {
        "current_schema": ROOT / "tests" / "fixtures" / "nsys" / "current_schema.sqlite",
        "kineto_torch": TORCH / "aa_first.pt.trace.json.gz",
        "kineto_serving": HANDMADE,
    }[key]


def same_ops(a: op_columns.OpColumns, b: op_columns.OpColumns) -> None:
    assert a.name_vocab == b.name_vocab
    assert a.kernel_vocab == b.kernel_vocab
    assert sorted(a.cols) == sorted(b.cols)
    for name, col in a.cols.items():
        assert col.dtype == b.cols[name].dtype, name
        np.testing.assert_array_equal(col, b.cols[name], err_msg=name)


@pytest.mark.parametrize(
    "key", ["saxpy_a100", "current_schema", "generated", "kineto_torch", "kineto_serving"]
)
def test_op_table_made_in_memory_is_the_file_read_back(
    key: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(op_table, "MIN_EVENTS", 1)  # every run counts as big
    store = tmp_path / "store"
    ingest(store, source(key, tmp_path), run_id="r")
    events = layout.partition_dir(store, "events", "r") / layout.PART_FILE
    stored = op_table.read(events)
    assert stored is not None and stored.ops.size > 0
    index = {r: i for i, r in enumerate(stored.request_ids)}
    same_ops(stored.ops, op_columns.read(events, index))


def test_of_table_matches_read_with_nulls_and_skipped_requests(tmp_path: Path) -> None:
    """Null text values, rows of requests not asked for, and batches past the first."""
    store = tmp_path / "store"
    ingest(store, TORCH / "aa_first.pt.trace.json.gz", run_id="r")
    events = layout.partition_dir(store, "events", "r") / layout.PART_FILE
    table = pq.read_table(events)
    n = table.num_rows
    # Repeat the rows past one read batch, and null out every third kernel and shape.
    reps = op_columns._BATCH_ROWS // n + 2
    big = pa.concat_tables([table] * reps)
    big = big.set_column(
        big.schema.get_field_index("event_id"),
        "event_id",
        pa.array(np.arange(big.num_rows, dtype=np.int64)),
    )
    drop = pa.array(np.arange(big.num_rows) % 3 == 0)
    for name in ("kernel", "shape"):
        col = big.column(name)
        big = big.set_column(
            big.schema.get_field_index(name), name, pa.compute.if_else(drop, None, col)
        )
    path = tmp_path / "big.parquet"
    layout.write_table(big, big.schema, path)
    ids = [r for r in pq.read_table(store / "requests").column("request_id").to_pylist()]
    index = {r: i for i, r in enumerate(ids[::2])}  # every other request skipped
    same_ops(op_columns.of_table(big, index), op_columns.read(path, index))


@pytest.mark.parametrize(
    "key", ["saxpy_a100", "current_schema", "generated", "kineto_torch", "kineto_serving"]
)
def test_events_text_holds_the_events_values(key: str, tmp_path: Path) -> None:
    """The dictionary-encoded text columns the op table is made from are the events' own."""
    path = source(key, tmp_path)
    decoded = importer_for(path).open(path, None, None).decode()
    rules = load_rules(DEFAULT_RULES)
    assert attribute(decoded.cols, decoded.args, rules, None).events_text is None
    att = attribute(decoded.cols, decoded.args, rules, None, text_for_ops=True)
    assert att.events_text is not None
    assert sorted(att.events_text) == ["category", "kernel", "name", "request_id", "stage"]
    for name, encoded in att.events_text.items():
        assert pa.types.is_dictionary(encoded.type), name
        assert encoded.cast(pa.string()).equals(att.events.column(name).combine_chunks()), name
    # Only the names the run uses (an nsys export's list is all of its StringIds).
    names = att.events_text["name"].dictionary
    assert len(names) == len(set(att.events.column("name").to_pylist()))
