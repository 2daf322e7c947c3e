"""Native Parquet input: a schema-v1 events table, and another store merged run by run."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ingest_helpers import HANDMADE, MI250, store_hash
from workbench.errors import WorkbenchError
from workbench.store.ingest import ingest


@pytest.fixture
def source(tmp_path: Path) -> Path:
    s = tmp_path / "src"
    ingest(s, MI250, run_id="mi250")
    ingest(s, HANDMADE, run_id="hand")
    return s


def test_merge_store_run_by_run(tmp_path: Path, source: Path) -> None:
    dst = tmp_path / "dst"
    ingest(dst, HANDMADE, run_id="hand")  # already there, same import: skipped
    report = ingest(dst, source)
    assert report.status == "imported" and sorted(report.run_ids) == ["hand", "mi250"]
    for name in ("events", "requests"):
        a = pq.read_table(source / name / "run_id=mi250" / "part-0.parquet")
        b = pq.read_table(dst / name / "run_id=mi250" / "part-0.parquet")
        assert a.equals(b)
    before = store_hash(dst)
    assert ingest(dst, source).status == "unchanged"
    assert store_hash(dst) == before


def test_merge_conflict_writes_nothing(tmp_path: Path, source: Path) -> None:
    dst = tmp_path / "dst"
    ingest(dst, MI250, run_id="hand")  # same id, other content
    before = store_hash(dst)
    with pytest.raises(WorkbenchError, match="already exists"):
        ingest(dst, source)
    assert store_hash(dst) == before


def test_events_table_gets_requests_and_stages(tmp_path: Path, source: Path) -> None:
    con = duckdb.connect()
    table = con.sql(
        "SELECT * EXCLUDE (request_id, stage) FROM read_parquet($p, hive_partitioning = true)"
        " WHERE run_id = 'hand'",
        params={"p": str(source / "events" / "*" / "*.parquet")},
    ).to_arrow_table()
    path = tmp_path / "events.parquet"
    pq.write_table(table, path)
    dst = tmp_path / "dst"
    report = ingest(dst, path, run_id="again")
    assert report.run_ids == ["again"] and report.requests == 2
    cols = ["latency_us", "ingress_us", "lowering_us", "execution_us", "assembly_us", "other_us"]
    orig = pq.read_table(source / "requests" / "run_id=hand" / "part-0.parquet").select(cols)
    new = pq.read_table(dst / "requests" / "run_id=again" / "part-0.parquet").select(cols)
    assert new.to_pylist() == orig.to_pylist()


def test_events_table_with_wrong_schema(tmp_path: Path) -> None:
    path = tmp_path / "x.parquet"
    pq.write_table(pa.table({"a": [1]}), path)
    with pytest.raises(WorkbenchError, match="missing columns"):
        ingest(tmp_path / "dst", path)
    assert not (tmp_path / "dst").exists()
