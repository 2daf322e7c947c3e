"""Batch-mates from shared kernel executions (workbench/store/attribution/batch_mates.py)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from workbench.store.attribution.batch_mates import batch_mates


def _run(lane: list[int], ts: list[float], dur: list[float], req: list[int], n: int,
         kernel: list[bool] | None = None) -> tuple[list[int], list[int]] | None:  # fmt: skip
    k = np.ones(len(lane), bool) if kernel is None else np.asarray(kernel)
    got = batch_mates(
        k,
        pa.array(lane, pa.int32(), mask=np.asarray(lane) < 0),
        np.asarray(ts, np.float64),
        np.asarray(dur, np.float64),
        np.asarray(req, np.int64),
        n,
    )
    return None if got is None else (got[0].tolist(), got[1].tolist())


def test_requests_sharing_an_execution_are_one_batch() -> None:
    # Requests 0 and 2 carry the same kernel (lane 1, ts 10, 5 us); request 1 runs alone.
    got = _run([1, 1, 1, 1], [10, 20, 10, 30], [5, 5, 5, 5], [0, 1, 2, 1], 3)
    assert got == ([0, 1, 0], [2, 1, 2])


def test_chains_of_shared_executions_join_into_one_batch() -> None:
    # 3 shares with 2, 2 with 1, 1 with 0 (each pair on a different kernel): one batch of four.
    got = _run([0] * 6, [1, 1, 2, 2, 3, 3], [1] * 6, [3, 2, 2, 1, 1, 0], 5)
    assert got == ([0, 0, 0, 0, 4], [4, 4, 4, 4, 1])


def test_coincidences_that_are_not_one_execution_are_ignored() -> None:
    # Same start on other lanes, or another duration, or within one request, or host events:
    # no batch.
    assert _run([0, 1], [5, 5], [2, 2], [0, 1], 2) is None
    assert _run([0, 0], [5, 5], [2, 3], [0, 1], 2) is None
    assert _run([0, 0], [5, 5], [2, 2], [1, 1], 2) is None
    assert _run([0, 0], [5, 5], [2, 2], [0, 1], 2, kernel=[True, False]) is None
    assert _run([0, 0], [5, 5], [2, 2], [0, -1], 2) is None
    assert _run([0, -1], [5, 5], [2, 2], [0, 1], 2) is None
