"""One run as a profiler records it: every span, launch, kernel and copy, and each request's
exclusive stage times (the truth the events reproduce when attributed)."""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Final

import numpy as np

from accel.ops import F64
from accel.profiles import HardwareProfile
from accel.profsim.world import Reality, Service
from accel.stages import STAGES
from accel.synth.columns import quantize_us

# One layer: (kernel name, matmul?, input width, output width) in units of `hidden`.
_OPS: Final[tuple[tuple[str, bool, int, int], ...]] = (
    ("qkv", True, 1, 3),
    ("attn", False, 3, 1),
    ("up", True, 1, 4),
    ("down", True, 4, 1),
)
_FUSED: Final[tuple[bool, ...]] = (False, False, True, True)  # the MLP a fusing compiler merges
_SYNC_US: Final[float] = 2.0  # a barrier's own cost when nobody is late
_VOCAB: Final[int] = 4096
HOST_PID: Final[int] = 1
DEVICE_PID: Final[int] = 0

# Event columns (one entry per event). Unknown: -1, NaN or "".
Events = dict[str, np.ndarray]


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


class _Builder:
    """Events in blocks of numpy columns."""

    def __init__(self) -> None:
        self.blocks: list[Events] = []
        self.n = 0

    def add(self, n: int, **cols: object) -> np.ndarray:
        """Append n events; returns their indices (event ids)."""
        block: Events = {}
        for k, v in cols.items():
            arr = np.asarray(v)
            block[k] = np.broadcast_to(arr, (n,)).copy() if arr.ndim == 0 else arr.reshape(n)
        self.blocks.append(block)
        ids = np.arange(self.n, self.n + n, dtype=np.int64)
        self.n += n
        return ids

    def concat(self) -> Events:
        defaults: dict[str, object] = {
            "req": -1,
            "stage": "",
            "category": "",
            "name": "",
            "ts": np.nan,
            "dur": np.nan,
            "pid": HOST_PID,
            "tid": -1,
            "stream": -1,
            "core": -1,
            "corr": -1,
            "parent": -1,
            "shape": "",
            "flops": np.nan,
            "bytes": np.nan,
            "kernel": "",
            "fallback": False,
            "recompile": False,
            "predicted": np.nan,
        }
        out: Events = {}
        for k, d in defaults.items():
            parts = [
                b[k] if k in b else np.full(len(next(iter(b.values()))), d) for b in self.blocks
            ]
            out[k] = np.concatenate(parts)
        return out


def _kernels(
    hw: HardwareProfile,
    s: Service,
    r: Reality,
    seq: np.ndarray,
    fallback: np.ndarray,
    rng: np.random.Generator,
) -> dict[str, np.ndarray]:
    """Per (request, layer, op, core): duration, flops, bytes, names, the compiler's estimate."""
    n, L, NOPS, C = seq.size, s.layers, len(_OPS), s.cores
    h = float(s.hidden)
    shape4 = (n, L, NOPS, C)
    rows = np.broadcast_to(np.ceil(seq / C)[:, None, None, None], shape4).astype(np.float64)
    mm = np.broadcast_to(np.array([o[1] for o in _OPS])[None, None, :, None], shape4)
    k_in = np.broadcast_to(np.array([o[2] * h for o in _OPS])[None, None, :, None], shape4)
    n_out = np.broadcast_to(np.array([o[3] * h for o in _OPS])[None, None, :, None], shape4)
    fb = np.broadcast_to(fallback[:, None, None, None], shape4) & mm
    fused = np.broadcast_to(np.array(_FUSED)[None, None, :, None], shape4) & (s.fusion_spill > 0)
    flops = np.where(mm, 2.0 * rows * k_in * n_out, 6.0 * rows * k_in)
    nbytes = np.where(mm, k_in * n_out * 2.0 / C, 0.0) + rows * (k_in + n_out) * 2.0
    spill = np.where(fused, s.fusion_spill * rows * 4.0 * h * 2.0, 0.0)
    peak, bw = hw.peak_dense_bf16_flops / C, hw.hbm_bw / C
    c = np.where(mm, flops / (peak * r.compute_eff), flops / (hw.vector_flops / C * r.compute_eff))
    c = np.where(fb, c / s.fallback_eff, c) * 1e6
    m = nbytes / (bw * r.bw_eff) * 1e6
    busy = np.maximum(c, m) + (1.0 - r.overlap) * np.minimum(c, m)
    busy = busy + spill * r.spill_penalty / (bw * r.bw_eff) * 1e6
    kind = np.where(fb, 4, np.broadcast_to(np.arange(NOPS)[None, None, :, None], shape4))
    dur = busy * np.asarray(r.bias)[kind] * rng.lognormal(0.0, r.op_noise, shape4)
    if s.slow_core >= 0:
        dur = dur + np.where(
            np.arange(C)[None, None, None, :] == s.slow_core, s.slow_core_us * np.median(dur), 0.0
        )
    # What the compiler believed: nominal peak and bandwidth, no overlap, no spill.
    est = np.maximum(np.where(mm, flops / peak, flops / (hw.vector_flops / C)), nbytes / bw) * 1e6
    est = (est + hw.launch_overhead_us) * rng.lognormal(0.0, 0.1, shape4)
    names = np.array([o[0] for o in _OPS])[None, None, :, None]
    kname = np.where(fused, np.char.add("fused_mlp_", names), np.char.add("gemm_", names))
    kname = np.where(mm, kname, np.char.add("ew_", names))
    kname = np.where(fb, "gemm_generic_fallback", kname)
    return {
        "dur": quantize_us(dur),
        "flops": flops,
        "bytes": nbytes + spill,
        "rows": rows,
        "k": k_in,
        "n": n_out,
        "mm": mm,
        "fallback": fb,
        "predicted": np.where(fb, np.nan, est),
        "kernel": np.broadcast_to(kname, shape4),
    }


