"""op_columns' children's time per parent: ids 0..n-1 (a count by id) and any other ids (a sort)
give what a plain per-parent sum gives."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.store.op_columns import _child_sums


@pytest.mark.parametrize("spread", [1, 10**9], ids=["dense-ids", "sparse-ids"])
def test_child_sums_match_a_plain_sum(spread: int) -> None:
    rng = np.random.default_rng(spread)
    for _ in range(100):
        n = int(rng.integers(1, 40))
        event_id = np.arange(n, dtype=np.int64) * spread
        if rng.random() < 0.2:
            event_id[0] = -1  # a null event id, as the reader fills it
        # parents among the events, plus ids of events not loaded
        parent = rng.choice(np.r_[event_id, [7 * spread + 3, 10**13]], int(rng.integers(1, 60)))
        weight = rng.random(parent.size)
        sums, has = _child_sums(parent.astype(np.int64), weight, event_id)
        for i, e in enumerate(event_id.tolist()):
            mine = parent == e
            assert has[i] == mine.any()
            if mine.any():
                assert sums[i] == pytest.approx(weight[mine].sum(), rel=1e-12)
