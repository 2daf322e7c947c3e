"""The served model, the hardware's hidden behaviour, and the faults profsim can place."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Final

import numpy as np

FAULTS: Final[tuple[str, ...]] = (
    "none",
    "queueing",
    "batch_policy",
    "recompile",
    "mapping_fallback",
    "fusion_memory_burst",
    "core_imbalance",
    "barrier_stall",
    "assembly",
)

# fault -> (origin stage, manifest stage, mechanism id of DESIGN §5)
TRUTH: Final[dict[str, tuple[str | None, str | None, str]]] = {
    "none": (None, None, "none"),
    "queueing": ("ingress", "ingress", "queueing"),
    "batch_policy": ("ingress", "ingress", "batch_policy"),
    "recompile": ("lowering", "lowering", "recompile"),
    "mapping_fallback": ("lowering", "execution", "mapping_fallback"),
    "fusion_memory_burst": ("lowering", "execution", "fusion_memory_burst"),
    "core_imbalance": ("scheduling", "execution", "core_imbalance"),
    "barrier_stall": ("execution", "execution", "barrier_stall"),
    "assembly": ("assembly", "assembly", "assembly"),
}

BATCHING: Final[tuple[str, ...]] = ("serial", "continuous")


@dataclass(frozen=True)
class Service:
    """What is served and how; a fault changes some of these."""

    n_requests: int = 400
    batching: str = "serial"  # "serial": batch members run one after another; "continuous"
    layers: int = 2
    hidden: int = 4096
    cores: int = 4  # shards of every kernel, one stream each
    seq_buckets: tuple[int, ...] = (128, 256, 512, 1024)
    seq_probs: tuple[float, ...] = (0.4, 0.3, 0.2, 0.1)
    utilization: float = 0.45  # offered load (serial: of the one server; continuous: of the slots)
    load_scale: float = 1.0  # arrival rate multiplier (queueing fault)
    max_batch: int = 4  # serial: members per batch
    batch_timeout: float = 0.3  # serial: batch held open this long (x median service)
    slots: int = 3  # continuous: requests in flight at once
    contention: float = 0.3  # continuous: kernel stretch per extra request in flight
    step_admission: float = 0.0  # continuous: admitted only at step boundaries (x median service)
    drift_share: float = 0.0  # share of requests on a length no kernel was compiled for
    unseen: str = "none"  # what a drifted length gets: "none", "fallback", "recompile"
    fallback_eff: float = 1.0  # generic kernel's share of the tuned kernel's rate
    compile_scale: float = 0.0  # compile time (x median service)
    recompile_churn: float = 0.0  # chance a later request of a drifted length compiles again
    fusion_spill: float = 0.0  # spill bytes of the fused MLP per byte of its intermediate
    slow_core: int = -1  # core that is slower on every kernel (-1: none)
    slow_core_us: float = 0.0  # its extra time per kernel (x median kernel; an intercept)
    stall_share: float = 0.0  # share of layer barriers that stall
    stall_scale: float = 0.0  # stall length (x the layer's own kernel time)
    d2h_scale: float = 1.0  # D2H copy slowdown (pageable host memory)
    post_scale: float = 1.0  # post-processing slowdown


@dataclass(frozen=True)
class Reality:
    """How the hardware really runs, unknown to any cost model (its mis-calibration)."""

    compute_eff: float
    bw_eff: float
    overlap: float
    launch_us: float
    host_scale: float
    spill_penalty: float
    op_noise: float
    bias: tuple[float, ...]  # per kernel kind: qkv, attn, up, down, generic


@dataclass(frozen=True)
class Truth:
    """What was placed in the failing run; the localizer never sees it."""

    fault: str
    origin_stage: str | None
    manifest_stage: str | None
    mechanism: str
    magnitude: dict[str, float]


def draw_reality(rng: np.random.Generator) -> Reality:
    return Reality(
        compute_eff=float(rng.uniform(0.35, 0.75)),
        bw_eff=float(rng.uniform(0.5, 0.9)),
        overlap=float(rng.uniform(0.2, 0.9)),
        launch_us=float(rng.uniform(3.0, 9.0)),
        host_scale=float(rng.uniform(0.7, 1.5)),
        spill_penalty=float(rng.uniform(2.0, 6.0)),
        op_noise=float(rng.uniform(0.03, 0.12)),
        bias=tuple(float(x) for x in rng.lognormal(0.0, 0.15, 5)),
    )


def inject(fault: str, rng: np.random.Generator, s: Service) -> tuple[Service, Truth]:
    """The failing run's service for `fault`, with a random magnitude."""
    if fault not in TRUTH:
        raise ValueError(f"unknown fault {fault!r}; known: {', '.join(FAULTS)}")
    mag: dict[str, float] = {}
    if fault == "queueing":
        mag["load_scale"] = float(rng.uniform(1.4, 1.8))
        s = replace(s, load_scale=mag["load_scale"])
    elif fault == "batch_policy":
        if s.batching == "serial":
            mag.update(max_batch=float(rng.choice([8, 12])), batch_timeout=rng.uniform(4.0, 8.0))
            s = replace(s, max_batch=int(mag["max_batch"]), batch_timeout=mag["batch_timeout"])
        else:
            mag["step_admission"] = float(rng.uniform(3.0, 6.0))
            s = replace(s, step_admission=mag["step_admission"])
    elif fault == "recompile":
        mag.update(
            drift_share=float(rng.uniform(0.15, 0.35)),
            compile_scale=float(rng.uniform(4.0, 10.0)),
            recompile_churn=float(rng.uniform(0.1, 0.3)),
        )
        s = replace(
            s,
            unseen="recompile",
            drift_share=mag["drift_share"],
            compile_scale=mag["compile_scale"],
            recompile_churn=mag["recompile_churn"],
        )
    elif fault == "mapping_fallback":
        mag.update(drift_share=float(rng.uniform(0.3, 0.5)), fallback_eff=rng.uniform(0.1, 0.25))
        s = replace(
            s, unseen="fallback", drift_share=mag["drift_share"], fallback_eff=mag["fallback_eff"]
        )
    elif fault == "fusion_memory_burst":
        mag["fusion_spill"] = float(rng.uniform(2.0, 5.0))
        s = replace(s, fusion_spill=mag["fusion_spill"])
    elif fault == "core_imbalance":
        mag.update(slow_core=float(rng.integers(0, s.cores)), slow_core_us=rng.uniform(0.6, 1.5))
        s = replace(s, slow_core=int(mag["slow_core"]), slow_core_us=mag["slow_core_us"])
    elif fault == "barrier_stall":
        mag.update(stall_share=float(rng.uniform(0.15, 0.3)), stall_scale=rng.uniform(1.5, 3.0))
        s = replace(s, stall_share=mag["stall_share"], stall_scale=mag["stall_scale"])
    elif fault == "assembly":
        if rng.random() < 0.5:  # result copies into pageable host memory
            mag["d2h_scale"] = float(rng.uniform(3.0, 6.0))
            s = replace(s, d2h_scale=mag["d2h_scale"])
        else:  # a heavier post-processing / quality check
            mag["post_scale"] = float(rng.uniform(3.0, 6.0))
            s = replace(s, post_scale=mag["post_scale"])
    origin, manifest, mech = TRUTH[fault]
    return s, Truth(fault, origin, manifest, mech, {k: float(v) for k, v in mag.items()})
