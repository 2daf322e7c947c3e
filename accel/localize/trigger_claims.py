"""The trigger's claims and the verdict fields every outcome shares: the observed gaps with their
intervals and thresholds, the trigger's outcome and reason, the gaps at equal traffic, of the
queue-free tail or of the change of load when they were read, and the base re-run's
reproduction, as the verdict states them."""

from __future__ import annotations

from accel.localize.equal_traffic import EqualTraffic
from accel.localize.gaps import at_q
from accel.localize.records import Claim, _Common
from accel.localize.requeue import REPRO_QNAMES, Reproduction
from accel.localize.trigger import Trigger
from accel.ops import F64


def trigger_claims(
    trig: Trigger,
    lf: F64,
    lc: F64,
    alpha: float,
    method: str,
    hw_doc: dict[str, dict[str, float]],
) -> tuple[list[Claim], _Common]:
    """The gap and trigger claims of failing latencies lf vs comparator lc, and the fields of
    the Localization that every outcome carries."""
    tg = trig.gaps
    gaps, cis, rel = tg.gap, tg.ci, tg.rel
    claims: list[Claim] = [
        Claim(
            f"p95 latency {at_q(lf, 0.95):.0f} us vs {at_q(lc, 0.95):.0f} us "
            f"(gap {gaps['p95']:+.0f} us, {1 - alpha:.0%} CI {cis['p95'][0]:+.0f}.."
            f"{cis['p95'][1]:+.0f}); p99 gap {gaps['p99']:+.0f} us (CI {cis['p99'][0]:+.0f}.."
            f"{cis['p99'][1]:+.0f}); practical threshold {trig.threshold_us['p95']:.0f} / "
            f"{trig.threshold_us['p99']:.0f} us ({trig.threshold_basis})",
            {
                "p95_gap_us": gaps["p95"],
                "p99_gap_us": gaps["p99"],
                "p95_rel": rel["p95"],
                "p99_rel": rel["p99"],
                "p95_threshold_us": trig.threshold_us["p95"],
                "p99_threshold_us": trig.threshold_us["p99"],
                "block_failing": float(tg.block[0]),
                "block_comparator": float(tg.block[1]),
                **{
                    f"{q}_queue_{e}_us": v
                    for q, ci in tg.queue_ci.items()
                    for e, v in zip(("lo", "hi"), ci, strict=True)
                },
                "n_failing": float(lf.size),
                "n_comparator": float(lc.size),
            },
            "moving-block bootstrap of the quantile gap (block length from each run's "
            "autocorrelation)"
            + (
                ", widened to the queue bootstrap's interval (jobs and arrival gaps of each run "
                "resampled and replayed through its queue)"
                if tg.queue_ci
                else ""
            )
            + "; practical threshold",
        ),
        Claim(
            f"{trig.outcome}: {trig.reason}",
            {
                **trig.comparator_halves,
                **(
                    {"requests_needed": float(trig.requests_needed)}
                    if trig.requests_needed is not None
                    else {}
                ),
                **equal_numbers(trig),
                **queue_free_numbers(trig),
                **load_numbers(trig),
                **exceedance_numbers(trig),
            },
            "trigger",
        ),
    ]
    common: _Common = {
        "p95_gap_us": gaps["p95"],
        "p99_gap_us": gaps["p99"],
        "p95_gap_ci": cis["p95"],
        "p99_gap_ci": cis["p99"],
        "n_failing": lf.size,
        "n_comparator": lc.size,
        "p95_rel_gap": rel["p95"],
        "p99_rel_gap": rel["p99"],
        "method": method,
        "outcome": trig.outcome,
        "outcome_reason": trig.reason,
        "threshold_us": dict(trig.threshold_us),
        "threshold_basis": trig.threshold_basis,
        "hardware_gap": hw_doc,
        "equal_traffic": equal_doc(trig),
        "queue_free_tail": queue_free_doc(trig),
        "load_change": load_doc(trig),
        "tail_exceedance": exceedance_doc(trig),
    }
    return claims, common


def rerun_doc(rep: Reproduction) -> dict[str, float]:
    """What the verdict states of a base re-run: tolerance, reproduced, and per quantile the
    observed and re-run values and their relative error."""
    out: dict[str, float] = {"tolerance": rep.tolerance, "reproduced": float(rep.reproduced)}
    for q in REPRO_QNAMES:
        out[f"observed_{q}_us"] = rep.observed_us[q]
        out[f"rerun_{q}_us"] = rep.rerun_us[q]
        out[f"rel_error_{q}"] = rep.rel_error[q]
    return out


