"""accel.localize.graph_break: the rule on per-request region counts, and its hook."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from accel.localize.graph_break import graph_break
from accel.localize.mechanism import mechanism_of
from accel.ops import RunArrays
from accel.profiles import get_profile
from accel.synth import generate_pair


def _pair() -> tuple[RunArrays, RunArrays, int, int]:
    pair = generate_pair(get_profile("h100"), "mapping_fallback", 3, tables=False)
    failing, comparator = pair.failing.arrays, pair.comparator.arrays
    return failing, comparator, failing.requests.size, comparator.requests.size


def test_split_requests_are_a_graph_break() -> None:
    f, c, n_f, n_c = _pair()
    f = replace(f, regions=np.full(n_f, 7), eager_between=np.full(n_f, 3))
    c = replace(c, regions=np.ones(n_c, np.int64), eager_between=np.zeros(n_c, np.int64))
    scores: dict[str, float] = {}
    assert graph_break(f, c, scores)
    assert scores["lowering.graph_split_share"] == 1.0
    assert scores["lowering.extra_regions_per_request"] == 6.0
    assert mechanism_of("lowering", f, c, {}, {}) == "graph_break"


def test_more_regions_split_the_graph_and_a_few_split_requests_do_not() -> None:
    f, c, n_f, n_c = _pair()
    c = replace(c, regions=np.ones(n_c, np.int64), eager_between=np.zeros(n_c, np.int64))
    # More regions with nothing eager between them is a split too: a `print` breaks the graph
    # with no tensor op between the regions (tests/fixtures/real_pairs, fixture-break_print).
    f2 = replace(f, regions=np.full(n_f, 2), eager_between=np.zeros(n_f, np.int64))
    assert graph_break(f2, c, {})
    # A break on a few requests only (an odd shape) is not systematic.
    regions = np.ones(n_f, np.int64)
    regions[: n_f // 5] = 3
    f3 = replace(f, regions=regions, eager_between=(regions > 1).astype(np.int64))
    assert not graph_break(f3, c, {})
    # Without region counts (a run that is not torch.compile) the rule does not apply.
    assert not graph_break(f, c, {})
    assert mechanism_of("lowering", f, c, {}, {}) != "graph_break"
