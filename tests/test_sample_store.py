"""The committed sample store is exactly what `workbench sample` regenerates, and tells its story."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from workbench.cli.main import main
from workbench.sample.llm import RECORDED_PAIR, llm_runs
from workbench.sample.synthetic import SAMPLE_RUNS
from workbench.store import db, layout

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / "sample_traces"


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sample") / "store"
    assert main(["sample", "--out", str(out)]) == 0
    return out


def _files(store: Path) -> list[str]:
    return sorted(str(p.relative_to(store)) for p in store.rglob("*") if p.is_file())


def test_regenerates_the_committed_store(fresh: Path) -> None:
    assert _files(fresh) == _files(COMMITTED)
    for rel in _files(COMMITTED):
        if rel.endswith(".parquet"):
            assert pq.read_table(fresh / rel).equals(pq.read_table(COMMITTED / rel)), rel
        else:
            assert (fresh / rel).read_bytes() == (COMMITTED / rel).read_bytes(), rel


def test_refuses_a_non_empty_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "keep.txt").write_text("mine")
    assert main(["sample", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(tmp_path) in err[0]
    assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"]


def test_store_is_small_and_tells_the_incident() -> None:
    total = sum(p.stat().st_size for p in COMMITTED.rglob("*") if p.is_file())
    # Most of it is the two 6,000-request runs a rollback needs to be shown equivalent.
    assert total <= 14 * 1024 * 1024
    llm = [rid for rid, *_ in llm_runs()]
    assert layout.run_ids(COMMITTED) == sorted([r.run_id for r in SAMPLE_RUNS] + llm)
    con = db.connect(COMMITTED)
    tags = {
        r["run_id"]: r
        for r in con.sql(
            "select run_id, compiler_version, hardware, driver_version, runtime_version, "
            "thermal_state, host from runs"
        )
        .to_arrow_table()
        .to_pylist()
    }
    fail, comp = tags["failing"], tags["comparator"]
    assert fail["compiler_version"] != comp["compiler_version"]
    for key in ("hardware", "driver_version", "runtime_version", "thermal_state", "host"):
        assert fail[key] == comp[key] == tags["fixed-metadata"][key]
    p95 = dict(
        con.sql(
            "select run_id, quantile_cont(latency_us, 0.95) from requests group by run_id"
        ).fetchall()
    )
    assert p95["failing"] > 1.5 * p95["comparator"]
    assert p95["fixed-metadata"] > 1.2 * p95["comparator"]
    assert p95["candidate-rollback"] < 1.1 * p95["comparator"]
    # Fewer launches and more bytes moved per request under the new compiler: the case study's
    # signature (per request: the comparator serves 6,000, the failing run 240).
    launches = dict(
        con.sql(
            "select run_id, (count(distinct case when fusion_group < 0 then event_id end)"
            " + count(distinct fusion_group)) / count(distinct request_id) from events"
            " where category = 'kernel' group by run_id"
        ).fetchall()
    )
    assert launches["failing"] < launches["comparator"]
    by = dict(
        con.sql(
            "select run_id, sum(bytes) / count(distinct request_id) from events"
            " where category = 'kernel' group by run_id"
        ).fetchall()
    )
    assert by["failing"] > by["comparator"]


def test_llm_incident_triages_to_its_recorded_cause(capsys: pytest.CaptureFixture[str]) -> None:
    """The recorded KV-cache cut reads as a TTFT regression from preemption (README, part 2)."""
    import json

    truth = json.loads((RECORDED_PAIR / "truth.json").read_text())
    before = {rel: (COMMITTED / rel).read_bytes() for rel in _files(COMMITTED)}
    args = ["triage", "--store", str(COMMITTED), "--failing", "llm-failing"]
    assert main([*args, "--comparator", "llm-comparator", "--json"]) == 0
    assert {rel: (COMMITTED / rel).read_bytes() for rel in _files(COMMITTED)} == before
    doc = json.loads(capsys.readouterr().out)
    assert doc["primary_slo"] == truth["slo"] == "ttft"
    assert (doc["origin_stage"], doc["mechanism"]) == (truth["origin_stage"], truth["mechanism"])
    tags = {rid: dict(t) for rid, _, _, t in llm_runs()}
    differing = {
        k for k in tags["llm-failing"] if tags["llm-failing"][k] != tags["llm-comparator"][k]
    }
    assert differing == {"kv_blocks"}
