"""One accel.synth run: requests, dynamic batching, the queue, every op, the store columns."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass

import numpy as np

from accel.ops import F64, RunArrays
from accel.profiles import HardwareProfile
from accel.stages import STAGES
from accel.synth.columns import (
    Column,
    compile_columns,
    event_columns,
    quantize_us,
    with_warmup_events,
)
from accel.synth.execution import execute
from accel.synth.faults import Truth
from accel.synth.optable import OpBlocks, full, host_op, kernel_names, run_arrays, shape_text
from accel.synth.world import (
    DEFAULT_META,
    LAYER_OPS,
    US,
    Plan,
    Reality,
    Workload,
    compiled_shape_keys,
    kernel_bias,
    shape_key,
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


def batch_starts(sizes: np.ndarray) -> np.ndarray:
    return np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)


def host_nominal(
    bsize: np.ndarray,
    rows: F64,
    workload: Workload,
    plan: Plan,
    bias: dict[str, float],
    hs: float,
    host_bw: float,
) -> F64:
    """Noise-free time of a batch's host-side ops (lookup, placement, copies, post-processing)."""
    h2d = rows * 1024.0 / host_bw * US + 5.0
    d2h = (bsize * workload.vocab * 16.0 + rows * 16.0) / host_bw * US + 5.0
    return np.asarray(
        12.0 * hs * bias["lookup"]
        + 8.0 * hs * bias["place"] * (1 + 0.1 * workload.cores)
        + h2d
        + d2h
        + 40.0 * hs * bias["post"] * bsize,
        dtype=np.float64,
    )


def form_batches(
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
    bias = kernel_bias(
        [f"{o[0]}" for o in LAYER_OPS] + ["generic", "admit", "lookup", "place", "post"], reality
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
    g_exec = execute(hw, workload, plan, reality, g_rows, g_fb, g_unseen, bias, None).exec_b
    g_svc = g_exec + host_nominal(gb, g_rows, workload, plan, bias, hs, host_bw)
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
    batch_of = form_batches(ready, seq_idx, svc_grid, B, wait_us)

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
    ex = execute(hw, workload, plan, reality, rows, fallback_b, unseen, bias, rng, collide)
    L, n_ops = workload.layers, len(LAYER_OPS)
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
    names_b = np.array([o[0] for o in LAYER_OPS])

    # --- host-side ops ------------------------------------------------------------------------
    lookup = quantize_us(12.0 * hs * bias["lookup"] * rng.lognormal(0.0, 0.15, nb))
    place = quantize_us(8.0 * hs * bias["place"] * (1 + 0.1 * C) * rng.lognormal(0.0, 0.15, nb))
    h2d_bytes = rows * 1024.0
    h2d = quantize_us((h2d_bytes / host_bw * US + 5.0) * rng.lognormal(0.0, 0.05, nb))
    d2h_bytes = bsize * workload.vocab * 2.0 * 8.0 + rows * 16.0
    med_svc = float(np.median(svc_grid[0, seq_idx]))  # nominal service of a median request
    d2h = d2h_bytes / host_bw * US + 5.0
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
        held = np.minimum.reduceat(ready, batch_starts(bsize)) + wait_us
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
    ops = OpBlocks()
    bidx = np.arange(nb)
    t0 = start_b.copy()
    # lowering: compile (when it happens) then the cache lookup
    cb = np.flatnonzero(compiles)
    host_op(ops, cb, "lowering", "compile", "compile", t0[cb], compile_us[cb], recompile=True)
    t0 = t0 + compile_us
    host_op(ops, bidx, "lowering", "cpu_op", "compile_cache.lookup", t0, lookup)
    t0 = t0 + lookup
    host_op(ops, bidx, "scheduling", "cpu_op", "placement", t0, place)
    t0 = t0 + place
    host_op(
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
    kernel = kernel_names(names_b[oidx], fused4, fb, tile_m, tile_n, plan.fusion, mm)
    shape_txt = shape_text(r, K, N, mm)
    ops.add(
        batch=b4.ravel(),
        stage=full(b4.size, "execution"),
        category=full(b4.size, "kernel"),
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
        stage=full(nbar, "execution"),
        category=full(nbar, "sync"),
        name=np.char.add(np.char.add("L", bar_l.astype(str)), ".barrier").ravel(),
        ts=(layer_start + layer_mean).ravel(),
        dur=barrier.ravel(),
        core=full(nbar, -1),
        flops=full(nbar, np.nan),
        nbytes=full(nbar, np.nan),
        m=full(nbar, np.nan),
        n=full(nbar, np.nan),
        tile_m=full(nbar, np.nan),
        tile_n=full(nbar, np.nan),
        fusion_group=full(nbar, -1),
        tier=full(nbar, ""),
        kernel=full(nbar, "barrier"),
        shape=full(nbar, ""),
        predicted=full(nbar, np.nan),
        fallback=np.zeros(nbar, dtype=bool),
        recompile=np.zeros(nbar, dtype=bool),
    )
    t0 = t0 + exec_b
    host_op(ops, bidx, "assembly", "gpu_memcpy", "d2h_copy", t0, d2h, nbytes=d2h_bytes, tier="host")
    t0 = t0 + d2h
    host_op(ops, bidx, "assembly", "cpu_op", "postprocess", t0, post)
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
        "stage": full(nr, "ingress"),
        "category": full(nr, "cpu_op"),
        "name": full(nr, "serving.admit"),
        "ts": arrival,
        "dur": admit,
        "core": full(nr, -1),
        "flops": full(nr, np.nan),
        "nbytes": seq * 4.0,
        "m": full(nr, np.nan),
        "n": full(nr, np.nan),
        "tile_m": full(nr, np.nan),
        "tile_n": full(nr, np.nan),
        "fusion_group": full(nr, -1),
        "tier": full(nr, "host"),
        "kernel": full(nr, ""),
        "shape": np.array([f"[[{int(s)}]]" for s in seq]),
        "predicted": full(nr, np.nan),
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
    arrays = run_arrays(
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
            4 * workload.layers * len(LAYER_OPS),
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
