"""accel.cost.retimed (re-costing a subset of ops with another tile or fallback flag) and
accel.ops.name_codes: the shortcuts must give exactly what the long way gives."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from accel.cost import CostParams, op_times, retimed
from accel.ops import joint_name_codes, name_codes, nan_as_zero, sorted_used
from accel.profiles import PROFILES, get_profile
from accel_reference import random_run


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    profile=st.sampled_from(sorted(PROFILES)),
    tile=st.sampled_from([(64.0, 64.0), (128.0, 256.0), (16.0, float("nan"))]),
    overlap=st.floats(0.0, 1.0),
)
def test_retimed_equals_full_op_times(
    seed: int, profile: str, tile: tuple[float, float], overlap: float
) -> None:
    run = random_run(seed, 8, 30, nan_share=0.1)
    ops, hw, params = run.ops, get_profile(profile), CostParams(overlap=overlap)
    base = op_times(ops, hw, params)
    sel = np.flatnonzero(np.random.default_rng(seed).random(ops.size) < 0.6)
    tile_m, tile_n = ops.tile_m.copy(), ops.tile_n.copy()
    tile_m[sel], tile_n[sel] = tile
    want = op_times(replace(ops, tile_m=tile_m, tile_n=tile_n), hw, params).predicted_us[sel]
    (got,) = retimed(ops, base, sel, hw, params, tiles=[tile])
    np.testing.assert_array_equal(got, want)  # same arithmetic in the same order: bit-exact
    fallback = ops.fallback.copy()
    fallback[sel] = True
    want = op_times(replace(ops, fallback=fallback), hw, params).predicted_us[sel]
    np.testing.assert_array_equal(next(retimed(ops, base, sel, hw, params, fallback=True)), want)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), profile=st.sampled_from(sorted(PROFILES)))
def test_retimed_menu_of_tiles_equals_full_op_times(seed: int, profile: str) -> None:
    run = random_run(seed, 8, 30, nan_share=0.1)
    ops, hw = run.ops, get_profile(profile)
    base = op_times(ops, hw)
    sel = np.flatnonzero(np.random.default_rng(seed).random(ops.size) < 0.7)
    menu = [(64.0, 64.0), (float("nan"), 128.0), (256.0, 128.0), (0.0, 64.0), (128.0, 256.0)]
    for tile, got in zip(menu, retimed(ops, base, sel, hw, tiles=menu), strict=True):
        tile_m, tile_n = ops.tile_m.copy(), ops.tile_n.copy()
        tile_m[sel], tile_n[sel] = tile
        want = op_times(replace(ops, tile_m=tile_m, tile_n=tile_n), hw).predicted_us[sel]
        np.testing.assert_array_equal(got, want)


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    profile=st.sampled_from(sorted(PROFILES)),
    overlap=st.floats(0.0, 1.0),
    with_untiled=st.booleans(),
)
def test_fastest_tile_is_the_least_of_the_menu(
    seed: int, profile: str, overlap: float, with_untiled: bool
) -> None:
    """`fastest` picks each op's tile by its issued work alone: the least of the per-tile times
    (to rounding: the overlap formula is monotone in compute, its rounding is not quite)."""
    run = random_run(seed, 8, 30, nan_share=0.1)
    ops, hw, params = run.ops, get_profile(profile), CostParams(overlap=overlap)
    base = op_times(ops, hw, params)
    sel = np.flatnonzero(np.random.default_rng(seed).random(ops.size) < 0.7)
    menu = [(64.0, 64.0), (256.0, 128.0), (128.0, 256.0), (32.0, 512.0)]
    if with_untiled:
        menu.append((float("nan"), 128.0))
    least = np.min(np.stack(list(retimed(ops, base, sel, hw, params, tiles=menu))), axis=0)
    (got,) = retimed(ops, base, sel, hw, params, tiles=menu, fastest=True)
    np.testing.assert_allclose(got, least, rtol=1e-12, atol=0.0)


def test_retimed_yields_one_array_per_tile() -> None:
    run = random_run(3, 4, 20)
    hw = get_profile("h100")
    sel = np.arange(run.ops.size)
    out = list(retimed(run.ops, op_times(run.ops, hw), sel, hw, tiles=[(64, 64), (256, 128)]))
    assert len(out) == 2 and all(a.shape == (run.ops.size,) for a in out)


def test_name_codes_from_lists_and_from_store_codes_agree() -> None:
    run = random_run(5, 4, 10)
    names = [f"op{i % 7}" if i % 5 else "" for i in range(run.ops.size)]
    plain = replace(run.ops, name=names)
    codes, vocab = name_codes(plain)
    assert vocab == sorted(set(names)) and [vocab[c] for c in codes] == names
    # Store-style codes: an unsorted vocabulary with unused and repeated entries.
    store_vocab = ("zz-unused", *sorted(set(names), reverse=True), "")
    index = {s: i for i, s in enumerate(store_vocab[:-1])}
    coded = replace(
        plain,
        name_code=np.array([index[s] for s in names], dtype=np.int32),
        name_vocab=store_vocab,
    )
    c2, v2 = name_codes(coded)
    assert v2 == vocab and np.array_equal(c2, codes)
    other = replace(run.ops, name=[f"op{i % 3 + 5}" for i in range(run.ops.size)])
    a, b, joint = joint_name_codes(coded, other)
    assert joint == sorted(set(names) | set(other.name))
    assert [joint[i] for i in a] == names and [joint[i] for i in b] == other.name


def test_name_codes_fall_back_to_kernels_or_empty() -> None:
    run = random_run(7, 2, 5)
    ops = replace(run.ops, name=[], kernel=["k"] * run.ops.size)
    assert name_codes(ops, kernel_fallback=True)[1] == ["k"]
    codes, vocab = name_codes(ops)
    assert vocab == [""] and not codes.any()


def test_sorted_used_keeps_codes_only_when_nothing_moves() -> None:
    codes = np.array([0, 1, 1, 0], dtype=np.int32)
    kept, vocab = sorted_used(codes, ("a", "b", ""))  # a store's: '' last and unused
    assert kept is codes and vocab == ("a", "b")
    # Repeated, unsorted or skipped entries are renumbered to the sorted names used.
    for store_vocab, want in (
        (("a", "a", "b"), [0, 0, 0, 0]),
        (("b", "a", ""), [1, 0, 0, 1]),
        (("a", "zz", "b"), [0, 1, 1, 0]),
    ):
        used = np.array([0, 2, 2, 0] if store_vocab[1] == "zz" else codes, dtype=np.int32)
        got, names = sorted_used(used, store_vocab)
        assert [names[c] for c in got] == [store_vocab[c] for c in used]
        assert list(names) == sorted(set(names)) and got.tolist() == want


def test_nan_as_zero_is_nan_to_num_exactly() -> None:
    big = np.finfo(np.float64).max
    for values in (
        np.array([1.5, 2.0, 3.25]),
        np.array([1.0, np.nan, -2.0]),
        np.array([np.inf, 1.0, -np.inf, np.nan]),
        np.array([big, big, -1.0]),  # finite values whose sum overflows
        np.zeros(0),
    ):
        want = np.nan_to_num(values, nan=0.0)
        for own in (False, True):
            got = nan_as_zero(values.copy(), own=own)
            assert got.dtype == want.dtype and np.array_equal(got, want)
    clean = np.array([1.0, 2.0])
    assert nan_as_zero(clean, own=True) is clean and nan_as_zero(clean) is not clean


def test_ols_slopes_need_three_points_and_two_x_values() -> None:
    from accel.localize.swaps import _ols_slopes

    code = np.array([0, 0, 0, 1, 1, 1, 2, 2, 3, 3, 3], dtype=np.int64)
    x = np.array([1.0, 2.0, 3.0, 5.0, 5.0, 5.0, 1.0, 2.0, 1.0, 2.0, 4.0])
    y = np.array([2.0, 4.0, 6.0, 1.0, 2.0, 3.0, 1.0, 9.0, 3.0, 2.0, 0.0])
    # code 1: one x value; code 2: two points; code 3: a falling line (slope floored at 0)
    assert _ols_slopes(code, x, y, 5).tolist() == [2.0, 0.0, 0.0, 0.0, 0.0]
