"""The brief that opens the closure summary (DESIGN §8): what regressed, why, what fixes it, the
verdict, the rollback plan and open follow-ups, in plain words and built only from the summary.

`build_brief(doc)` is stored in the summary as doc["brief"] (JSON and Markdown show the same
lines); `lines_of` gives the app's Close screen the very same lines (summary.brief_lines).
Every number is taken from the summary's own sections, so the brief, the tables and the app agree.
"""

from __future__ import annotations

from typing import Any

from accel.stats import level_text
from workbench.triage.numbers_text import (
    fmt_ci,
    fmt_pct,
    fmt_signed,
    fmt_us,
    fmt_value,
)
from workbench.triage.readings import READINGS

# Tags that say where in the fleet a run was taken, in the order a reader wants them.
WHERE_KEYS: tuple[tuple[str, str], ...] = (
    ("model", "model"),
    ("workload", "serving"),
    ("hardware", "on"),
    ("host", "host"),
    ("tag:region", "region"),
)


def _value(v: Any) -> str:
    return "unknown" if v is None else str(v)


def _row(doc: dict[str, Any], metric: str, quantile: str) -> dict[str, Any] | None:
    imp = doc.get("impact")
    rows = imp["rows"] if imp else []
    return next((r for r in rows if r["metric"] == metric and r["quantile"] == quantile), None)


