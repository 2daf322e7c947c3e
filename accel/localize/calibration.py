"""Confidence as a probability: the chance that the origin is right (issue 34, item 5).

The bootstrap's share of resamples naming the same origin (the stability score) measures how
stable the decision is, not whether it is right: a systematic mistake is stable too. The
confidence reported is a logistic function of that score and of what decided the origin (a plan
swap, a residual shift, direct evidence, or only the manifest stage) and whether the trace
witnessed a mechanism, fitted by bench/calibrate.py on labelled pairs of the corpora the method
was tuned on; its calibration is then measured on the blind half, which the fit never reads.
The coefficients are data (calibration.json), rewritten by that bench.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Final

FEATURES: Final[tuple[str, ...]] = (
    "bias",
    "stability",
    "plan_swap",
    "residual",
    "direct",
    "unknown_mechanism",
)
_FIT: Final[Path] = Path(__file__).with_name("calibration.json")


def features(stability: float, decided_by: str, mechanism: str) -> list[float]:
    """The fit's inputs of one verdict (a manifest-decided origin is the baseline)."""
    s = min(max(stability, 0.0), 1.0) if math.isfinite(stability) else 0.0
    return [
        1.0,
        s,
        1.0 if decided_by == "plan_swap" else 0.0,
        1.0 if decided_by == "residual" else 0.0,
        1.0 if decided_by == "direct" else 0.0,
        1.0 if mechanism == "unknown" else 0.0,
    ]


def load_fit(path: Path = _FIT) -> dict[str, object]:
    """The fitted coefficients and what they were fitted on."""
    doc: dict[str, object] = json.loads(path.read_text(encoding="utf-8"))
    return doc


_DOC: Final[dict[str, object]] = load_fit()
_COEF: Final[list[float]] = [float(x) for x in _DOC["coefficients"]]  # type: ignore[attr-defined]


def calibrated(stability: float, decided_by: str, mechanism: str) -> float:
    """P(origin right) of a verdict, by the fitted logistic model."""
    z = sum(w * x for w, x in zip(_COEF, features(stability, decided_by, mechanism), strict=True))
    return 1.0 / (1.0 + math.exp(-max(min(z, 40.0), -40.0)))


def fitted_on() -> str:
    """What the coefficients were fitted on, in words."""
    return str(_DOC.get("fitted_on", "unknown data"))
