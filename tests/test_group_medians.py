"""group_medians: the median of each key's values, by either of its two paths."""

from __future__ import annotations

import numpy as np
import pytest

from accel.localize import group_medians
from accel.localize.matching import _FEW_GROUPS


def _reference(key: np.ndarray, value: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per sorted distinct key: the mean of the two middle values, NaN sorted last."""
    keys = np.unique(key)
    med = []
    for k in keys:
        v = np.sort(value[key == k])
        med.append(0.5 * (v[(v.size - 1) // 2] + v[v.size // 2]))
    return keys, np.asarray(med)


@pytest.mark.parametrize("n_keys", [1, 5, _FEW_GROUPS, _FEW_GROUPS + 1, 900])
def test_group_medians_match_a_sort_per_key(n_keys: int) -> None:
    rng = np.random.default_rng(n_keys)
    key = rng.choice(rng.integers(-50, 10**6, n_keys), 20_000)
    value = np.round(rng.lognormal(3.0, 1.0, key.size), 1)  # ties, as observed times have
    value[rng.random(key.size) < 0.01] = np.nan
    got_keys, got = group_medians(key, value)
    want_keys, want = _reference(key, value)
    np.testing.assert_array_equal(got_keys, want_keys)
    np.testing.assert_array_equal(got, want)  # exactly: the same order statistics


def test_group_medians_of_nothing() -> None:
    keys, med = group_medians(np.zeros(0, dtype=np.int64), np.zeros(0))
    assert keys.size == 0 and med.size == 0
