"""accel.localize.decisions: kernels the comparator never ran, and what they would cost tuned."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from accel.cost import op_times
from accel.localize.decisions import kernel_table, novel_kernels, novel_mechanism
from accel.profiles import get_profile
from accel.stages import STAGE_CODE
from localize_pieces import ops

H100 = get_profile("h100")
EXEC = STAGE_CODE["execution"]


def _run(n_req: int, fallback_every: int, slow: float, seed: int):  # type: ignore[no-untyped-def]
    """Per request 4 matmul ops; every `fallback_every`-th request runs them as a fallback
    kernel that is `slow` times slower than the tuned one."""
    rng = np.random.default_rng(seed)
    k = 4 * n_req
    req = np.repeat(np.arange(n_req), 4)
    o = ops(req, np.full(k, EXEC), np.zeros(k), np.zeros(k), ["gemm"] * k,
            flops=np.full(k, 2e9), nbytes=np.full(k, 1e6))  # fmt: skip
    o = replace(o, m=np.full(k, 512.0), n=np.full(k, 512.0))
    fb = (req % fallback_every == 0) if fallback_every else np.zeros(k, dtype=bool)
    o = replace(o, fallback=fb)
    cost = op_times(replace(o, fallback=np.zeros(k, dtype=bool)), H100)
    tuned = cost.predicted_us * rng.uniform(1.4, 1.6, k)  # reality: 1.5x the model, tuned
    o = replace(o, observed_us=np.where(fb, tuned * slow, tuned))
    return o, op_times(o, H100)


def test_fallback_kernels_are_a_changed_decision_timed_as_tuned() -> None:
    n = 100
    f_ops, f_cost = _run(n, 5, 6.0, 1)
    c_ops, c_cost = _run(n, 0, 1.0, 2)
    f, c = kernel_table(f_ops, f_cost, H100), kernel_table(c_ops, c_cost, H100)
    assert "gemm [fallback]" in f.vocab
    nv = novel_kernels(f, c, n)
    assert nv is not None and nv.kernels == ["gemm [fallback]"]
    hit = np.arange(n) % 5 == 0
    assert np.all(nv.observed_us[~hit] == 0) and np.all(nv.saved_us[~hit] == 0)
    # Tuned at the comparator's efficiency (1.5x the model), a fallback request saves ~5/6.
    ratio = nv.saved_us[hit] / nv.observed_us[hit]
    assert np.all((ratio > 0.75) & (ratio < 0.9))
    assert nv.share_fallback == 1.0 and novel_mechanism(nv) == "mapping_fallback"
    # The comparator against itself: nothing changed.
    assert novel_kernels(c, kernel_table(*_run(n, 0, 1.0, 3), H100), n) is None
