"""What a localization returns: the verdict and the claims that prove it."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TypedDict


@dataclass(frozen=True)
class Claim:
    """One statement of the verdict with the numbers that prove it and how they were made."""

    text: str
    numbers: dict[str, float]
    method: str


@dataclass(frozen=True)
class Localization:
    """The verdict for one failing/comparator pair (see the module docstring)."""

    triggered: bool
    origin_stage: str | None
    manifest_stage: str | None
    mechanism: str
    secondary_mechanism: str | None
    confidence: float
    # stage -> {"p95": share, "p99": share} of the tail gap removed by giving failing the
    # comparator's plan (ingress, lowering, scheduling) or removing the stage's residual shift
    # (execution, assembly); empty when not triggered.
    explained_share: dict[str, dict[str, float]]
    p95_gap_us: float
    p99_gap_us: float
    p95_gap_ci: tuple[float, float]
    p99_gap_ci: tuple[float, float]
    n_failing: int
    n_comparator: int
    claims: list[Claim]
    p95_rel_gap: float = math.nan
    p99_rel_gap: float = math.nan
    decided_by: str = "none"  # "plan_swap", "residual", "manifest", "raw_shift" or "none"
    # the bootstrap's share of resamples naming the same origin, with its caps: what the
    # calibrated confidence is computed from (calibration.py); NaN when not triggered
    stability: float = math.nan
    residual_shift: dict[str, dict[str, float]] = field(default_factory=dict)
    manifest_gap_us: dict[str, float] = field(default_factory=dict)  # stage -> p95 own-time gap
    mechanism_scores: dict[str, float] = field(default_factory=dict)
    method: str = "full"
    # role ("failing", "comparator") -> row (STAGES, "other", "latency") -> replay_summary's
    # figures; empty when no replay was made (not triggered, or method "naive").
    replay_summary: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    outcome: str = "no regression"  # "regression", "no regression" or "inconclusive"
    outcome_reason: str = ""
    threshold_us: dict[str, float] = field(default_factory=dict)  # practical, per quantile
    threshold_basis: str = ""
    # role -> the base queue re-run against the observed latency: observed_pXX_us,
    # rerun_pXX_us, rel_error_pXX, tolerance, reproduced (1.0 / 0.0)
    rerun: dict[str, dict[str, float]] = field(default_factory=dict)
    # share of bootstrap resamples of both runs' requests that name the same origin (what
    # `confidence` holds, capped when the re-run did not reproduce the tail)
    origin_agreement: float = math.nan
    confidence_method: str = ""
    direct: list[dict[str, float | str]] = field(default_factory=list)  # kinds, tail first
    hardware_gap: dict[str, dict[str, float]] = field(default_factory=dict)
    # quantile name -> value, lo, hi of the tail gap at equal traffic, and "fired" -> 1.0 when
    # the trigger fired on it; empty when it was not read (see trigger.TriggerPolicy)
    equal_traffic: dict[str, dict[str, float]] = field(default_factory=dict)
    # the same of the queue-free tail (latency minus the waits for a busy server; see
    # trigger.TriggerPolicy)
    queue_free_tail: dict[str, dict[str, float]] = field(default_factory=dict)
    # the same of the change of load (the comparator's service at the failing run's arrival
    # rate and at its own; "fired" also holds the rate ratio)
    load_change: dict[str, dict[str, float]] = field(default_factory=dict)
    # the tail-exceedance test's figures (exceedance.py), "fired" 1.0 when it decided; empty
    # when it was not read
    tail_exceedance: dict[str, float] = field(default_factory=dict)


class _Common(TypedDict):
    """Localization fields known once the gaps are measured."""

    p95_gap_us: float
    p99_gap_us: float
    p95_gap_ci: tuple[float, float]
    p99_gap_ci: tuple[float, float]
    n_failing: int
    n_comparator: int
    p95_rel_gap: float
    p99_rel_gap: float
    method: str
    outcome: str
    outcome_reason: str
    threshold_us: dict[str, float]
    threshold_basis: str
    equal_traffic: dict[str, dict[str, float]]
    queue_free_tail: dict[str, dict[str, float]]
    load_change: dict[str, dict[str, float]]
    tail_exceedance: dict[str, float]
    hardware_gap: dict[str, dict[str, float]]
