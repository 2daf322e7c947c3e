"""The impact section of the closure summary: p95/p99 deltas failing minus comparator, end to end
then per stage, each with its n and interval; the end-to-end rows are the triage's recorded
figures when there are some, followed by the gaps of the verdict's second reading (at equal
traffic, or of the queue-free tail) when it fired on them.
"""

from __future__ import annotations

import math
from typing import Any, Final

import numpy as np

from accel import stats
from accel.stages import STAGES
from workbench.incident.guardrails import RunSamples
from workbench.incident.incident import Incident
from workbench.incident.judge import CONFIDENCE, N_BOOT, SEED
from workbench.triage.numbers_text import UNSTORED_READING_LEVEL
from workbench.triage.readings import EQUAL_METRIC, LOAD_METRIC, QUEUE_FREE_METRIC

IMPACT_QUANTILES: Final[tuple[tuple[str, float], ...]] = (("p95", 0.95), ("p99", 0.99))


def finite(x: float) -> float | None:
    """x, or None where JSON has no number for it (NaN, inf)."""
    return float(x) if math.isfinite(x) else None


def delta_rows(
    label: str, x: np.ndarray, y: np.ndarray, x_name: str, y_name: str
) -> list[dict[str, Any]]:
    """p95 and p99 of x and y with the bootstrap CI of quantile(x) - quantile(y)."""
    rows = []
    nx, ny = int(stats.clean(x).size), int(stats.clean(y).size)
    for name, q in IMPACT_QUANTILES:
        d, lo, hi = stats.bootstrap_quantile_diff(
            x, y, q, n_boot=N_BOOT, seed=SEED, alpha=1 - CONFIDENCE
        )
        vy = float(stats.quantile(y, q))
        rows.append(
            {
                "metric": label,
                "quantile": name,
                f"{x_name}_us": finite(float(stats.quantile(x, q))),
                f"{y_name}_us": finite(vy),
                "delta_us": finite(d),
                "ci_low_us": finite(lo),
                "ci_high_us": finite(hi),
                "delta_pct": finite(100.0 * d / vy) if vy else None,
                f"n_{x_name}": nx,
                f"n_{y_name}": ny,
            }
        )
    return rows


TRIAGE_INTERVAL: Final[str] = "triage: the trigger's interval (steady state, block bootstrap)"
EXPORT_INTERVAL: Final[str] = "export: percentile bootstrap of every request"
EQUAL_INTERVAL: Final[str] = (
    "triage: both services replayed through the queue on the same arrivals (the verdict's "
    "reading; a further reading of the pair, so at its share of the error rate: the row's level)"
)
QUEUE_FREE_INTERVAL: Final[str] = (
    "triage: block bootstrap of each request's latency minus its waits for a server busy with "
    "other requests (the verdict's reading; a further reading of the pair, so at its share of "
    "the error rate: the row's level)"
)
# The queue-free tail read on the service alone (the failing run got less traffic).
SERVICE_INTERVAL: Final[str] = (
    "triage: block bootstrap of each request's service, its latency minus its waits for a "
    "server busy with other requests and for its batch to form, which the failing run's "
    "lighter load lengthens (the verdict's reading; a further reading of the pair, so at its "
    "share of the error rate: the row's level)"
)
LOAD_INTERVAL: Final[str] = (
    "triage: the comparator's service replayed through the queue at the failing run's arrival "
    "rate and at its own, on the same jobs and traffic (the verdict's reading; a further reading "
    "of the pair, so at its share of the error rate: the row's level)"
)
# Per reading the verdict can fire on: its claim-number prefix, fired flag, metric, interval.
_READINGS: Final[tuple[tuple[str, str, str, str], ...]] = (
    ("equal_traffic", "at_equal_traffic", EQUAL_METRIC, EQUAL_INTERVAL),
    ("queue_free_tail", "at_queue_free_tail", QUEUE_FREE_METRIC, QUEUE_FREE_INTERVAL),
    ("load_change", "at_load_change", LOAD_METRIC, LOAD_INTERVAL),
)


def recorded_tail(inc: Incident) -> dict[str, Any] | None:
    """The end-to-end tail gap the triage recorded (its stage_quantiles claim), if any."""
    claim = next((c for c in inc.claims if c.query == "stage_quantiles"), None)
    keys = ("p95_gap_ci", "p99_gap_ci", "failing_p99_us", "n_failing", "n_comparator")
    return dict(claim.numbers) if claim and all(k in claim.numbers for k in keys) else None


def _with_recorded(row: dict[str, Any], tail: dict[str, Any]) -> dict[str, Any]:
    q = row["quantile"]
    lo, hi = tail[f"{q}_gap_ci"]
    base = float(tail[f"comparator_{q}_us"])
    delta = float(tail[f"{q}_gap_us"])
    return {
        **row,
        "failing_us": finite(float(tail[f"failing_{q}_us"])),
        "comparator_us": finite(base),
        "delta_us": finite(delta),
        "ci_low_us": finite(float(lo)),
        "ci_high_us": finite(float(hi)),
        "delta_pct": finite(100.0 * delta / base) if base else None,
        "n_failing": int(tail["n_failing"]),
        "n_comparator": int(tail["n_comparator"]),
        "interval": TRIAGE_INTERVAL,
    }


SLO_INTERVAL: Final[str] = (
    "triage: percentile bootstrap of the SLO's samples (requests, or tokens for ITL), the "
    "metric the verdict is read in"
)


