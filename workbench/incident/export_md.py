"""Markdown rendering of the closure summary dict (summary.build_summary): GitHub-flavoured tables.

It renders only what the dict holds, so the Markdown and the JSON export carry the same content.
"""

from __future__ import annotations

import json
from typing import Any, Final
from urllib.parse import quote

from accel.stats import level_text
from workbench.incident import closure_md
from workbench.incident.brief import PARTS
from workbench.incident.md_text import code, esc, opt_esc
from workbench.incident.md_text import table as _table
from workbench.triage.numbers_text import fmt_ci as _ci
from workbench.triage.numbers_text import fmt_pct as _pct
from workbench.triage.numbers_text import fmt_signed as _signed
from workbench.triage.numbers_text import fmt_us as _us


def _rounded(value: Any) -> Any:
    """Floats to 4 significant digits for reading; the JSON export keeps full precision."""
    if isinstance(value, float):
        return float(f"{value:.4g}")
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


def _brief(doc: dict[str, Any]) -> list[str]:
    """The brief first: an auditor's two minutes, in plain words (the same lines as the JSON)."""
    b = doc["brief"]
    out = ["## Brief", ""]
    for key, label in PARTS:
        first, *rest = b[key]
        out.append(f"- **{label}:** {esc(first)}")
        out += [f"  - {esc(line)}" for line in rest]
    if b["suggested_title"] and b["suggested_title"] != doc["header"]["title"]:
        out.append(f"- _Title from the record:_ {esc(b['suggested_title'])}")
    return [*out, ""]


def _title(doc: dict[str, Any]) -> list[str]:
    h = doc["header"]
    return [f"# Incident {esc(h['id'])}: {esc(h['title'])}", ""]


def _header(doc: dict[str, Any]) -> list[str]:
    h = doc["header"]
    out = ["## Header", ""]
    body: list[list[Any]] = [
        ["severity", opt_esc(h["severity"])],
        ["status", f"**{esc(h['status'])}**"],
        ["created", f"{esc(h['created_at'])} by {esc(h['created_by'])}"],
        ["updated", f"{esc(h['updated_at'])} (version {h['version']})"],
        ["failing run", opt_esc(h["failing"])],
        ["comparator run", opt_esc(h["comparator"])],
        ["fixed-metadata run", opt_esc(h["fixed_metadata"])],
        ["candidate run", opt_esc(h["candidate"])],
        ["summary generated", doc["generated_at"]],
    ]
    out += _table(["field", "value"], body)
    if doc["missing"]:
        out += [f"> **Not yet available:** {', '.join(doc['missing'])}", ""]
    return out


def _impact(doc: dict[str, Any]) -> list[str]:
    out = ["## Impact", ""]
    imp = doc["impact"]
    if imp is None:
        return [*out, "_The incident has no failing / comparator pair yet._", ""]
    level = round(100 * imp["confidence_level"])
    out += [f"Failing minus comparator, tail first; {level}% bootstrap confidence intervals."]
    sources = list(dict.fromkeys(r["interval"] for r in imp["rows"]))
    slo = imp.get("primary_slo")
    if slo is not None and len(sources) > 1:
        out.append(
            f"Rows are in {esc(slo['metric'])}, the SLO the verdict is read in, and each stage's "
            f"part of it: {esc(sources[0])}; end-to-end: {esc(sources[-1])}."
        )
    elif len(sources) > 1:
        out.append(f"End-to-end intervals: {esc(sources[0])}; stages: {esc(sources[-1])}.")
    out.append("")
    for r in imp["rows"]:
        if "row_confidence_level" in r:
            out += [f"{esc(r['metric'])}: {esc(r['interval'])}.", ""]
            break
    rows = [
        [
            esc(r["metric"]),
            r["quantile"],
            _us(r["failing_us"]),
            _us(r["comparator_us"]),
            _signed(r["delta_us"]),
            _with_level(_ci(r["ci_low_us"], r["ci_high_us"]), r),
            _pct(r["delta_pct"]),
            f"{r['n_failing']} / {r['n_comparator']}" + (f" {r['unit']}" if r.get("unit") else ""),
        ]
        for r in imp["rows"]
    ]
    return out + _table(
        ["metric", "q", "failing", "comparator", "Δ", f"{level}% CI", "Δ %", "n (f / c)"], rows
    )


def _with_level(ci: str | None, row: dict[str, Any]) -> str | None:
    """The interval, with its level when the row's is not the table's (' (97.5%)')."""
    level = row.get("row_confidence_level")
    return ci if ci is None or level is None else f"{ci} ({level_text(level)})"


_PLOT_NAMES: Final[dict[str, str]] = {
    "latency": "Latency distributions",
    "stages": "Stage shares of the gap",
    "hosts": "Tails per host",
}


