"""accel.localize.requeue: jobs, waits and the re-run, on hand-built queues with known answers."""

from __future__ import annotations

import numpy as np

from accel.localize.requeue import observed_queue, queue_free, reproduction, requeue, unqueued
from accel.queueing import batched_waits
from localize_pieces import requests, sequential_batches


def _arrivals(n: int, gap: float, seed: int = 0) -> np.ndarray:
    return np.cumsum(np.random.default_rng(seed).exponential(gap, n))


def test_members_served_in_turn_wait_for_their_mates_and_get_the_savings() -> None:
    n, size = 400, 4
    arrival = _arrivals(n, 120.0)
    service = np.random.default_rng(1).uniform(60.0, 100.0, n)
    latency, bid, _ = sequential_batches(arrival, service, size)
    req = requests(arrival, latency, service, batch_id=bid)
    q = observed_queue(req)
    assert q.n_jobs == n  # members in turn: a job each, one after another
    assert reproduction(q, req).reproduced
    np.testing.assert_allclose(requeue(q, req.stage_us), latency, rtol=1e-9)
    # Member k waited for the k members before it: its mates wait is their service.
    k = np.arange(n) % size
    before = np.array([service[i - k[i] : i].sum() for i in range(n)])
    np.testing.assert_allclose(q.mates_us, before, atol=1e-6)
    _, _, bstart = sequential_batches(arrival, service, size)
    np.testing.assert_allclose(q.queue_us + q.formation_us, bstart - arrival, atol=1e-6)
    # Saving 20 us of every member's service: the ground truth is the same batcher re-run.
    faster = req.stage_us.copy()
    faster[:, 3] -= 20.0
    truth, _, _ = sequential_batches(arrival, service - 20.0, size)
    np.testing.assert_allclose(requeue(q, faster), truth, rtol=1e-6, atol=1e-6)


