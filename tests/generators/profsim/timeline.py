"""One profsim run: arrivals, the queue (serial batches or continuous batching), and each
request's exclusive stage times, with the events a profiler records (generators.profsim.events)."""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Final

import numpy as np

from accel.ops import F64
from accel.profiles import HardwareProfile
from accel.stages import STAGES
from accel.synth.columns import quantize_us
from generators.profsim.device import exec_layout, kernels
from generators.profsim.events import DeviceWork, Events, HostWork, record
from generators.profsim.world import Reality, Service

_VOCAB: Final[int] = 4096


@dataclass(frozen=True)
class Timeline:
    """The run's events and, per request, its times and exclusive stage times."""

    events: Events
    arrival_us: F64
    start_us: F64  # service start (after admission and every wait)
    latency_us: F64
    stage_us: F64  # (n, 6): STAGES then other
    batch_id: np.ndarray  # serial: the batch; continuous: -1
    batch_size: np.ndarray  # serial: members; continuous: requests in flight at start
    seq: np.ndarray
    drifted: np.ndarray


def _serial_starts(
    ready: F64, service: F64, max_batch: int, timeout: float
) -> tuple[F64, np.ndarray]:
    """Batches close when full or `timeout` after their first member; one server runs the
    members one after another (Lindley recursion in closed form)."""
    n = ready.size
    batch = np.empty(n, dtype=np.int64)
    close = np.empty(n)
    i = k = 0
    while i < n:  # batch boundaries only: one step per batch
        deadline = ready[i] + timeout
        j = min(i + max_batch, int(np.searchsorted(ready, deadline, side="right")))
        j = max(j, i + 1)
        batch[i:j] = k
        close[i:j] = ready[j - 1] if j - i == max_batch else deadline
        i, k = j, k + 1
    csum = np.concatenate(([0.0], np.cumsum(service)[:-1]))
    start = csum + np.maximum.accumulate(close - csum)
    return quantize_us(start), batch


def _continuous_starts(
    ready: F64, fixed: F64, exec_us: F64, slots: int, contention: float, step: float
) -> tuple[F64, F64, np.ndarray, np.ndarray]:
    """Requests join the running batch as soon as a slot frees (at a step boundary when `step`);
    kernels of the k requests in flight share the device, stretched by 1 + contention (k - 1).
    Returns start, stretch, requests in flight at start, and the slot each ran in."""
    n = ready.size
    start = np.empty(n)
    stretch = np.empty(n)
    inflight = np.empty(n, dtype=np.int64)
    slot = np.empty(n, dtype=np.int64)
    busy: list[tuple[float, int]] = []  # (end, slot) of requests in flight
    free = list(range(slots))
    for i in range(n):  # a heap of in-flight requests: S servers have no closed form
        t = float(ready[i])
        if not free:
            end, sl = heapq.heappop(busy)
            t = max(t, end)
            free.append(sl)
        if step > 0:
            t = float(np.ceil(t / step) * step)
        while busy and busy[0][0] <= t:
            free.append(heapq.heappop(busy)[1])
        free.sort()
        sl = free.pop(0)
        start[i], inflight[i], slot[i] = t, len(busy) + 1, sl
        stretch[i] = 1.0 + contention * len(busy)
        heapq.heappush(busy, (t + float(fixed[i] + exec_us[i] * stretch[i]), sl))
    return quantize_us(start), stretch, inflight, slot


