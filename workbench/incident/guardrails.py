"""Guardrails: the default set, the per-run samples they read, and the rollback criteria they imply.

A guardrail names a metric, the direction that is bad, a tolerance relative to the baseline
value (plus an absolute floor for rates near zero) and whether failing it fails the validation.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import numpy as np
from numpy.typing import NDArray

from accel import stats
from accel.stages import STAGES
from workbench.errors import WorkbenchError
from workbench.incident.incident import Guardrail, RollbackCriterion
from workbench.incident.numbers import finite, whole

F64 = NDArray[np.float64]

METRICS: Final[tuple[str, ...]] = (
    "e2e_p95",
    "e2e_p99",
    "stage_p99",
    "throughput",
    "fallback_rate",
    "recompile_rate",
    "quality",
)
# Quantile metrics: (which samples, which quantile). Quality is judged on its low tail.
QUANTILE_OF: Final[dict[str, float]] = {
    "e2e_p95": 0.95,
    "e2e_p99": 0.99,
    "stage_p99": 0.99,
    "quality": 0.05,
}
# Shares of requests, compared as proportions (throughput is a rate over time, not a share).
RATE_METRICS: Final[frozenset[str]] = frozenset({"fallback_rate", "recompile_rate"})
# A rollback watch window: 1000 requests put 10 samples beyond the p99, enough to see it move.
ROLLBACK_WINDOW_REQUESTS: Final[int] = 1000
# Throughput is completed requests over the run's span; its dispersion (bursts of completions,
# e.g. batches) is estimated from counts per time window: at most this many, >= 20 requests each.
MAX_THROUGHPUT_WINDOWS: Final[int] = 50
MIN_REQUESTS_PER_WINDOW: Final[int] = 20


@dataclass(frozen=True)
class RunSamples:
    """What the judge reads from one run: per-request arrays (NaN = unknown)."""

    run_id: str
    latency_us: F64
    stage_us: dict[str, F64]
    quality: F64
    arrival_us: F64
    end_us: F64
    fallback_ops: NDArray[np.int64]
    recompile_ops: NDArray[np.int64]
    shape_key: list[str | None]

    @property
    def n(self) -> int:
        return int(self.latency_us.size)

    def has_quality(self) -> bool:
        return bool(np.isfinite(self.quality).any())


@dataclass(frozen=True)
class Measurement:
    """A metric's raw material: a sample (quantile metrics), successes / trials (shares), or
    events over an exposure in seconds (throughput: successes = trials = completed requests)."""

    unit: str
    sample: F64 | None = None
    quantile: float = 0.5
    successes: int = 0
    trials: int = 0
    exposure_s: float = 0.0
    dispersion: float = 1.0

    @property
    def n(self) -> int:
        return int(stats.clean(self.sample).size) if self.sample is not None else self.trials

    def value(self) -> float:
        if self.sample is not None:
            return float(stats.quantile(self.sample, self.quantile))
        if self.exposure_s > 0:
            return self.successes / self.exposure_s
        return self.successes / self.trials if self.trials else math.nan


def default_guardrails(origin_stage: str | None, with_quality: bool) -> list[Guardrail]:
    """End-to-end p95/p99, the origin stage's p99, throughput, fallback and recompile rates,
    and quality when the baseline measures it. End-to-end p99 and quality are critical."""
    out = [
        Guardrail(
            metric="e2e_p95",
            label="end-to-end p95",
            direction="increase",
            tolerance=0.05,
            critical=False,
        ),
        Guardrail(
            metric="e2e_p99",
            label="end-to-end p99",
            direction="increase",
            tolerance=0.05,
            critical=True,
        ),
    ]
    if origin_stage in STAGES:
        out.append(
            Guardrail(
                metric="stage_p99",
                label=f"{origin_stage} p99",
                direction="increase",
                tolerance=0.10,
                critical=False,
                stage=origin_stage,
            )
        )
    out += [
        Guardrail(
            metric="throughput",
            label="throughput (completed requests per second)",
            direction="decrease",
            tolerance=0.05,
            critical=False,
        ),
        Guardrail(
            metric="fallback_rate",
            label="share of requests with a fallback op",
            direction="increase",
            tolerance=0.10,
            critical=False,
            min_effect=0.01,
        ),
        Guardrail(
            metric="recompile_rate",
            label="share of requests with a recompile",
            direction="increase",
            tolerance=0.10,
            critical=False,
            min_effect=0.01,
        ),
    ]
    if with_quality:
        out.append(
            Guardrail(
                metric="quality",
                label="quality p05",
                direction="decrease",
                tolerance=0.01,
                critical=True,
            )
        )
    return out


DIRECTIONS: Final[tuple[str, ...]] = ("increase", "decrease", "both")
# The units a measurement (and so a rollback threshold) is in.
UNITS: Final[tuple[str, ...]] = ("us", "req/s", "score", "share")
_GUARDRAIL_KEYS: Final[frozenset[str]] = frozenset(
    {"metric", "label", "direction", "tolerance", "critical", "stage", "min_effect"}
)
# Tolerances are relative to the baseline: 1000 is already "100000 % worse is fine".
MAX_TOLERANCE: Final[float] = 1000.0
# No latency, rate or score a trace can hold comes near this; past it a number is a typo.
MAX_MAGNITUDE: Final[float] = 1e15
MAX_WINDOW_REQUESTS: Final[int] = 1_000_000_000


def load_guardrails(path: Path) -> list[Guardrail]:
    """A guardrail set from TOML: [[guardrail]] tables with metric, direction, tolerance, critical
    and optionally stage (for stage_p99), min_effect and label."""
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise WorkbenchError(str(path), f"cannot read guardrails: {exc.strerror or exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise WorkbenchError(str(path), f"malformed guardrails TOML: {exc}") from exc
    entries = doc.get("guardrail")
    if not isinstance(entries, list) or not entries:
        raise WorkbenchError(str(path), "no [[guardrail]] tables")
    return [_guardrail(e, f"{path}: guardrail {i}") for i, e in enumerate(entries, start=1)]


def _guardrail(e: object, where: str) -> Guardrail:
    """One [[guardrail]] table, every field checked; WorkbenchError naming `where` and the key."""
    if not isinstance(e, dict):
        raise WorkbenchError(where, f"must be a table (got {type(e).__name__})")
    unknown = sorted(set(e) - _GUARDRAIL_KEYS)
    if unknown:
        raise WorkbenchError(
            where, f"unknown key {unknown[0]!r} (keys: {', '.join(sorted(_GUARDRAIL_KEYS))})"
        )
    metric, stage = e.get("metric"), e.get("stage")
    if metric not in METRICS:
        raise WorkbenchError(where, f"metric must be one of {', '.join(METRICS)}")
    if (metric == "stage_p99") != (stage is not None) or (
        stage is not None and stage not in STAGES
    ):
        raise WorkbenchError(where, f"stage_p99 needs a stage from {', '.join(STAGES)}")
    direction = e.get("direction")
    if direction not in DIRECTIONS:
        raise WorkbenchError(where, f"direction must be one of {', '.join(DIRECTIONS)}")
    if "tolerance" not in e:
        raise WorkbenchError(f"{where} tolerance", "is required")
    tol = finite(e["tolerance"], f"{where} tolerance", 0.0, MAX_TOLERANCE)
    floor = finite(e.get("min_effect", 0.0), f"{where} min_effect", 0.0, MAX_MAGNITUDE)
    critical = e.get("critical", False)
    if not isinstance(critical, bool):
        raise WorkbenchError(f"{where} critical", "must be true or false")
    label = e.get("label", f"{stage} p99" if stage else str(metric))
    if not isinstance(label, str) or not label.strip():
        raise WorkbenchError(f"{where} label", "must be a non-empty string")
    return Guardrail(
        metric=str(metric),
        label=label,
        direction=str(direction),
        tolerance=tol,
        critical=critical,
        stage=stage if isinstance(stage, str) else None,
        min_effect=floor,
    )


def check_criterion(c: RollbackCriterion, where: str = "rollback criterion") -> RollbackCriterion:
    """c, if every field is in range: a known metric and unit, > or <, a finite threshold (a
    share within 0..1) and a positive window; else WorkbenchError naming the field."""
    base, _, stage = c.metric.partition(":")
    if base not in METRICS or (stage and (base != "stage_p99" or stage not in STAGES)):
        raise WorkbenchError(
            f"{where} metric", f"unknown metric {c.metric!r} (one of {', '.join(METRICS)})"
        )
    if c.op not in (">", "<"):
        raise WorkbenchError(f"{where} op", f"must be '>' or '<' (got {c.op!r})")
    if c.unit not in UNITS:
        raise WorkbenchError(
            f"{where} unit", f"unknown unit {c.unit!r} (one of {', '.join(UNITS)})"
        )
    lo, hi = (0.0, 1.0) if c.unit == "share" else (-MAX_MAGNITUDE, MAX_MAGNITUDE)
    if c.unit in ("us", "req/s"):
        lo = 0.0
    finite(c.threshold, f"{where} threshold", lo, hi)
    whole(c.window_requests, f"{where} window", 1, MAX_WINDOW_REQUESTS)
    return c


def throughput(arrival_us: F64, end_us: F64) -> Measurement:
    """Completed requests per second of the run's span (first arrival to last completion), with
    the dispersion of completions per time window."""
    ends = end_us[np.isfinite(end_us)]
    if ends.size == 0:
        return Measurement("req/s")
    start = float(np.nanmin(arrival_us)) if np.isfinite(arrival_us).any() else float(ends.min())
    span = float(ends.max()) - start
    if span <= 0:
        return Measurement("req/s")
    n_win = int(min(MAX_THROUGHPUT_WINDOWS, max(1, ends.size // MIN_REQUESTS_PER_WINDOW)))
    idx = np.minimum(((ends - start) / (span / n_win)).astype(np.int64), n_win - 1)
    counts = np.bincount(idx, minlength=n_win)
    return Measurement(
        "req/s",
        successes=int(ends.size),
        trials=int(ends.size),
        exposure_s=span / 1e6,
        dispersion=stats.dispersion_index(counts),
    )


def measure(g: Guardrail, s: RunSamples) -> Measurement:
    """The raw material of guardrail g in run s."""
    if g.metric in ("e2e_p95", "e2e_p99"):
        return Measurement("us", s.latency_us, QUANTILE_OF[g.metric])
    if g.metric == "stage_p99":
        sample = s.stage_us.get(g.stage or "", np.empty(0))
        return Measurement("us", sample, QUANTILE_OF[g.metric])
    if g.metric == "throughput":
        return throughput(s.arrival_us, s.end_us)
    if g.metric == "quality":
        return Measurement("score", s.quality, QUANTILE_OF["quality"])
    if g.metric == "fallback_rate":
        return Measurement("share", successes=int((s.fallback_ops > 0).sum()), trials=s.n)
    if g.metric == "recompile_rate":
        return Measurement("share", successes=int((s.recompile_ops > 0).sum()), trials=s.n)
    raise ValueError(f"unknown guardrail metric {g.metric!r}")


def allowed_change(g: Guardrail, baseline_value: float) -> float:
    """How far the candidate may move in the bad direction before the guardrail trips."""
    return max(g.tolerance * abs(baseline_value), g.min_effect)


def window_noise(m: Measurement, window: int, alpha: float = 0.05) -> float:
    """Half-width of m's (1 - alpha) interval over `window` requests of the same traffic: the
    baseline's own interval, scaled by sqrt(n / window) (quantiles: percentile bootstrap;
    throughput: quasi-Poisson; shares: Wilson at the baseline share)."""
    if m.sample is not None:
        _, lo, hi = stats.bootstrap_quantile(m.sample, m.quantile, alpha=alpha)
        return (hi - lo) / 2 * math.sqrt(m.n / window)
    z = stats.normal_ppf(1 - alpha / 2)
    if m.exposure_s > 0:
        return m.value() * z * math.sqrt(m.dispersion / window)
    _, lo, hi = stats.wilson_interval(round(m.value() * window), window, alpha)
    return (hi - lo) / 2


def rollback_criteria(guardrails: list[Guardrail], baseline: RunSamples) -> list[RollbackCriterion]:
    """One explicit trip wire per guardrail with data: the tolerated edge around the baseline,
    moved out to the noise of one watch window when that is wider (no rollback on noise)."""
    out = []
    for g in guardrails:
        m = measure(g, baseline)
        base = m.value()
        if m.n == 0 or not math.isfinite(base):
            continue
        noise = window_noise(m, ROLLBACK_WINDOW_REQUESTS)
        edge = max(allowed_change(g, base), noise)
        # "both" guardrails watch the bad side that matters for latency-like metrics first.
        sides = [">", "<"] if g.direction == "both" else [">" if g.direction == "increase" else "<"]
        for op in sides:
            out.append(
                RollbackCriterion(
                    metric=g.metric if g.stage is None else f"{g.metric}:{g.stage}",
                    label=g.label,
                    op=op,
                    threshold=base + edge if op == ">" else base - edge,
                    unit=m.unit,
                    window_requests=ROLLBACK_WINDOW_REQUESTS,
                    source="guardrail",
                    noise=noise,
                )
            )
    return out
