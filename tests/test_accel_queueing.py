"""accel.queueing: the closed-form Lindley recursion equals the plain loop."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accel.queueing import batched_waits, fifo_schedule, lindley_waits_sorted
from accel_reference import ref_batched_waits, ref_fifo_waits

times = st.floats(min_value=0.0, max_value=1e6, allow_nan=False)
jobs = st.lists(st.tuples(times, st.floats(min_value=0.0, max_value=5e4)), min_size=0, max_size=80)


@given(jobs)
def test_closed_form_equals_loop(pairs: list[tuple[float, float]]) -> None:
    arrival = [a for a, _ in pairs]
    service = [s for _, s in pairs]
    got = fifo_schedule(arrival, service)
    ref = ref_fifo_waits(arrival, service)
    np.testing.assert_allclose(got.wait_us, ref, rtol=1e-9, atol=1e-6)
    np.testing.assert_allclose(
        got.departure_us, np.add(arrival, ref) + service, rtol=1e-9, atol=1e-6
    )


@given(jobs, st.integers(0, 2**31))
@settings(max_examples=100)
def test_batched_equals_loop(pairs: list[tuple[float, float]], seed: int) -> None:
    arrival = [a for a, _ in pairs]
    service = [s for _, s in pairs]
    batch = np.random.default_rng(seed).integers(-1, 5, len(pairs))
    got = batched_waits(arrival, service, batch)
    np.testing.assert_allclose(got, ref_batched_waits(arrival, service, batch.tolist()), atol=1e-6)


def test_textbook_example() -> None:
    # Arrivals 0, 1, 2, 10; each service 3: waits 0, 2, 4, 0 (job 3 leaves at 9 < 10).
    s = fifo_schedule([0.0, 1.0, 2.0, 10.0], [3.0, 3.0, 3.0, 3.0])
    assert s.wait_us.tolist() == [0.0, 2.0, 4.0, 0.0]
    assert s.departure_us.tolist() == [3.0, 6.0, 9.0, 13.0]


def test_unsorted_input_keeps_input_order() -> None:
    s = fifo_schedule([2.0, 0.0, 1.0], [3.0, 3.0, 3.0])
    assert s.wait_us.tolist() == [4.0, 0.0, 2.0]


def test_batch_waits_for_last_member_and_slowest_service() -> None:
    # Batch 7 = requests at 0 and 4 (service 1 and 5); solo request at 5 waits for the batch.
    w = batched_waits([0.0, 4.0, 5.0], [1.0, 5.0, 1.0], np.array([7, 7, -1]))
    assert w.tolist() == [4.0, 0.0, 4.0]


def test_unknown_arrival_does_not_queue() -> None:
    s = fifo_schedule([0.0, np.nan, 1.0], [5.0, 100.0, 1.0])
    assert s.wait_us.tolist() == [0.0, 0.0, 4.0]


def test_shape_mismatch_is_refused() -> None:
    with pytest.raises(ValueError, match="equal length"):
        lindley_waits_sorted([0.0, 1.0], [1.0])


def test_large_queue_is_exact_enough() -> None:
    rng = np.random.default_rng(0)
    a = np.cumsum(rng.exponential(1.0, 20_000)) * 1e3 + 1e9  # epoch-like offsets
    s = rng.exponential(0.95, 20_000) * 1e3
    np.testing.assert_allclose(
        fifo_schedule(a, s).wait_us, ref_fifo_waits(a.tolist(), s.tolist()), atol=1e-4
    )
