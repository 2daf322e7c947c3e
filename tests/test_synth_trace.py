"""accel.synth runs written as events only import into the generator's own stage times."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import duckdb
import numpy as np
import pytest

from accel.localize import localize
from accel.profiles import get_profile
from accel.stages import STAGES
from accel.synth import Workload, generate_pair
from generators.synth_trace import chrome_trace, ingest_events_only
from localize_pieces import load_pair
from workbench.store.ingest import ingest

COLS = [f"{s}_us" for s in STAGES] + ["other_us", "latency_us"]


@pytest.mark.parametrize("fault", ["recompile", "barrier_stall"])
def test_events_only_import_reproduces_the_stage_times(tmp_path: Path, fault: str) -> None:
    run = generate_pair(get_profile("h100"), fault, 5, workload=Workload(n_requests=120)).failing
    trace = tmp_path / "run.pt.trace.json.gz"
    with gzip.open(trace, "wt", encoding="utf-8") as fh:
        json.dump(chrome_trace(run, "h100"), fh)
    store = tmp_path / "store"
    ingest(store, trace, run_id="events")
    # A private connection: duckdb's module-level default is shared with the whole session.
    got = (
        duckdb.connect()
        .sql(
            f"SELECT {', '.join(COLS)}, batch_id FROM read_parquet($glob) ORDER BY arrival_us",
            params={"glob": str(store / "requests" / "run_id=events" / "*.parquet")},
        )
        .fetchall()
    )
    want = np.column_stack([np.asarray(run.requests[c], dtype=np.float64) for c in COLS])
    assert len(got) == want.shape[0] == 120
    # accel.synth times sit on a 2**-10 us grid; its barrier spans are rounded apart from the
    # kernels they wait for, so execution may differ by a few grid steps.
    np.testing.assert_allclose(np.array([r[:-1] for r in got]), want, atol=0.01)
    # The trace carries no batch ids, but batch-mates share their batch's kernel executions
    # (same stream, start and duration): the importer gives back the generator's batches.
    truth = np.asarray(run.requests["batch_id"])[np.argsort(run.requests["arrival_us"])]
    assert max(np.asarray(run.requests["batch_size"])) > 1
    assert _partition([r[-1] for r in got]) == _partition(truth.tolist())


def _partition(labels: list[object]) -> set[frozenset[int]]:
    groups: dict[object, set[int]] = {}
    for i, b in enumerate(labels):
        groups.setdefault(b, set()).add(i)
    return {frozenset(g) for g in groups.values()}


def test_events_only_batch_policy_pair_is_localized_to_the_batcher(tmp_path: Path) -> None:
    # Without batch ids the batch-mates' copies of one batch's ops read as separate service
    # and the pair came out execution / barrier_stall; with the batches the importer restores,
    # the batch-policy swap finds the origin.
    hw = get_profile("tpu-v5e")
    pair = generate_pair(hw, "batch_policy", 303026, workload=Workload(n_requests=400))
    store = tmp_path / "store"
    for run_id, run in (("failing", pair.failing), ("comparator", pair.comparator)):
        ingest_events_only(store, run, run_id, hw.name, tmp_path)
    loc = localize(*load_pair(store), hw)
    assert (loc.outcome, loc.origin_stage, loc.mechanism) == (
        "regression",
        "ingress",
        "batch_policy",
    )
    assert loc.decided_by == "plan_swap"
