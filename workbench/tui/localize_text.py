"""Localize in plain words: the verdict lines, column headers with a legend, capped gains and the
caveat when the model's absolute times are far from the observed ones."""

from __future__ import annotations

import math
from typing import Any

from rich.text import Text

from workbench.tui.units import ms, pct

# (key, two-line header) of the replay table: cells read "observed/model" in ms.
REPLAY_COLUMNS: tuple[tuple[str, str], ...] = (
    ("stage", "stage\n"),
    ("f95", "failing\np95 obs/mdl"),
    ("f99", "failing\np99 obs/mdl"),
    ("c95", "comparator\np95 obs/mdl"),
    ("c99", "comparator\np99 obs/mdl"),
    ("shift", "unexplained\nshift ms"),
    ("mod", "model\ncovers"),
)
REPLAY_LEGEND = (
    "obs/mdl: observed / model-predicted time, ms. Unexplained shift: failing minus comparator "
    "time the model does not predict. O = origin, M = manifest."
)
# (key, two-line header) of the primary-metric table.
METRIC_COLUMNS: tuple[tuple[str, str], ...] = (
    ("bucket", "shape\nbucket"),
    ("n", "requests\nn"),
    ("mape", "cost model\nerror %"),
    ("rank", "rank\ncorr"),
    ("regret", "plan\nregret %"),
    ("fallback", "fallback\nshare"),
    ("plan", "plan\n"),
    ("static", "static\np99 ms"),
    ("adapted", "adapted\np99 ms"),
    ("gain", "p99 gain\nms"),
    ("recompile", "recompile\nms"),
)
METRIC_LEGEND = (
    "Cost model error: mean absolute % error of the compiler's cost estimates against measured "
    "op times (high = its plan choices rest on wrong costs). Rank corr: does it order ops right."
)
# Observed vs predicted p99 further apart than this factor: absolute model times are not to
# be read as times, only the differences between runs.
CAVEAT_FACTOR = 1.5
STRENGTH = {
    "plan_swap": "share of the gap removed by swapping in the comparator's plan for that stage",
    "residual": "0.9 x the share of the gap in that stage's unexplained shift",
}


def _iv(d: dict[str, Any] | None, level: str = "95%") -> str:
    if not d:
        return "-"
    return f"{ms(d.get('value'))} ms ({level} CI {ms(d.get('lo'))}..{ms(d.get('hi'))})"


def _reading(doc: dict[str, Any]) -> str:
    """The gaps of the second reading the verdict fired on, if it did ('' otherwise)."""
    # Tables of words and number formats: no data stack behind them.
    from workbench.triage.numbers_text import fmt_reading_level
    from workbench.triage.readings import READINGS

    for key, _, words, what in READINGS:
        eq = (doc.get("verdict") or {}).get(key) or {}
        fired = eq.get("fired") or {}
        if fired.get("value"):
            level = fmt_reading_level(fired)
            return (
                f" The verdict rests on the gaps {words} ({what}): "
                f"p99 {_iv(eq.get('p99'), level)}, p95 {_iv(eq.get('p95'), level)}."
            )
    return ""


def _n(doc: dict[str, Any]) -> str:
    """n of both runs, from the replay's latency row."""
    for row in _rows(doc):
        if row.get("id") == "latency":
            f, c = row.get("failing") or {}, row.get("comparator") or {}
            return f"n={f.get('n', '?')}/{c.get('n', '?')} requests"
    return ""


def _rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    rep = doc.get("replay")
    rows = rep.get("rows") if isinstance(rep, dict) else None
    return [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []


def support_text(loc: Any, doc: dict[str, Any]) -> str:
    """What backs the origin, named for what it is: a probability when the triage reports one,
    else the evidence-strength score with how it was computed."""
    prob = doc.get("origin_probability", getattr(loc, "probability", None))
    if isinstance(prob, int | float):
        return f"probability the origin is right {pct(prob)}"
    how = STRENGTH.get(str(doc.get("decided_by") or "plan_swap"), "fallback to the manifest")
    return f"evidence strength {pct(loc.confidence)} ({how}; a score, not a probability)"


def model_caveat(doc: dict[str, Any]) -> str | None:
    """One line when the model's p99 of the failing run is far from the observed p99."""
    for row in _rows(doc):
        if row.get("id") != "latency":
            continue
        f = row.get("failing") or {}
        obs, pred = f.get("observed_p99_us"), f.get("predicted_p99_us")
        if not _pos(obs) or not _pos(pred):
            return None
        ratio = obs / pred
        if 1 / CAVEAT_FACTOR <= ratio <= CAVEAT_FACTOR:
            return None
        return (
            f"Caveat: the model predicts the failing p99 at {ms(pred)} ms, observed {ms(obs)} ms "
            f"({ratio:.1f}x): read its differences between runs, not its absolute times."
        )
    return None


def _pos(x: Any) -> bool:
    return isinstance(x, int | float) and math.isfinite(x) and x > 0


def verdict_text(loc: Any, doc: dict[str, Any]) -> Text:
    """The verdict in plain words; every warning and the caveat on lines of their own (they wrap,
    never cut)."""
    text = Text.assemble(
        ("Starts in ", "bold"),
        (loc.origin, "bold reverse"),
        " (where the plan first diverged), ",
        ("shows in ", "bold"),
        (loc.manifest, "bold underline"),
        " (where the time is spent).\n",
        ("Mechanism: ", "bold"),
        (loc.mechanism or "unknown", "bold"),
        f", then {loc.secondary_mechanism}" if loc.secondary_mechanism else "",
        ".\n",
        ("Proof: ", "bold"),
        f"replaying with the comparator's {loc.origin} removes {pct(loc.explained_share)} of "
        f"the p99 gap; {support_text(loc, doc)}.\n",
        ("Gap: ", "bold"),
        f"p99 {_iv(doc.get('p99_gap_us'))}, p95 {_iv(doc.get('p95_gap_us'))}, {_n(doc)}."
        + _reading(doc),
    )
    caveat = model_caveat(doc)
    if caveat:
        text.append("\n" + caveat, "italic")
    for w in doc.get("warnings") or []:
        text.append("\nWARNING ", "bold reverse")
        text.append(f" {w}")
    return text


def capped_gain(gain_us: Any, gap_us: Any) -> tuple[str, bool]:
    """A predicted p99 gain shown against the gap it can close: 'gain/gap ms', capped at the gap
    (a fix cannot remove more than the whole regression); True when it was capped."""
    if not isinstance(gain_us, int | float) or not math.isfinite(gain_us):
        return "-", False
    if not _pos(gap_us):
        return ms(gain_us), False
    capped = gain_us > gap_us
    return f"{ms(min(gain_us, gap_us))}/{ms(gap_us)}", capped
