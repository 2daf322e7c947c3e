"""The faults accel.synth can inject, what each one truly is, and how a failing run gets it."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Final

import numpy as np

from accel.synth.world import Plan, Workload

FAULTS: Final[tuple[str, ...]] = (
    "none",
    "batch_policy",
    "mapping_fallback",
    "fusion_memory_burst",
    "core_imbalance",
    "barrier_stall",
    "assembly",
    "recompile",
)

# fault -> (origin stage, manifest stage, mechanism id)
TRUTH_TABLE: Final[dict[str, tuple[str | None, str | None, str]]] = {
    "none": (None, None, "none"),
    "batch_policy": ("ingress", "ingress", "batch_policy"),
    "mapping_fallback": ("lowering", "execution", "mapping_fallback"),
    "fusion_memory_burst": ("lowering", "execution", "fusion_memory_burst"),
    "core_imbalance": ("scheduling", "execution", "core_imbalance"),
    "barrier_stall": ("execution", "execution", "barrier_stall"),
    "assembly": ("assembly", "assembly", "assembly"),
    "recompile": ("lowering", "lowering", "recompile"),
}


@dataclass(frozen=True)
class Truth:
    """What was injected: known to the bench and tests, never shown to the localizer."""

    fault: str
    origin_stage: str | None
    manifest_stage: str | None
    mechanism: str
    magnitude: dict[str, float] = field(default_factory=dict)


def inject(
    fault: str, rng: np.random.Generator, plan: Plan, workload: Workload, severity: float = 1.0
) -> tuple[Plan, Workload, Truth]:
    """The failing run's plan and workload for `fault`, with a random magnitude.

    `severity` scales the magnitude toward no fault (1: the ranges below, 0: none), drawing the
    same random numbers, so a bench can sweep detection power at fixed seeds.
    """
    v = float(severity)
    if fault not in TRUTH_TABLE:
        raise ValueError(f"unknown fault {fault!r}; known: {', '.join(FAULTS)}")
    origin, manifest, mech = TRUTH_TABLE[fault]
    mag: dict[str, float] = {}
    if fault == "batch_policy":
        b = int(rng.choice([8, 12, 16]))
        w = float(rng.uniform(0.8, 2.0)) * v
        plan = replace(plan, max_batch=b, batch_wait_scale=w)
        mag.update(max_batch=b, batch_wait_scale=w)
    elif fault == "mapping_fallback":
        d = float(rng.uniform(0.35, 0.55)) * v
        e = 1.0 - v * (1.0 - float(rng.uniform(0.08, 0.25)))
        workload = replace(workload, drift_share=d)
        plan = replace(plan, unseen_shapes="fallback", fallback_efficiency=e)
        mag.update(drift_share=d, fallback_efficiency=e)
    elif fault == "fusion_memory_burst":
        f = 1.0 + v * (float(rng.uniform(2.5, 4.5)) - 1.0)
        plan = replace(plan, fusion="aggressive", fusion_buffering=f)
        mag["fusion_buffering"] = f
    elif fault == "core_imbalance":
        s = float(rng.uniform(0.2, 0.6)) * v
        c = float(rng.uniform(0.2, 0.6)) * v
        plan = replace(plan, placement_skew=s, placement_collision_share=c)
        mag.update(placement_skew=s, placement_collision_share=c)
    elif fault == "barrier_stall":
        p = float(rng.uniform(0.05, 0.2)) * v
        s = float(rng.uniform(1.0, 3.0))
        plan = replace(plan, barrier_stall_share=p, barrier_stall_scale=s)
        mag.update(barrier_stall_share=p, barrier_stall_scale=s)
    elif fault == "assembly":
        if rng.random() < 0.5:  # a heavy quality check on some batches
            p = float(rng.uniform(0.1, 0.3))
            s = float(rng.uniform(1.0, 2.0)) * v
            plan = replace(plan, post_share=p, post_scale=s)
            mag.update(post_share=p, post_scale=s)
        else:  # result copies into pageable host memory
            s = float(rng.uniform(0.4, 0.8)) * v
            plan = replace(plan, d2h_slowdown=s)
            mag["d2h_slowdown"] = s
    elif fault == "recompile":
        d = float(rng.uniform(0.15, 0.4)) * v
        c = float(rng.uniform(0.2, 0.5)) * v
        k = float(rng.uniform(3.0, 10.0))
        workload = replace(workload, drift_share=d)
        plan = replace(plan, unseen_shapes="recompile", recompile_churn=c, compile_scale=k)
        mag.update(drift_share=d, recompile_churn=c, compile_scale=k)
    return plan, workload, Truth(fault, origin, manifest, mech, mag)
