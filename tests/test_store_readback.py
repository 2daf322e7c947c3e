"""The store reads back with plain duckdb and polars, without any of our code."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import polars as pl
import pytest

from ingest_helpers import HANDMADE, MI250, TORCH
from workbench.store.ingest import ingest


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    s = tmp_path_factory.mktemp("rb") / "store"
    ingest(s, MI250, run_id="mi250")
    ingest(s, HANDMADE, run_id="hand")
    stem = "serving_static_rerun"
    ingest(s, TORCH / f"{stem}.pt.trace.json.gz", compile_log=TORCH / f"{stem}.torch_trace")
    return s


def test_duckdb_reads_every_table(store: Path) -> None:
    con = duckdb.connect()
    counts = con.execute(
        "SELECT run_id, count(*) FROM read_parquet($p, hive_partitioning = true) "
        "GROUP BY run_id ORDER BY run_id",
        {"p": str(store / "events" / "*" / "*.parquet")},
    ).fetchall()
    assert [c[0] for c in counts] == ["hand", "mi250", "serving_static_rerun"]
    assert dict(counts)["mi250"] == 115
    runs = con.execute(
        "SELECT run_id, hardware, tags FROM read_parquet($p) ORDER BY run_id",
        {"p": str(store / "runs" / "*.parquet")},
    ).fetchall()
    assert runs[0][:2] == ("hand", "Test GPU 1")
    joined = con.execute(
        "SELECT count(*) FROM read_parquet($r, hive_partitioning = true) r "
        "JOIN read_parquet($e, hive_partitioning = true) e USING (run_id, request_id)",
        {"r": str(store / "requests" / "*" / "*.parquet"),
         "e": str(store / "events" / "*" / "*.parquet")},
    ).fetchone()  # fmt: skip
    assert joined is not None and joined[0] > 0
    compiles = con.execute(
        "SELECT count(*) FROM read_parquet($c, hive_partitioning = true)",
        {"c": str(store / "compiles" / "*" / "*.parquet")},
    ).fetchone()
    assert compiles is not None and compiles[0] > 0


def test_polars_reads_every_table(store: Path) -> None:
    ev = pl.scan_parquet(store / "events" / "**" / "*.parquet", hive_partitioning=True)
    per_run = ev.group_by("run_id").len().sort("run_id").collect()
    assert per_run["run_id"].to_list() == ["hand", "mi250", "serving_static_rerun"]
    assert per_run["len"].to_list()[1] == 115
    req = pl.read_parquet(store / "requests" / "**" / "*.parquet", hive_partitioning=True)
    stages = ["ingress_us", "lowering_us", "scheduling_us", "execution_us", "assembly_us"]
    total = req.select(pl.sum_horizontal([*stages, "other_us"]) - pl.col("latency_us")).to_series()
    assert total.abs().max() < 1e-6
    runs = pl.read_parquet(store / "runs" / "*.parquet")
    assert set(runs["run_id"]) == {"hand", "mi250", "serving_static_rerun"}
    shapes = ev.filter(pl.col("shape").is_not_null()).select("shape").head(5).collect()
    for s in shapes["shape"]:
        assert isinstance(json.loads(s), list) and " " not in s
