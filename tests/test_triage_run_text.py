"""What the app says when a triage localizes nothing: the trigger's outcome, with its interval."""

from __future__ import annotations

from workbench.tui.triage_run import no_regression_text

GAP = {"p99_gap_us": {"value": 4000.0, "lo": -1500.0, "hi": 9000.0}}


def test_an_inconclusive_pair_says_so_and_why() -> None:
    reason = (
        "too few requests to tell: the p99 gap is above the practical threshold but its "
        "interval includes zero (about 900 requests a run would confirm a gap this size); p95 ..."
    )
    text = no_regression_text({**GAP, "verdict": {"outcome": "inconclusive", "reason": reason}})
    assert text.startswith("inconclusive (p99 gap CI -1.50..9.00 ms): too few requests to tell;")
    assert "threshold" not in text  # the first clause only: one status line


def test_no_regression_keeps_its_wording() -> None:
    doc = {**GAP, "verdict": {"outcome": "no regression", "reason": "intervals include zero"}}
    assert no_regression_text(doc).startswith("no stage explains a significant tail gap (p99")
