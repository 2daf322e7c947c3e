"""accel.localize.matching: the nearest-size match of failing ops to comparator ops."""

from __future__ import annotations

import numpy as np
import pytest

from accel.localize import matching


@pytest.mark.parametrize("kind", ["sizes", "negative", "fractional", "wide"])
def test_key_runs_equal_a_stable_sort(kind: str) -> None:
    """The table gives what the stable sort gives; keys it cannot hold exactly (fractional or
    too wide) must not take it (they would differ from the sort if they did)."""
    rng = np.random.default_rng(11)
    for _ in range(40):
        n, names = int(rng.integers(1, 4000)), int(rng.integers(1, 30))
        code = rng.integers(0, names, n).astype(np.int64)
        if kind == "sizes":
            m = rng.integers(1, 4096, n).astype(float)  # the table
        elif kind == "negative":
            m = rng.integers(-64, 64, n).astype(float)  # a shifted table
        elif kind == "fractional":
            m = rng.choice([0.5, 2.0, 8.25, 1e6], n)  # the sort
        else:
            m = rng.integers(1, 2**40, n).astype(float)  # keys too wide for a table: the sort
        sel = np.sort(rng.choice(10 * n, n, replace=False)).astype(np.int64)
        big = 2.0 ** (int(np.log2(max(float(m.max()), 1.0))) + 2)
        for got, want in zip(
            matching._key_runs(code, m, big, sel),
            matching._sorted_key_runs(code, m, big, sel),
            strict=True,
        ):
            assert np.array_equal(got, want)
