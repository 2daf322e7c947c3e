"""Synthetic serving workloads on a hardware profile, with injected faults and their ground truth.

A run is a stream of requests (Poisson arrivals) that a dynamic batcher groups (what is ready
when the device frees up, up to a cap, optionally held open) for one device. Every batch goes
through lowering (compile-cache lookup, compiles on unseen shapes), scheduling (placement, H2D
copy), execution (per layer, matmul / elementwise ops sharded over `cores` abstract cores,
fused into groups, then a barrier) and assembly (D2H copy, post-processing); the queue follows
the Lindley recursion in closed form. Batch ops are repeated for every request of the batch,
so a request's events account for its stages; all times sit on a 2**-10 us grid, so that the
stage times plus `other` sum to the latency exactly.

The generator's "reality" is deliberately mis-calibrated against accel.cost (other efficiencies,
launch cost, overlap, spill penalty, per-op noise and per-kernel bias), so that the localizer is
never graded by its own model. Nothing in the outputs names the injected fault: the ground truth
travels separately in `Truth`.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, field
from typing import Final

import numpy as np

from accel.faults import FAULTS, TRUTH_TABLE, Truth, inject
from accel.ops import F64, OpArrays, RequestArrays, RunArrays
from accel.profiles import HardwareProfile
from accel.stages import MEM_TIER_CODE, STAGE_CODE, STAGES
from accel.synth_columns import (
    Column,
    codes,
    compile_columns,
    event_columns,
    quantize_us,
    with_warmup_events,
)

__all__ = [
    "FAULTS",
    "TRUTH_TABLE",
    "Column",
    "Pair",
    "Plan",
    "Reality",
    "SynthRun",
    "Truth",
    "Workload",
    "draw_reality",
    "generate_pair",
    "generate_run",
    "inject",
]


# Logical ops of one transformer-ish layer: (name, kind, K (mm) or input width (ew), N) in units
# of `hidden`.
_LAYER_OPS: Final[tuple[tuple[str, str, int, int], ...]] = (
    ("qkv", "mm", 1, 3),
    ("attn", "ew", 3, 1),
    ("up", "mm", 1, 4),
    ("act", "ew", 4, 4),
    ("down", "mm", 4, 1),
)
# Fusion plans: groups of op positions within a layer.
_FUSION: Final[dict[str, tuple[tuple[int, ...], ...]]] = {
    "none": ((0,), (1,), (2,), (3,), (4,)),
    "epilogue": ((0,), (1,), (2, 3), (4,)),
    "aggressive": ((0, 1, 2, 3, 4),),
}
_TILES: Final[tuple[tuple[int, int], ...]] = ((64, 64), (128, 128), (128, 256), (256, 128))
_GENERIC_TILE: Final[tuple[int, int]] = (32, 32)
_US: Final[float] = 1e6


@dataclass(frozen=True)
class Workload:
    """The traffic and the model served: what the request stream looks like."""

    n_requests: int = 600
    layers: int = 2
    hidden: int = 2048
    cores: int = 4  # abstract cores a layer's ops are sharded over
    seq_buckets: tuple[int, ...] = (64, 128, 256, 512, 1024)
    seq_probs: tuple[float, ...] = (0.35, 0.3, 0.2, 0.1, 0.05)
    drift_share: float = 0.0  # share of requests whose length is not a compiled bucket
    utilization: float = 0.25  # offered load of the fault-free service at the base batch size
    vocab: int = 32000


@dataclass(frozen=True)
class Plan:
    """The serving stack's decisions and runtime behaviour; faults change these."""

    max_batch: int = 4
    batch_wait_scale: float = 0.0  # batcher holds a batch open this long (x median service)
    fusion: str = "epilogue"
    fusion_buffering: float = 1.0  # on-chip buffers per intermediate a fused template keeps
    unseen_shapes: str = "fallback"  # "fallback" (generic kernel) or "recompile"
    recompile_churn: float = 0.0  # chance that a later batch of an unseen shape recompiles
    compile_scale: float = 6.0  # compile time in units of the median batch service
    fallback_efficiency: float = 0.35  # generic kernel's share of the tuned kernel's rate
    placement_skew: float = 0.0  # extra row share given to core 0 (0: balanced)
    placement_collision_share: float = 0.0  # share of batches whose shard 1 lands on core 0
    barrier_stall_share: float = 0.0  # share of barriers that stall
    barrier_stall_scale: float = 0.0  # stall length in units of the mean layer time
    post_share: float = 0.0  # share of batches with an extra post-processing pass
    post_scale: float = 0.0  # its length in units of the median batch service
    d2h_slowdown: float = 0.0  # extra D2H time in units of the median batch service


@dataclass(frozen=True)
class Reality:
    """How the simulated hardware really behaves, unknown to the model (mis-calibration)."""

    compute_eff: float
    vector_eff: float
    bw_eff: float
    launch_scale: float
    overlap: float
    spill_penalty: float
    onchip_share: float
    host_scale: float
    op_noise: float
    bias_seed: int


