"""accel.primary_metric: per shape bucket, mapping accuracy and runtime adaptation gain."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from accel.primary_metric import primary_metric
from accel.profiles import get_profile
from accel.synth import generate_pair

H100 = get_profile("h100")


def test_fault_free_run_has_one_bucket_and_no_gain() -> None:
    run = generate_pair(H100, "none", seed=7000, tables=False).failing.arrays
    pm = primary_metric(run, H100)
    seen, drifted = pm.buckets["seen"], pm.buckets["drifted"]
    assert seen.n_requests == run.requests.size and drifted.n_requests == 0
    assert seen.estimate_share == 1.0 and seen.fallback_share == 0.0
    assert 0.5 < seen.spearman <= 1.0 and seen.mape_pct > 0
    assert all(v == 0.0 for v in seen.gain_us.values())
    assert math.isnan(pm.compile_us)


def test_fallback_run_is_the_static_plan_and_adaptation_would_pay() -> None:
    run = generate_pair(H100, "mapping_fallback", seed=7000, tables=False).failing.arrays
    pm = primary_metric(run, H100, compile_us=2000.0)
    d = pm.buckets["drifted"]
    assert d.n_requests > 0 and d.observed_plan == "static"
    assert d.fallback_share > 0.3 and d.fallback_regret_pct > 0
    assert d.estimate_share < 1.0  # generic kernels carry no compiler estimate
    # Static plan = what the run did: its tail is the observed one.
    obs = run.requests.latency_us[~np.isin(run.requests.shape_key, list(run.compiled_shapes))]
    assert abs(d.static_us["p95"] - float(np.quantile(obs, 0.95))) < 0.02 * d.static_us["p95"]
    assert d.gain_us["p95"] > 0 and d.gain_us["p99"] > 0
    assert d.net_of_compile and d.recompile_us > 0
    # A dearer compile shrinks the gain.
    dear = primary_metric(run, H100, compile_us=200_000.0).buckets["drifted"]
    assert dear.gain_us["p99"] < d.gain_us["p99"]


def test_recompile_storm_shows_adaptation_losing_net_of_compiles() -> None:
    run = generate_pair(H100, "recompile", seed=7000, tables=False).failing.arrays
    pm = primary_metric(run, H100)
    d = pm.buckets["drifted"]
    assert d.observed_plan == "adapted" and pm.compile_us > 0
    assert d.recompile_us > 0 and d.net_of_compile
    assert d.gain_us["p95"] < 0  # the storm costs more than generic kernels would


def test_unknown_compile_cost_is_reported_gross() -> None:
    run = generate_pair(H100, "mapping_fallback", seed=7001, tables=False).failing.arrays
    d = primary_metric(run, H100).buckets["drifted"]
    assert not d.net_of_compile and d.recompile_us == 0.0


def test_regret_is_each_tuned_op_against_its_best_tile_of_the_menu(monkeypatch) -> None:
    """_regret (chunked menu, one fastest-tile re-costing) equals the plain reading: every
    tile of the menu costed on every tuned op, the least of them against the chosen tile.
    Chunks of 1000 ops put runs of equal tiles across chunk boundaries."""
    from accel import grouping
    from accel import primary_metric as pm_mod
    from accel.cost import op_times, retimed

    run = generate_pair(H100, "mapping_fallback", seed=7000, tables=False).failing.arrays
    # Every third op on an oversized tile, so that some ops have a better tile on the menu.
    tile_m, tile_n = run.ops.tile_m.copy(), run.ops.tile_n.copy()
    tile_m[::3], tile_n[::3] = np.where(np.isfinite(tile_m[::3]), 512.0, np.nan), 256.0
    ops = replace(run.ops, tile_m=tile_m, tile_n=tile_n)
    monkeypatch.setattr(pm_mod, "chunks", lambda n, size=1000: grouping.chunks(n, min(size, 1000)))
    kern = pm_mod._kernel_ops(ops)
    cost = op_times(ops, H100)
    got = pm_mod._regret(ops, H100, kern, cost)

    at = np.flatnonzero(~ops.fallback[kern] & np.isfinite(ops.tile_m[kern]))
    tuned = kern[at]
    pairs = {
        (float(a), float(b)) for a, b in zip(ops.tile_m[tuned], ops.tile_n[tuned], strict=True)
    }
    menu = sorted(pairs | {(float(a), float(b)) for a, b in pm_mod.STANDARD_TILES})
    base = cost.predicted_us[tuned]
    best = np.minimum.reduce([base, *retimed(ops, cost, tuned, H100, tiles=menu)])
    want = np.full(kern.size, np.nan)
    want[at] = (base - best) / base
    assert at.size > 3000 and np.isfinite(want).sum() == at.size
    assert (want[at] > 0).any()  # some ops ran on a slower tile than the menu's best
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=0.0)