def _exec_layout(
    kdur: np.ndarray, launch_us: float, stall: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Offsets within the execution stage: launch starts, kernel starts, layer starts and ends.

    The host launches (op, core) kernels one after another; a kernel starts when launched and
    when its stream (core) is free; the layer's barrier waits for the last kernel, plus a stall.
    """
    n, L, NOPS, C = kdur.shape
    launch = np.zeros((n, L, NOPS, C))
    kstart = np.zeros((n, L, NOPS, C))
    layer_start = np.zeros((n, L))
    layer_end = np.zeros((n, L))
    t = np.zeros(n)
    seq_idx = np.arange(NOPS * C).reshape(NOPS, C) * launch_us
    for layer in range(L):  # a handful of layers: the loop is over the model, not the data
        layer_start[:, layer] = t
        launch[:, layer] = t[:, None, None] + seq_idx[None, :, :]
        free = t[:, None] + np.zeros((n, C))
        for o in range(NOPS):
            st = np.maximum(launch[:, layer, o, :] + launch_us, free)
            kstart[:, layer, o, :] = st
            free = st + kdur[:, layer, o, :]
        last_launch = t + NOPS * C * launch_us
        t = np.maximum(free.max(axis=1), last_launch) + _SYNC_US + stall[:, layer]
        layer_end[:, layer] = t
    return (
        quantize_us(launch),
        quantize_us(kstart),
        quantize_us(layer_start),
        quantize_us(layer_end),
    )


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
    n, L, NOPS, C = s.n_requests, s.layers, len(_OPS), s.cores
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
    k = _kernels(hw, s, r, seq, fallback, rng)
    kdur = k["dur"]
    layer_nominal = kdur.sum(axis=2).max(axis=2)  # (n, L) without launches or stalls
    stall = np.zeros((n, L))
    if s.stall_share > 0:
        hit = rng.random((n, L)) < s.stall_share
        # A late peer holds the barrier for a multiple of the layer's own time.
        size = s.stall_scale * layer_nominal * rng.lognormal(0.0, 0.3, (n, L))
        stall = np.where(hit, quantize_us(size), 0.0)
    launch_us = quantize_us(np.asarray(r.launch_us)).item()

    def exec_total(kd: np.ndarray) -> F64:
        return _exec_layout(kd, launch_us, stall)[3][:, -1]

    exec_us = exec_total(kdur)
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
    launch, kstart, layer_start, layer_end = _exec_layout(kdur, launch_us, stall)
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
    b = _Builder()
    tid = 10_000 + np.arange(n)
    req = np.arange(n)
    shape_in = np.char.add(np.char.add("[[1,", seq.astype(str)), f",{s.hidden}]]")
    ann = b.add(n, req=req, stage="", category="user_annotation",
                name=np.char.add("request#", req.astype(str)), ts=arrival, dur=latency, tid=tid)  # fmt: skip
    b.add(n, req=req, stage="ingress", category="cpu_op", name="serving.admission", ts=arrival,
          dur=admit, tid=tid, parent=ann, shape=shape_in)  # fmt: skip
    waits = np.flatnonzero(start > ready)
    b.add(waits.size, req=waits, stage="ingress", category="user_annotation", name="wait_for_batch",
          ts=ready[waits], dur=(start - ready)[waits], tid=tid[waits], parent=ann[waits])  # fmt: skip
    t = start.copy()
    b.add(n, req=req, stage="lowering", category="cpu_op", name="TorchDynamo Cache Lookup", ts=t,
          dur=lookup, tid=tid, parent=ann)  # fmt: skip
    t = t + lookup
    cmp = np.flatnonzero(compile_us > 0)
    b.add(cmp.size, req=cmp, stage="lowering", category="cpu_op", name="backend_compile",
          ts=t[cmp], dur=compile_us[cmp], tid=tid[cmp], parent=ann[cmp], recompile=True)  # fmt: skip
    t = t + compile_us
    b.add(n, req=req, stage="scheduling", category="cpu_op", name="memory_plan", ts=t, dur=plan,
          tid=tid, parent=ann)  # fmt: skip
    t = t + plan
    corr = [0]

    def copy(device_name: str, stage_id: str, ts: F64, dur: F64, nbytes: F64) -> None:
        c0 = corr[0]
        cr = np.arange(c0, c0 + n)
        corr[0] += n
        host = b.add(n, req=req, stage="execution", category="cuda_runtime",
                     name="cudaMemcpyAsync", ts=ts, dur=dur, tid=tid, parent=ann, corr=cr)  # fmt: skip
        b.add(n, req=req, stage=stage_id, category="gpu_memcpy", name=device_name, ts=ts, dur=dur,
              pid=DEVICE_PID, tid=7, stream=7, corr=cr, parent=host, bytes=nbytes)  # fmt: skip

    copy("Memcpy HtoD (Pinned -> Device)", "scheduling", t, h2d, h2d_bytes)
    t = t + h2d
    # execution: launches on the request thread, kernels on one stream per (slot, core)
    shape4 = kdur.shape
    nk = kdur.size
    r4 = np.broadcast_to(req[:, None, None, None], shape4).ravel()
    cr = np.arange(corr[0], corr[0] + nk)
    corr[0] += nk
    lts = (t[:, None, None, None] + launch).ravel()
    host = b.add(nk, req=r4, stage="execution", category="cuda_runtime", name="cudaLaunchKernel",
                 ts=lts, dur=launch_us, tid=tid[r4], parent=ann[r4], corr=cr)  # fmt: skip
    core4 = np.broadcast_to(np.arange(C)[None, None, None, :], shape4).ravel()
    stream = 20 + lane[r4] * C + core4
    dims_mm = np.char.add(
        np.char.add(np.char.add("[[", k["rows"].astype(np.int64).astype(str)), ","),
        k["k"].astype(np.int64).astype(str),
    )
    dims = np.where(
        k["mm"],
        np.char.add(np.char.add(np.char.add(dims_mm, "],["), k["k"].astype(np.int64).astype(str)),
                    np.char.add(np.char.add(",", k["n"].astype(np.int64).astype(str)), "]]")),
        np.char.add(dims_mm, "]]"),
    )  # fmt: skip
    b.add(nk, req=r4, stage="execution", category="kernel",
          name=k["kernel"].ravel(), ts=(t[:, None, None, None] + kstart).ravel(), dur=kdur.ravel(),
          pid=DEVICE_PID, tid=stream, stream=stream, core=core4, corr=cr, parent=host,
          shape=dims.ravel(), flops=k["flops"].ravel(), bytes=k["bytes"].ravel(),
          kernel=k["kernel"].ravel(), fallback=k["fallback"].ravel(),
          predicted=k["predicted"].ravel())  # fmt: skip
    last_launch = layer_start + NOPS * C * launch_us
    nl = n * L
    rl = np.repeat(req, L)
    b.add(nl, req=rl, stage="execution", category="cuda_runtime", name="cudaStreamSynchronize",
          ts=(t[:, None] + last_launch).ravel(), dur=(layer_end - last_launch).ravel(),
          tid=tid[rl], parent=ann[rl])  # fmt: skip
    t = t + exec_us
    copy("Memcpy DtoH (Device -> Pageable)", "assembly", t, d2h, d2h_bytes)
    t = t + d2h
    b.add(n, req=req, stage="assembly", category="cpu_op", name="postprocess", ts=t, dur=post,
          tid=tid, parent=ann)  # fmt: skip
    events = b.concat()
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
