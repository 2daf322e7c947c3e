"""Synthetic serving workloads on a hardware profile, with injected faults and their ground truth.
Imports numpy and the rest of accel only; the product uses it for `workbench sample`.

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

import numpy as np

from accel.profiles import HardwareProfile
from accel.synth.columns import Column
from accel.synth.faults import FAULTS, TRUTH_TABLE, Truth, inject
from accel.synth.run import Pair, SynthRun, generate_run
from accel.synth.world import (
    DEFAULT_META,
    Plan,
    Reality,
    Workload,
    compiled_shape_keys,
    draw_reality,
    shape_key,
)

__all__ = [
    "DEFAULT_META",
    "FAULTS",
    "TRUTH_TABLE",
    "Column",
    "Pair",
    "Plan",
    "Reality",
    "SynthRun",
    "Truth",
    "Workload",
    "compiled_shape_keys",
    "draw_reality",
    "fault_free_twin",
    "generate_pair",
    "generate_run",
    "inject",
    "shape_key",
]


def _draw(
    fault: str, seed: int, workload: Workload | None, severity: float
) -> tuple[Reality, Workload, Plan, Plan, Workload, Truth, int, int]:
    """What generate_pair draws before it generates: reality, the comparator's workload and
    plan, the failing run's plan, workload and truth, and each run's traffic seed."""
    rng = np.random.default_rng(seed)
    reality = draw_reality(rng)
    base_w = workload or Workload()
    base_p = Plan()
    plan, wl, truth = inject(fault, rng, base_p, base_w, severity)
    s_comp, s_fail = (int(x) for x in rng.integers(0, 2**31, 2))
    return reality, base_w, base_p, plan, wl, truth, s_comp, s_fail


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
    reality, base_w, base_p, plan, wl, truth, s_comp, s_fail = _draw(
        fault, seed, workload, severity
    )
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


def fault_free_twin(
    hw: HardwareProfile,
    pair: Pair,
    seed: int,
    *,
    workload: Workload | None = None,
    severity: float = 1.0,
) -> SynthRun:
    """The failing run of `pair` (generate_pair with these arguments) generated again without
    its fault, on the same reality and traffic seed: what the fault changed on this traffic."""
    reality, base_w, base_p, _, _, _, _, s_fail = _draw(pair.truth.fault, seed, workload, severity)
    return generate_run(
        hw,
        base_w,
        base_p,
        reality,
        seed=s_fail,
        run_id="failing",
        mean_gap_us=pair.comparator.mean_gap_us,
        truth=Truth("none", None, None, "none"),
        tables=False,
    )