def _change_tags(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Tags that differ between the failing run and the comparator."""
    rep = doc.get("reproduction")
    h = doc["header"]
    if not rep:
        return []
    out = []
    for t in rep["tags"]:
        before, after = t["values"].get(h["comparator"]), t["values"].get(h["failing"])
        if before != after:
            out.append({"key": t["key"], "before": before, "after": after})
    return out


def _slo(doc: dict[str, Any]) -> dict[str, Any] | None:
    """The LLM-serving SLO the verdict was read in, when it is not end-to-end latency."""
    imp = doc.get("impact")
    slo: dict[str, Any] | None = imp.get("primary_slo") if imp else None
    return slo


def _headline_metric(doc: dict[str, Any]) -> str:
    """The impact rows the brief leads with: the paging SLO's, else end to end."""
    slo = _slo(doc)
    return str(slo["metric"]) if slo else "end-to-end"


def _what(doc: dict[str, Any]) -> str:
    h = doc["header"]
    headline = _headline_metric(doc)
    p99, p95 = _row(doc, headline, "p99"), _row(doc, headline, "p95")
    if p99 is None or p95 is None:
        return "Not measured yet: the incident has no failing / comparator pair."
    level = round(100 * doc["impact"]["confidence_level"])
    unit = f" {p99['unit']}" if p99.get("unit") else ""
    text = (
        f"{headline} p99 {fmt_signed(p99['delta_us'])} ({fmt_pct(p99['delta_pct'])}, {level}% CI "
        f"{fmt_ci(p99['ci_low_us'], p99['ci_high_us'])}; {fmt_us(p99['failing_us'])} vs "
        f"{fmt_us(p99['comparator_us'])}, n = {p99['n_failing']} / {p99['n_comparator']}{unit}), "
        f"p95 {fmt_signed(p95['delta_us'])} (CI {fmt_ci(p95['ci_low_us'], p95['ci_high_us'])}), "
        f"run {h['failing']} vs {h['comparator']}"
    )
    e99 = _row(doc, "end-to-end", "p99") if _slo(doc) else None
    if e99 is not None:
        text += (
            f"; end-to-end p99 {fmt_signed(e99['delta_us'])} (CI "
            f"{fmt_ci(e99['ci_low_us'], e99['ci_high_us'])}, n = {e99['n_failing']} / "
            f"{e99['n_comparator']} requests)"
        )
    for _, metric, words, _ in READINGS:
        e99, e95 = _row(doc, metric, "p99"), _row(doc, metric, "p95")
        if e99 is not None and e95 is not None:
            # The verdict rests on these, not on the observed gaps before them.
            text += (
                f"; {words}, the verdict's reading, p99 {fmt_signed(e99['delta_us'])} "
                f"({level_text(e99['row_confidence_level'])} CI "
                f"{fmt_ci(e99['ci_low_us'], e99['ci_high_us'])}), p95 "
                f"{fmt_signed(e95['delta_us'])} (CI {fmt_ci(e95['ci_low_us'], e95['ci_high_us'])})"
            )
    change = _change_tags(doc)
    if change:
        text += ", since " + ", ".join(
            f"{c['key']} {_value(c['before'])} → {_value(c['after'])}" for c in change
        )
    runs = {r["role"]: r for r in doc["reproduction"]["runs"]}
    if runs.get("failing", {}).get("imported_at"):
        text += f" (failing run of {runs['failing']['imported_at']})"
    where = _where(doc)
    return text + (f". Where: {where}." if where else ".")


def _failing_tags(doc: dict[str, Any]) -> dict[str, Any]:
    rep = doc.get("reproduction")
    failing = doc["header"]["failing"]
    return {t["key"]: t["values"].get(failing) for t in rep["tags"]} if rep else {}


def _where(doc: dict[str, Any]) -> str:
    tags = _failing_tags(doc)
    return ", ".join(f"{label} {tags[k]}" for k, label in WHERE_KEYS if tags.get(k))


def _why(doc: dict[str, Any]) -> list[str]:
    loc = doc.get("localization")
    if loc is None:
        return ["Not localized yet."]
    mech = loc["mechanism"] or "unclassified"
    if loc.get("secondary_mechanism"):
        mech += f" (then {loc['secondary_mechanism']})"
    out = [f"{mech}; origin {loc['origin']} ({loc['origin_name']}) → manifest {loc['manifest']}."]
    ev = doc.get("mechanism_evidence")
    if ev and ev["facts"]:
        facts = "; ".join(
            f"{f['label']} {f['failing_text']} vs {f['comparator_text']} "
            f"(n = {f['n_failing']:,} / {f['n_comparator']:,} {f['n_label']})"
            for f in ev["facts"]
        )
        out.append(f"{facts} [{ev['query']}].")
    swap = next((c for c in loc["claims"] if c["query"].startswith("replay:plan_swap")), None)
    p99 = _row(doc, "end-to-end", "p99")
    if swap and "p99_share" in swap["numbers"] and p99 is not None:
        out.append(
            f"the comparator's {loc['origin']} decisions remove "
            f"{100 * swap['numbers']['p99_share']:.0f}% of the p99 gap in replay "
            f"(n = {p99['n_failing']} / {p99['n_comparator']})."
        )
    manifest = _row(doc, loc["manifest"], "p95")
    slo = _slo(doc)
    if manifest is not None and slo is not None:
        out.append(
            f"{loc['manifest']} part of {slo['metric']}, p95 {fmt_signed(manifest['delta_us'])} "
            f"(95% CI {fmt_ci(manifest['ci_low_us'], manifest['ci_high_us'])}, n = "
            f"{manifest['n_failing']} / {manifest['n_comparator']} {slo['unit']})."
        )
    elif manifest is not None:
        out.append(
            f"{loc['manifest']} p95 own time {fmt_signed(manifest['delta_us'])} (95% CI "
            f"{fmt_ci(manifest['ci_low_us'], manifest['ci_high_us'])}, n = "
            f"{manifest['n_failing']} / {manifest['n_comparator']})."
        )
    return out


def _fix(doc: dict[str, Any]) -> str:
    fix = doc.get("fix")
    cand = doc["header"]["candidate"]
    if not cand or not fix:
        return "No fix candidate yet."
    label = f"; {fix['label']}" if fix.get("label") else ""
    if fix["tags"]:
        tags = "; ".join(
            f"{t['key']} {_value(t['candidate'])} (failing {_value(t['failing'])}, comparator "
            f"{_value(t['comparator'])})"
            for t in fix["tags"]
        )
        text = f"{cand}: {tags}{label}."
    else:
        text = f"{cand}{label}: the failing run's tags (the fix is not in its tags)."
    res = (doc.get("closed_loop") or {}).get("result_run")
    row = next((r for r in res["rows"] if r["quantile"] == "p99"), None) if res else None
    if row is not None:
        text += (
            f" p99 {fmt_us(row['candidate_us'])} vs {fmt_us(row['failing_us'])} failing "
            f"({fmt_signed(row['delta_us'])}, 95% CI {fmt_ci(row['ci_low_us'], row['ci_high_us'])}"
            f", n = {row['n_candidate']} / {row['n_failing']})."
        )
    return text


def _verdict(doc: dict[str, Any]) -> list[str]:
    v = doc.get("validation")
    if v is None:
        return ["No candidate validated yet."]
    first = v["reasons"][0] if v["reasons"] else ""
    out = [f"{v['candidate']} {v['verdict']}: {first}"]
    out += [
        f"Earlier: {h['candidate']} {h['verdict']}: {h['reasons'][0] if h['reasons'] else ''}"
        for h in v["history"]
        if h["candidate"] != v["candidate"]
    ]
    return out


def _rollback(doc: dict[str, Any]) -> list[str]:
    crit = doc.get("rollback_criteria") or []
    if not crit:
        return ["No rollback criteria yet."]
    change = _change_tags(doc)
    target = (
        ", ".join(f"{c['key']} {_value(c['before'])}" for c in change)
        if change
        else "the comparator's configuration"
    )
    watcher = (doc.get("fix") or {}).get("watcher") or "unassigned"
    # The end-to-end tail first; the rest are counted, and listed under Rollback criteria.
    shown = [c for c in crit if c["metric"].startswith("e2e_")] or crit[:2]
    trips = "; ".join(
        f"{c['label']} {c['op']} {fmt_value(c['threshold'], c['unit'])}"
        + (f" (noise ±{fmt_value(c['noise'], c['unit'])})" if c.get("noise") else "")
        for c in shown
    )
    more = len(crit) - len(shown)
    return [
        f"to {target} if over {crit[0]['window_requests']} requests {trips}"
        + (f", or any of {more} more triggers" if more else "")
        + f"; watcher {watcher}."
    ]


def _follow_ups(doc: dict[str, Any]) -> list[str]:
    ups = [a for a in doc["owners"]["follow_ups"] if a["status"] == "open"]
    if not ups:
        return ["None open."]
    return [
        f"#{a['id']} {a['owner']}, due {a['due']}{' (OVERDUE)' if a['overdue'] else ''}: "
        f"{a['text']}"
        for a in ups
    ]


def suggested_title(doc: dict[str, Any]) -> str | None:
    """A title in plain words from the record, e.g. "p99 +124% on chat-serving after
    compiler_version 2.4.0 → 2.5.0 (fusion_memory_burst)"; None before a pair is measured."""
    slo = _slo(doc)
    p99 = _row(doc, _headline_metric(doc), "p99")
    if p99 is None or p99["delta_pct"] is None:
        return None
    tags = _failing_tags(doc)
    where = f" on {tags['workload']}" if tags.get("workload") else ""
    change = _change_tags(doc)
    after = (
        " after "
        + ", ".join(f"{c['key']} {_value(c['before'])} → {_value(c['after'])}" for c in change)
        if change
        else ""
    )
    loc = doc.get("localization")
    mech = f" ({loc['mechanism']})" if loc and loc.get("mechanism") else ""
    slo_word = f"{slo['slo'].upper()} " if slo else ""
    return f"{slo_word}p99 {fmt_pct(p99['delta_pct'])}{where}{after}{mech}"


def build_brief(doc: dict[str, Any]) -> dict[str, Any]:
    """The brief of a summary dict: each part as a list of plain-text sentences."""
    h = doc["header"]
    return {
        "headline": f"{h['id']} ({h['severity']}, {h['status']}): {h['title']}",
        "suggested_title": suggested_title(doc),
        "what_regressed": [_what(doc)],
        "why": _why(doc),
        "fix": [_fix(doc)],
        "verdict": _verdict(doc),
        "rollback_plan": _rollback(doc),
        "follow_ups": _follow_ups(doc),
    }


PARTS: tuple[tuple[str, str], ...] = (
    ("what_regressed", "What regressed"),
    ("why", "Why"),
    ("fix", "What fixes it"),
    ("verdict", "Validation"),
    ("rollback_plan", "Rollback plan"),
    ("follow_ups", "Open follow-ups"),
)


def lines_of(brief: dict[str, Any]) -> list[str]:
    """The brief as terminal lines: the headline, then "Part: sentence" and indented extras."""
    out = [brief["headline"]]
    for key, label in PARTS:
        first, *rest = brief[key]
        out.append(f"{label}: {first}")
        out += [f"  {line}" for line in rest]
    return out