def simulate(
    hw: HardwareProfile, s: Service, r: Reality, *, seed: int, mean_gap_us: float | None = None
) -> tuple[Timeline, float]:
    """Generate one run; returns it and its mean inter-arrival gap (µs)."""
    rng = np.random.default_rng(seed)
    n, L = s.n_requests, s.layers
    hs = r.host_scale
    buckets = np.asarray(s.seq_buckets)
    seq = buckets[rng.choice(buckets.size, size=n, p=np.asarray(s.seq_probs))]
    drifted = rng.random(n) < s.drift_share
    seq = np.where(drifted, seq * 3 // 4 + 8, seq)

    # --- host work per request ---------------------------------------------------------------
    link = hw.host_link_bw * r.bw_eff
    admit = quantize_us(hs * 20.0 * rng.lognormal(0.0, 0.2, n))
    lookup = quantize_us(hs * 12.0 * rng.lognormal(0.0, 0.15, n))
    plan = quantize_us(hs * 8.0 * rng.lognormal(0.0, 0.15, n))
    h2d_bytes = seq * s.hidden * 2.0
    h2d = quantize_us((h2d_bytes / link * 1e6 + 5.0) * rng.lognormal(0.0, 0.05, n))
    d2h_bytes = seq * _VOCAB * 2.0
    d2h = quantize_us((d2h_bytes / link * 1e6 + 5.0) * s.d2h_scale * rng.lognormal(0.0, 0.05, n))
    post = quantize_us(hs * (20.0 + 0.05 * seq) * s.post_scale * rng.lognormal(0.0, 0.2, n))
    tail = quantize_us(hs * rng.uniform(3.0, 10.0, n))

    # --- kernels --------------------------------------------------------------------------------
    fallback = drifted & (s.unseen == "fallback")
    k = kernels(hw, s, r, seq, fallback, rng)
    kdur = k["dur"]
    layer_nominal = kdur.sum(axis=2).max(axis=2)  # (n, L) without launches or stalls
    stall = np.zeros((n, L))
    if s.stall_share > 0:
        hit = rng.random((n, L)) < s.stall_share
        # A late peer holds the barrier for a multiple of the layer's own time.
        size = s.stall_scale * layer_nominal * rng.lognormal(0.0, 0.3, (n, L))
        stall = np.where(hit, quantize_us(size), 0.0)
    launch_us = quantize_us(np.asarray(r.launch_us)).item()

    exec_us = exec_layout(kdur, launch_us, stall)[3][:, -1]
    base = lookup + plan + h2d + exec_us + d2h + post
    med = float(np.median(base))
    compile_us = np.zeros(n)
    if s.unseen == "recompile":
        first = np.zeros(n, dtype=bool)
        _, idx = np.unique(np.where(drifted, seq, -1), return_index=True)
        first[idx] = True
        compiles = drifted & (first | (rng.random(n) < s.recompile_churn))
        compile_us = np.where(
            compiles, quantize_us(s.compile_scale * med * rng.lognormal(0.0, 0.3, n)), 0.0
        )

    # --- arrivals and service starts -------------------------------------------------------
    if mean_gap_us is None:
        per = med if s.batching == "serial" else med / s.slots
        mean_gap_us = per / s.utilization
    gap = mean_gap_us / s.load_scale
    arrival = quantize_us(np.cumsum(rng.exponential(gap, n)) + 1000.0)
    # One FIFO queue in arrival order: a request admitted quickly does not overtake an earlier one.
    ready = quantize_us(arrival + admit)
    release = np.maximum.accumulate(ready)
    fixed = lookup + compile_us + plan + h2d + d2h + post
    if s.batching == "serial":
        lane = np.zeros(n, dtype=np.int64)
        start, batch = _serial_starts(release, fixed + exec_us, s.max_batch, s.batch_timeout * med)
        bsize = np.bincount(batch)[batch]
    else:
        start, stretch, inflight, lane = _continuous_starts(
            release, fixed, exec_us, s.slots, s.contention, s.step_admission * med
        )
        kdur = quantize_us(kdur * stretch[:, None, None, None])
        k["dur"] = kdur
        batch, bsize = np.full(n, -1, dtype=np.int64), inflight
    launch, kstart, layer_start, layer_end = exec_layout(kdur, launch_us, stall)
    exec_us = layer_end[:, -1]

    # --- stage times: contiguous pieces of each request's window -----------------------------
    stage = np.zeros((n, len(STAGES) + 1))
    stage[:, 0] = start - arrival
    stage[:, 1] = lookup + compile_us
    stage[:, 2] = plan + h2d
    stage[:, 3] = exec_us
    stage[:, 4] = d2h + post
    stage[:, 5] = tail
    latency = stage.sum(axis=1)

    # --- events ---------------------------------------------------------------------------------
    host = HostWork(admit, lookup, compile_us, plan, h2d, h2d_bytes, d2h, d2h_bytes, post)
    device = DeviceWork(k, launch, kstart, layer_start, layer_end, launch_us, lane)
    events = record(s, seq, arrival, ready, start, latency, host, device)
    timeline = Timeline(
        events=events,
        arrival_us=arrival,
        start_us=start,
        latency_us=latency,
        stage_us=stage,
        batch_id=batch,
        batch_size=bsize,
        seq=seq,
        drifted=drifted,
    )
    return timeline, float(mean_gap_us)
