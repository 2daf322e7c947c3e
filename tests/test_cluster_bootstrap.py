"""The cluster bootstrap of token quantiles: exact resample quantiles, and an A/A false-alarm
rate near nominal where tokens of one request move together (the token-by-token bootstrap's
is many times that)."""

from __future__ import annotations

import numpy as np
import pytest

from accel import stats
from accel.cluster_bootstrap import (
    boot_count,
    cluster_quantile_diffs,
    cluster_quantile_intervals,
    resampled_quantiles,
)

QS = (0.5, 0.95, 0.99)


def test_each_resample_quantile_is_the_expanded_samples() -> None:
    rng = np.random.default_rng(1)
    a = rng.exponential(size=400)
    codes = rng.integers(0, 37, size=400)
    codes = np.unique(codes, return_inverse=True)[1].astype(np.int64)
    got = resampled_quantiles(a, codes, QS, 60, np.random.default_rng(7))
    draws = np.random.default_rng(7)
    groups = int(codes.max()) + 1
    for row in got:
        counts = draws.multinomial(groups, np.full(groups, 1.0 / groups))
        expanded = np.repeat(a, counts[codes])
        np.testing.assert_allclose(row, np.quantile(expanded, QS))


def _aa_tokens(rng: np.random.Generator, n_req: int = 60, per: int = 30) -> tuple:
    """One run of a build: each request's gaps share a request-level factor (its batch mates)."""
    level = rng.lognormal(0.0, 0.6, size=n_req)
    gaps = np.repeat(level, per) * rng.lognormal(0.0, 0.1, size=n_req * per)
    return gaps, np.repeat(np.arange(n_req), per)


def test_aa_pairs_alarm_near_nominal_where_token_resampling_alarms_often() -> None:
    rng = np.random.default_rng(3)
    cluster_alarms = iid_alarms = 0
    trials = 60
    for i in range(trials):
        f, gf = _aa_tokens(rng)
        c, gc = _aa_tokens(rng)
        _, lo, hi = cluster_quantile_diffs(f, gf, c, gc, (0.95,), n_boot=400, seed=i)[0]
        cluster_alarms += not lo <= 0 <= hi
        _, lo, hi = stats.bootstrap_quantile_diff(f, c, 0.95, n_boot=400, seed=i)
        iid_alarms += not lo <= 0 <= hi
    # Nominal 5%: 3 of 60. The token-level bootstrap treats 1800 dependent gaps as independent.
    assert cluster_alarms <= 8, cluster_alarms
    assert iid_alarms >= 3 * max(cluster_alarms, 4), (iid_alarms, cluster_alarms)


def test_one_token_per_request_is_the_ordinary_bootstrap_in_distribution() -> None:
    rng = np.random.default_rng(5)
    x = rng.lognormal(size=3000)
    est, lo, hi = cluster_quantile_intervals(x, np.arange(x.size), (0.95,), n_boot=1000)[0]
    _, blo, bhi = stats.bootstrap_quantile(x, 0.95, n_boot=1000)
    assert est == pytest.approx(np.quantile(x, 0.95))
    assert lo == pytest.approx(blo, rel=0.03) and hi == pytest.approx(bhi, rel=0.03)


def test_nan_values_drop_out_and_an_empty_side_is_nan() -> None:
    x = np.array([1.0, np.nan, 3.0, 4.0, np.inf])
    g = np.array(["a", "a", "b", "b", "c"])
    est, lo, hi = cluster_quantile_intervals(x, g, (0.5,), n_boot=50)[0]
    assert est == pytest.approx(3.0) and 1.0 <= lo <= hi <= 4.0
    got = cluster_quantile_diffs(x, g, np.array([np.nan]), np.array(["z"]), QS)
    assert all(np.isnan(v).all() for v in got)
    with pytest.raises(ValueError, match="shape"):
        cluster_quantile_intervals(x, g[:2], (0.5,))


def test_huge_runs_draw_fewer_resamples_not_fewer_than_the_floor() -> None:
    assert boot_count(10_000, 100, 2000) == 2000
    assert 200 <= boot_count(5_000_000, 40_000, 2000) < 2000
    assert boot_count(10**10, 10**7, 2000) == 200
