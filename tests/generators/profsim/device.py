"""The device side of a profsim request: its kernels (time, flops, bytes, names, the compiler's
estimate) and how launches, streams and barriers lay them out in a layer."""

from __future__ import annotations

from typing import Final

import numpy as np

from accel.profiles import HardwareProfile
from accel.synth.columns import quantize_us
from generators.profsim.world import Reality, Service

# One layer: (kernel name, matmul?, input width, output width) in units of `hidden`.
OPS: Final[tuple[tuple[str, bool, int, int], ...]] = (
    ("qkv", True, 1, 3),
    ("attn", False, 3, 1),
    ("up", True, 1, 4),
    ("down", True, 4, 1),
)
_FUSED: Final[tuple[bool, ...]] = (False, False, True, True)  # the MLP a fusing compiler merges
_SYNC_US: Final[float] = 2.0  # a barrier's own cost when nobody is late


def kernels(
    hw: HardwareProfile,
    s: Service,
    r: Reality,
    seq: np.ndarray,
    fallback: np.ndarray,
    rng: np.random.Generator,
) -> dict[str, np.ndarray]:
    """Per (request, layer, op, core): duration, flops, bytes, names, the compiler's estimate."""
    n, L, NOPS, C = seq.size, s.layers, len(OPS), s.cores
    h = float(s.hidden)
    shape4 = (n, L, NOPS, C)
    rows = np.broadcast_to(np.ceil(seq / C)[:, None, None, None], shape4).astype(np.float64)
    mm = np.broadcast_to(np.array([o[1] for o in OPS])[None, None, :, None], shape4)
    k_in = np.broadcast_to(np.array([o[2] * h for o in OPS])[None, None, :, None], shape4)
    n_out = np.broadcast_to(np.array([o[3] * h for o in OPS])[None, None, :, None], shape4)
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
    names = np.array([o[0] for o in OPS])[None, None, :, None]
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


def exec_layout(
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
