"""Integrity: a run's files are checked against the content hashes recorded at commit before
anything is computed on them; damage is a one-line error naming the file, never a number."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from harness import refused, tree_hash, workbench

from triage_stores import RunSpec, write_run
from workbench.store import arrays, db, integrity, layout, op_table

TRIAGE = ["triage", "--failing", "failing", "--comparator", "base"]


def _store(root: Path) -> Path:
    store = root / "store"
    write_run(store, RunSpec("base", seed=1, n_requests=60, drift_share=0.3))
    spec = RunSpec("failing", seed=2, n_requests=60, drift_share=0.3, recompile_us=8000.0)
    write_run(store, spec)
    return store


def _file(store: Path, table: str, run_id: str = "failing") -> Path:
    return layout.partition_dir(store, table, run_id) / layout.PART_FILE


def _silent_damage(path: Path, column: str) -> None:
    """Overwrite bytes (64, or fewer in a small column) inside `column`'s data so that the file
    still decodes, to other values: damage no Parquet reader notices (zstd keeps float bytes
    as raw literals)."""
    data = path.read_bytes()
    before = pq.read_table(path)
    meta = pq.ParquetFile(path).metadata.row_group(0)
    chunk = next(
        meta.column(i) for i in range(meta.num_columns) if meta.column(i).path_in_schema == column
    )
    start, size = chunk.data_page_offset, chunk.total_compressed_size
    spots = [(n, off) for n in (64, 8) for off in range(start + 16, start + size - 2 * n, 4)]
    for n, off in spots:
        damaged = data[:off] + b"\x7f" * n + data[off + n :]
        try:
            after = pq.read_table(io.BytesIO(damaged))
        except Exception:
            continue
        if not after.equals(before):
            path.write_bytes(damaged)
            return
    pytest.fail(f"no silent damage found in {column} of {path}")


@pytest.mark.parametrize(
    ("table", "column"),
    [("events", "dur_us"), ("events", "ts_us"), ("requests", "latency_us")],
)
def test_silently_damaged_file_is_refused_by_triage(
    tmp_path: Path, table: str, column: str
) -> None:
    store = _store(tmp_path)
    target = _file(store, table)
    _silent_damage(target, column)
    out = refused(["triage", "--store", store, *TRIAGE[1:]], tmp_path, str(target), [store])
    assert "damaged" in out.stderr


def test_truncated_parquet_footer_is_one_line_naming_the_file(tmp_path: Path) -> None:
    store = _store(tmp_path)
    target = _file(store, "events")
    target.write_bytes(target.read_bytes()[:-40])
    refused(["triage", "--store", store, *TRIAGE[1:]], tmp_path, str(target), [store])


def test_a_missing_partition_file_is_named(tmp_path: Path) -> None:
    store = _store(tmp_path)
    target = _file(store, "requests")
    target.unlink()
    refused(["triage", "--store", store, *TRIAGE[1:]], tmp_path, str(target), [store])


def test_hashes_are_recorded_for_every_file_of_a_run(tmp_path: Path) -> None:
    store = _store(tmp_path)
    hashes = integrity.recorded(layout.run_file(store, "failing"))
    assert hashes is not None
    assert sorted(hashes) == [
        f"{t}/run_id=failing/{layout.PART_FILE}"
        for t in ("compiles", "events", "requests", "tokens")
    ]
    for rel, value in hashes.items():
        assert value == integrity.digest(store / rel)


def _strip_hashes(run_file: Path) -> None:
    runs = pq.read_table(run_file)
    meta = {k: v for k, v in (runs.schema.metadata or {}).items() if k != integrity.FILES_KEY}
    pq.write_table(runs.replace_schema_metadata(meta), run_file)


def test_a_store_from_before_hashes_still_triages_and_reimports_with_them(
    tmp_path: Path,
) -> None:
    store = _store(tmp_path)
    want = workbench(["triage", "--store", store, *TRIAGE[1:], "--json"], tmp_path)
    assert want.code == 0, str(want)
    for rid in ("base", "failing"):
        _strip_hashes(layout.run_file(store, rid))
    old = workbench(["triage", "--store", store, *TRIAGE[1:], "--json"], tmp_path)
    assert old.code == 0, str(old)
    assert json.loads(old.stdout) == json.loads(want.stdout)
    # Re-importing the old store into a new one records the hashes.
    new = tmp_path / "new"
    out = workbench(["ingest", store, "--store", new], tmp_path)
    assert out.code == 0, str(out)
    assert integrity.recorded(layout.run_file(new, "failing")) is not None


def test_importing_a_damaged_store_is_refused(tmp_path: Path) -> None:
    store = _store(tmp_path)
    target = _file(store, "events")
    _silent_damage(target, "dur_us")
    new = tmp_path / "new"
    refused(["ingest", store, "--store", new], tmp_path, str(target), [store, new])


@pytest.fixture
def big(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Runs big enough (for this test) to get a cached op table, in the test's own home."""
    monkeypatch.setattr(op_table, "MIN_EVENTS", 300)
    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path / "home"))
    return _store(tmp_path)


def test_a_damaged_op_table_is_passed_over_for_the_parquet(big: Path) -> None:
    hashes = integrity.recorded(layout.run_file(big, "failing")) or {}
    assert not any(op_table.FILE in rel for rel in hashes)  # a cache, not a store file
    want = arrays.load_run_arrays(db.connect(big), "failing").ops  # makes the table
    op_table.flush()
    table = op_table.cache_path(hashes[f"events/run_id=failing/{layout.PART_FILE}"])
    # 64 bytes inside the mapped columns: the table still opens, with other numbers.
    data = bytearray(table.read_bytes())
    mid = len(data) // 2
    data[mid : mid + 64] = b"\x7f" * 64
    table.write_bytes(bytes(data))
    assert op_table.read(_file(big, "events"), table) is not None  # its own checks do not see it
    got = arrays.load_run_arrays(db.connect(big), "failing").ops
    assert got.observed_us.tolist() == want.observed_us.tolist()
    assert got.flops.tolist() == want.flops.tolist()


def test_an_unchanged_store_is_not_written_by_a_verified_triage(tmp_path: Path) -> None:
    store = _store(tmp_path)
    before = tree_hash(store)
    out = workbench(["triage", "--store", store, *TRIAGE[1:]], tmp_path)
    assert out.code == 0, str(out)
    assert tree_hash(store) == before