def recorded_slo(inc: Incident) -> dict[str, Any] | None:
    """The LLM-serving SLO the verdict was read in (its slo_samples claim's numbers), unless
    that SLO is end-to-end latency, whose rows the table has already."""
    claim = next((c for c in inc.claims if c.query == "slo_samples"), None)
    if claim is None or claim.numbers.get("slo") in (None, "e2e"):
        return None
    return dict(claim.numbers)


def _slo_rows(gaps: dict[str, Any], metric: str) -> list[dict[str, Any]]:
    """One SLO gap's p95/p99 rows as the triage bootstrapped them; n counts its unit."""
    rows = []
    for name, _ in IMPACT_QUANTILES:
        f, c, d = gaps["failing"][name], gaps["comparator"][name], gaps["gap_us"][name]
        base = c["value"]
        rows.append(
            {
                "metric": metric,
                "quantile": name,
                "failing_us": f["value"],
                "comparator_us": base,
                "delta_us": d["value"],
                "ci_low_us": d["lo"],
                "ci_high_us": d["hi"],
                "delta_pct": 100.0 * d["value"] / base if base and d["value"] is not None else None,
                "n_failing": int(gaps["n_failing"]),
                "n_comparator": int(gaps["n_comparator"]),
                "interval": SLO_INTERVAL,
                "unit": gaps["unit"],
            }
        )
    return rows


def _slo_table(slo: dict[str, Any], rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The SLO and each stage's part of it first, then end-to-end latency for context (its
    stages per request would be a second, contradicting split)."""
    out = _slo_rows(slo, slo["name"])
    for stage, gaps in (slo.get("stages") or {}).items():
        out += _slo_rows(gaps, stage)
    return out + [r for r in rows if r["metric"] == "end-to-end"]


def recorded_reading(inc: Incident) -> dict[str, Any] | None:
    """The trigger claim's numbers when the verdict fired on a second reading of the pair (the
    gaps at equal traffic, of the queue-free tail, or of the change of load)."""
    claim = next((c for c in inc.claims if c.query == "replay:trigger"), None)
    if claim is None or not any(claim.numbers.get(f) == 1.0 for _, f, _, _ in _READINGS):
        return None
    return dict(claim.numbers)


def _reading_rows(numbers: dict[str, Any], tail: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The gaps of the reading the verdict rests on, as rows beside the observed ones: no
    quantile of their own per run, intervals at the reading's level (1 - alpha/2 in records
    made before it was stored), percentages of the comparator's end-to-end quantile (the
    threshold's basis)."""
    prefix, _, metric, interval = next(r for r in _READINGS if numbers.get(r[1]) == 1.0)
    if prefix == "queue_free_tail" and numbers.get("queue_free_tail_with_formation") == 0.0:
        interval = SERVICE_INTERVAL
    level = float(numbers.get(f"{prefix}_level", UNSTORED_READING_LEVEL))
    rows = []
    for name, _ in IMPACT_QUANTILES:
        gap = float(numbers[f"{name}_{prefix}_gap_us"])
        base = float(tail[f"comparator_{name}_us"]) if tail else float("nan")
        rows.append(
            {
                "metric": metric,
                "quantile": name,
                "failing_us": None,
                "comparator_us": None,
                "delta_us": finite(gap),
                "ci_low_us": finite(float(numbers[f"{name}_{prefix}_lo_us"])),
                "ci_high_us": finite(float(numbers[f"{name}_{prefix}_hi_us"])),
                "delta_pct": finite(100.0 * gap / base) if base else None,
                "n_failing": int(tail["n_failing"]) if tail else 0,
                "n_comparator": int(tail["n_comparator"]) if tail else 0,
                "interval": interval,
                "row_confidence_level": level,
            }
        )
    return rows


def impact(
    failing: RunSamples,
    comparator: RunSamples,
    recorded: dict[str, Any] | None = None,
    reading: dict[str, Any] | None = None,
    slo: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """p95/p99 deltas failing - comparator, end to end then per stage, each with n and CI.

    The end-to-end rows are the triage's own figures when it recorded them (`recorded`, the
    stage_quantiles claim's numbers), so one gap has one interval in the claim, the impact
    table, the brief and the app, followed by the gaps of the second reading the verdict fired
    on (`reading`, the trigger claim's numbers); the stages are bootstrapped here. An LLM
    incident read in another SLO (`slo`, its slo_samples numbers) leads with that SLO's rows."""
    rows = delta_rows(
        "end-to-end", failing.latency_us, comparator.latency_us, "failing", "comparator"
    )
    for s in STAGES:
        rows += delta_rows(s, failing.stage_us[s], comparator.stage_us[s], "failing", "comparator")
    rows = [{**r, "interval": EXPORT_INTERVAL} for r in rows]
    if recorded is not None:
        rows = [_with_recorded(r, recorded) if r["metric"] == "end-to-end" else r for r in rows]
    if reading is not None:
        e2e = len(IMPACT_QUANTILES)  # the end-to-end rows come first
        rows = rows[:e2e] + _reading_rows(reading, recorded) + rows[e2e:]
    out: dict[str, Any] = {"confidence_level": CONFIDENCE, "rows": rows}
    if slo is not None:
        out["rows"] = _slo_table(slo, rows)
        out["primary_slo"] = {"slo": slo["slo"], "metric": slo["name"], "unit": slo["unit"]}
    return out
