"""accel.primary_metric: per shape bucket, mapping accuracy and runtime adaptation gain."""

from __future__ import annotations

import math

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
