"""accel.synth's world: the served model and traffic, the stack's decisions (Plan), and the
hardware's hidden behaviour (Reality) with its per-kernel bias."""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Final

import numpy as np

LAYER_OPS: Final[tuple[tuple[str, str, int, int], ...]] = (
    ("qkv", "mm", 1, 3),
    ("attn", "ew", 3, 1),
    ("up", "mm", 1, 4),
    ("act", "ew", 4, 4),
    ("down", "mm", 4, 1),
)
# Fusion plans: groups of op positions within a layer.
FUSION: Final[dict[str, tuple[tuple[int, ...], ...]]] = {
    "none": ((0,), (1,), (2,), (3,), (4,)),
    "epilogue": ((0,), (1,), (2, 3), (4,)),
    "aggressive": ((0, 1, 2, 3, 4),),
}
TILES: Final[tuple[tuple[int, int], ...]] = ((64, 64), (128, 128), (128, 256), (256, 128))
GENERIC_TILE: Final[tuple[int, int]] = (32, 32)
US: Final[float] = 1e6


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


def kernel_bias(names: list[str], reality: Reality, sigma: float = 0.08) -> dict[str, float]:
    """A fixed per-kernel-name efficiency bias of this reality (same for every run on it)."""
    out = {}
    for name in names:
        h = hashlib.sha256(f"{reality.bias_seed}:{name}".encode()).digest()
        u = (int.from_bytes(h[:8], "big") + 0.5) / 2.0**64
        z = math.sqrt(2.0) * erfinv(2.0 * u - 1.0)
        out[name] = math.exp(sigma * z)
    return out


def erfinv(y: float) -> float:
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
