"""accel.cost: the vectorized op model equals the plain-Python oracle, plus its physics."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accel.cost import CostParams, group_instance, op_times, tile_plan
from accel.grouping import dense_ids, rank_in_runs, run_starts
from accel.ops import OpArrays
from accel.profiles import PROFILES, get_profile
from accel_reference import random_run, ref_op_times

params_st = st.builds(
    CostParams,
    overlap=st.floats(0.0, 1.0),
    compute_efficiency=st.floats(0.1, 1.0),
    memory_efficiency=st.floats(0.1, 1.0),
    k_tile=st.sampled_from([16.0, 64.0, 512.0]),
    spill_factor=st.floats(1.0, 3.0),
    onchip_share=st.floats(0.01, 1.0),
)


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n_req=st.integers(1, 12),
    per_req=st.integers(1, 40),
    profile=st.sampled_from(sorted(PROFILES)),
    params=params_st,
)
def test_vectorized_equals_reference(
    seed: int, n_req: int, per_req: int, profile: str, params: CostParams
) -> None:
    run = random_run(seed, n_req, per_req, nan_share=0.1)
    hw = get_profile(profile)
    got = op_times(run.ops, hw, params)
    ref = ref_op_times(run, hw, params)
    np.testing.assert_array_equal(got.modelled, [r.modelled for r in ref])
    for field in ("predicted_us", "compute_us", "memory_us", "spill_bytes", "launch_us"):
        np.testing.assert_allclose(
            getattr(got, field),
            [getattr(r, field) for r in ref],
            rtol=1e-9,
            atol=1e-12,
            err_msg=field,
        )


def _one(**kw: float | int | bool) -> OpArrays:
    """A single op with the given fields; everything else unknown."""
    base: dict[str, float | int | bool] = {
        "req": 0,
        "stage": 3,
        "observed_us": 10.0,
        "flops": np.nan,
        "bytes": np.nan,
        "m": np.nan,
        "n": np.nan,
        "tile_m": np.nan,
        "tile_n": np.nan,
        "fusion_group": -1,
        "mem_tier": 1,
        "core": -1,
        "fallback": False,
        "recompile": False,
        "predicted_us": np.nan,
    }
    base.update(kw)
    dtypes = {
        "req": np.int64,
        "stage": np.int8,
        "fusion_group": np.int64,
        "mem_tier": np.int8,
        "core": np.int32,
        "fallback": np.bool_,
        "recompile": np.bool_,
    }
    return OpArrays(**{k: np.array([v], dtype=dtypes.get(k, np.float64)) for k, v in base.items()})


H100 = get_profile("h100")
NO_EFF = CostParams(compute_efficiency=1.0, memory_efficiency=1.0, overlap=0.0)


def test_unmodelled_op_keeps_observed_time() -> None:
    c = op_times(_one(observed_us=12.5), H100)
    assert not c.modelled[0] and c.predicted_us[0] == 12.5 and c.launch_us[0] == 0.0
    assert op_times(_one(observed_us=np.nan), H100).predicted_us[0] == 0.0


def test_gemm_compute_time_matches_hand_calculation() -> None:
    # 4096 x 4096 x 4096 bf16 GEMM, 128x128 tiles: 1024 tiles; tile footprint (128+128)*64*2 +
    # 128*128*4 = 98304 B -> 2 per SM (228 KB) -> 264 slots -> 4 waves -> 1056 tile-slots issued.
    m = n = k = 4096.0
    flops = 2 * m * n * k
    op = _one(flops=flops, bytes=0.0, m=m, n=n, tile_m=128.0, tile_n=128.0)
    c = op_times(op, H100, NO_EFF)
    expected = flops * (1056 / 1024) / 989e12 * 1e6
    plan = tile_plan(op, H100, NO_EFF)
    assert (plan.tiles[0], plan.waves[0]) == (1024, 4)
    assert plan.wave_efficiency[0] == pytest.approx(1024 / 1056)
    assert np.isnan(tile_plan(_one(m=m, n=n), H100).tiles[0])  # untiled
    assert c.compute_us[0] == pytest.approx(expected, rel=1e-12)
    assert c.predicted_us[0] == pytest.approx(expected + H100.launch_overhead_us, rel=1e-12)


def test_tile_and_wave_quantization() -> None:
    tpu = get_profile("tpu-v5e")  # 4 MXUs, one tile each: 4 slots per wave

    def t(m: float) -> float:
        kw = {"flops": 2 * m * 128 * 1024, "bytes": 0.0, "m": m, "n": 128.0}
        return float(op_times(_one(**kw, tile_m=128.0, tile_n=128.0), tpu).compute_us[0])

    # 512 rows: 4 tiles, one full wave. One more row: a 5th, mostly padding tile -> 2 waves.
    assert t(513.0) == pytest.approx(2 * t(512.0), rel=0.01)
    # Inside one wave a small op pays for the whole tile: 1 row costs as much as 128 rows.
    assert t(1.0) == pytest.approx(t(128.0))


def test_fallback_runs_on_vector_unit() -> None:
    kw = {"flops": 1e12, "bytes": 0.0, "m": 4096.0, "n": 4096.0, "tile_m": 128.0, "tile_n": 128.0}
    fast = op_times(_one(**kw), H100, NO_EFF)
    slow = op_times(_one(**kw, fallback=True), H100, NO_EFF)
    assert slow.compute_us[0] == pytest.approx(1e12 / 67e12 * 1e6)
    assert slow.compute_us[0] > 10 * fast.compute_us[0]
    assert not slow.matrix_unit[0] and fast.matrix_unit[0]


def test_memory_tier_bandwidths() -> None:
    for tier, bw in (
        (0, H100.sram_bw),
        (1, H100.hbm_bw),
        (2, H100.host_link_bw),
        (-1, H100.hbm_bw),
    ):
        c = op_times(_one(bytes=1e9, flops=0.0, mem_tier=tier), H100, NO_EFF)
        assert c.memory_us[0] == pytest.approx(1e9 / bw * 1e6), tier


@pytest.mark.parametrize("rho", [0.0, 0.5, 1.0])
def test_partial_overlap(rho: float) -> None:
    p = replace(NO_EFF, overlap=rho)
    c = op_times(_one(flops=1e12, bytes=1e9), H100, p)
    cc, mm = c.compute_us[0], c.memory_us[0]
    assert c.predicted_us[0] - c.launch_us[0] == pytest.approx(cc + mm - rho * min(cc, mm))


def _group(bytes_each: float, n_ops: int, fused: bool) -> OpArrays:
    ops = [_one(bytes=bytes_each, flops=0.0, fusion_group=0 if fused else -1) for _ in range(n_ops)]
    return OpArrays(
        **{
            f: np.concatenate([getattr(o, f) for o in ops])
            for f in OpArrays.__dataclass_fields__
            if f not in ("kernel", "name_vocab_used")  # lists and arrays only
        }
    )


def test_fusion_saves_launches_until_it_spills() -> None:
    cap = H100.onchip_bytes
    small_fused = op_times(_group(1e6, 4, True), H100)
    small_split = op_times(_group(1e6, 4, False), H100)
    assert small_fused.launch_us.sum() == H100.launch_overhead_us
    assert small_split.launch_us.sum() == 4 * H100.launch_overhead_us
    assert small_fused.spill_bytes.sum() == 0.0
    big = op_times(_group(cap / 2, 4, True), H100)  # working set 2x capacity
    assert big.spill_bytes.sum() == pytest.approx(2.0 * cap)
    assert big.predicted_us.sum() > op_times(_group(cap / 2, 4, False), H100).predicted_us.sum()


def test_fused_groups_are_per_request() -> None:
    ops = _group(1e6, 2, True)
    ops = replace(ops, req=np.array([0, 1], dtype=np.int64))
    assert op_times(ops, H100).launch_us.tolist() == [H100.launch_overhead_us] * 2


def test_faster_memory_never_slows_an_op() -> None:
    run = random_run(3, 30, 40)
    h100, h200 = op_times(run.ops, get_profile("h100")), op_times(run.ops, get_profile("h200"))
    assert np.all(h200.predicted_us <= h100.predicted_us + 1e-12)
    assert np.any(h200.predicted_us < h100.predicted_us)


@given(st.lists(st.integers(-5, 10**12), min_size=0, max_size=200))
def test_dense_ids_number_distinct_values_in_order(values: list[int]) -> None:
    key = np.array(values, dtype=np.int64)
    ids, k = dense_ids(key)
    uniq = sorted(set(values))
    assert k == len(uniq)
    assert ids.tolist() == [uniq.index(v) for v in values]


@given(st.lists(st.integers(-5, 10**12), min_size=1, max_size=200))
def test_dense_ids_of_keys_in_order_match_a_sort(values: list[int]) -> None:
    # Sorted keys over a wide range take the running-count path, not the table or the sort.
    key = np.sort(np.array([*values, 10**12 + 7], dtype=np.int64))
    ids, k = dense_ids(key)
    uniq, inv = np.unique(key, return_inverse=True)
    assert k == uniq.size
    assert ids.tolist() == inv.tolist()


def test_group_instance_is_per_request_and_group() -> None:
    run = random_run(6, 12, 30)
    grp = group_instance(run.ops)
    pairs = list(zip(run.ops.req.tolist(), run.ops.fusion_group.tolist(), strict=True))
    first: dict[tuple[int, int], int] = {}
    for g, (r, f) in zip(grp.tolist(), pairs, strict=True):
        if f < 0:
            assert g == -1
        else:
            assert first.setdefault((r, f), g) == g
    assert len(set(first.values())) == len(first)


@given(st.lists(st.integers(0, 3), min_size=0, max_size=60))
def test_runs_of_equal_values_start_and_rank(values: list[int]) -> None:
    x = np.array(values, dtype=np.int64)
    starts = [i for i, v in enumerate(values) if i == 0 or values[i - 1] != v]
    assert run_starts(x).tolist() == starts
    rank = [i - max(s for s in starts if s <= i) for i in range(len(values))]
    assert rank_in_runs(x).tolist() == rank
