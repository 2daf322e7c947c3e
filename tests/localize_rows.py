"""Rows as bench/localize.py makes them (one pair, method and look), for its report's tests."""

from __future__ import annotations


def bench_row(
    fault: str, seed: int, look: int, origin: str, outcome: str, **kw: object
) -> dict[str, object]:
    """A profsim/store row of the full method; `fault` is "none" or "assembly" (its truth),
    keywords override any field (mechanism defaults to the origin)."""
    truth = "none" if fault == "none" else "assembly"
    out: dict[str, object] = {
        "generator": "profsim",
        "layout": "store",
        "profile": "h100",
        "fault": fault,
        "batching": "serial",
        "seed": seed,
        "look": look,
        "method": "full",
        "truth_origin": truth,
        "truth_mechanism": truth,
        "origin": origin,
        "mechanism": origin,
        "outcome": outcome,
        "triggered": outcome == "regression",
        "confidence": 0.9 if outcome == "regression" else 0.0,
        "decided_by": "direct" if outcome == "regression" else "none",
        "seconds": 0.1,
        "requests": 400,
    }
    out.update(kw)
    return out
