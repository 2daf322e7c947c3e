"""accel.replay: equals the oracle, keeps the stage-sum invariant, conditional replay semantics."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accel.cost import DEFAULT_PARAMS
from accel.ops import RunArrays
from accel.profiles import PROFILES, get_profile
from accel.replay import COLUMNS, conditional_replay, replay, stage_times, stage_times_of
from accel.stages import OTHER, STAGES
from accel_reference import random_run, ref_replay, ref_stage_times

H100 = get_profile("h100")


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n_req=st.integers(1, 15),
    per_req=st.integers(1, 30),
    batched=st.booleans(),
    profile=st.sampled_from(sorted(PROFILES)),
)
def test_replay_equals_reference(
    seed: int, n_req: int, per_req: int, batched: bool, profile: str
) -> None:
    run = random_run(seed, n_req, per_req, batched=batched)
    hw = get_profile(profile)
    got = replay(run, hw)
    ref = ref_replay(run, hw, DEFAULT_PARAMS)
    np.testing.assert_allclose(got.predicted_stage_us, ref["predicted"], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(got.barrier_us[:, :5], ref["barrier"], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(got.queue_wait_us, np.ravel(ref["wait"]), rtol=1e-9, atol=1e-6)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_req=st.integers(1, 15), per_req=st.integers(1, 30))
def test_replay_invariants(seed: int, n_req: int, per_req: int) -> None:
    run = random_run(seed, n_req, per_req, batched=seed % 2 == 0)
    r = replay(run, H100)
    assert (*STAGES, OTHER) == COLUMNS
    assert r.predicted_stage_us.shape == (n_req, 6)
    np.testing.assert_allclose(r.predicted_stage_us.sum(axis=1), r.predicted_latency_us, rtol=1e-12)
    np.testing.assert_array_equal(r.residual_us, r.observed_stage_us - r.predicted_stage_us)
    np.testing.assert_array_equal(r.predicted_stage_us[:, 5], r.observed_stage_us[:, 5])
    assert np.all(r.queue_wait_us >= -1e-9) and np.all(r.predicted_stage_us >= -1e-9)
    # Ingress = queue wait + ingress work; latency = wait + service.
    np.testing.assert_allclose(r.predicted_latency_us, r.queue_wait_us + r.service_us, rtol=1e-12)
    # Anchored: a stage moves from its observed value by the modelled change of its ops.
    moved = r.observed_stage_us[:, 1:5] + r.op_predicted_us[:, 1:5] - r.op_observed_us[:, 1:5]
    np.testing.assert_allclose(r.predicted_stage_us[:, 1:5], np.maximum(moved, 0.0), atol=1e-9)
    # NaN only when no op has an observed time (nothing to share out).
    has_time = np.nansum(run.ops.observed_us) > 0
    assert (0.0 <= r.modelled_share <= 1.0) if has_time else np.isnan(r.modelled_share)


def test_stage_times_sum_serial_and_take_busiest_core() -> None:
    run = random_run(5, 8, 25)
    t = np.random.default_rng(1).uniform(0, 50, run.ops.size)
    got = stage_times(run.ops, t, 8)
    stage, barrier = ref_stage_times(run, t.tolist(), 8)
    np.testing.assert_allclose(got.stage_us, stage, rtol=1e-12)
    np.testing.assert_allclose(got.barrier_us, barrier, rtol=1e-12, atol=1e-12)
    # Hand case: request 0 execution on cores 0 and 1 busy 10 and 30 -> stage 30, barrier 10.
    ops = replace(
        run.ops,
        req=np.zeros(run.ops.size, dtype=np.int64),
        stage=np.full(run.ops.size, 3, dtype=np.int8),
        core=np.where(np.arange(run.ops.size) % 2 == 0, 0, 1).astype(np.int32),
    )
    w = np.where(np.arange(run.ops.size) % 2 == 0, 10.0, 30.0) / (run.ops.size / 2)
    one = stage_times(ops, w, 1)
    assert one.stage_us[0, 3] == pytest.approx(30.0)
    assert one.barrier_us[0, 3] == pytest.approx(10.0)


def test_modelled_share_counts_observed_time() -> None:
    run = random_run(9, 10, 30)
    r = replay(run, H100)
    obs = np.nan_to_num(run.ops.observed_us)
    assert r.modelled_share == pytest.approx(obs[r.ops.modelled].sum() / obs.sum())
    exec_ops = run.ops.stage == 3
    assert r.stage_modelled_share[3] == pytest.approx(
        obs[exec_ops & r.ops.modelled].sum() / obs[exec_ops].sum()
    )


def _slowed(run: RunArrays, stage: int, factor: float) -> RunArrays:
    """The same run with one stage's observed time multiplied (and latency following)."""
    st_us = run.requests.stage_us.copy()
    st_us[:, stage] *= factor
    reqs = replace(run.requests, stage_us=st_us, latency_us=st_us.sum(axis=1))
    return replace(run, requests=reqs)


