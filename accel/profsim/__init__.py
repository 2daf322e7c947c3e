"""A second synthetic world, written to disagree with accel.synth: runs as a profiler records them.

Differences that matter to a localizer: batch members are served one after another ("serial",
so waiting for batch-mates is ingress time) or requests share the device in flight
("continuous"); nothing is replicated across members. Faults sit where a profiler sees them:
stalls inside barrier (sync) spans that carry no flops or bytes, a slow core as an intercept on
every kernel it runs, copies and post-processing, spill traffic of a fused MLP, generic kernels
and compiles on drifted lengths, a load surge or a batch policy. Its hardware "reality" has its
own efficiencies and noise, not accel.cost's. numpy only; writers live in workbench/store.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from accel.profiles import HardwareProfile
from accel.profsim.timeline import Timeline, simulate
from accel.profsim.world import (
    BATCHING,
    FAULTS,
    TRUTH,
    Reality,
    Service,
    Truth,
    draw_reality,
    inject,
)

__all__ = [
    "BATCHING",
    "FAULTS",
    "TRUTH",
    "Pair",
    "Reality",
    "Run",
    "Service",
    "Timeline",
    "Truth",
    "draw_reality",
    "generate_pair",
    "inject",
    "simulate",
]


@dataclass(frozen=True)
class Run:
    run_id: str
    hardware: str
    service: Service
    timeline: Timeline
    seed: int


@dataclass(frozen=True)
class Pair:
    failing: Run
    comparator: Run
    truth: Truth


def generate_pair(
    hw: HardwareProfile,
    fault: str,
    seed: int,
    *,
    batching: str = "serial",
    n_requests: int = 400,
) -> Pair:
    """A fault-free comparator and a failing run with `fault`, on one hardware reality, with
    independent traffic at the comparator's arrival rate. Fault "none": an A/A pair."""
    if batching not in BATCHING:
        raise ValueError(f"unknown batching {batching!r}; known: {', '.join(BATCHING)}")
    rng = np.random.default_rng(seed)
    reality = draw_reality(rng)
    base = Service(n_requests=n_requests, batching=batching)
    failing_service, truth = inject(fault, rng, base)
    s_comp, s_fail = (int(x) for x in rng.integers(0, 2**31, 2))
    comp, gap = simulate(hw, base, reality, seed=s_comp)
    fail, _ = simulate(hw, failing_service, reality, seed=s_fail, mean_gap_us=gap)
    return Pair(
        Run("failing", hw.name, failing_service, fail, s_fail),
        Run("comparator", hw.name, base, comp, s_comp),
        truth,
    )