def draw_reality(rng: np.random.Generator) -> Reality:
    """A random mis-calibration of the hardware against accel.cost's defaults."""
    return Reality(
        compute_eff=float(rng.uniform(0.5, 0.7)),
        vector_eff=float(rng.uniform(0.4, 0.7)),
        bw_eff=float(rng.uniform(0.6, 0.85)),
        launch_scale=float(rng.uniform(1.3, 2.5)),
        overlap=float(rng.uniform(0.5, 0.8)),
        spill_penalty=float(rng.uniform(3.0, 5.0)),
        onchip_share=float(rng.uniform(0.25, 0.45)),
        host_scale=float(rng.uniform(0.8, 1.3)),
        op_noise=float(rng.uniform(0.04, 0.08)),
        bias_seed=int(rng.integers(0, 2**31)),
    )


@dataclass(frozen=True)
class SynthRun:
    """One generated run: the model's input, the store's columns and the injected truth."""

    arrays: RunArrays
    run: dict[str, object]
    events: dict[str, Column]
    requests: dict[str, Column]
    compiles: dict[str, Column]
    truth: Truth
    mean_gap_us: float


@dataclass(frozen=True)
class Pair:
    failing: SynthRun
    comparator: SynthRun
    truth: Truth


DEFAULT_META: Final[dict[str, str]] = {
    "model": "llama-style-2L",
    "workload": "chat-serving",
    "compiler": "xla-like",
    "compiler_version": "1.0",
    "runtime": "serve-rt",
    "runtime_version": "3.2",
    "driver_version": "550.54",
    "thermal_state": "nominal",
    "host": "canary-01",
}


def _bias(names: list[str], reality: Reality, sigma: float = 0.08) -> dict[str, float]:
    """A fixed per-kernel-name efficiency bias of this reality (same for every run on it)."""
    out = {}
    for name in names:
        h = hashlib.sha256(f"{reality.bias_seed}:{name}".encode()).digest()
        u = (int.from_bytes(h[:8], "big") + 0.5) / 2.0**64
        z = math.sqrt(2.0) * _erfinv(2.0 * u - 1.0)
        out[name] = math.exp(sigma * z)
    return out


def _erfinv(y: float) -> float:
    """Inverse error function by Newton steps on math.erf (enough for a noise draw)."""
    x = 0.0
    for _ in range(60):
        err = math.erf(x) - y
        x -= err / (2.0 / math.sqrt(math.pi) * math.exp(-x * x))
        if abs(err) < 1e-13:
            break
    return x


def shape_key(batch: int, seq: int) -> str:
    """The request shape key: padded batch rows and tokens per request."""
    return f"[{batch},{seq}]"


def compiled_shape_keys(workload: Workload, max_batch: int = 16) -> frozenset[str]:
    """Shapes compiled ahead of serving (warm-up): every batch size up to 16 x seq bucket."""
    return frozenset(shape_key(b, s) for b in range(1, max_batch + 1) for s in workload.seq_buckets)


@dataclass
class _Ops:
    """Growing SoA of batch-level ops (before replication to requests)."""

    cols: dict[str, list[np.ndarray]] = field(default_factory=dict)

    def add(self, **cols: np.ndarray) -> None:
        n = len(next(iter(cols.values())))
        for k, v in cols.items():
            arr = np.asarray(v)
            if arr.shape[0] != n:
                raise ValueError(f"column {k} has {arr.shape[0]} rows, expected {n}")
            self.cols.setdefault(k, []).append(arr)

    def concat(self) -> dict[str, np.ndarray]:
        return {k: np.concatenate(v) for k, v in self.cols.items()}


def _full(n: int, value: object) -> np.ndarray:
    return np.full(n, value)


@dataclass(frozen=True)
class _Exec:
    """Execution ops of every batch over (batch, layer, op, core), and per-batch totals."""

    r: np.ndarray
    K: np.ndarray
    N: np.ndarray
    mm: np.ndarray
    fb: np.ndarray
    fused: np.ndarray
    first: np.ndarray
    last: np.ndarray
    gkey: np.ndarray
    n_groups: int
    flops: np.ndarray
    op_bytes: np.ndarray
    tile_m: np.ndarray
    tile_n: np.ndarray
    predicted: np.ndarray
    t_exec: np.ndarray
    barrier: np.ndarray
    layer_max: np.ndarray
    layer_mean: np.ndarray
    sync: np.ndarray
    exec_b: F64
    core_of: np.ndarray
    shard_base: np.ndarray


