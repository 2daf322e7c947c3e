"""Replay on the real Kineto traces (A100 training steps, MI250 toy run) imported into a store."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from accel.profiles import get_profile
from accel.replay import conditional_replay, replay
from accel.stages import STAGES
from ingest_helpers import TRACES
from workbench.cli.main import main as workbench
from workbench.store import db
from workbench.store.arrays import load_run_arrays


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("real") / "store"
    for run_id, name in (
        ("a100", "rank0.json.gz"),
        ("mi250", "mi250_minitoy_train_ROCm6_2_kineto.json.gz"),
    ):
        assert (
            workbench(["ingest", "--store", str(root), "--run-id", run_id, str(TRACES / name)]) == 0
        )
    return root


def test_a100_steps_replay_without_phantom_queue(store: Path) -> None:
    run = load_run_arrays(db.connect(store), "a100")
    r = replay(run, get_profile("a100"))
    lat = r.observed_latency_us
    assert run.requests.size == 5 and np.all(lat > 200_000)  # ProfilerStep#550..554, ~210 ms each
    np.testing.assert_allclose(r.predicted_stage_us.sum(axis=1), r.predicted_latency_us)
    np.testing.assert_allclose(r.observed_stage_us.sum(axis=1), lat, rtol=1e-6)
    # Training steps run back to back: there is no queue, and the replay must not invent one
    # by adding up kernels that overlap on 5 streams (the sum of op times exceeds the step).
    assert np.all(r.queue_wait_us < 0.01 * lat)
    assert np.nansum(run.ops.observed_us[run.ops.req == 0]) > lat[0]
    # Few ops carry flops or bytes (memcpys): the replay stays near what was observed, and says so.
    assert 0.0 < r.modelled_share < 0.2
    assert np.all(np.abs(r.predicted_latency_us - lat) < 0.1 * lat)


def test_a100_trace_on_faster_memory_is_not_slower(store: Path) -> None:
    run = load_run_arrays(db.connect(store), "a100")
    on_a100 = replay(run, get_profile("a100"))
    on_h200 = replay(run, get_profile("h200"))
    assert np.all(on_h200.predicted_latency_us <= on_a100.predicted_latency_us + 1e-6)
    modelled = on_a100.ops.modelled
    assert np.all(on_h200.ops.predicted_us[modelled] < on_a100.ops.predicted_us[modelled])


def test_unmodelled_run_replays_as_observed(store: Path) -> None:
    run = load_run_arrays(db.connect(store), "mi250")
    r = replay(run, get_profile("mi250"))
    assert r.modelled_share == 0.0  # the toy trace has no flops or bytes
    np.testing.assert_allclose(r.residual_us, 0.0, atol=1e-6)
    for stage in STAGES:
        c = conditional_replay(run, get_profile("mi250"), stage, base=r)
        np.testing.assert_allclose(c.residual_us, 0.0, atol=1e-6)
        np.testing.assert_allclose(c.latency_us, r.observed_latency_us, rtol=1e-9)
