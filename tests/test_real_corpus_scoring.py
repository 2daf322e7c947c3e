"""The real-corpus bench's scoring (bench/real_corpus.py) and the confidence fit (bench/calibrate.py)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import calibrate
import real_corpus

from accel.localize.calibration import FEATURES, calibrated, features, load_fit


def row(
    truth: str, outcome: str, origin: str | None, conf: float, mech: str = "x"
) -> dict[str, Any]:
    return {
        "pair_id": f"{truth}-{origin}-{conf}",
        "truth_stage": truth,
        "truth_mechanism": "x",
        "outcome": outcome,
        "origin": origin,
        "mechanism": mech,
        "confidence": conf,
    }


def test_a_a_pairs_are_right_when_not_called_and_faults_need_origin_and_outcome() -> None:
    assert real_corpus.right(row("none", "no regression", None, 0.0)) == (True, True)
    assert real_corpus.right(row("none", "regression", "ingress", 0.9)) == (False, False)
    assert real_corpus.right(row("lowering", "regression", "lowering", 0.9)) == (True, True)
    assert real_corpus.right(row("lowering", "regression", "lowering", 0.9, "y")) == (True, False)
    assert real_corpus.right(row("lowering", "inconclusive", "lowering", 0.0)) == (False, False)
    assert real_corpus.right({**row("lowering", "regression", "lowering", 1.0), "error": "x"}) == (
        False,
        False,
    )


def test_summary_counts_per_stage_false_alarms_and_the_ece() -> None:
    rows = [
        row("lowering", "regression", "lowering", 0.9),
        row("lowering", "regression", "ingress", 0.9),
        row("assembly", "no regression", None, 0.0),
        row("none", "regression", "execution", 0.5),
        row("none", "no regression", None, 0.0),
    ]
    s = real_corpus.summarize(rows)
    assert (s["fault_pairs"], s["aa_pairs"], s["aa_false_alarms"]) == (3, 2, 1)
    assert s["origin"] == pytest.approx(1 / 3)
    assert s["origin_by_stage"] == {"assembly": "0/1", "lowering": "1/2"}
    # Both called fault pairs sit in the 0.8-1.0 bin at 0.9, one right: |0.9 - 0.5| = 0.4.
    assert s["ece"] == pytest.approx(0.4)
    assert s["median_confidence_wrong_origin"] == pytest.approx(0.9)


def test_the_fit_recovers_a_known_logistic_model() -> None:
    rng = np.random.default_rng(3)
    true = np.array([-2.0, 3.0, 1.0, 0.5, 0.0, -1.5])
    data = []
    for _ in range(4000):
        x = features(
            float(rng.random()),
            str(rng.choice(["plan_swap", "residual", "direct", "manifest"])),
            str(rng.choice(["recompile", "unknown"])),
        )
        p = 1.0 / (1.0 + np.exp(-(np.array(x) @ true)))
        data.append((x, float(rng.random() < p), "a" if rng.random() < 0.5 else "b"))
    beta = calibrate.fit(data)
    assert np.allclose(beta, true, atol=0.5)


def test_the_stored_fit_gives_a_probability_and_says_what_it_was_fitted_on() -> None:
    doc = load_fit()
    assert len(doc["coefficients"]) == len(FEATURES)  # type: ignore[arg-type]
    assert "pairs" in str(doc["fitted_on"])
    for stability in (0.0, 0.5, 1.0):
        for decided in ("plan_swap", "residual", "direct", "manifest"):
            assert 0.0 < calibrated(stability, decided, "recompile") < 1.0