def _plots(doc: dict[str, Any]) -> list[str]:
    """The images beside the export, linked by relative path; no section when there are none
    (text with no file of its own, or a record without the figures)."""
    plots = doc.get("plots") or []
    if not plots:
        return []
    folder = plots[0]["path"].rsplit("/", 1)[0]
    out = [
        "## Plots",
        "",
        f"Images in {code(folder + '/')} beside this file; the quantiles and intervals are the "
        "triage's (Impact, Localization) and, per host, the fleet view's.",
        "",
    ]
    for p in plots:
        title = esc(p["title"])
        # Intervals in round brackets: no square bracket in the alt text can end it early.
        alt = esc(p["title"].translate(str.maketrans("[]", "()")))
        name = _PLOT_NAMES.get(p["kind"], esc(p["kind"]))
        out += [f"**{name}.** {title}", "", f"![{alt}]({quote(p['path'])})", ""]
    return out


def _reproduction(doc: dict[str, Any]) -> list[str]:
    out = ["## Reproduction", ""]
    rep = doc["reproduction"]
    if rep is None:
        return [*out, "_No runs are paired yet._", ""]
    runs = [r["run_id"] for r in rep["runs"]]
    out += _table(
        ["role", "run", "taken", "label"],
        [
            [r["role"], code(r["run_id"]), opt_esc(r["imported_at"]), opt_esc(r["label"])]
            for r in rep["runs"]
        ],
    )
    roles = [f"{r['role']} {code(r['run_id'])}" for r in rep["runs"]]
    out += ["Locked tags (🔒) must hold equal for a fair comparison; differences are **bold**.", ""]
    rows = []
    for t in rep["tags"]:
        vals = [opt_esc(t["values"].get(r)) for r in runs]
        if t["differs"]:
            vals = [f"**{v}**" if v is not None else "**unknown**" for v in vals]
        rows.append([("🔒 " if t["locked"] else "") + esc(t["key"]), *vals])
    out += _table(["tag", *roles], rows)
    out += [f"- ⚠️ {esc(w)}" for w in rep["warnings"]]
    return [*out, ""] if rep["warnings"] else out


def _localization(doc: dict[str, Any]) -> list[str]:
    out = ["## Localization", ""]
    loc = doc["localization"]
    if loc is None:
        return [*out, "_Not localized yet._", ""]
    conf = loc["confidence"]
    share = loc["explained_share"]
    out += _table(
        ["", "value"],
        [
            ["origin stage", f"{code(loc['origin'])} — {opt_esc(loc['origin_name'])}"],
            ["manifest stage", f"{code(loc['manifest'])} — {opt_esc(loc['manifest_name'])}"],
            ["mechanism", code(loc["mechanism"])],
            ["secondary mechanism", opt_esc(loc["secondary_mechanism"])],
            ["confidence", None if conf is None else f"{conf:.2f}"],
            ["explained share of the tail gap", None if share is None else f"{100 * share:.1f}%"],
        ],
    )
    out += _mechanism_evidence(doc)
    out += ["### Claims and their proving artifacts", ""]
    for i, c in enumerate(loc["claims"], start=1):
        params = json.dumps(c["parameters"], sort_keys=True)
        out += [
            f"{i}. {esc(c['text'])}",
            f"   - query {code(c['query'])} with parameters {code(params)}",
            f"   - numbers: {code(json.dumps(_rounded(c['numbers']), sort_keys=True))}",
        ]
    return [*out, ""]


def _mechanism_evidence(doc: dict[str, Any]) -> list[str]:
    ev = doc.get("mechanism_evidence")
    if not ev:
        return []
    out = [
        f"### Mechanism evidence: {code(ev['query'])} (the app's Evidence screen)",
        "",
    ]
    out += _table(
        ["fact", "failing", "comparator", "n (f / c)"],
        [
            [
                f["label"],
                f["failing_text"],
                f["comparator_text"],
                f"{f['n_failing']:,} / {f['n_comparator']:,} {f['n_label']}",
            ]
            for f in ev["facts"]
        ],
    )
    return out


def render_markdown(doc: dict[str, Any]) -> str:
    """The closure summary as GitHub-flavoured Markdown: the brief first."""
    parts = [
        _title,
        _brief,
        _header,
        _impact,
        _plots,
        _reproduction,
        _localization,
        closure_md.fix,
        closure_md.closed_loop,
        closure_md.validation,
        closure_md.rollback,
        closure_md.checks,
        closure_md.owners,
        closure_md.timeline,
        closure_md.audit,
    ]
    lines: list[str] = []
    for part in parts:
        lines += part(doc)
    return "\n".join(lines).rstrip() + "\n"
