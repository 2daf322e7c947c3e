"""The LLM-serving mechanism witnesses (accel/serving.py): each fires on the events of its
mechanism, and not on shifts within what two runs of one loop differ by."""

from __future__ import annotations

import numpy as np
import pytest

from accel.serving import MIN_REL_SHIFT, ServingRun, witnesses


def run(
    n_steps: int = 800,
    *,
    forward: float = 1000.0,
    compiled: int = 0,
    starving: int = 0,
    seed: int = 0,
) -> ServingRun:
    """A run of `n_steps` decode-only steps of 4 members, `compiled` of them compiling and
    `starving` of them prefill-only while two decodes wait."""
    rng = np.random.default_rng(seed)
    n_prefill = np.zeros(n_steps, dtype=np.int64)
    n_decode = np.full(n_steps, 4, dtype=np.int64)
    stalled = np.zeros(n_steps, dtype=np.int64)
    n_prefill[:starving], n_decode[:starving], stalled[:starving] = 1, 0, 2
    compile_us = np.zeros(n_steps)
    compile_us[n_steps - compiled :] = 50_000.0
    return ServingRun(
        tokenize_us=rng.normal(120.0, 5.0, 200),
        tokenize_tokens=np.full(200, 10.0),
        preemptions=np.zeros(200, dtype=np.int64),
        step_forward_us=rng.normal(forward, 0.03 * forward, n_steps),
        step_detokenize_us=rng.normal(40.0, 2.0, n_steps),
        step_compile_us=compile_us,
        step_prefill_tokens=n_prefill * 512,
        step_n_prefill=n_prefill,
        step_n_decode=n_decode,
        step_stalled_decodes=stalled,
    )


def fired(f: ServingRun, c: ServingRun) -> set[str]:
    return {w.mechanism for w in witnesses(f, c) if w.fired}


def test_like_runs_fire_nothing() -> None:
    assert fired(run(seed=1), run(seed=2)) == set()


def test_prefill_only_steps_that_stall_decodes() -> None:
    assert fired(run(starving=80, seed=1), run(seed=2)) == {"prefill_starving_decode"}
    # The same share on both sides is the loop's own behaviour, not a change.
    assert fired(run(starving=80, seed=1), run(starving=80, seed=2)) == set()


def test_compiles_during_serving() -> None:
    assert fired(run(compiled=20, seed=1), run(seed=2)) == {"batch_shape_recompile"}
    assert "batch_shape_recompile" not in fired(run(compiled=2, seed=1), run(seed=2))


@pytest.mark.parametrize(("growth", "fires"), [(0.12, False), (2 * MIN_REL_SHIFT, True)])
def test_a_slower_decode_must_be_material(growth: float, fires: bool) -> None:
    # A 12% slower forward is significant at this n but within the drift of the tuning A/A.
    got = fired(run(forward=1000.0 * (1 + growth), seed=1), run(seed=2))
    assert ("slower_decode_kernel" in got) is fires