def test_members_served_together_form_one_job_and_match_the_batched_queue() -> None:
    n = 300
    arrival = _arrivals(n, 100.0, seed=2)
    bid = (np.arange(n) // 3).astype(np.int64)
    own = np.random.default_rng(3).uniform(150.0, 250.0, n)
    job_svc = np.array([own[bid == b].max() for b in bid])
    # A batch is ready when its last member arrives; members run side by side.
    wait = batched_waits(arrival, own, bid)
    latency = wait + job_svc
    req = requests(arrival, latency, job_svc, batch_id=bid)
    q = observed_queue(req)
    assert q.n_jobs == n // 3
    assert reproduction(q, req).reproduced
    faster = req.stage_us.copy()
    faster[:, 3] *= 0.5
    truth = batched_waits(arrival, own * 0.5, bid) + job_svc * 0.5
    np.testing.assert_allclose(requeue(q, faster), truth, rtol=1e-6, atol=1e-6)
    # Served together: no wait for mates; the wait before the start is queue or formation, and
    # it is formation where the server was idle when the last member arrived.
    np.testing.assert_allclose(q.mates_us, 0.0, atol=1e-6)
    np.testing.assert_allclose(q.queue_us + q.formation_us, wait, atol=1e-6)
    last = np.array([arrival[bid == b].max() for b in bid])
    first = np.array([arrival[bid == b].min() for b in bid])
    end = arrival + latency
    prev_end = np.array([end[bid == b - 1].max() if b else -np.inf for b in bid])
    idle = prev_end <= first  # the server was free when the batch's first member arrived
    assert idle.sum() >= 10
    np.testing.assert_allclose(q.formation_us[idle], (last - arrival)[idle], atol=1e-6)
    np.testing.assert_allclose(q.queue_us[idle], 0.0, atol=1e-6)


def test_concurrent_service_without_batch_ids_does_not_run_away() -> None:
    # Continuous batching as a profiler records it: no batch ids, start = arrival, services
    # overlap in time. A FIFO queue of these services would add up to far more than observed.
    n = 500
    arrival = _arrivals(n, 20.0, seed=4)
    service = np.random.default_rng(5).uniform(150.0, 300.0, n)  # ~10 requests in flight
    req = requests(arrival, service, service)
    fifo = batched_waits(arrival, service, None) + service
    assert np.quantile(fifo, 0.95) > 20 * np.quantile(service, 0.95)  # the runaway
    q = observed_queue(req)
    rep = reproduction(q, req)
    assert rep.reproduced and rep.worst < 1e-9
    faster = req.stage_us.copy()
    faster[:, 3] -= 50.0
    np.testing.assert_allclose(requeue(q, faster), service - 50.0, rtol=1e-9)


def test_a_broken_record_is_reported_as_not_reproduced() -> None:
    arrival = _arrivals(50, 100.0, seed=6)
    service = np.full(50, 80.0)
    req = requests(arrival, service.copy(), service)
    req.stage_us[:, 3] *= 2.0  # stages that add up to twice the latency (double counted)
    rep = reproduction(observed_queue(req), req)
    assert not rep.reproduced
    assert rep.rel_error["p50"] > 0.5


def _slots_fifo(arrival: np.ndarray, service: np.ndarray, c: int) -> np.ndarray:
    """Latency under c servers taking requests in arrival order (the ground truth)."""
    import heapq

    free = [0.0] * c
    out = np.empty(arrival.size)
    for i in np.argsort(arrival, kind="stable"):
        f = heapq.heappop(free)
        end = max(f, arrival[i]) + service[i]
        heapq.heappush(free, end)
        out[i] = end - arrival[i]
    return out


def test_continuous_batching_is_a_server_with_slots_and_savings_free_them_early() -> None:
    n, c = 600, 3
    arrival = _arrivals(n, 70.0, seed=7)
    service = np.random.default_rng(8).uniform(150.0, 250.0, n)  # ~2.9 slots busy
    latency = _slots_fifo(arrival, service, c)
    req = requests(arrival, latency, service)
    q = observed_queue(req)
    assert q.slots == c
    assert reproduction(q, req).worst < 1e-9
    faster = req.stage_us.copy()
    faster[:, 3] -= 40.0
    truth = _slots_fifo(arrival, service - 40.0, c)
    np.testing.assert_allclose(requeue(q, faster), truth, rtol=1e-6, atol=1e-6)
    assert np.quantile(truth, 0.95) < np.quantile(latency, 0.95) - 40.0  # waits shrank too


def test_unqueued_gives_each_request_its_service_and_formation_under_any_service() -> None:
    # Batches of 4 served in turn, under load: queue, formation and mates waits all occur.
    n, size = 400, 4
    arrival = _arrivals(n, 80.0, seed=3)
    service = np.random.default_rng(4).uniform(40.0, 80.0, n)
    latency, bid, _ = sequential_batches(arrival, service, size)
    req = requests(arrival, latency, service, batch_id=bid)
    q = observed_queue(req)
    assert (q.queue_us > 0).mean() > 0.1 and (q.formation_us > 0).mean() > 0.1
    free = unqueued(q)
    np.testing.assert_allclose(requeue(free, req.stage_us), q.service + q.formation_us, atol=1e-6)
    # A saving reaches only the request that made it: no request waits behind another.
    faster = req.stage_us.copy()
    faster[7, 3] -= 30.0
    moved = requeue(free, faster) - requeue(free, req.stage_us)
    np.testing.assert_allclose(moved, np.where(np.arange(n) == 7, -30.0, 0.0), atol=1e-6)
    # Through the observed queue the same saving moves later requests too.
    assert np.count_nonzero(np.abs(requeue(q, faster) - requeue(q, req.stage_us)) > 1e-6) > 1
    # Without formation (the service alone): each request's own service, under any service.
    bare = unqueued(q, formation=False)
    np.testing.assert_allclose(requeue(bare, req.stage_us), q.service, atol=1e-6)
    np.testing.assert_allclose(queue_free(q, formation=False), q.service)
    np.testing.assert_allclose(requeue(bare, faster) - q.service, moved, atol=1e-6)


def test_one_overlap_does_not_add_a_slot_where_the_capacity_binds() -> None:
    """Three slots near saturation, and one request that began at its arrival while three
    others were in service (a fourth in flight once): still three slots, where the maximum
    read four, and a server at 95% load was re-run as one at 71%."""
    n, c = 600, 3
    arrival = _arrivals(n, 70.0, seed=7)
    service = np.random.default_rng(8).uniform(150.0, 250.0, n)
    latency = _slots_fifo(arrival, service, c)
    waited = np.flatnonzero(latency - service > 50.0)
    assert waited.size > n // 10  # the capacity binds
    latency[waited[waited.size // 2]] = service[waited[waited.size // 2]]
    assert observed_queue(requests(arrival, latency, service)).slots == c
    # with no request waiting, every overlap is a slot: nothing to bind, nothing to invent
    free = observed_queue(requests(arrival, service.copy(), service))
    assert free.slots == int(_in_flight_max(arrival, service))


def _in_flight_max(arrival: np.ndarray, service: np.ndarray) -> int:
    t = arrival + 0.1 * service
    started = np.searchsorted(np.sort(arrival), t, side="right")
    ended = np.searchsorted(np.sort(arrival + service), t, side="right")
    return int((started - ended).max())


def _one_worker_with_tails(long_us: float) -> tuple[np.ndarray, np.ndarray]:
    """A FIFO server with one worker: each request holds it for its stages, then spends a tail
    of unattributed time (`other`) after releasing it, which overlaps the next request's
    service. Request 20 holds the worker for long_us; a burst queues behind it."""
    rng = np.random.default_rng(7)
    n = 60
    arrival = np.cumsum(rng.exponential(400.0, n))
    arrival[21:35] = arrival[20] + np.arange(1, 15) * 5.0  # the burst behind request 20
    arrival = np.sort(arrival)
    work = rng.uniform(100.0, 200.0, n)
    work[20] = long_us
    tail = rng.uniform(300.0, 600.0, n)  # longer than the next requests' own service
    stage = np.zeros((n, 6))
    free = -np.inf
    for i in range(n):
        begin = max(arrival[i], free)
        free = begin + work[i]
        stage[i, 0] = begin - arrival[i]
        stage[i, 3] = work[i]
        stage[i, 5] = tail[i]
    return arrival, stage


def test_a_one_worker_server_whose_requests_end_after_releasing_it_has_one_slot() -> None:
    # Counting the tails as a second slot turned the burst's waits into holds that no
    # counterfactual removes (a recorded recompile storm was blamed on queueing this way).
    arrival, stage = _one_worker_with_tails(long_us=50_000.0)
    latency = stage.sum(axis=1)
    req = requests(arrival, latency, stage[:, 3])
    req = type(req)(**{**req.__dict__, "stage_us": stage})
    q = observed_queue(req)
    assert q.slots == 1
    np.testing.assert_allclose(requeue(q, stage), latency, rtol=1e-9, atol=1e-6)
    # Without the long hold, the burst no longer waits for it: the tail gap closes.
    fast = stage.copy()
    fast[20, 3] = 150.0
    cf = requeue(q, fast)
    _, calm = _one_worker_with_tails(long_us=150.0)
    base_p99, cf_p99 = np.quantile(latency, 0.99), np.quantile(cf, 0.99)
    calm_p99 = np.quantile(calm.sum(axis=1), 0.99)
    assert (base_p99 - cf_p99) > 0.9 * (base_p99 - calm_p99)