def _consistent(run: RunArrays, ingress_work: float = 5.0) -> RunArrays:
    """Observed ingress rebuilt as a single-server FIFO wait on the observed service times."""
    from accel.queueing import fifo_schedule

    st_us = run.requests.stage_us.copy()
    st_us[:, 0] = ingress_work  # no wait yet
    service = st_us.sum(axis=1)
    sched = fifo_schedule(run.requests.arrival_us, service)
    st_us[:, 0] += sched.wait_us
    reqs = replace(
        run.requests,
        stage_us=st_us,
        start_us=sched.start_us,
        latency_us=st_us.sum(axis=1),
        batch_id=None,
    )
    return replace(run, requests=reqs)


def test_conditional_ingress_explains_queueing_of_a_downstream_slowdown() -> None:
    base = random_run(21, 300, 10)
    # No ingress ops and no ingress work: all observed ingress time is queue wait. Arrivals
    # dense enough that a slower execution stage builds a queue.
    ops = replace(base.ops, stage=np.where(base.ops.stage == 0, 3, base.ops.stage).astype(np.int8))
    reqs = replace(base.requests, arrival_us=np.arange(300, dtype=np.float64) * 400.0)
    run = _consistent(replace(base, ops=ops, requests=reqs), ingress_work=0.0)
    slow = _consistent(_slowed(run, 3, 4.0), ingress_work=0.0)
    raw_p99 = np.percentile(slow.requests.stage_us[:, 0], 99)
    assert raw_p99 > 5 * np.percentile(run.requests.stage_us[:, 0], 99) + 1000.0
    # Raw ingress time moved a lot, though ingress did nothing wrong: the queue on the observed
    # service times reproduces every wait, so the conditional residual is zero.
    c = conditional_replay(slow, H100, "ingress")
    np.testing.assert_allclose(c.residual_us, 0.0, atol=1e-6 * raw_p99)
    np.testing.assert_allclose(c.latency_us, slow.requests.latency_us, rtol=1e-9)
    # The unconditional replay, by contrast, predicts the queue from modelled service times.
    assert not np.allclose(replay(slow, H100).residual_us[:, 0], 0.0, atol=1.0)


@pytest.mark.parametrize("stage", STAGES[1:])
def test_conditional_other_stage_replaces_only_that_stage(stage: str) -> None:
    run = _consistent(random_run(4, 40, 20))
    base = replay(run, H100)
    c = conditional_replay(run, H100, stage, base=base)
    s = STAGES.index(stage)
    np.testing.assert_allclose(c.predicted_us, base.predicted_stage_us[:, s], rtol=1e-12)
    np.testing.assert_array_equal(c.residual_us, c.observed_us - c.predicted_us)
    keep = [k for k in range(1, 6) if k != s]
    np.testing.assert_array_equal(c.stage_us[:, keep], run.requests.stage_us[:, keep])
    np.testing.assert_allclose(c.latency_us, c.stage_us.sum(axis=1), rtol=1e-12)
    # Queue re-run on the counterfactual service times, ingress work kept as observed.
    from accel.queueing import fifo_schedule

    work = c.stage_us[:, 1:].sum(axis=1) + 5.0
    np.testing.assert_allclose(
        c.queue_wait_us, fifo_schedule(run.requests.arrival_us, work).wait_us, atol=1e-6
    )


