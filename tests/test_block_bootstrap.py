"""The block bootstrap's tail path reads resample quantiles from a few order statistics; it must
give what sorting every resample gives, including resamples whose tail lies below its cut. Its
p95 and p99 intervals hold together."""

from __future__ import annotations

import numpy as np
import pytest

from accel.block_bootstrap import _block_resampled_quantiles, block_bootstrap_quantile_diffs
from accel.stats import QUANTILE_METHOD


def _sorted_every_resample(
    a: np.ndarray, qs: tuple[float, ...], n_boot: int, length: int, seed: int
) -> np.ndarray:
    n = a.size
    k = -(-n // length)
    starts = np.random.default_rng(seed).integers(0, n - length + 1, size=(n_boot, k))
    idx = (starts[:, :, None] + np.arange(length)).reshape(n_boot, k * length)[:, :n]
    return np.quantile(a[idx], list(qs), axis=1, method=QUANTILE_METHOD).T


SERIES = {
    "lognormal": lambda r, n: r.lognormal(size=n),
    "ties": lambda r, n: np.round(r.lognormal(size=n), 1),
    "queue runs": lambda r, n: np.convolve(r.exponential(size=n), np.ones(20), "same"),
    "ramp": lambda r, n: np.arange(n, dtype=np.float64),  # every high value in the last blocks
}


@pytest.mark.parametrize("name", sorted(SERIES))
@pytest.mark.parametrize(("n", "length"), [(5000, 8), (997, 3), (40, 2), (20_000, 40)])
def test_tail_quantiles_equal_sorting_every_resample(name: str, n: int, length: int) -> None:
    a = SERIES[name](np.random.default_rng(n + length), n)
    qs = (0.5, 0.95, 0.99)
    got = _block_resampled_quantiles(a, qs, 300, length, np.random.default_rng(7))
    want = _sorted_every_resample(a, qs, 300, length, 7)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_upper_tail_only_matches_too() -> None:
    a = np.random.default_rng(3).pareto(1.5, size=10_000)
    got = _block_resampled_quantiles(a, (0.95, 0.99), 2000, 8, np.random.default_rng(1))
    want = _sorted_every_resample(a, (0.95, 0.99), 2000, 8, 1)
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_rows_whose_tail_falls_below_the_cut_are_redone(monkeypatch: pytest.MonkeyPatch) -> None:
    import accel.block_bootstrap as bb

    redone: list[int] = []
    dense = bb._dense_order_stats

    def counting(*args: object) -> np.ndarray:
        redone.append(args[1].shape[0])  # type: ignore[attr-defined]
        return dense(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(bb, "_MARGIN_SD", -1.0)  # a cut above the order statistics' spread
    monkeypatch.setattr(bb, "_dense_order_stats", counting)
    a = np.random.default_rng(5).lognormal(size=4000)
    got = bb._block_resampled_quantiles(a, (0.95, 0.99), 500, 6, np.random.default_rng(2))
    assert redone and 0 < redone[0] < 500
    np.testing.assert_allclose(got, _sorted_every_resample(a, (0.95, 0.99), 500, 6, 2), rtol=1e-12)


def test_p95_and_p99_intervals_hold_together_on_a_a_pairs() -> None:
    """On 400 pairs of two samples of one distribution, either interval excludes zero on at most
    about alpha of pairs; read one at a time, each at its own 95%, about twice as often."""
    rng = np.random.default_rng(11)
    joint = apart = 0
    for i in range(400):
        x, y = rng.lognormal(0, 0.5, 300), rng.lognormal(0, 0.5, 300)
        both = block_bootstrap_quantile_diffs(x, y, (0.95, 0.99), 400, i, 0.05, (1, 1))
        each = [block_bootstrap_quantile_diffs(x, y, (q,), 400, i, 0.05, (1, 1))[0]
                for q in (0.95, 0.99)]  # fmt: skip
        joint += any(lo > 0 or hi < 0 for _, lo, hi in both)
        apart += any(lo > 0 or hi < 0 for _, lo, hi in each)
    assert joint / 400 <= 0.06 < 0.07 <= apart / 400
