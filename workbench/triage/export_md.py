"""Markdown rendering of the closure summary dict (summary.build_summary): GitHub-flavoured tables.

It renders only what the dict holds, so the Markdown and the JSON export carry the same content.
"""

from __future__ import annotations

import json
from typing import Any

_VERDICT_MARK = {"Pass": "✅ Pass", "Marginal": "⚠️ Marginal", "Fail": "❌ Fail"}


def _cell(value: Any) -> str:
    if value is None:
        return "—"
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text.replace("|", "\\|").replace("\n", " ")


def _table(headers: list[str], rows: list[list[Any]]) -> list[str]:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
    return [*out, ""]


def _us(x: float | None) -> str | None:
    if x is None:
        return None
    return f"{x / 1000:,.3f} ms" if abs(x) >= 1000 else f"{x:,.1f} µs"


def _value(x: float | None, unit: str) -> str | None:
    if x is None:
        return None
    if unit == "us":
        return _us(x)
    if unit == "share":
        return f"{100 * x:.2f}%"
    return f"{x:,.4g} {unit}"


def _ci(lo: float | None, hi: float | None, unit: str = "us") -> str | None:
    if lo is None or hi is None:
        return None
    return f"[{_value(lo, unit)}, {_value(hi, unit)}]"


def _signed(x: float | None, unit: str = "us") -> str | None:
    if x is None:
        return None
    v = _value(abs(x), unit)
    return f"+{v}" if x >= 0 else f"−{v}"


def _pct(x: float | None) -> str | None:
    return None if x is None else f"{x:+.1f}%"


def _rounded(value: Any) -> Any:
    """Floats to 4 significant digits for reading; the JSON export keeps full precision."""
    if isinstance(value, float):
        return float(f"{value:.4g}")
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


def _header(doc: dict[str, Any]) -> list[str]:
    h = doc["header"]
    out = [f"# Incident {h['id']}: {h['title']}", ""]
    out += _table(
        ["field", "value"],
        [
            ["severity", h["severity"]],
            ["status", f"**{h['status']}**"],
            ["created", f"{h['created_at']} by {h['created_by']}"],
            ["updated", f"{h['updated_at']} (version {h['version']})"],
            ["failing run", h["failing"]],
            ["comparator run", h["comparator"]],
            ["fixed-metadata run", h["fixed_metadata"]],
            ["candidate run", h["candidate"]],
            ["summary generated", doc["generated_at"]],
        ],
    )
    if doc["missing"]:
        out += [f"> **Not yet available:** {', '.join(doc['missing'])}", ""]
    return out


def _impact(doc: dict[str, Any]) -> list[str]:
    out = ["## Impact", ""]
    imp = doc["impact"]
    if imp is None:
        return [*out, "_The incident has no failing / comparator pair yet._", ""]
    level = round(100 * imp["confidence_level"])
    out += [f"Failing minus comparator, tail first; {level}% bootstrap confidence intervals.", ""]
    rows = [
        [
            r["metric"],
            r["quantile"],
            _us(r["failing_us"]),
            _us(r["comparator_us"]),
            _signed(r["delta_us"]),
            _ci(r["ci_low_us"], r["ci_high_us"]),
            _pct(r["delta_pct"]),
            f"{r['n_failing']} / {r['n_comparator']}",
        ]
        for r in imp["rows"]
    ]
    return out + _table(
        ["metric", "q", "failing", "comparator", "Δ", f"{level}% CI", "Δ %", "n (f / c)"], rows
    )


def _reproduction(doc: dict[str, Any]) -> list[str]:
    out = ["## Reproduction", ""]
    rep = doc["reproduction"]
    if rep is None:
        return [*out, "_No runs are paired yet._", ""]
    runs = [r["run_id"] for r in rep["runs"]]
    roles = [f"{r['role']} `{r['run_id']}`" for r in rep["runs"]]
    out += ["Locked tags (🔒) must hold equal for a fair comparison; differences are **bold**.", ""]
    rows = []
    for t in rep["tags"]:
        vals = [t["values"].get(r) for r in runs]
        if t["differs"]:
            vals = [f"**{v}**" if v is not None else "**unknown**" for v in vals]
        rows.append([("🔒 " if t["locked"] else "") + t["key"], *vals])
    out += _table(["tag", *roles], rows)
    out += [f"- ⚠️ {w}" for w in rep["warnings"]]
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
            ["origin stage", f"`{loc['origin']}` — {loc['origin_name']}"],
            ["manifest stage", f"`{loc['manifest']}` — {loc['manifest_name']}"],
            ["mechanism", f"`{loc['mechanism']}`"],
            ["secondary mechanism", loc["secondary_mechanism"]],
            ["confidence", None if conf is None else f"{conf:.2f}"],
            ["explained share of the tail gap", None if share is None else f"{100 * share:.1f}%"],
        ],
    )
    out += ["### Claims and their proving artifacts", ""]
    for i, c in enumerate(loc["claims"], start=1):
        out += [
            f"{i}. {c['text']}",
            f"   - query `{c['query']}` with parameters `{json.dumps(c['parameters'], sort_keys=True)}`",
            f"   - numbers: `{json.dumps(_rounded(c['numbers']), sort_keys=True)}`",
        ]
    return [*out, ""]