def test_conditional_replay_refuses_unknown_stage() -> None:
    with pytest.raises(ValueError, match="unknown stage 'other'"):
        conditional_replay(random_run(1, 2, 2), H100, "other")


@pytest.mark.parametrize(
    "layout",
    ["wide_core_ids", "many_cores", "unsorted", "unsorted_many_requests", "odd_codes", "negative"],
)
def test_stage_times_general_paths_equal_reference(layout: str) -> None:
    n_req = 3000 if layout == "unsorted_many_requests" else 30
    run = random_run(13, n_req, 1 if layout == "unsorted_many_requests" else 40)
    ops = run.ops
    rng = np.random.default_rng(0)
    if layout == "wide_core_ids":  # ids like device * 10^7 + stream: no dense core table
        ops = replace(ops, core=np.where(ops.core >= 0, ops.core * 10_000_000, -1).astype(np.int32))
    elif layout == "many_cores":  # (request, stage, core) table too large: sparse grouping
        ops = replace(
            ops,
            core=np.where(ops.core >= 0, rng.integers(0, 60_000, ops.size), -1).astype(np.int32),
        )
    elif layout.startswith("unsorted"):
        perm = rng.permutation(ops.size)
        ops = replace(ops, req=ops.req[perm], stage=ops.stage[perm], core=ops.core[perm])
    else:  # request ids past the run and stage codes that are not stages are left out
        ops = replace(
            ops,
            req=np.where(rng.random(ops.size) < 0.1, 99, ops.req),
            stage=np.where(rng.random(ops.size) < 0.1, 7, ops.stage).astype(np.int8),
        )
    # Negative times are bad data, but an idle core must still not outrank them.
    t = rng.uniform(-60 if layout == "negative" else 0, 50, ops.size)
    got = stage_times(ops, t, n_req)
    stage, barrier = ref_stage_times(replace(run, ops=ops), t.tolist(), n_req)
    np.testing.assert_allclose(got.stage_us, stage, rtol=1e-12)
    np.testing.assert_allclose(got.barrier_us, barrier, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("layout", ["table", "wide_core_ids"])
def test_an_array_given_twice_is_summed_once_with_the_same_result(layout: str) -> None:
    run = random_run(17, 20, 30)
    ops = run.ops
    if layout == "wide_core_ids":  # the sparse path
        ops = replace(ops, core=np.where(ops.core >= 0, ops.core * 10_000_000, -1).astype(np.int32))
    rng = np.random.default_rng(1)
    a, b = rng.uniform(0, 50, ops.size), rng.uniform(0, 50, ops.size)
    got = stage_times_of(ops, (a, b, a), 20)
    assert got[0] is got[2] and got[1] is not got[0]
    for t, times in ((a, got[0]), (b, got[1])):
        one = stage_times(ops, t, 20)
        np.testing.assert_array_equal(times.stage_us, one.stage_us)
        np.testing.assert_array_equal(times.barrier_us, one.barrier_us)


def test_modelled_share_folds_odd_stage_codes_into_other() -> None:
    run = random_run(17, 10, 30)
    ops = replace(run.ops, stage=np.where(run.ops.stage == -1, 9, run.ops.stage).astype(np.int8))
    a = replay(run, H100).stage_modelled_share
    b = replay(replace(run, ops=ops), H100).stage_modelled_share
    np.testing.assert_allclose(a, b, rtol=1e-12)


def test_unmodelled_ops_leave_the_observed_run_unchanged() -> None:
    run = _consistent(random_run(8, 50, 20))
    blind = replace(
        run,
        ops=replace(
            run.ops, flops=np.full(run.ops.size, np.nan), bytes=np.full(run.ops.size, np.nan)
        ),
    )
    r = replay(blind, H100)
    assert r.modelled_share == 0.0
    np.testing.assert_allclose(r.residual_us, 0.0, atol=1e-6)
    # With modelled ops the same run moves, and only in stages whose ops are modelled.
    moved = replay(run, H100)
    assert np.abs(moved.residual_us).max() > 1.0


def test_stage_ops_overlapping_in_time_are_not_summed_into_a_queue() -> None:
    # Back-to-back requests whose stage time is much shorter than the sum of their op times
    # (ops overlap on streams): no modelled ops, so no queue may appear in the replay.
    run = random_run(12, 40, 30)
    blind = replace(
        run.ops, flops=np.full(run.ops.size, np.nan), bytes=np.full(run.ops.size, np.nan)
    )
    st_us = np.full((40, 6), 10.0)
    st_us[:, 0] = 0.0
    arrival = np.arange(40) * 50.0
    reqs = replace(
        run.requests,
        stage_us=st_us,
        arrival_us=arrival,
        start_us=arrival,
        latency_us=st_us.sum(axis=1),
        batch_id=None,
    )
    r = replay(replace(run, ops=blind, requests=reqs), H100)
    assert np.nansum(run.ops.observed_us[run.ops.req == 0]) > 50.0
    np.testing.assert_allclose(r.queue_wait_us, 0.0)
    np.testing.assert_allclose(r.predicted_latency_us, 50.0)


def test_empty_and_opless_runs() -> None:
    run = random_run(2, 6, 5)
    none = np.zeros(0, dtype=bool)
    empty_ops = replace(
        run.ops,
        **{
            f: getattr(run.ops, f)[none]
            for f in (
                "req",
                "stage",
                "observed_us",
                "flops",
                "bytes",
                "m",
                "n",
                "tile_m",
                "tile_n",
                "fusion_group",
                "mem_tier",
                "core",
                "fallback",
                "recompile",
                "predicted_us",
            )
        },
    )
    r = replay(replace(run, ops=empty_ops), H100)  # requests but no ops: the observed run
    assert np.isnan(r.modelled_share)
    np.testing.assert_allclose(r.predicted_stage_us[:, 1:], r.observed_stage_us[:, 1:])
    c = conditional_replay(replace(run, ops=empty_ops), H100, "execution", base=r)
    np.testing.assert_allclose(c.residual_us, 0.0)
    no_req = replace(
        run.requests,
        request_id=[],
        arrival_us=np.zeros(0),
        start_us=np.zeros(0),
        latency_us=np.zeros(0),
        stage_us=np.zeros((0, 6)),
        batch_size=np.zeros(0, dtype=np.int32),
        shape_key=[],
        batch_id=None,
    )
    z = replay(replace(run, ops=empty_ops, requests=no_req), H100)
    assert z.predicted_stage_us.shape == (0, 6) and z.predicted_latency_us.shape == (0,)


def test_sparse_and_table_paths_give_the_same_replay() -> None:
    run = random_run(23, 25, 30)
    wide = replace(
        run,
        ops=replace(
            run.ops,
            core=np.where(run.ops.core >= 0, run.ops.core * 100_000_000, -1).astype(np.int64),
        ),
    )
    a, b = replay(run, H100), replay(wide, H100)
    np.testing.assert_allclose(b.predicted_stage_us, a.predicted_stage_us, rtol=1e-12)
    np.testing.assert_allclose(b.barrier_us, a.barrier_us, rtol=1e-12, atol=1e-12)
    assert b.modelled_share == pytest.approx(a.modelled_share, rel=1e-12)
    np.testing.assert_allclose(b.stage_modelled_share, a.stage_modelled_share, rtol=1e-12)