def _reading_doc(
    gap: dict[str, float], ci: dict[str, tuple[float, float]], fired: dict[str, float]
) -> dict[str, dict[str, float]]:
    out = {q: {"value": v, "lo": ci[q][0], "hi": ci[q][1]} for q, v in gap.items()}
    out["fired"] = fired
    return out


def _reading_numbers(
    name: str, gap: dict[str, float], ci: dict[str, tuple[float, float]]
) -> dict[str, float]:
    out: dict[str, float] = {}
    for q, v in gap.items():
        out[f"{q}_{name}_gap_us"] = v
        out[f"{q}_{name}_lo_us"], out[f"{q}_{name}_hi_us"] = ci[q]
    return out


def _replayed_doc(
    et: EqualTraffic | None, fired: bool, level: float, **extra: float
) -> dict[str, dict[str, float]]:
    if et is None:
        return {}
    return _reading_doc(
        et.gap,
        et.ci,
        {"value": float(fired), "replays": float(et.replays), "level": level, **extra},
    )


def _replayed_numbers(
    name: str, et: EqualTraffic | None, fired: bool, level: float, **extra: float
) -> dict[str, float]:
    if et is None:
        return {}
    return {
        f"{name}_replays": float(et.replays),
        f"at_{name}": float(fired),
        f"{name}_level": level,
        **extra,
        **_reading_numbers(name, et.gap, et.ci),
    }


def equal_doc(trig: Trigger) -> dict[str, dict[str, float]]:
    """Localization.equal_traffic of a trigger."""
    return _replayed_doc(trig.equal_traffic, trig.at_equal_traffic, trig.further_level)


def equal_numbers(trig: Trigger) -> dict[str, float]:
    """The gaps at equal traffic as claim numbers (empty when they were not read)."""
    et, at = trig.equal_traffic, trig.at_equal_traffic
    return _replayed_numbers("equal_traffic", et, at, trig.further_level)


def queue_free_doc(trig: Trigger) -> dict[str, dict[str, float]]:
    """Localization.queue_free_tail of a trigger."""
    st = trig.queue_free_tail
    if st is None:
        return {}
    fired = {
        "value": float(trig.at_queue_free_tail),
        "with_formation": float(trig.queue_free_formation),
        "level": trig.further_level,
    }
    doc = _reading_doc(st.gap, st.ci, fired)
    doc["threshold_us"] = dict(trig.queue_free_threshold_us)
    return doc


def queue_free_numbers(trig: Trigger) -> dict[str, float]:
    """The queue-free tail's gaps as claim numbers (empty when they were not read)."""
    st = trig.queue_free_tail
    if st is None:
        return {}
    return {
        "at_queue_free_tail": float(trig.at_queue_free_tail),
        "queue_free_tail_with_formation": float(trig.queue_free_formation),
        "queue_free_tail_level": trig.further_level,
        **_reading_numbers("queue_free_tail", st.gap, st.ci),
        **{f"{q}_queue_free_tail_threshold_us": v for q, v in trig.queue_free_threshold_us.items()},
    }


def load_doc(trig: Trigger) -> dict[str, dict[str, float]]:
    """Localization.load_change of a trigger (its "fired" holds the rate ratio too)."""
    lg, at, level = trig.load_change, trig.at_load_change, trig.further_level
    return _replayed_doc(lg, at, level, rate_ratio=trig.rate_ratio)


def load_numbers(trig: Trigger) -> dict[str, float]:
    """The gaps of the change of load as claim numbers (empty when they were not read)."""
    lg, at, level = trig.load_change, trig.at_load_change, trig.further_level
    return _replayed_numbers("load_change", lg, at, level, rate_ratio=trig.rate_ratio)


def exceedance_doc(trig: Trigger) -> dict[str, float]:
    """Localization.tail_exceedance of a trigger: the test's figures, with n, and "fired"
    (1.0 when it decided); {} when it was not read or could not be."""
    e = trig.exceedance
    if e is None:
        return {}
    return {
        "p_value": e.p_value,
        "level_us": e.level_us,
        "exceed_failing": float(e.exceed_failing),
        "n_failing": float(e.n_failing),
        "exceed_comparator": float(e.exceed_comparator),
        "n_comparator": float(e.n_comparator),
        "expected": e.expected,
        "comparator_max_us": e.comparator_max_us,
        "tail_mean_us": e.tail_mean_us,
        "levels": float(e.levels),
        "fired": 1.0 if trig.at_exceedance else 0.0,
    }


def exceedance_numbers(trig: Trigger) -> dict[str, float]:
    return {f"tail_exceedance_{k}": v for k, v in exceedance_doc(trig).items()}