def _execute(
    hw: HardwareProfile,
    workload: Workload,
    plan: Plan,
    reality: Reality,
    rows: F64,
    fallback_b: np.ndarray,
    unseen: np.ndarray,
    bias: dict[str, float],
    rng: np.random.Generator | None,
    collide: np.ndarray | None = None,
) -> _Exec:
    """Time the execution stage of batches with `rows` tokens; rng None: noise-free nominal."""
    nb = rows.size
    C = workload.cores
    h = workload.hidden
    eff_peak = hw.peak_dense_bf16_flops * reality.compute_eff / C
    eff_vec = hw.vector_flops * reality.vector_eff / C
    eff_bw = hw.hbm_bw * reality.bw_eff / C
    sram_bw = hw.sram_bw * reality.bw_eff / C
    launch = hw.launch_overhead_us * reality.launch_scale
    onchip = (hw.sram_per_core_bytes * hw.core_count + hw.l2_bytes) * reality.onchip_share / C
    sms = max(1, hw.core_count // C)
    # --- execution: arrays over (batch, layer, op, core) --------------------------------------
    L, n_ops = workload.layers, len(_LAYER_OPS)
    kind_mm = np.array([o[1] == "mm" for o in _LAYER_OPS])
    k_in = np.array([o[2] * h for o in _LAYER_OPS], dtype=np.float64)
    n_out = np.array([o[3] * h for o in _LAYER_OPS], dtype=np.float64)
    share = np.full(C, 1.0 / C)
    if plan.placement_skew > 0:
        share[0] = (1.0 + plan.placement_skew) / C
        share[1:] = (1.0 - share[0]) / (C - 1)
    shape4 = (nb, L, n_ops, C)
    r = np.broadcast_to(np.round(rows[:, None, None, None] * share[None, None, None, :]), shape4)
    r = np.maximum(r, 1.0)
    K = np.broadcast_to(k_in[None, None, :, None], shape4)
    N = np.broadcast_to(n_out[None, None, :, None], shape4)
    mm = np.broadcast_to(kind_mm[None, None, :, None], shape4)
    fb = np.broadcast_to(fallback_b[:, None, None, None], shape4) & mm

    groups = _FUSION[plan.fusion]
    pos_group = np.zeros(n_ops, dtype=np.int64)
    first_in = np.zeros(n_ops, dtype=bool)
    last_in = np.zeros(n_ops, dtype=bool)
    for gi, g in enumerate(groups):
        pos_group[list(g)] = gi
        first_in[g[0]] = True
        last_in[g[-1]] = True
    group_size = np.array([len(groups[pos_group[o]]) for o in range(n_ops)])
    # Batches on the fallback path are not fused (the generic path has no fusion templates).
    fused4 = np.broadcast_to(group_size[None, None, :, None] > 1, shape4) & ~np.broadcast_to(
        fallback_b[:, None, None, None], shape4
    )
    first4 = np.where(fused4, first_in[None, None, :, None], True)
    last4 = np.where(fused4, last_in[None, None, :, None], True)

    flops = np.where(mm, 2.0 * r * K * N, 8.0 * r * K)
    weights = np.where(mm, K * N * 2.0, 0.0)
    in_b = np.where(first4, r * K * 2.0, 0.0)
    out_b = np.where(last4, r * N * 2.0, 0.0)
    inter = np.where(~last4, r * N * 2.0, 0.0)  # kept on chip inside a fused group
    hbm_bytes = weights + in_b + out_b
    # Working set per (batch, layer, group, core): intermediates of the group's ops.
    gkey = np.broadcast_to(pos_group[None, None, :, None], shape4)
    ws = np.zeros((nb, L, len(groups), C))
    np.add.at(
        ws,
        (
            np.arange(nb)[:, None, None, None],
            np.arange(L)[None, :, None, None],
            gkey,
            np.arange(C)[None, None, None, :],
        ),
        inter,
    )
    excess = np.maximum(ws * plan.fusion_buffering - onchip, 0.0) * 2.0
    spill = np.where(
        last4 & fused4,
        np.take_along_axis(excess, np.broadcast_to(gkey, shape4).astype(np.int64), axis=2),
        0.0,
    )

    # What a profiler's counters report per op: its traffic, spill round trips included.
    op_bytes = hbm_bytes + inter + spill
    # Tile choice: the compiler minimises its own estimate (tile padding only, no waves).
    cand = np.asarray(_TILES, dtype=np.float64)
    pad = np.stack(
        [np.ceil(r / tm) * tm * np.ceil(N / tn) * tn / (r * N) for tm, tn in cand], axis=0
    )
    best = np.argmin(pad + 0.02 * np.arange(len(_TILES))[:, None, None, None, None], axis=0)
    tile_m = np.where(fb, _GENERIC_TILE[0], cand[best, 0])
    tile_n = np.where(fb, _GENERIC_TILE[1], cand[best, 1])
    tiles = np.ceil(r / tile_m) * np.ceil(N / tile_n)
    waves = np.ceil(tiles / sms)
    q_eff = np.where(mm, r * N / (waves * sms * tile_m * tile_n), 1.0)
    kern_eff = np.where(fb, plan.fallback_efficiency, 1.0)
    bias_v = np.array([bias[o[0]] for o in _LAYER_OPS])[None, None, :, None]
    bias_v = np.where(fb, bias["generic"], bias_v)
    c_us = np.where(mm, flops / (eff_peak * q_eff * kern_eff), flops / eff_vec) * _US
    m_us = (hbm_bytes / eff_bw + inter / sram_bw) * _US
    busy = c_us + m_us - reality.overlap * np.minimum(c_us, m_us)
    # Spill round trips stall the pipeline: they do not overlap with compute.
    busy = busy + spill * reality.spill_penalty / eff_bw * _US
    noise = rng.lognormal(0.0, reality.op_noise, shape4) if rng is not None else 1.0
    t_exec = busy * bias_v * noise + np.where(first4, launch, 0.0)
    # The compiler's own estimate: nominal peak, no waves, no spill; worse on unseen shapes.
    est_err = (
        np.where(
            np.broadcast_to(unseen[:, None, None, None], shape4),
            rng.lognormal(0.0, 0.35, shape4),
            rng.lognormal(0.0, 0.12, shape4),
        )
        if rng is not None
        else 1.0
    )
    c_est = np.where(
        mm,
        flops * pad_at(pad, best) / (hw.peak_dense_bf16_flops / C),
        flops / (hw.vector_flops / C),
    )
    m_est = hbm_bytes / (hw.hbm_bw / C)
    predicted = (np.maximum(c_est, m_est) * _US + hw.launch_overhead_us) * est_err
    predicted = np.where(fb, np.nan, predicted)

    # Placement: shard c runs on core core_of[b, c]; a collision stacks shard 1 onto core 0.
    core_of = np.broadcast_to(np.arange(C), (nb, C)).copy()
    if collide is not None:
        core_of[collide, 1] = 0
    shard_busy = t_exec.sum(axis=2)  # (nb, L, C) by shard
    same = core_of[:, :, None] == core_of[:, None, :]  # (nb, shard, shard)
    core_busy = np.einsum("blc,bck->blk", shard_busy, (core_of[:, :, None] == np.arange(C)))
    earlier = same & (np.arange(C)[:, None] < np.arange(C)[None, :])[None, :, :]
    shard_base = np.einsum("blc,bcd->bld", shard_busy, earlier)  # busy queued before a shard
    layer_max = core_busy.max(axis=2)
    layer_mean = core_busy.mean(axis=2)
    sync = (
        2.0 * launch * (rng.lognormal(0.0, 0.2, (nb, L)) if rng is not None else np.ones((nb, L)))
    )
    mean_layer = float(np.median(layer_max))
    if plan.barrier_stall_share > 0 and rng is not None:
        stall = rng.random((nb, L)) < plan.barrier_stall_share
        sync = sync + np.where(
            stall,
            plan.barrier_stall_scale * mean_layer * rng.lognormal(0.0, 0.3, (nb, L)),
            0.0,
        )
    t_exec = quantize_us(t_exec)
    barrier = quantize_us(layer_max - layer_mean + sync)
    exec_b = quantize_us(t_exec.sum(axis=(2, 3)).sum(axis=1) / C + barrier.sum(axis=1))

    return _Exec(
        r=r,
        K=K,
        N=N,
        mm=mm,
        fb=fb,
        fused=fused4,
        first=first4,
        last=last4,
        gkey=gkey,
        n_groups=len(groups),
        flops=flops,
        op_bytes=op_bytes,
        tile_m=tile_m,
        tile_n=tile_n,
        predicted=predicted,
        t_exec=t_exec,
        barrier=barrier,
        layer_max=layer_max,
        layer_mean=layer_mean,
        sync=sync,
        exec_b=exec_b,
        core_of=core_of,
        shard_base=shard_base,
    )


def _starts(sizes: np.ndarray) -> np.ndarray:
    return np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)