def _closed_loop(doc: dict[str, Any]) -> list[str]:
    out = ["## Closed loop", ""]
    loop = doc["closed_loop"]
    if loop is None:
        return [*out, "_Needs a localization and a candidate run._", ""]
    out += ["### Compile profile", ""]
    out += _table(
        [
            "run",
            "compiles",
            "recompiles",
            "failed",
            "cache hits",
            "compile time",
            "fallback ops",
            "ops",
        ],
        [
            [
                f"`{p['run_id']}`",
                p["compiles"],
                p["recompiles"],
                p["failed_compiles"],
                p["cache_hits"],
                _us(p["compile_us"]),
                p["fallback_ops"],
                p["ops"],
            ]
            for p in loop["compile_profile"]
        ],
    )
    out += ["### Runtime telemetry (origin and manifest stage p99)", ""]
    out += _table(
        ["stage", "failing", "comparator", "Δ", "95% CI", "n (f / c)"],
        [
            [
                r["metric"],
                _us(r["failing_us"]),
                _us(r["comparator_us"]),
                _signed(r["delta_us"]),
                _ci(r["ci_low_us"], r["ci_high_us"]),
                f"{r['n_failing']} / {r['n_comparator']}",
            ]
            for r in loop["runtime_telemetry"]
        ],
    )
    out += ["### Retuning action", ""]
    retune = loop["retuning_action"]
    proposed = retune["triage"]
    if isinstance(proposed, list) and all(isinstance(a, dict) for a in proposed):
        # TriageResult.retuning: actions with their predicted tail gain.
        for a in proposed:
            gain = a.get("predicted_p99_gain_us")
            out.append(
                f"- proposed by triage: {a.get('text', a.get('kind'))}"
                + (f" (predicted p99 gain {_us(gain)})" if isinstance(gain, int | float) else "")
            )
    elif proposed:
        out.append(f"- proposed by triage: `{json.dumps(proposed, sort_keys=True)}`")
    out += [
        f"- action #{a['id']} ({a['status']}, {a['owner']}): {a['text']}" for a in retune["actions"]
    ]
    res = loop["result_run"]
    out += ["", f"### Result run `{res['run_id']}` against failing `{res['against']}`", ""]
    out += _table(
        ["q", "candidate", "failing", "Δ", "95% CI", "Δ %", "n (c / f)"],
        [
            [
                r["quantile"],
                _us(r["candidate_us"]),
                _us(r["failing_us"]),
                _signed(r["delta_us"]),
                _ci(r["ci_low_us"], r["ci_high_us"]),
                _pct(r["delta_pct"]),
                f"{r['n_candidate']} / {r['n_failing']}",
            ]
            for r in res["rows"]
        ],
    )
    return out


def _validation(doc: dict[str, Any]) -> list[str]:
    out = ["## Validation", ""]
    v = doc["validation"]
    if v is None:
        return [*out, "_No candidate validated yet._", ""]
    out += [
        f"**Verdict: {_VERDICT_MARK.get(v['verdict'], v['verdict'])}** — candidate `{v['candidate']}` "
        f"against the {v['baseline_role']} `{v['baseline']}`; score {v['score']:.2f} "
        f"(Pass ≥ {v['pass_threshold']}, Marginal ≥ {v['marginal_threshold']}); "
        f"validated {v['validated_at']} by {v['validated_by']}.",
        "",
    ]
    out += [f"- {r}" for r in v["reasons"]] + [""]
    level = round(100 * v["confidence_level"])
    rows = []
    for c in v["cells"]:
        unit = c["unit"]
        rows.append(
            [
                c["label"] + (" (critical)" if c["critical"] else ""),
                c["classification"],
                "✅" if c["passed"] else ("—" if c["classification"] == "Nodata" else "❌"),
                _value(c["baseline_value"], unit),
                _value(c["candidate_value"], unit),
                _signed(c["diff"], unit),
                _ci(c["ci_low"], c["ci_high"], unit),
                f"{c['n_baseline']} / {c['n_candidate']}",
                c["reason"] + "".join(f" ⚠️ {w}" for w in c["warnings"]),
            ]
        )
    return out + _table(
        [
            "guardrail",
            "class",
            "ok",
            "baseline",
            "candidate",
            "Δ",
            f"{level}% CI",
            "n (b / c)",
            "why",
        ],
        rows,
    )


