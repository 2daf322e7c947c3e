"""requests.shape_key is the request's input shape, whichever torch.compile path served it."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ingest_helpers import HANDMADE, TORCH, TRACES
from workbench.store.attribution.requests import Requests, shape_keys
from workbench.store.ingest import ingest

RUNS = {
    "failing": "serving_static_failing",
    "comparator": "serving_dynamic_comparator",
    "rerun": "serving_static_rerun",
}


def _generator_shapes() -> dict[str, str]:
    """request name -> the [B,T,64] input the fixture generator fed it (warm-ups included)."""
    spec = importlib.util.spec_from_file_location("make_torch", TORCH / "make_torch_fixtures.py")
    assert spec and spec.loader
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    d = gen.D_MODEL
    named = [(f"warmup#{i}", s) for i, s in enumerate(gen.WARM_SHAPES)]
    named += [(f"request#{i}", s) for i, s in enumerate(gen.request_shapes())]
    return {name: json.dumps([[b, t, d]], separators=(",", ":")) for name, (b, t) in named}


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, str | None]]:
    store = tmp_path_factory.mktemp("shape_key")
    out: dict[str, dict[str, str | None]] = {}
    for rid, stem in RUNS.items():
        ingest(store, TORCH / f"{stem}.pt.trace.json.gz", run_id=rid)
        rows = pq.read_table(store / "requests" / f"run_id={rid}").to_pylist()
        out[rid] = {r["name"]: r["shape_key"] for r in rows}
    fb = pq.read_table(
        store / "events" / "run_id=failing", columns=["request_id", "fallback", "recompile"]
    ).to_pylist()
    reqs = pq.read_table(store / "requests" / "run_id=failing").to_pylist()
    name_of = {r["request_id"]: r["name"] for r in reqs}
    out["_failing_eager"] = {name_of[e["request_id"]]: "" for e in fb if e["fallback"]}
    out["_failing_compiling"] = {name_of[e["request_id"]]: "" for e in fb if e["recompile"]}
    return out


def test_every_request_is_keyed_by_its_real_input(keys: dict[str, dict[str, str | None]]) -> None:
    truth = _generator_shapes()
    for rid in RUNS:
        assert set(keys[rid]) == set(truth), rid
        wrong = {n: (k, truth[n]) for n, k in keys[rid].items() if k != truth[n]}
        assert not wrong, (rid, sorted(wrong.items())[:5])
    assert len(set(truth.values())) == 26  # 3 warm shapes + the 23 drifted ones of the README


def test_same_request_same_key_on_every_path(keys: dict[str, dict[str, str | None]]) -> None:
    failing, comparator, rerun = keys["failing"], keys["comparator"], keys["rerun"]
    assert failing == comparator == rerun
    # The equality spans the paths that used to disagree: eager fallback in the failing run
    # (compiled in the comparator) and requests whose first events are a recompilation.
    eager = set(keys["_failing_eager"])
    compiling = set(keys["_failing_compiling"])
    assert {"request#45", "request#51", "request#79"} <= eager
    assert {"request#36", "request#37", "request#41", "request#43", "request#44"} <= compiling
    assert all(failing[n] and failing[n] == comparator[n] for n in eager | compiling)


def test_handmade_request_keys(tmp_path: Path) -> None:
    store = tmp_path / "store"
    ingest(store, HANDMADE, run_id="hand")
    rows = {r["name"]: r for r in pq.read_table(store / "requests").to_pylist()}
    # request#0: the copy_ under `preprocess`, before the compilation and the compiled region.
    assert rows["request#0"]["shape_key"] == "[[4,16],[4,16]]"
    # request#1 only runs compiled code (flattened shapes) and nothing shaped precedes it.
    assert rows["request#1"]["shape_key"] is None


def test_training_steps_keep_a_key(tmp_path: Path) -> None:
    store = tmp_path / "store"
    ingest(store, TRACES / "mi250_minitoy_train_ROCm6_2_kineto.json.gz", run_id="mi250")
    rows = pq.read_table(store / "requests").to_pylist()
    # Step 1 makes its [5,128] input (randn -> normal_) and runs eager; step 2 carries no dims.
    assert [(r["name"], r["shape_key"]) for r in rows] == [
        ("ProfilerStep#1", "[[5,128]]"),
        ("ProfilerStep#2", None),
    ]


def _req(starts: list[float], ends: list[float]) -> Requests:
    n = len(starts)
    return Requests(
        "annotation",
        np.arange(n, dtype=np.int64),
        np.array(starts),
        np.array(ends),
        np.zeros(n, dtype=np.int64),
    )


def test_sources_in_order_and_exclusions() -> None:
    # Two requests on thread 0: [10, 20) and [30, 40).
    req = _req([10.0, 30.0], [20.0, 40.0])
    ts = np.array([5.0, 8.0, 11.0, 12.0, 13.0, 22.0, 25.0, 31.0, 33.0, 35.0])
    request_of = np.array([-1, -1, 0, 0, 0, -1, -1, 1, 1, 1], dtype=np.int64)
    thread = np.zeros(ts.size, dtype=np.int64)
    shape = pa.array(
        [
            "[[9,9]]",  # made before request 0, but not the last one
            "[[2,3,9],[],[]]",  # the last tensor made before request 0 (its own operator wins)
            "[[],[],[]]",  # no tensor dims: never a key
            "[[7,7]]",  # inside a compilation: not usable
            "[[2,3,8],[],[8]]",  # request 0's first eager operator
            "[[6,6],[6]]",  # made before request 1 but superseded by the next one
            "[[5,4,8],[],[]]",  # the last tensor made before request 1
            None,  # the compiled region of request 1
            "[[20,8],[8,8]]",  # inside it: flattened, not usable
            "[[1,1]]",  # after the region: output handling, not input
        ]
    )
    usable = np.array([1, 1, 1, 0, 1, 1, 1, 1, 0, 1], dtype=np.bool_)
    region = np.zeros(ts.size, dtype=np.bool_)
    region[7] = True
    got = shape_keys(req, request_of, ts, shape, usable, thread, region)
    assert got == ["[[2,3,8]]", "[[5,4,8]]"]
    # Without the compile information only the requests' own first shaped operators count.
    assert shape_keys(req, request_of, ts, shape) == ["[[7,7]]", "[[20,8],[8,8]]"]