def _host_nominal(
    bsize: np.ndarray,
    rows: F64,
    workload: Workload,
    plan: Plan,
    bias: dict[str, float],
    hs: float,
    host_bw: float,
) -> F64:
    """Noise-free time of a batch's host-side ops (lookup, placement, copies, post-processing)."""
    h2d = rows * 1024.0 / host_bw * _US + 5.0
    d2h = (bsize * workload.vocab * 16.0 + rows * 16.0) / host_bw * _US + 5.0
    return np.asarray(
        12.0 * hs * bias["lookup"]
        + 8.0 * hs * bias["place"] * (1 + 0.1 * workload.cores)
        + h2d
        + d2h
        + 40.0 * hs * bias["post"] * bsize,
        dtype=np.float64,
    )


def _form_batches(
    ready: F64, seq_idx: np.ndarray, svc_grid: F64, max_batch: int, wait_us: float
) -> np.ndarray:
    """Dynamic batching: when the server frees up, take what is ready (up to max_batch).

    With wait_us > 0 the batcher holds a batch open until it is full or its first request has
    waited wait_us. The server's busy time follows the nominal service table; the real start
    times are recomputed afterwards from the real service (Lindley), so causality holds.
    """
    n = ready.size
    batch_of = np.empty(n, dtype=np.int64)
    free = -np.inf
    i = k = 0
    while i < n:
        dispatch = max(free, float(ready[i]))
        if wait_us > 0:
            full_at = float(ready[i + max_batch - 1]) if i + max_batch - 1 < n else np.inf
            dispatch = max(free, min(full_at, float(ready[i]) + wait_us))
        j = min(i + max_batch, int(np.searchsorted(ready, dispatch, side="right")))
        j = max(j, i + 1)
        batch_of[i:j] = k
        free = dispatch + float(svc_grid[j - i - 1, int(seq_idx[i:j].max())])
        i, k = j, k + 1
    return batch_of


