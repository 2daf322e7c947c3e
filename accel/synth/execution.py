"""Timing of the execution stage: every (batch, layer, op, core) kernel of accel.synth's model."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from accel.ops import F64
from accel.profiles import HardwareProfile
from accel.synth.columns import quantize_us
from accel.synth.world import FUSION, GENERIC_TILE, LAYER_OPS, TILES, US, Plan, Reality, Workload


@dataclass(frozen=True)
class Execution:
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


def execute(
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
) -> Execution:
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
    L, n_ops = workload.layers, len(LAYER_OPS)
    kind_mm = np.array([o[1] == "mm" for o in LAYER_OPS])
    k_in = np.array([o[2] * h for o in LAYER_OPS], dtype=np.float64)
    n_out = np.array([o[3] * h for o in LAYER_OPS], dtype=np.float64)
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

    groups = FUSION[plan.fusion]
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
    cand = np.asarray(TILES, dtype=np.float64)
    pad = np.stack(
        [np.ceil(r / tm) * tm * np.ceil(N / tn) * tn / (r * N) for tm, tn in cand], axis=0
    )
    best = np.argmin(pad + 0.02 * np.arange(len(TILES))[:, None, None, None, None], axis=0)
    tile_m = np.where(fb, GENERIC_TILE[0], cand[best, 0])
    tile_n = np.where(fb, GENERIC_TILE[1], cand[best, 1])
    tiles = np.ceil(r / tile_m) * np.ceil(N / tile_n)
    waves = np.ceil(tiles / sms)
    q_eff = np.where(mm, r * N / (waves * sms * tile_m * tile_n), 1.0)
    kern_eff = np.where(fb, plan.fallback_efficiency, 1.0)
    bias_v = np.array([bias[o[0]] for o in LAYER_OPS])[None, None, :, None]
    bias_v = np.where(fb, bias["generic"], bias_v)
    c_us = np.where(mm, flops / (eff_peak * q_eff * kern_eff), flops / eff_vec) * US
    m_us = (hbm_bytes / eff_bw + inter / sram_bw) * US
    busy = c_us + m_us - reality.overlap * np.minimum(c_us, m_us)
    # Spill round trips stall the pipeline: they do not overlap with compute.
    busy = busy + spill * reality.spill_penalty / eff_bw * US
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
    predicted = (np.maximum(c_est, m_est) * US + hw.launch_overhead_us) * est_err
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

    return Execution(
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


def pad_at(pad: np.ndarray, best: np.ndarray) -> np.ndarray:
    """The padding factor of the chosen tile candidate per op."""
    return np.asarray(np.take_along_axis(pad, best[None, ...], axis=0)[0])
