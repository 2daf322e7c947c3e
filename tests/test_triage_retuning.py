"""Retuning actions: concrete changes with the model's predicted p95/p99 gain and evidence."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from accel.profiles import get_profile
from triage_stores import RunSpec, write_run
from workbench.store import arrays, db
from workbench.triage import retuning, warmup


def _propose(con, run_id: str, hw: str = "h100") -> list[retuning.Action]:  # type: ignore[no-untyped-def]
    run = arrays.load_run_arrays(con, run_id)
    w = warmup.warmup_of(con, run_id)
    buckets = db.query(
        con, "shape_buckets", {"run_id": run_id, "compiled_shapes": sorted(run.compiled_shapes)}
    ).to_pylist()
    return retuning.propose(run, w, buckets, get_profile(hw))


@pytest.fixture(scope="module")
def con(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    store = tmp_path_factory.mktemp("store")
    write_run(store, RunSpec("recompiling", seed=2, drift_share=0.3, recompile_us=15_000.0))
    write_run(store, RunSpec("clean", seed=1, drift_share=0.3))
    write_run(store, RunSpec("falling-back", seed=9, fallback_share=0.3))
    c = db.connect(store)
    yield c
    c.close()


def test_recompiles_give_shape_and_dynamic_actions(con) -> None:  # type: ignore[no-untyped-def]
    actions = _propose(con, "recompiling")
    kinds = [a.kind for a in actions]
    assert "mark_dynamic" in kinds and kinds.count("precompile_shapes") == 3
    dyn = next(a for a in actions if a.kind == "mark_dynamic")
    assert dyn.target == "x dim 0" and dyn.evidence["recompiles"] == 3
    for a in actions:
        assert a.predicted_p99_gain_us > 0 and a.predicted_p95_gain_us > 0
    # ranked by traffic share x cost
    pri = [a.priority for a in actions]
    assert pri == sorted(pri, reverse=True)
    pre = [a for a in actions if a.kind == "precompile_shapes"]
    assert all(a.evidence["recompile_us"] > 10_000 for a in pre)
    assert all(a.to_json()["predicted_p99_gain_us"] is not None for a in actions)


def test_no_actions_without_a_cause(con) -> None:  # type: ignore[no-untyped-def]
    assert _propose(con, "clean") == []


def test_fallback_gives_a_kernel_action(con) -> None:  # type: ignore[no-untyped-def]
    actions = _propose(con, "falling-back")
    assert [a.kind for a in actions] == ["pin_kernel"]
    assert "aten::mm_generic" in actions[0].target
    assert actions[0].predicted_p99_gain_us > 0


def test_counterfactual_gain_is_zero_for_no_saving(con) -> None:  # type: ignore[no-untyped-def]
    run = arrays.load_run_arrays(con, "recompiling")
    cf = retuning.Counterfactual.of(run, warmup.warmup_of(con, "recompiling"))
    assert cf.gain(np.zeros(run.requests.size)) == (0.0, 0.0)
    g95, g99 = cf.gain(np.full(run.requests.size, 100.0))
    assert g95 >= 100.0 and g99 >= 100.0  # less service never lengthens a FIFO queue


def test_capped_batches_split_in_arrival_order() -> None:
    bid = np.array([0, 0, 0, 1, 1, -1, 0, 2])
    new = retuning._capped_batches(bid, 2)
    assert new[5] == -1
    # batch 0 has 4 members -> two batches of 2, in arrival order; batch 1 stays whole
    assert new[0] == new[1] != new[2] == new[6]
    assert new[3] == new[4] and len({new[0], new[2], new[3], new[7]}) == 4


SAMPLE = Path(__file__).resolve().parents[1] / "sample_traces"


def test_batch_policy_action_on_the_sample_store() -> None:
    con = db.connect(SAMPLE)
    actions = _propose(con, "failing")
    batch = [a for a in actions if a.kind == "batch_policy"]
    assert len(batch) == 1 and batch[0].target.startswith("max batch size ")
    assert 0.0 <= batch[0].evidence["alpha"] <= 1.0
    assert batch[0].predicted_p95_gain_us > 0
    # the sample's injected fault spills fused groups: splitting them is proposed, with a gain
    split = [a for a in actions if a.kind == "split_fusion"]
    assert split and split[0].predicted_p99_gain_us > 0