def generate_run(
    hw: HardwareProfile,
    workload: Workload,
    plan: Plan,
    reality: Reality,
    *,
    seed: int,
    run_id: str,
    mean_gap_us: float | None = None,
    truth: Truth | None = None,
    meta: dict[str, str] | None = None,
    tables: bool = True,
) -> SynthRun:
    """Generate one run. `mean_gap_us` (inter-arrival) defaults to the load of `workload`."""
    rng = np.random.default_rng(seed)
    nr = workload.n_requests
    C = workload.cores
    B = plan.max_batch
    buckets = np.asarray(workload.seq_buckets, dtype=np.int64)
    compiled = compiled_shape_keys(workload)
    bias = _bias(
        [f"{o[0]}" for o in _LAYER_OPS] + ["generic", "admit", "lookup", "place", "post"], reality
    )
    hs = reality.host_scale
    host_bw = hw.host_link_bw * reality.bw_eff

    # --- requests -------------------------------------------------------------------------------
    seq = buckets[rng.choice(buckets.size, size=nr, p=np.asarray(workload.seq_probs))]
    drifted = rng.random(nr) < workload.drift_share
    # Drifted lengths sit between buckets (3/4 of one): never larger than the stream they replace.
    seq = np.where(drifted, (seq * 3) // 4, seq)

    # Nominal (noise-free) service of every (batch size, length): the batcher's own estimate,
    # and the arrival rate (offered load at batch size 1).
    seq_vals = np.unique(seq)
    gb = np.repeat(np.arange(1, B + 1), seq_vals.size)
    gs = np.tile(seq_vals, B)
    g_unseen = np.array(
        [shape_key(int(x), int(y)) not in compiled for x, y in zip(gb, gs, strict=True)]
    )
    g_rows = (gb * gs).astype(np.float64)
    g_fb = g_unseen & (plan.unseen_shapes == "fallback")
    g_exec = _execute(hw, workload, plan, reality, g_rows, g_fb, g_unseen, bias, None).exec_b
    g_svc = g_exec + _host_nominal(gb, g_rows, workload, plan, bias, hs, host_bw)
    svc_grid = g_svc.reshape(B, seq_vals.size)
    seq_idx = np.searchsorted(seq_vals, seq)
    if mean_gap_us is None:
        mean_gap_us = float(np.mean(svc_grid[0, seq_idx])) / workload.utilization
    arrival = np.cumsum(rng.exponential(mean_gap_us, nr)) + 1000.0
    admit = quantize_us((20.0 * hs * bias["admit"] + 0.02 * seq) * rng.lognormal(0.0, 0.25, nr))
    # Requests are numbered in the order they reach the batcher (after admission).
    order = np.argsort(arrival + admit, kind="stable")
    seq, seq_idx, admit = seq[order], seq_idx[order], admit[order]
    arrival = quantize_us(arrival[order])
    ready = arrival + admit
    wait_us = plan.batch_wait_scale * float(np.median(svc_grid[0, seq_idx]))
    batch_of = _form_batches(ready, seq_idx, svc_grid, B, wait_us)

    # --- batches --------------------------------------------------------------------------------
    nb = int(batch_of[-1]) + 1
    bsize = np.bincount(batch_of, minlength=nb).astype(np.int64)
    seq_pad = np.zeros(nb, dtype=np.int64)
    np.maximum.at(seq_pad, batch_of, seq)
    keys = [shape_key(int(x), int(y)) for x, y in zip(bsize, seq_pad, strict=True)]
    unseen = np.array([k not in compiled for k in keys], dtype=bool)
    rows = (bsize * seq_pad).astype(np.float64)  # M of every execution op of the batch

    # First batch of each unseen key compiles (recompile policy); later ones may churn.
    first_seen = np.zeros(nb, dtype=bool)
    _, first_idx = np.unique(np.asarray(keys), return_index=True)
    first_seen[first_idx] = True
    compiles = np.zeros(nb, dtype=bool)
    fallback_b = np.zeros(nb, dtype=bool)
    if plan.unseen_shapes == "recompile":
        compiles = unseen & (first_seen | (rng.random(nb) < plan.recompile_churn))
    else:
        fallback_b = unseen

    collide = rng.random(nb) < plan.placement_collision_share
    ex = _execute(hw, workload, plan, reality, rows, fallback_b, unseen, bias, rng, collide)
    L, n_ops = workload.layers, len(_LAYER_OPS)
    shape4 = (nb, L, n_ops, C)
    t_exec, barrier, exec_b = ex.t_exec, ex.barrier, ex.exec_b
    layer_max, layer_mean, sync = ex.layer_max, ex.layer_mean, ex.sync
    fused4, first4, last4, fb, mm = ex.fused, ex.first, ex.last, ex.fb, ex.mm
    r, K, N, gkey, n_groups = ex.r, ex.K, ex.N, ex.gkey, ex.n_groups
    flops, op_bytes, tile_m, tile_n, predicted = (
        ex.flops,
        ex.op_bytes,
        ex.tile_m,
        ex.tile_n,
        ex.predicted,
    )
    names_b = np.array([o[0] for o in _LAYER_OPS])

    # --- host-side ops ------------------------------------------------------------------------
    lookup = quantize_us(12.0 * hs * bias["lookup"] * rng.lognormal(0.0, 0.15, nb))
    place = quantize_us(8.0 * hs * bias["place"] * (1 + 0.1 * C) * rng.lognormal(0.0, 0.15, nb))
    h2d_bytes = rows * 1024.0
    h2d = quantize_us((h2d_bytes / host_bw * _US + 5.0) * rng.lognormal(0.0, 0.05, nb))
    d2h_bytes = bsize * workload.vocab * 2.0 * 8.0 + rows * 16.0
    med_svc = float(np.median(svc_grid[0, seq_idx]))  # nominal service of a median request
    d2h = d2h_bytes / host_bw * _US + 5.0
    d2h = d2h + plan.d2h_slowdown * med_svc * d2h_bytes / float(np.median(d2h_bytes))
    d2h = quantize_us(d2h * rng.lognormal(0.0, 0.05, nb))
    post = 40.0 * hs * bias["post"] * bsize * rng.lognormal(0.0, 0.2, nb)
    if plan.post_share > 0:
        extra = plan.post_scale * med_svc * rng.lognormal(0.0, 0.3, nb)
        post = np.where(rng.random(nb) < plan.post_share, post + extra, post)
    post = quantize_us(post)
    base_service = lookup + place + h2d + exec_b + d2h + post
    compile_us = quantize_us(
        plan.compile_scale * float(np.median(base_service)) * rng.lognormal(0.0, 0.3, nb)
    )
    compile_us = np.where(compiles, compile_us, 0.0)

    low_b = lookup + compile_us
    sch_b = place + h2d
    asm_b = d2h + post
    service = low_b + sch_b + exec_b + asm_b

    # --- arrivals and the queue ---------------------------------------------------------------
    ready_b = np.zeros(nb)
    np.maximum.at(ready_b, batch_of, ready)
    if wait_us > 0:  # a batch that did not fill was held open for wait_us
        held = np.minimum.reduceat(ready, _starts(bsize)) + wait_us
        ready_b = np.where(bsize < B, np.maximum(ready_b, held), ready_b)
    csum = np.concatenate(([0.0], np.cumsum(service)[:-1]))
    start_b = quantize_us(csum + np.maximum.accumulate(ready_b - csum))
    other = quantize_us(rng.uniform(3.0, 12.0, nr) * hs)

    stage = np.zeros((nr, 6))
    stage[:, 0] = start_b[batch_of] - arrival
    stage[:, 1] = low_b[batch_of]
    stage[:, 2] = sch_b[batch_of]
    stage[:, 3] = exec_b[batch_of]
    stage[:, 4] = asm_b[batch_of]
    stage[:, 5] = other
    latency = stage.sum(axis=1)
    start_req = start_b[batch_of]

    # --- batch-level op table (time order within a batch) -------------------------------------
    ops = _Ops()
    bidx = np.arange(nb)
    t0 = start_b.copy()
    # lowering: compile (when it happens) then the cache lookup
    cb = np.flatnonzero(compiles)
    _host_op(ops, cb, "lowering", "compile", "compile", t0[cb], compile_us[cb], recompile=True)
    t0 = t0 + compile_us
    _host_op(ops, bidx, "lowering", "cpu_op", "compile_cache.lookup", t0, lookup)
    t0 = t0 + lookup
    _host_op(ops, bidx, "scheduling", "cpu_op", "placement", t0, place)
    t0 = t0 + place
    _host_op(
        ops, bidx, "scheduling", "gpu_memcpy", "h2d_copy", t0, h2d, nbytes=h2d_bytes, tier="host"
    )
    t0 = t0 + h2d
    # execution ops: layer start times, then per-core offsets within the layer
    layer_len = layer_max + sync  # equals mean + barrier duration
    layer_start = t0[:, None] + np.concatenate(
        (np.zeros((nb, 1)), np.cumsum(layer_len, axis=1)[:, :-1]), axis=1
    )
    off = np.cumsum(t_exec, axis=2) - t_exec + ex.shard_base[:, :, None, :]
    ts4 = layer_start[:, :, None, None] + off
    lidx = np.broadcast_to(np.arange(L)[None, :, None, None], shape4)
    oidx = np.broadcast_to(np.arange(n_ops)[None, None, :, None], shape4)
    cidx = np.broadcast_to(ex.core_of[:, None, None, :], shape4)
    b4 = np.broadcast_to(bidx[:, None, None, None], shape4)
    # fusion group ids unique per (batch, layer, group); -1 when unfused
    fg = np.where(fused4, (b4 * L + lidx) * n_groups + gkey, -1)
    opname = np.char.add(np.char.add("L", lidx.astype(str)), np.char.add(".", names_b[oidx]))
    tier = np.where(fused4 & ~first4 & ~last4, "sram", "hbm")
    kernel = _kernel_names(names_b[oidx], fused4, fb, tile_m, tile_n, plan.fusion, mm)
    shape_txt = _shape_text(r, K, N, mm)
    ops.add(
        batch=b4.ravel(),
        stage=_full(b4.size, "execution"),
        category=_full(b4.size, "kernel"),
        name=opname.ravel(),
        ts=ts4.ravel(),
        dur=t_exec.ravel(),
        core=cidx.ravel(),
        flops=flops.ravel(),
        nbytes=op_bytes.ravel(),
        m=r.ravel(),
        n=np.where(mm, N, K).ravel(),  # the width the trace shape shows
        tile_m=np.where(mm, tile_m, np.nan).ravel(),
        tile_n=np.where(mm, tile_n, np.nan).ravel(),
        fusion_group=fg.ravel(),
        tier=tier.ravel(),
        kernel=kernel.ravel(),
        shape=shape_txt.ravel(),
        predicted=predicted.ravel(),
        fallback=fb.ravel(),
        recompile=np.zeros(b4.size, dtype=bool),
    )
    bar_b = np.broadcast_to(bidx[:, None], (nb, L))
    bar_l = np.broadcast_to(np.arange(L)[None, :], (nb, L))
    nbar = nb * L
    ops.add(
        batch=bar_b.ravel(),
        stage=_full(nbar, "execution"),
        category=_full(nbar, "sync"),
        name=np.char.add(np.char.add("L", bar_l.astype(str)), ".barrier").ravel(),
        ts=(layer_start + layer_mean).ravel(),
        dur=barrier.ravel(),
        core=_full(nbar, -1),
        flops=_full(nbar, np.nan),
        nbytes=_full(nbar, np.nan),
        m=_full(nbar, np.nan),
        n=_full(nbar, np.nan),
        tile_m=_full(nbar, np.nan),
        tile_n=_full(nbar, np.nan),
        fusion_group=_full(nbar, -1),
        tier=_full(nbar, ""),
        kernel=_full(nbar, "barrier"),
        shape=_full(nbar, ""),
        predicted=_full(nbar, np.nan),
        fallback=np.zeros(nbar, dtype=bool),
        recompile=np.zeros(nbar, dtype=bool),
    )
    t0 = t0 + exec_b
    _host_op(
        ops, bidx, "assembly", "gpu_memcpy", "d2h_copy", t0, d2h, nbytes=d2h_bytes, tier="host"
    )
    t0 = t0 + d2h
    _host_op(ops, bidx, "assembly", "cpu_op", "postprocess", t0, post)
    bops = ops.concat()

    # --- replicate batch ops to every member request, then add per-request admission ---------
    first_member = np.concatenate(([0], np.cumsum(bsize)[:-1]))
    reps = bsize[bops["batch"]]
    src = np.repeat(np.arange(bops["batch"].size), reps)
    within = np.arange(src.size) - np.repeat(np.cumsum(reps) - reps, reps)
    req_of = first_member[bops["batch"][src]] + within
    allops = {k: v[src] for k, v in bops.items()}
    allops["req"] = req_of
    adm = {
        "batch": batch_of,
        "stage": _full(nr, "ingress"),
        "category": _full(nr, "cpu_op"),
        "name": _full(nr, "serving.admit"),
        "ts": arrival,
        "dur": admit,
        "core": _full(nr, -1),
        "flops": _full(nr, np.nan),
        "nbytes": seq * 4.0,
        "m": _full(nr, np.nan),
        "n": _full(nr, np.nan),
        "tile_m": _full(nr, np.nan),
        "tile_n": _full(nr, np.nan),
        "fusion_group": _full(nr, -1),
        "tier": _full(nr, "host"),
        "kernel": _full(nr, ""),
        "shape": np.array([f"[[{int(s)}]]" for s in seq]),
        "predicted": _full(nr, np.nan),
        "fallback": np.zeros(nr, dtype=bool),
        "recompile": np.zeros(nr, dtype=bool),
        "req": np.arange(nr),
    }
    for k in allops:
        allops[k] = np.concatenate((adm[k], allops[k]))
    order = np.lexsort((allops["core"], allops["ts"], allops["req"]))
    allops = {k: v[order] for k, v in allops.items()}

    req_ids = [f"r{i:06d}" for i in range(nr)]
    req_keys = [keys[b] for b in batch_of]
    arrays = _run_arrays(
        run_id,
        allops,
        req_ids,
        req_keys,
        arrival,
        start_req,
        latency,
        stage,
        bsize[batch_of],
        batch_of,
        compiled,
    )
    events = (
        event_columns(allops, req_ids, {int(b): f"0/{i + 1}" for i, b in enumerate(cb)})
        if tables
        else {}
    )
    sla = 4.0 * float(np.median(base_service)) + 2.0 * mean_gap_us * B
    quality = np.clip(rng.normal(0.97, 0.01, nr), 0.0, 1.0)
    requests: dict[str, Column] = {
        "request_id": req_ids,
        "name": ["generate"] * nr,
        "arrival_us": arrival,
        "start_us": start_req,
        "end_us": arrival + latency,
        "latency_us": latency,
        "batch_id": batch_of.astype(np.int64),
        "batch_size": bsize[batch_of].astype(np.int32),
        "shape_key": req_keys,
        **{f"{s}_us": stage[:, i].copy() for i, s in enumerate(STAGES)},
        "other_us": stage[:, 5].copy(),
        "sla_us": np.full(nr, sla),
        "quality": quality,
        "ok": (latency <= sla) & (quality >= 0.9),
    }
    comp_tab = (
        compile_columns(
            cb,
            start_b,
            compile_us,
            keys,
            first_seen,
            compiled,
            4 * workload.layers * len(_LAYER_OPS),
            rng,
        )
        if tables
        else {}
    )
    if tables:
        events = with_warmup_events(events, comp_tab)
    info = dict(DEFAULT_META)
    info.update(meta or {})
    truth = truth or Truth("none", None, None, "none")
    params = {
        "hw": hw.name,
        "workload": asdict(workload),
        "plan": asdict(plan),
        "reality": asdict(reality),
        "seed": seed,
        "mean_gap_us": mean_gap_us,
    }
    digest = hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()
    run: dict[str, object] = {
        "run_id": run_id,
        "label": run_id,
        "source_format": "synthetic",
        "source_file": f"accel.synth seed={seed}",
        "source_sha256": digest,
        "hardware": hw.name,
        "device_count": 1,
        "rank": 0,
        "world_size": 1,
        **info,
    }
    return SynthRun(arrays, run, events, requests, comp_tab, truth, mean_gap_us)


def pad_at(pad: np.ndarray, best: np.ndarray) -> np.ndarray:
    """The padding factor of the chosen tile candidate per op."""
    return np.asarray(np.take_along_axis(pad, best[None, ...], axis=0)[0])


def _host_op(
    ops: _Ops,
    batches: np.ndarray,
    stage: str,
    category: str,
    name: str,
    ts: np.ndarray,
    dur: np.ndarray,
    *,
    nbytes: np.ndarray | None = None,
    tier: str = "host",
    recompile: bool = False,
) -> None:
    n = batches.size
    sel = dur if dur.shape[0] == n else dur[batches]
    ops.add(
        batch=batches,
        stage=_full(n, stage),
        category=_full(n, category),
        name=_full(n, name),
        ts=ts if ts.shape[0] == n else ts[batches],
        dur=sel,
        core=_full(n, -1),
        flops=_full(n, np.nan),
        nbytes=_full(n, np.nan) if nbytes is None else nbytes,
        m=_full(n, np.nan),
        n=_full(n, np.nan),
        tile_m=_full(n, np.nan),
        tile_n=_full(n, np.nan),
        fusion_group=_full(n, -1),
        tier=_full(n, tier),
        kernel=_full(n, ""),
        shape=_full(n, ""),
        predicted=_full(n, np.nan),
        fallback=np.zeros(n, dtype=bool),
        recompile=np.full(n, recompile),
    )


def _kernel_names(
    names: np.ndarray,
    fused: np.ndarray,
    fb: np.ndarray,
    tm: np.ndarray,
    tn: np.ndarray,
    fusion: str,
    mm: np.ndarray,
) -> np.ndarray:
    tiles = np.char.add(
        np.char.add(tm.astype(np.int64).astype(str), "x"), tn.astype(np.int64).astype(str)
    )
    plain = np.where(mm, np.char.add("gemm_bf16_", tiles), np.char.add("ew_", names))
    fused_name = np.char.add(f"fused_{fusion}_", names)
    out = np.where(fused, fused_name, plain)
    return np.where(fb, "gemm_generic_fallback", out)


def _shape_text(r: np.ndarray, K: np.ndarray, N: np.ndarray, mm: np.ndarray) -> np.ndarray:
    ri, ki, ni = (x.astype(np.int64).astype(str) for x in (r, K, N))
    a = np.char.add(np.char.add(np.char.add("[[", ri), ","), ki)
    mm_txt = np.char.add(np.char.add(np.char.add(np.char.add(a, "],["), ki), ","), ni)
    return np.where(mm, np.char.add(mm_txt, "]]"), np.char.add(a, "]]"))


def _run_arrays(
    run_id: str,
    o: dict[str, np.ndarray],
    req_ids: list[str],
    req_keys: list[str],
    arrival: F64,
    start: F64,
    latency: F64,
    stage: F64,
    bsize: np.ndarray,
    batch_of: np.ndarray,
    compiled: frozenset[str],
) -> RunArrays:
    tier = codes(o["tier"], dict(MEM_TIER_CODE))
    ops = OpArrays(
        req=o["req"].astype(np.int64),
        stage=codes(o["stage"], dict(STAGE_CODE)),
        observed_us=o["dur"].astype(np.float64),
        flops=o["flops"].astype(np.float64),
        bytes=o["nbytes"].astype(np.float64),
        m=o["m"].astype(np.float64),
        n=o["n"].astype(np.float64),
        tile_m=o["tile_m"].astype(np.float64),
        tile_n=o["tile_n"].astype(np.float64),
        fusion_group=o["fusion_group"].astype(np.int64),
        mem_tier=tier,
        core=o["core"].astype(np.int32),
        fallback=o["fallback"].astype(bool),
        recompile=o["recompile"].astype(bool),
        predicted_us=o["predicted"].astype(np.float64),
        kernel=[str(k) for k in o["kernel"]],
        name=[str(k) for k in o["name"]],
    )
    reqs = RequestArrays(
        request_id=req_ids,
        arrival_us=arrival,
        start_us=start,
        latency_us=latency,
        stage_us=stage,
        batch_size=bsize.astype(np.int32),
        shape_key=req_keys,
        batch_id=batch_of.astype(np.int64),
    )
    return RunArrays(run_id=run_id, ops=ops, requests=reqs, compiled_shapes=compiled)


def generate_pair(
    hw: HardwareProfile,
    fault: str,
    seed: int,
    *,
    workload: Workload | None = None,
    meta: dict[str, str] | None = None,
    tables: bool = True,
    severity: float = 1.0,
) -> Pair:
    """A comparator (fault-free) and a failing run with `fault` on the same hardware reality.

    The two runs draw independent traffic; arrivals share one rate, set by the comparator's load.
    With fault "none" this is an A/A pair.
    """
    rng = np.random.default_rng(seed)
    reality = draw_reality(rng)
    base_w = workload or Workload()
    base_p = Plan()
    plan, wl, truth = inject(fault, rng, base_p, base_w, severity)
    s_comp, s_fail = (int(x) for x in rng.integers(0, 2**31, 2))
    comp = generate_run(
        hw,
        base_w,
        base_p,
        reality,
        seed=s_comp,
        run_id="comparator",
        meta=meta,
        tables=tables,
        truth=Truth("none", None, None, "none"),
    )
    fail = generate_run(
        hw,
        wl,
        plan,
        reality,
        seed=s_fail,
        run_id="failing",
        mean_gap_us=comp.mean_gap_us,
        truth=truth,
        meta=meta,
        tables=tables,
    )
    return Pair(fail, comp, truth)
