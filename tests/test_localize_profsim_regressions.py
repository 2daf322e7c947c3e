"""Verdicts on accel.profsim pairs that went wrong before, each for a reason now fixed: kernels
imported without cores, a batch-policy swap from a simulated batcher that does not reproduce the
runs, and a placement swap that moved a request's shards onto another batch slot's lanes."""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import pytest

from accel import profsim
from accel.localize import localize
from accel.localize.batching import SIM_TOLERANCE, ingress_swap
from accel.localize.requeue import observed_queue
from accel.ops import RunArrays
from accel.profiles import get_profile
from accel.stages import STAGE_CODE
from workbench.store import db
from workbench.store.arrays import load_run_arrays
from workbench.store.profsim_io import add_run

HW = get_profile("h100")


def _runs(tmp: Path, fault: str, seed: int, layout: str, batching: str) -> tuple[RunArrays, RunArrays, profsim.Pair]:  # fmt: skip
    pair = profsim.generate_pair(HW, fault, seed, batching=batching, n_requests=400)
    store = tmp / "store"
    for rid, run in (("failing", pair.failing), ("comparator", pair.comparator)):
        add_run(store, run, rid, layout, tmp)
    con: duckdb.DuckDBPyConnection = db.connect(store)
    try:
        return load_run_arrays(con, "failing"), load_run_arrays(con, "comparator"), pair
    finally:
        con.close()


@pytest.mark.parametrize(
    ("fault", "seed", "layout", "batching"),
    [
        ("core_imbalance", 1, "events", "serial"),  # kernels had no cores: barrier_stall
        ("mapping_fallback", 2, "store", "serial"),  # batcher swap claimed it: ingress
        ("barrier_stall", 3, "store", "serial"),  # likewise
        ("assembly", 2, "events", "continuous"),  # placement across slots: scheduling
    ],
)
def test_origin_and_mechanism(tmp_path: Path, fault: str, seed: int, layout: str, batching: str) -> None:  # fmt: skip
    f, c, pair = _runs(tmp_path, fault, seed, layout, batching)
    loc = localize(f, c, HW)
    assert (loc.origin_stage, loc.mechanism) == (pair.truth.origin_stage, pair.truth.mechanism)


def test_events_import_gives_kernels_a_lane_per_stream(tmp_path: Path) -> None:
    f, _, _ = _runs(tmp_path, "none", 5, "events", "continuous")
    ops = f.ops
    kernels = (ops.stage == STAGE_CODE["execution"]) & np.isfinite(ops.m)
    lanes = np.unique(ops.core[kernels])
    # profsim runs a stream per (slot, core): 3 slots x 4 cores, numbered 0..11
    assert lanes.tolist() == list(range(12))
    assert (ops.core[ops.stage == STAGE_CODE["ingress"]] == -1).all()  # host work: no lane


def test_batcher_swap_needs_a_simulation_that_reproduces_the_runs(tmp_path: Path) -> None:
    f, c, _ = _runs(tmp_path, "mapping_fallback", 2, "store", "serial")
    swap = ingress_swap(f.requests, c.requests, (observed_queue(f.requests), observed_queue(c.requests)), (f.ops, c.ops))  # fmt: skip
    assert swap.error > SIM_TOLERANCE and not swap.usable
    loc = localize(f, c, HW)
    assert any("simulated batcher does not give back" in cl.text for cl in loc.claims)
    assert loc.origin_stage == "lowering"
