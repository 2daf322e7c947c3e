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
from generators.profsim.timeline import Timeline, simulate
from generators.profsim.world import (
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
    "fault_free_twin",
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
    mean_gap_us: float  # the traffic's mean inter-arrival gap before any load fault


@dataclass(frozen=True)
class Pair:
    failing: Run
    comparator: Run
    truth: Truth


def _draw(
    fault: str, seed: int, batching: str, n_requests: int
) -> tuple[Reality, Service, Service, Truth, int, int]:
    """What generate_pair draws before it simulates: reality, the comparator's and the failing
    run's services, the truth, and each run's traffic seed."""
    if batching not in BATCHING:
        raise ValueError(f"unknown batching {batching!r}; known: {', '.join(BATCHING)}")
    rng = np.random.default_rng(seed)
    reality = draw_reality(rng)
    base = Service(n_requests=n_requests, batching=batching)
    failing_service, truth = inject(fault, rng, base)
    s_comp, s_fail = (int(x) for x in rng.integers(0, 2**31, 2))
    return reality, base, failing_service, truth, s_comp, s_fail


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
    reality, base, failing_service, truth, s_comp, s_fail = _draw(fault, seed, batching, n_requests)
    comp, gap = simulate(hw, base, reality, seed=s_comp)
    fail, _ = simulate(hw, failing_service, reality, seed=s_fail, mean_gap_us=gap)
    return Pair(
        Run("failing", hw.name, failing_service, fail, s_fail, gap),
        Run("comparator", hw.name, base, comp, s_comp, gap),
        truth,
    )


def fault_free_twin(hw: HardwareProfile, pair: Pair, seed: int) -> Timeline:
    """The failing run of `pair` (generate_pair(hw, fault, seed, ...)) simulated again without
    its fault, on the same reality and traffic seed: what the fault changed on this traffic.
    Faults that draw more (recompiles, barrier stalls) shift the draws after theirs, arrivals
    included; a load surge keeps the draws and scales the arrival gaps."""
    c = pair.comparator.service  # the fault-free service generate_pair drew
    reality, base, _, _, _, s_fail = _draw(pair.truth.fault, seed, c.batching, c.n_requests)
    twin, _ = simulate(hw, base, reality, seed=s_fail, mean_gap_us=pair.failing.mean_gap_us)
    return twin
