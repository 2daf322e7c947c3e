"""attribution.exclusive_times against a segment-by-segment reference on random requests."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from accel.stages import STAGES
from workbench.store.attribution.requests import Requests, exclusive_times


def reference(
    req: Requests,
    request_of: np.ndarray,
    ts: np.ndarray,
    end: np.ndarray,
    stage: np.ndarray,
    prio: np.ndarray,
) -> np.ndarray:
    """Per request, every elementary segment goes to the covering event of highest priority
    (ties: the earlier stage in pipeline order); a plain loop, for small inputs."""
    out = np.zeros((req.n, len(STAGES)))
    for k in range(req.n):
        lo, hi = req.start[k], req.end[k]
        mine = [i for i in range(len(ts)) if request_of[i] == k and stage[i] >= 0]
        spans = [(max(ts[i], lo), min(end[i], hi), i) for i in mine]
        spans = [sp for sp in spans if sp[1] > sp[0]]
        cuts = sorted({lo, hi, *(s for s, _, _ in spans), *(e for _, e, _ in spans)})
        for a, b in itertools.pairwise(cuts):
            cover = [i for s, e, i in spans if s <= a and b <= e]
            if cover:
                i = min(cover, key=lambda j: (-prio[j], stage[j]))
                out[k, stage[i]] += b - a
    return out


def random_case(rng: np.random.Generator, n_levels: int) -> tuple:
    n_req = int(rng.integers(1, 6))
    start = np.sort(rng.integers(0, 200, n_req)).astype(np.float64)
    req = Requests(
        "annotation",
        np.arange(n_req, dtype=np.int64),
        start,
        start + rng.integers(0, 60, n_req),
        np.zeros(n_req, dtype=np.int64),
    )
    n = int(rng.integers(0, 80))
    ts = rng.integers(-10, 260, n).astype(np.float64)
    end = ts + rng.integers(0, 40, n)
    request_of = rng.integers(-1, n_req, n)
    stage = rng.integers(-1, len(STAGES), n)
    prio = rng.integers(0, max(1, n_levels // len(STAGES)) + 1, n) * 10
    return req, request_of, ts, end, stage, prio


@pytest.mark.parametrize("n_levels", [3, 12, 13, 66, 400])
def test_exclusive_times_match_the_reference(n_levels: int) -> None:
    rng = np.random.default_rng(n_levels)
    for _ in range(60):
        case = random_case(rng, n_levels)
        got = exclusive_times(*case)
        np.testing.assert_allclose(got, reference(*case), rtol=1e-12, atol=1e-9)


@pytest.mark.parametrize("n", [100, 70])
def test_more_levels_than_one_bitmask_holds(n: int) -> None:
    # n nested spans of distinct priorities in one request: each level beyond the 62 that
    # one bitmask holds still gets the segment only it covers (70: the second round's 8
    # levels look their lowest bit up in a table, 100: its 38 compute it).
    ts = np.arange(n, dtype=np.float64)
    end = 2.0 * n - ts
    prio = np.arange(n, dtype=np.int64)  # the innermost span has the highest priority
    stage = np.arange(n, dtype=np.int64) % len(STAGES)
    req = Requests(
        "annotation",
        np.zeros(1, np.int64),
        np.array([0.0]),
        np.array([2.0 * n]),
        np.zeros(1, np.int64),
    )
    args = (req, np.zeros(n, dtype=np.int64), ts, end, stage, prio)
    got = exclusive_times(*args)
    np.testing.assert_allclose(got, reference(*args))
    # every span but the innermost owns its two 1-unit rims; the innermost its 2 units
    assert got.sum() == pytest.approx(2.0 * n)
