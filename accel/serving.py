"""LLM serving: which SLO regressed, and the mechanism witnesses of a serving regression.

Each witness compares one quantity the trace records between the failing and the comparator
run with a distribution-free interval; a mechanism is named only when its witness fired.
Imports numpy and the rest of accel only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Final

import numpy as np
import numpy.typing as npt

from accel.stats import hodges_lehmann_ci, proportion_diff_ci

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]

# The stage in which each mechanism originates (DESIGN §2 mapped onto LLM serving).
ORIGIN: Final[dict[str, str]] = {
    "tokenizer_slowdown": "ingress",
    "batch_shape_recompile": "lowering",
    "kv_preemption": "scheduling",
    "prefill_starving_decode": "scheduling",
    "slower_decode_kernel": "execution",
    "detokenizer_cost": "assembly",
}
# A per-step or per-request cost must grow by at least this share of the comparator's median
# to count: on the recorded tuning pairs, medians of runs without that fault drifted by up to
# 12% (two runs of one loop on a loaded 2-core box); 0.25 leaves twice that.
MIN_REL_SHIFT: Final[float] = 0.25


@dataclass(frozen=True)
class ServingRun:
    """One run's witness quantities: per request (tokenize time, input tokens, preemptions)
    and per engine step (phase times, members, prefill tokens); empty arrays when absent."""

    tokenize_us: F64  # per request with a tokenize span
    tokenize_tokens: F64  # its input tokens
    preemptions: I64  # per request
    step_forward_us: F64
    step_detokenize_us: F64
    step_compile_us: F64
    step_prefill_tokens: I64
    step_n_prefill: I64
    step_n_decode: I64
    step_stalled_decodes: I64  # requests mid-decode that the step left out


@dataclass(frozen=True)
class Witness:
    """One mechanism's test: whether it fired, the effect with its interval, n a side."""

    mechanism: str
    fired: bool
    what: str
    value: float
    lo: float
    hi: float
    n_failing: int
    n_comparator: int
    extra: dict[str, float] = field(default_factory=dict)


def _shift(mech: str, what: str, f: F64, c: F64, alpha: float) -> Witness:
    f, c = f[np.isfinite(f)], c[np.isfinite(c)]
    if f.size < 5 or c.size < 5:
        return Witness(mech, False, what, math.nan, math.nan, math.nan, int(f.size), int(c.size))
    d, lo, hi = hodges_lehmann_ci(f, c, alpha)
    base = float(np.median(c))
    fired = lo > 0 and d > MIN_REL_SHIFT * abs(base)
    return Witness(mech, bool(fired), what, d, lo, hi, int(f.size), int(c.size),
                   {"comparator_median": base})  # fmt: skip


def _share(mech: str, what: str, kf: int, nf: int, kc: int, nc: int, alpha: float) -> Witness:
    if nf == 0 or nc == 0:
        return Witness(mech, False, what, math.nan, math.nan, math.nan, nf, nc)
    d, lo, hi = proportion_diff_ci(kf, nf, kc, nc, alpha)
    return Witness(mech, bool(lo > 0 and kf >= 3), what, d, lo, hi, nf, nc,
                   {"failing_count": float(kf), "comparator_count": float(kc)})  # fmt: skip


def _starving(run: ServingRun) -> npt.NDArray[np.bool_]:
    stalled: npt.NDArray[np.bool_] = (
        (run.step_n_decode == 0) & (run.step_n_prefill > 0) & (run.step_stalled_decodes > 0)
    )
    return stalled


def witnesses(f: ServingRun, c: ServingRun, alpha: float = 0.05) -> list[Witness]:
    """Every mechanism's witness test, in pipeline order of their origin stages."""
    per_tok_f = f.tokenize_us / np.maximum(f.tokenize_tokens, 1.0)
    per_tok_c = c.tokenize_us / np.maximum(c.tokenize_tokens, 1.0)
    members_f = np.maximum(f.step_n_prefill + f.step_n_decode, 1).astype(np.float64)
    members_c = np.maximum(c.step_n_prefill + c.step_n_decode, 1).astype(np.float64)
    decode_f, decode_c = f.step_n_prefill == 0, c.step_n_prefill == 0
    # A prefill-only step that left running decodes out: their next tokens waited for a prompt.
    stall_f = int(np.count_nonzero(_starving(f)))
    stall_c = int(np.count_nonzero(_starving(c)))
    return [
        _shift("tokenizer_slowdown", "tokenize us per input token, per request",
               per_tok_f, per_tok_c, alpha),
        _share("batch_shape_recompile", "share of engine steps that compiled",
               int(np.count_nonzero(f.step_compile_us > 0)), f.step_compile_us.size,
               int(np.count_nonzero(c.step_compile_us > 0)), c.step_compile_us.size, alpha),
        _share("kv_preemption", "share of requests preempted",
               int(np.count_nonzero(f.preemptions > 0)), f.preemptions.size,
               int(np.count_nonzero(c.preemptions > 0)), c.preemptions.size, alpha),
        _share("prefill_starving_decode",
               "share of steps that ran prefill only while decodes waited",
               stall_f, f.step_n_prefill.size, stall_c, c.step_n_prefill.size, alpha),
        _shift("slower_decode_kernel", "forward us per member of decode-only steps",
               f.step_forward_us[decode_f] / members_f[decode_f],
               c.step_forward_us[decode_c] / members_c[decode_c], alpha),
        _shift("detokenizer_cost", "detokenize us per member, per step",
               f.step_detokenize_us / members_f, c.step_detokenize_us / members_c, alpha),
    ]  # fmt: skip


def choose(fired: list[Witness], stage_gap: dict[str, float]) -> Witness | None:
    """The fired witness whose origin stage grew most in the SLO's tail (`stage_gap`: stage ->
    p99 growth, us); None when none fired."""
    if not fired:
        return None
    return max(fired, key=lambda w: stage_gap.get(ORIGIN[w.mechanism], -math.inf))
