"""workbench.store.arrays: store -> RunArrays (shapes, tiles, codes, exclusive time)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from accel.stages import MEM_TIER_CODE, STAGE_CODE
from triage_stores import RunSpec, build_run, write_run
from workbench.errors import WorkbenchError
from workbench.store import arrays, db, layout, op_columns


def test_parse_shape_and_tile() -> None:
    assert op_columns.parse_shape_mn("[[8,96,256],[256,512]]") == (768.0, 512.0)
    assert op_columns.parse_shape_mn("[[256],[8,96,256],[256,512]]") == (768.0, 512.0)
    assert op_columns.parse_shape_mn("[[4,16,64]]") == (64.0, 64.0)
    for bad in (None, "", "[[], [3]]", "not json", "{}", '[["a","b"]]'):
        assert all(math.isnan(v) for v in op_columns.parse_shape_mn(bad))
    assert op_columns.parse_tile("128x256") == (128.0, 256.0)
    assert all(math.isnan(v) for v in op_columns.parse_tile("big"))


def test_load_run_arrays(tmp_path: Path) -> None:
    write_run(tmp_path, RunSpec("run-a", n_requests=50, drift_share=0.3, recompile_us=5000.0))
    con = db.connect(tmp_path)
    run = arrays.load_run_arrays(con, "run-a")
    assert run.requests.size == 50 and run.ops.size == 50 * 7
    assert run.requests.stage_us.shape == (50, 6)
    # stage times sum to latency (store invariant) and arrival order is kept
    assert np.allclose(run.requests.stage_us.sum(axis=1), run.requests.latency_us)
    assert np.all(np.diff(run.requests.arrival_us) >= 0)
    assert set(np.unique(run.ops.stage)) == set(STAGE_CODE.values())
    ex = run.ops.stage == STAGE_CODE["execution"]
    assert np.all(run.ops.mem_tier[ex] == MEM_TIER_CODE["hbm"])
    assert np.all(run.ops.tile_m[ex] == 128) and np.all(np.isnan(run.ops.tile_m[~ex]))
    assert np.all(run.ops.m[ex] >= 8 * 128)
    assert run.ops.recompile.sum() >= 1
    assert run.compiled_shapes == {run.requests.shape_key[0]}
    assert run.ops.name == run.ops.kernel and len(run.ops.name) == run.ops.size
    assert run.ops.name[3] in ("triton_mm_fused", "aten::mm_generic")
    assert run.requests.batch_id is not None
    assert sorted(run.requests.batch_id.tolist()) == list(range(50))
    # per-request op sums equal the request's stage times (no queue wait in op times)
    per_req = np.bincount(run.ops.req, weights=run.ops.observed_us, minlength=50)
    waits = run.requests.start_us - run.requests.arrival_us
    assert np.allclose(per_req + waits + run.requests.stage_us[:, 5], run.requests.latency_us)
    with pytest.raises(WorkbenchError, match="no such run"):
        arrays.load_run_arrays(con, "missing")


def test_exclusive_time_subtracts_children(tmp_path: Path) -> None:
    t = build_run(RunSpec("nest", n_requests=3))
    ev = t.events
    # make event 1 a child of event 0 (same request): event 0's exclusive time drops by it
    parent = pa.array([None, 0] + [None] * (ev.num_rows - 2), pa.int64())
    t = layout.RunTables(t.run, ev.append_column("parent_id", parent), t.requests, t.compiles)
    layout.commit_run(tmp_path, t, source="test")
    run = arrays.load_run_arrays(db.connect(tmp_path), "nest")
    dur = ev.column("dur_us").to_numpy()
    assert run.ops.observed_us[0] == pytest.approx(max(dur[0] - dur[1], 0.0))
    assert run.ops.observed_us[1] == pytest.approx(dur[1])


def test_drop_requests_renumbers(tmp_path: Path) -> None:
    write_run(tmp_path, RunSpec("d", n_requests=20))
    run = arrays.load_run_arrays(db.connect(tmp_path), "d")
    kept = arrays.drop_requests(run, ["r0", "r5"])
    assert kept.requests.size == 18 and kept.ops.size == 18 * 7
    assert kept.ops.req.max() == 17 and "r5" not in kept.requests.request_id
    assert len(kept.ops.kernel) == len(kept.ops.name) == kept.ops.size
    assert kept.requests.batch_id is not None and kept.requests.batch_id.size == 18
    assert arrays.drop_requests(run, []) is run


def test_loading_without_requests_equals_dropping_them(tmp_path: Path) -> None:
    write_run(tmp_path, RunSpec("s", n_requests=30, drift_share=0.3, recompile_us=3000.0))
    con = db.connect(tmp_path)
    full = arrays.load_run_arrays(con, "s")
    skip = ["r0", "r7", "r29"]
    a, b = arrays.load_run_arrays(con, "s", skip_requests=skip), arrays.drop_requests(full, skip)
    assert a.requests.request_id == b.requests.request_id and a.requests.size == 27
    for f in ("req", "stage", "observed_us", "m", "n", "fusion_group", "core", "recompile"):
        assert np.array_equal(getattr(a.ops, f), getattr(b.ops, f), equal_nan=f in ("m", "n"))
    assert a.ops.name == b.ops.name and a.ops.kernel == b.ops.kernel
    assert a.compiled_shapes == full.compiled_shapes
