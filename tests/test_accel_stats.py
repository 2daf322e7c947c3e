"""accel.stats against scipy and against brute-force definitions."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as sps

from accel import stats

samples = st.lists(
    st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False),
    min_size=1,
    max_size=60,
)
# Small integer values make ties frequent, which is where rank statistics go wrong.
tied = st.lists(st.integers(min_value=0, max_value=6).map(float), min_size=2, max_size=60)


@given(samples, st.floats(min_value=0.0, max_value=1.0))
def test_quantile_matches_numpy_linear(x: list[float], q: float) -> None:
    assert stats.quantile(x, q) == pytest.approx(float(np.quantile(x, q)), rel=1e-12, abs=1e-9)


def test_quantile_drops_nan_and_empty_is_nan() -> None:
    assert stats.quantile([1.0, np.nan, 3.0], 0.5) == 2.0
    assert math.isnan(float(stats.quantile([np.nan], 0.9)))
    qs = stats.quantile([1.0, 2.0, 3.0, 4.0, 5.0], [0.5, 0.95, 0.99])
    assert isinstance(qs, np.ndarray)
    assert qs.tolist() == pytest.approx([3.0, 4.8, 4.96])


@given(samples, samples)
@settings(max_examples=150)
def test_mann_whitney_matches_scipy(x: list[float], y: list[float]) -> None:
    u, p = stats.mann_whitney_u(x, y)
    ref = sps.mannwhitneyu(x, y, alternative="two-sided", method="asymptotic")
    assert u == pytest.approx(float(ref.statistic), rel=1e-12, abs=1e-9)
    if np.isnan(ref.pvalue):  # scipy gives NaN when every value is tied; we say "no evidence"
        assert p == 1.0
    else:
        assert p == pytest.approx(float(ref.pvalue), rel=1e-9, abs=1e-12)


@given(tied, tied)
@settings(max_examples=150)
def test_mann_whitney_tie_correction_matches_scipy(x: list[float], y: list[float]) -> None:
    u, p = stats.mann_whitney_u(x, y)
    ref = sps.mannwhitneyu(x, y, alternative="two-sided", method="asymptotic")
    assert u == pytest.approx(float(ref.statistic))
    if not np.isnan(ref.pvalue):
        assert p == pytest.approx(float(ref.pvalue), rel=1e-9, abs=1e-12)


def test_mann_whitney_detects_a_shift() -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(0.0, 1.0, 300)
    _, p_same = stats.mann_whitney_u(x, rng.normal(0.0, 1.0, 300))
    _, p_shift = stats.mann_whitney_u(x, rng.normal(0.5, 1.0, 300))
    assert p_shift < 1e-6 < p_same


@given(samples)
def test_rankdata_matches_scipy(x: list[float]) -> None:
    np.testing.assert_allclose(stats.rankdata(x), sps.rankdata(x, method="average"))


@given(samples, samples)
def test_hodges_lehmann_is_median_of_pairwise_differences(x: list[float], y: list[float]) -> None:
    brute = float(np.median([a - b for a in x for b in y]))
    assert stats.hodges_lehmann_shift(x, y) == pytest.approx(brute, rel=1e-12, abs=1e-9)


def test_hodges_lehmann_thinned_is_close_and_deterministic() -> None:
    rng = np.random.default_rng(7)
    x = rng.lognormal(3.0, 0.5, 4000) + 25.0
    y = rng.lognormal(3.0, 0.5, 3000)
    exact = stats.hodges_lehmann_shift(x, y, max_pairs=10**8)
    thin = stats.hodges_lehmann_shift(x, y, max_pairs=40_000)
    assert thin == stats.hodges_lehmann_shift(x, y, max_pairs=40_000)
    assert thin == pytest.approx(exact, rel=0.02)
    assert exact == pytest.approx(25.0, rel=0.1)
    _, lo, hi = stats.hodges_lehmann_ci(x, y, max_pairs=10**8)
    _, tlo, thi = stats.hodges_lehmann_ci(x, y, max_pairs=40_000)
    assert tlo == pytest.approx(lo, abs=0.15 * (hi - lo))
    assert thi == pytest.approx(hi, abs=0.15 * (hi - lo))


def _moses_bounds(x: list[float], y: list[float], alpha: float) -> tuple[float, float]:
    d = sorted(a - b for a in x for b in y)
    n, m = len(x), len(y)
    z = float(sps.norm.ppf(1 - alpha / 2))
    c = math.floor(n * m / 2 - z * math.sqrt(n * m * (n + m + 1) / 12))
    c = min(max(c, 1), len(d))
    return d[c - 1], d[len(d) - c]


@given(samples, samples)
def test_hodges_lehmann_ci_is_moses_interval(x: list[float], y: list[float]) -> None:
    shift, lo, hi = stats.hodges_lehmann_ci(x, y, alpha=0.05)
    ref_lo, ref_hi = _moses_bounds(x, y, 0.05)
    assert (lo, hi) == (pytest.approx(ref_lo, abs=1e-9), pytest.approx(ref_hi, abs=1e-9))
    assert lo <= shift <= hi


def test_hodges_lehmann_ci_covers_true_shift() -> None:
    rng = np.random.default_rng(3)
    covered = 0
    for _ in range(200):
        x = rng.normal(2.0, 1.0, 40)
        y = rng.normal(0.0, 1.0, 30)
        _, lo, hi = stats.hodges_lehmann_ci(x, y)
        covered += lo <= 2.0 <= hi
    assert 0.90 <= covered / 200 <= 0.99


@given(st.floats(min_value=1e-9, max_value=1 - 1e-9))
def test_normal_ppf_inverts_scipy(p: float) -> None:
    assert stats.normal_ppf(p) == pytest.approx(float(sps.norm.ppf(p)), abs=1e-9)


def test_bootstrap_quantile_diff_matches_scipy_percentile_bootstrap() -> None:
    rng = np.random.default_rng(11)
    x = rng.lognormal(4.0, 0.6, 400) * 1.3
    y = rng.lognormal(4.0, 0.6, 500)
    diff, lo, hi = stats.bootstrap_quantile_diff(x, y, 0.95, n_boot=3000, seed=5)
    assert diff == pytest.approx(float(np.quantile(x, 0.95) - np.quantile(y, 0.95)))
    ref = sps.bootstrap(
        (x, y),
        lambda a, b, axis: np.quantile(a, 0.95, axis=axis) - np.quantile(b, 0.95, axis=axis),
        n_resamples=3000,
        method="percentile",
        vectorized=True,
        paired=False,
        rng=np.random.default_rng(99),
    ).confidence_interval
    # Different random streams: the bounds agree within Monte Carlo error, not exactly.
    width = ref.high - ref.low
    assert lo == pytest.approx(ref.low, abs=0.1 * width)
    assert hi == pytest.approx(ref.high, abs=0.1 * width)
    assert lo < diff < hi


def test_bootstrap_is_deterministic_per_seed_and_chunking_is_invisible() -> None:
    x = np.arange(5000, dtype=float)
    a = stats.bootstrap_quantile_diff(x, x[::-1] + 3.0, 0.99, n_boot=1500, seed=2)
    b = stats.bootstrap_quantile_diff(x, x[::-1] + 3.0, 0.99, n_boot=1500, seed=2)
    assert a == b
    assert a[0] == pytest.approx(-3.0)
    assert a[1] <= -3.0 <= a[2]


def test_bootstrap_quantile_single_sample() -> None:
    x = np.random.default_rng(4).exponential(10.0, 800)
    est, lo, hi = stats.bootstrap_quantile(x, 0.5, n_boot=2000, seed=1)
    assert lo < est < hi
    assert lo < 10.0 * math.log(2) < hi


def test_psi_against_definition() -> None:
    e = [100, 200, 300, 400]
    a = [150, 150, 300, 400]
    pe = np.array(e) / 1000
    pa = np.array(a) / 1000
    assert stats.psi(e, a) == pytest.approx(float(np.sum((pa - pe) * np.log(pa / pe))))
    assert stats.psi(e, e) == 0.0
    assert stats.psi([10, 0], [0, 10]) > 5.0  # empty buckets are floored, not infinite
    with pytest.raises(ValueError, match="matching buckets"):
        stats.psi([1, 2], [1, 2, 3])


def test_quantile_bucket_counts_feed_psi() -> None:
    rng = np.random.default_rng(0)
    base = rng.normal(0, 1, 5000)
    ce, ca = stats.quantile_bucket_counts(base, rng.normal(0, 1, 5000))
    assert ce.sum() == 5000 and ca.sum() == 5000 and ce.size == 10
    assert stats.psi(ce, ca) < 0.05
    ce, ca = stats.quantile_bucket_counts(base, rng.normal(1.0, 1, 5000))
    assert stats.psi(ce, ca) > 0.25


@given(st.integers(min_value=0, max_value=500), st.integers(min_value=1, max_value=500))
@settings(deadline=None)  # a number check, not a timing one: a loaded box overran 200 ms once
def test_wilson_interval_matches_reference(k: int, n: int) -> None:
    k = min(k, n)
    p, lo, hi = stats.wilson_interval(k, n)
    ref = sps.binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    assert (lo, hi) == (pytest.approx(ref.low, abs=1e-9), pytest.approx(ref.high, abs=1e-9))
    assert lo <= p <= hi


@pytest.mark.filterwarnings("ignore::scipy.stats.ConstantInputWarning")
@given(tied, tied)
def test_spearman_matches_scipy(x: list[float], y: list[float]) -> None:
    n = min(len(x), len(y))
    ref = sps.spearmanr(x[:n], y[:n]).statistic
    got = stats.spearman(x[:n], y[:n])
    if np.isnan(ref):
        assert math.isnan(got)
    else:
        assert got == pytest.approx(float(ref), abs=1e-9)


def test_mape() -> None:
    assert stats.mape([110.0, 90.0, 5.0], [100.0, 100.0, 0.0]) == pytest.approx(10.0)
    assert math.isnan(stats.mape([1.0], [0.0]))


@pytest.mark.parametrize(("n", "q"), [(50, 0.9), (37, 0.5), (200, 0.99), (5, 1.0), (9, 0.0)])
def test_bootstrap_order_statistics_match_brute_force_resampling(n: int, q: float) -> None:
    # The O(n_boot) draw of a resample's quantile has the distribution of the plain method:
    # resample n values with replacement, take the type-7 quantile.
    rng = np.random.default_rng(n)
    x = rng.lognormal(3.0, 1.0, n)
    fast = stats._resampled_quantiles(x, q, 20_000, np.random.default_rng(1))
    idx = np.random.default_rng(2).integers(0, n, size=(20_000, n))
    brute = np.quantile(x[idx], q, axis=1)
    # 0.016: the 1% critical value of KS for two samples of 20k; off-by-one ranks give > 0.02.
    assert sps.ks_2samp(fast, brute).statistic < 0.016
    assert np.mean(fast) == pytest.approx(np.mean(brute), rel=0.02)


def test_proportion_diff_ci_matches_newcombe_worked_example() -> None:
    # Newcombe (1998), Table II, example (a): 56/70 vs 48/80 -> 0.2000, 95% CI 0.0524 to 0.3339.
    d, lo, hi = stats.proportion_diff_ci(56, 70, 48, 80)
    assert d == pytest.approx(0.2, abs=1e-12)
    assert lo == pytest.approx(0.0524, abs=5e-4)
    assert hi == pytest.approx(0.3339, abs=5e-4)


def test_proportion_diff_ci_is_narrower_than_end_to_end_wilson() -> None:
    d, lo, hi = stats.proportion_diff_ci(3, 200, 1, 200)
    _, l1, u1 = stats.wilson_interval(3, 200)
    _, l2, u2 = stats.wilson_interval(1, 200)
    assert l1 - u2 < lo < d < hi < u1 - l2


def _joint_coverage(d: np.ndarray, iv: np.ndarray) -> float:
    return float(((d >= iv[:, 0]) & (d <= iv[:, 2])).all(axis=1).mean())


def test_joint_intervals_of_one_column_are_the_plain_percentile_interval() -> None:
    col = np.random.default_rng(3).normal(size=(2000, 1))
    lo, mid, hi = stats.joint_percentile_intervals(col, 0.05)[0]
    assert (lo, mid, hi) == tuple(np.quantile(col[:, 0], [0.025, 0.5, 0.975]))


def test_joint_intervals_of_independent_columns_lie_between_alpha_and_bonferroni() -> None:
    d = np.random.default_rng(4).normal(size=(20000, 2))
    iv = stats.joint_percentile_intervals(d, 0.05)
    assert _joint_coverage(d, iv) >= 0.95
    # two independent intervals hold together at 95% when each holds at about 97.5%
    for j in range(2):
        plain = np.quantile(d[:, j], [0.025, 0.975])
        bonferroni = np.quantile(d[:, j], [0.0125, 0.9875])
        assert bonferroni[0] <= iv[j, 0] < plain[0] and plain[1] < iv[j, 2] <= bonferroni[1]
    assert _joint_coverage(d, iv) == pytest.approx(0.95, abs=0.002)


def test_joint_intervals_of_one_quantity_read_twice_are_not_widened() -> None:
    x = np.random.default_rng(5).normal(size=4000)
    iv = stats.joint_percentile_intervals(np.column_stack([x, x]), 0.05)
    for j in range(2):
        assert (iv[j, 0], iv[j, 2]) == tuple(np.quantile(x, [0.025, 0.975]))


def test_joint_intervals_drop_nan_per_column_and_need_two_draws() -> None:
    d = np.random.default_rng(6).normal(size=(500, 3))
    d[::7, 0] = np.nan
    d[:, 2] = np.nan
    d[0, 2] = 1.0
    iv = stats.joint_percentile_intervals(d, 0.05)
    assert np.isnan(iv[2]).all() and np.isfinite(iv[:2]).all()
    # the two usable columns are still read together, though no row is complete in all three
    # (here at Bonferroni's floor, alpha/2 each, which on 428 rows covers a little under 95%)
    both = d[:, :2][np.isfinite(d[:, :2]).all(axis=1)]
    assert _joint_coverage(both, iv[:2]) >= 0.94
    assert iv[0, 0] < np.quantile(d[:, 0][np.isfinite(d[:, 0])], 0.025)
    assert iv[0, 1] == np.median(d[:, 0][np.isfinite(d[:, 0])])
    with pytest.raises(ValueError, match="rows x columns"):
        stats.joint_percentile_intervals(np.zeros(5), 0.05)
