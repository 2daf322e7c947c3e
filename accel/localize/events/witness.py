"""Witnesses: the trace events a mechanism rests on (issue 34, item 3).

A mechanism is named only when the failing run holds the events that witness it: barrier or
collective events for barrier_stall, compiled-region splits for graph_break, compilations during
serving for recompile, eager fallback ops for mapping_fallback, per-core ops for core_imbalance,
fusion groups with memory tiers for fusion_memory_burst, byte counts or input sizes for
bandwidth_bound, more ops per request for launch_overhead, queue waits for queueing, batches for
batch_policy and assembly-stage events for assembly. Without them the verdict says `unknown`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

import numpy as np

from accel.localize.records import Claim
from accel.ops import B, OpArrays, RunArrays, name_codes
from accel.stages import STAGE_CODE

# Barriers and collectives as runtimes name them (NCCL/RCCL, MPI, c10d, stream/event waits).
BARRIER_NAME: Final[re.Pattern[str]] = re.compile(
    r"(?i)barrier|nccl|rccl|gloo|all_?reduce|all_?gather|all_?to_?all|reduce_?scatter|"
    r"send_?recv|^MPI_|c10d::|synchroniz|streamwait|eventwait|wait_tensor"
)
# launch_overhead needs this many more ops per request, at the median, than the comparator.
EXTRA_OPS: Final[float] = 1.0
# ... and the time per request they add within this many of the comparator's typical op.
LAUNCH_SLACK: Final[float] = 3.0
UNKNOWN: Final[str] = "unknown"


@dataclass(frozen=True)
class Witness:
    """The events that witness a mechanism, with their counts in both runs."""

    mechanism: str
    events: str
    n_failing: int
    n_comparator: int

    def text(self) -> str:
        return f"{self.events}: n={self.n_failing} in the failing run, {self.n_comparator} in the comparator"


def named(ops: OpArrays, pattern: re.Pattern[str]) -> B:
    """Per op: its name (or kernel, where it has none) matches `pattern`."""
    codes, vocab = name_codes(ops, kernel_fallback=True)
    hit = np.array([bool(pattern.search(v)) for v in vocab], dtype=bool)
    return hit[codes] if vocab else np.zeros(ops.size, dtype=bool)


def barrier_ops(ops: OpArrays) -> B:
    """Execution ops that are barriers: named as one, or serial ops of a run whose other ops
    carry the core they ran on (the accelerator model's barrier between per-core work)."""
    ex = ops.stage == STAGE_CODE["execution"]
    per_core = bool(np.any(ex & (ops.core >= 0)))
    serial = ex & (ops.core < 0) if per_core else np.zeros(ops.size, dtype=bool)
    out: B = ex & (serial | named(ops, BARRIER_NAME))
    return out


def _device_side(ops: OpArrays) -> B:
    out: B = (ops.stage == STAGE_CODE["execution"]) | (ops.stage == STAGE_CODE["scheduling"])
    return out


def _launches(failing: RunArrays, comparator: RunArrays) -> Witness | None:
    """More ops per request (scheduling and execution), and the time they add no more than
    LAUNCH_SLACK x that many of the comparator's typical op: many small ops, not bigger ones."""
    per: list[tuple[float, float, float, int]] = []
    for run in (failing, comparator):
        ops, n = run.ops, run.requests.size
        sel = _device_side(ops)
        if n == 0 or not sel.any():
            return None
        count = np.bincount(ops.req[sel], minlength=n)
        time = np.bincount(ops.req[sel], np.nan_to_num(ops.observed_us[sel], nan=0.0), n)
        typical = float(np.median(np.nan_to_num(ops.observed_us[sel], nan=0.0)))
        per.append((float(np.median(count)), float(np.median(time)), typical, int(sel.sum())))
    (of, tf, _, nf), (oc, tc, typ_c, nc) = per
    extra = of - oc
    if extra < EXTRA_OPS or tf - tc > LAUNCH_SLACK * extra * max(typ_c, 1e-9):
        return None
    what = f"ops per request (median {of:.0f} vs {oc:.0f}, each typically {typ_c:.0f} us)"
    return Witness("launch_overhead", what, nf, nc)


def _moved(ops: OpArrays) -> B:
    out: B = np.isfinite(ops.bytes) & (ops.bytes > 0)
    return out


def _sized(ops: OpArrays) -> B:
    # A profile recorded with shapes gives each op the sizes of the data it reads, the
    # volume a bandwidth claim rests on where no byte counts were written.
    out: B = _moved(ops) | (np.isfinite(ops.m) & np.isfinite(ops.n))
    return out


def _count(mask: B) -> int:
    return int(np.count_nonzero(mask))


def witness(mechanism: str, failing: RunArrays, comparator: RunArrays) -> Witness | None:
    """The witness of `mechanism` in the pair, None when the failing run holds none."""
    f, c = failing.ops, comparator.ops
    fr, cr = failing.requests, comparator.requests
    if mechanism == "barrier_stall":
        nf, nc = _count(barrier_ops(f)), _count(barrier_ops(c))
        return Witness(mechanism, "barrier or collective events", nf, nc) if nf else None
    if mechanism == "graph_break":
        if failing.regions is None or failing.eager_between is None or comparator.regions is None:
            return None
        base = float(np.median(comparator.regions)) if comparator.regions.size else 0.0
        split = failing.regions > base
        nf = _count(split)
        what = "requests split into more compiled regions than the comparator's"
        return Witness(mechanism, what, nf, 0) if nf else None
    if mechanism == "recompile":
        nf, nc = _count(f.recompile), _count(c.recompile)
        return Witness(mechanism, "compilation events while serving", nf, nc) if nf else None
    if mechanism == "mapping_fallback":
        nf, nc = _count(f.fallback), _count(c.fallback)
        return Witness(mechanism, "eager fallback ops", nf, nc) if nf else None
    if mechanism == "core_imbalance":
        cores = np.unique(f.core[f.core >= 0])
        nf = _count(f.core >= 0)
        ok = cores.size >= 2
        return (
            Witness(mechanism, f"ops placed on {cores.size} cores", nf, _count(c.core >= 0))
            if ok
            else None
        )
    if mechanism == "fusion_memory_burst":
        # Spill traffic shows as fused ops with their memory tier, or as bytes moved per op.
        placed_f = ((f.fusion_group >= 0) & (f.mem_tier >= 0)) | _moved(f)
        placed_c = ((c.fusion_group >= 0) & (c.mem_tier >= 0)) | _moved(c)
        nf, nc = _count(placed_f), _count(placed_c)
        what = "fused ops with their memory tier or bytes moved"
        return Witness(mechanism, what, nf, nc) if nf else None
    if mechanism == "bandwidth_bound":
        nf, nc = _count(_sized(f)), _count(_sized(c))
        return Witness(mechanism, "ops with bytes moved or input sizes", nf, nc) if nf else None
    if mechanism == "launch_overhead":
        return _launches(failing, comparator)
    if mechanism == "queueing":
        wf = _waits(fr.arrival_us, fr.start_us)
        wc = _waits(cr.arrival_us, cr.start_us)
        ing_f = _count(np.nan_to_num(fr.stage_us[:, STAGE_CODE["ingress"]]) > 0)
        ing_c = _count(np.nan_to_num(cr.stage_us[:, STAGE_CODE["ingress"]]) > 0)
        nf, nc = max(wf, ing_f), max(wc, ing_c)
        return (
            Witness(mechanism, "requests with a queue wait or ingress time", nf, nc) if nf else None
        )
    if mechanism == "batch_policy":
        nf, nc = _count(fr.batch_size > 1), _count(cr.batch_size > 1)
        return (
            Witness(mechanism, "requests served in batches of more than one", nf, nc)
            if nf or nc
            else None
        )
    if mechanism == "assembly":
        a = STAGE_CODE["assembly"]
        nf, nc = (
            _count(np.nan_to_num(fr.stage_us[:, a]) > 0),
            _count(np.nan_to_num(cr.stage_us[:, a]) > 0),
        )
        return Witness(mechanism, "requests with assembly-stage events", nf, nc) if nf else None
    return None


def _waits(arrival: np.ndarray, start: np.ndarray) -> int:
    with np.errstate(invalid="ignore"):
        return _count(
            np.nan_to_num(
                np.asarray(start, dtype=np.float64) - np.asarray(arrival, dtype=np.float64)
            )
            > 0
        )


# Where the evidence points at a mechanism the trace cannot witness, the stage's other
# mechanisms in this order are tried: the first the trace witnesses is named instead.
SIBLINGS: Final[dict[str, tuple[str, ...]]] = {
    "batch_policy": ("queueing",),
    "queueing": ("batch_policy",),
    "fusion_memory_burst": ("graph_break", "recompile", "mapping_fallback"),
    "mapping_fallback": ("graph_break", "recompile"),
    "recompile": ("graph_break", "mapping_fallback"),
}


def witnessed(
    mechanism: str, failing: RunArrays, comparator: RunArrays
) -> tuple[str, Witness | None]:
    """(mechanism, its witness) when the trace holds it, else the first witnessed sibling of
    the same stage (SIBLINGS); (unknown, None) when none is."""
    if mechanism in ("none", UNKNOWN):
        return mechanism, None
    for mech in (mechanism, *SIBLINGS.get(mechanism, ())):
        w = witness(mech, failing, comparator)
        if w is not None:
            return mech, w
    return UNKNOWN, None


def witness_claim(mechanism: str, failing: RunArrays, comparator: RunArrays) -> tuple[str, Claim]:
    """witnessed(...) and the claim that cites the witness, or says why none is named."""
    mech, w = witnessed(mechanism, failing, comparator)
    if w is not None:
        return mech, Claim(
            f"mechanism {mech} rests on {w.text()}",
            {"witness_failing": float(w.n_failing), "witness_comparator": float(w.n_comparator)},
            "witness events (witness.py)",
        )
    return mech, Claim(
        f"mechanism not named: the evidence points at {mechanism}, but the trace holds none of "
        f"the events that witness it ({WITNESS_EVENTS.get(mechanism, 'none known')})",
        {},
        "witness events (witness.py)",
    )


WITNESS_EVENTS: Final[dict[str, str]] = {
    "barrier_stall": "barrier or collective events",
    "graph_break": "requests split into more compiled regions",
    "recompile": "compilations while serving",
    "mapping_fallback": "eager fallback ops",
    "core_imbalance": "ops placed on two or more cores",
    "fusion_memory_burst": "fused ops with their memory tier or bytes moved",
    "bandwidth_bound": "ops with bytes moved or input sizes",
    "launch_overhead": "more execution ops per request",
    "queueing": "queue waits or ingress time",
    "batch_policy": "batches of more than one request",
    "assembly": "assembly-stage events",
}
