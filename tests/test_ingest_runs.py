"""`workbench runs` and list_runs: tags, request counts and latency tails per run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from ingest_helpers import HANDMADE, MI250, cli
from workbench.store.ingest import ingest
from workbench.store.runs import list_runs


@pytest.fixture
def store(tmp_path: Path) -> Path:
    s = tmp_path / "store"
    ingest(s, MI250, run_id="mi250", tags={"compiler": "none", "gpu": "mi250"})
    ingest(s, HANDMADE, run_id="hand", label="canary")
    return s


def test_list_runs(store: Path) -> None:
    runs = {r.run_id: r for r in list_runs(store)}
    assert set(runs) == {"mi250", "hand"}
    mi = runs["mi250"]
    assert mi.tags == {"compiler": "none", "gpu": "mi250"} and mi.compiler == "none"
    lat = np.array(
        pq.read_table(store / "requests" / "run_id=mi250" / "part-0.parquet")
        .column("latency_us")
        .to_pylist()
    )
    assert mi.n_requests == len(lat) == 2
    assert mi.p99_us == pytest.approx(float(np.quantile(lat, 0.99)))
    assert mi.p50_us == pytest.approx(float(np.median(lat)))
    hand = runs["hand"]
    assert hand.label == "canary" and hand.hardware == "Test GPU 1"
    assert hand.compiler == "torch.compile"  # the trace holds a Dynamo compilation
    assert (hand.n_requests, hand.p50_us) == (2, 650.0)


def test_runs_cli_json_and_table(store: Path, monkeypatch, capsys) -> None:
    assert cli(["runs", "--store", str(store), "--json"], monkeypatch) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["run_id"]: r["n_requests"] for r in rows} == {"mi250": 2, "hand": 2}
    assert cli(["runs", "--store", str(store)], monkeypatch) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:7] == [
        "run_id",
        "label",
        "hardware",
        "workload",
        "compiler",
        "runtime",
        "n",
    ]
    assert any(line.startswith("hand") and "canary" in line for line in out)


def test_runs_of_missing_store(tmp_path: Path, monkeypatch, capsys) -> None:
    assert cli(["runs", "--store", str(tmp_path / "nope")], monkeypatch) == 2
    assert "does not exist" in capsys.readouterr().err