def _rollback(doc: dict[str, Any]) -> list[str]:
    out = ["## Rollback criteria", ""]
    crit = doc["rollback_criteria"]
    if not crit:
        return [*out, "_None defined._", ""]
    out += ["Roll back when any of these holds over the given window of requests:", ""]
    return out + _table(
        ["metric", "trigger", "window", "source"],
        [
            [
                c["label"],
                f"{c['op']} {_value(c['threshold'], c['unit'])}",
                f"{c['window_requests']} requests",
                c["source"],
            ]
            for c in crit
        ],
    )


def _checks(doc: dict[str, Any]) -> list[str]:
    out = ["## Replay and guardrail checks", "", "### Production-like shapes", ""]
    rc = doc["checks"]["replay"]
    if rc is None:
        out += ["_No replay check yet._", ""]
    else:
        psi = "—" if rc["psi"] is None else f"{rc['psi']:.3f}"
        unseen = "—" if rc["unseen_share"] is None else f"{100 * rc['unseen_share']:.1f}%"
        out += [
            f"{'✅ production-like' if rc['passed'] else '❌ not production-like'}: "
            f"candidate `{rc['candidate']}` (n={rc['n_candidate']}) against `{rc['reference']}` "
            f"(n={rc['n_reference']}), {rc['n_shapes']} shape buckets; PSI {psi} "
            f"(threshold {rc['psi_threshold']}), unseen shapes {unseen} "
            f"(threshold {100 * rc['unseen_threshold']:.0f}%). {rc['reason']}.",
            "",
        ]
        out += _table(
            ["shape", "reference share", "candidate share"],
            [
                [
                    f"`{s['shape_key']}`",
                    f"{100 * s['share_reference']:.1f}% ({s['n_reference']})",
                    f"{100 * s['share_candidate']:.1f}% ({s['n_candidate']})",
                ]
                for s in rc["top_shapes"]
            ],
        )
    out += ["### Guardrails", ""]
    rails = doc["checks"]["guardrails"]
    if not rails:
        return [*out, "_None yet._", ""]
    return out + _table(
        ["guardrail", "bad direction", "tolerance", "floor", "critical"],
        [
            [
                g["label"],
                g["direction"],
                f"{100 * g['tolerance']:.0f}%",
                f"{g['min_effect']:g} (absolute)" if g["min_effect"] else None,
                "yes" if g["critical"] else "no",
            ]
            for g in rails
        ],
    )


def _owners(doc: dict[str, Any]) -> list[str]:
    out = ["## Owners and follow-ups", ""]
    own = doc["owners"]
    out += _table(
        ["role", "person", "since", "closure artifact"],
        [[o["role"], o["person"], o["assumed_at"], o["artifact"]] for o in own["owners"]],
    )
    out += _table(
        ["#", "action", "owner", "due", "status"],
        [
            [
                a["id"],
                a["text"],
                a["owner"],
                a["due"] + (" **overdue**" if a["overdue"] else ""),
                a["status"],
            ]
            for a in own["follow_ups"]
        ],
    )
    return out


def _timeline(doc: dict[str, Any]) -> list[str]:
    out = ["## Timeline", ""]
    return out + _table(
        ["when", "who", "event", "status", "note"],
        [
            [
                t["at"],
                t["actor"],
                t["event"],
                f"{t['status_from'] or ''} → {t['status_to']}" if t["status_to"] else None,
                t["note"] or None,
            ]
            for t in doc["timeline"]
        ],
    )


def _audit(doc: dict[str, Any]) -> list[str]:
    out = [
        "## Audit appendix",
        "",
        "<details>",
        f"<summary>{len(doc['audit'])} changes</summary>",
        "",
    ]
    out += _table(
        ["when", "who", "field", "old", "new"],
        [
            [a["at"], a["actor"], f"`{a['field']}`", f"`{a['old']}`", f"`{a['new']}`"]
            for a in doc["audit"]
        ],
    )
    return [*out, "</details>", ""]


def render_markdown(doc: dict[str, Any]) -> str:
    """The closure summary as GitHub-flavoured Markdown."""
    parts = [
        _header,
        _impact,
        _reproduction,
        _localization,
        _closed_loop,
        _validation,
        _rollback,
        _checks,
        _owners,
        _timeline,
        _audit,
    ]
    lines: list[str] = []
    for part in parts:
        lines += part(doc)
    return "\n".join(lines).rstrip() + "\n"
