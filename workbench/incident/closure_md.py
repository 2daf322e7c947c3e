"""Markdown of the closure summary's later sections: the fix and its closed-loop check, the
candidate's validation, rollback criteria, checks, owners, timeline and the audit appendix
(export_md.py renders the incident's diagnosis and puts the whole together)."""

from __future__ import annotations

import json
from typing import Any

from workbench.incident.md_text import code, esc, opt_esc
from workbench.incident.md_text import table as _table
from workbench.triage.numbers_text import fmt_ci as _ci
from workbench.triage.numbers_text import fmt_pct as _pct
from workbench.triage.numbers_text import fmt_signed as _signed
from workbench.triage.numbers_text import fmt_us as _us
from workbench.triage.numbers_text import fmt_value as _value

_VERDICT_MARK = {
    "PASS": "✅ PASS",
    "FAIL": "❌ FAIL",
    "REFUSED": "⛔ REFUSED",
    "INCONCLUSIVE": "⚠️ INCONCLUSIVE",
}
_OUTCOME_MARK = {
    "pass": "✅ pass",
    "better": "➖ better",
    "fail": "❌ fail",
    "undecided": "⚠️ undecided",
}


def fix(doc: dict[str, Any]) -> list[str]:
    out = ["## Fix candidate", ""]
    fix = doc.get("fix")
    if fix is None:
        return [*out, "_No candidate yet._", ""]
    label = f" — {esc(fix['label'])}" if fix["label"] else ""
    out += [f"Candidate {code(fix['candidate'])}{label}.", ""]
    if not fix["tags"]:
        return [*out, "_Its tags equal the failing run's._", ""]
    return out + _table(
        ["tag that differs from the failing run", "failing", "comparator", "candidate"],
        [
            [
                esc(t["key"]),
                opt_esc(t["failing"]),
                opt_esc(t["comparator"]),
                f"**{opt_esc(t['candidate'])}**",
            ]
            for t in fix["tags"]
        ],
    )


def closed_loop(doc: dict[str, Any]) -> list[str]:
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
                code(p["run_id"]),
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
                esc(r["metric"]),
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
                f"- proposed by triage: {esc(a.get('text', a.get('kind')))}"
                + (f" (predicted p99 gain {_us(gain)})" if isinstance(gain, int | float) else "")
            )
    elif proposed:
        out.append(f"- proposed by triage: {code(json.dumps(proposed, sort_keys=True))}")
    out += [
        f"- action #{a['id']} ({esc(a['status'])}, {esc(a['owner'])}): {esc(a['text'])}"
        for a in retune["actions"]
    ]
    res = loop["result_run"]
    out += ["", f"### Result run {code(res['run_id'])} against failing {code(res['against'])}", ""]
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


def validation(doc: dict[str, Any]) -> list[str]:
    out = ["## Validation", ""]
    v = doc["validation"]
    if v is None:
        return [*out, "_No candidate validated yet._", ""]
    out += [
        f"**Verdict: {_VERDICT_MARK.get(v['verdict'], esc(v['verdict']))}** — candidate "
        f"{code(v['candidate'])} against the {esc(v['baseline_role'])} {code(v['baseline'])}; "
        f"score {v['score']:.2f} (PASS needs ≥ {v['pass_threshold']}, every guardrail on ≥ 50 "
        "samples a side with its interval inside its tolerance, and production-like shapes); "
        f"validated {esc(v['validated_at'])} by "
        f"{esc(v['validated_by'])}.",
        "",
    ]
    out += [f"- {esc(r)}" for r in v["reasons"]] + [""]
    if v["history"]:
        out += ["Earlier candidates of this incident:", ""]
        out += [
            f"- {code(h['candidate'])} ({esc(h['validated_at'])}, {esc(h['validated_by'])}): "
            f"**{esc(h['verdict'])}** — {esc('; '.join(h['reasons']))}"
            for h in v["history"]
        ]
        out.append("")
    level = round(100 * v["confidence_level"])
    rows = []
    for c in v["cells"]:
        unit = c["unit"]
        rows.append(
            [
                esc(c["label"]) + (" (critical)" if c["critical"] else ""),
                _OUTCOME_MARK.get(c["outcome"], f"⚠️ {esc(c['outcome'])}"),
                c["classification"],
                _value(c["baseline_value"], unit),
                _value(c["candidate_value"], unit),
                _signed(c["diff"], unit),
                _ci(c["ci_low"], c["ci_high"], unit),
                f"{c['n_baseline']} / {c['n_candidate']}",
                esc(c["why"]),
            ]
        )
    return out + _table(
        [
            "guardrail",
            "outcome",
            "class",
            "baseline",
            "candidate",
            "Δ",
            f"{level}% CI",
            "n (b / c)",
            "why",
        ],
        rows,
    )


def rollback(doc: dict[str, Any]) -> list[str]:
    out = ["## Rollback criteria", ""]
    crit = doc["rollback_criteria"]
    if not crit:
        return [*out, "_None defined._", ""]
    out += [
        "Roll back when any of these holds over the given window of requests; a trigger is "
        "never closer to the baseline than the metric's noise over one window.",
        "",
    ]
    return out + _table(
        ["metric", "trigger", "window", "noise (±, one window)", "source"],
        [
            [
                esc(c["label"]),
                f"{esc(c['op'])} {_value(c['threshold'], c['unit'])}",
                f"{c['window_requests']} requests",
                _value(c.get("noise"), c["unit"]),
                esc(c["source"]),
            ]
            for c in crit
        ],
    )


def checks(doc: dict[str, Any]) -> list[str]:
    out = ["## Replay and guardrail checks", "", "### Production-like shapes", ""]
    rc = doc["checks"]["replay"]
    if rc is None:
        out += ["_No replay check yet._", ""]
    else:
        psi = "—" if rc["psi"] is None else f"{rc['psi']:.3f}"
        unseen = "—" if rc["unseen_share"] is None else f"{100 * rc['unseen_share']:.1f}%"
        out += [
            f"{'✅ production-like' if rc['passed'] else '⛔ not production-like'}: "
            f"candidate {code(rc['candidate'])} (n={rc['n_candidate']}) against "
            f"{code(rc['reference'])} (n={rc['n_reference']}), {rc['n_shapes']} shape buckets; "
            f"PSI {psi} (threshold {rc['psi_threshold']}), unseen shapes {unseen} "
            f"(threshold {100 * rc['unseen_threshold']:.0f}%). {esc(rc['reason'])}.",
            "",
        ]
        out += _table(
            ["shape", "reference share", "candidate share"],
            [
                [
                    code(s["shape_key"]),
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
                esc(g["label"]),
                esc(g["direction"]),
                f"{100 * g['tolerance']:.0f}%",
                f"{g['min_effect']:g} (absolute)" if g["min_effect"] else None,
                "yes" if g["critical"] else "no",
            ]
            for g in rails
        ],
    )


def owners(doc: dict[str, Any]) -> list[str]:
    out = ["## Owners and follow-ups", ""]
    own = doc["owners"]
    out += _table(
        ["role", "person", "since", "closure artifact"],
        [
            [esc(o["role"]), esc(o["person"]), esc(o["assumed_at"]), esc(o["artifact"])]
            for o in own["owners"]
        ],
    )
    out += _table(
        ["#", "action", "owner", "due", "status"],
        [
            [
                a["id"],
                esc(a["text"]),
                esc(a["owner"]),
                esc(a["due"]) + (" **overdue**" if a["overdue"] else ""),
                esc(a["status"]),
            ]
            for a in own["follow_ups"]
        ],
    )
    return out


def timeline(doc: dict[str, Any]) -> list[str]:
    out = ["## Timeline", ""]
    return out + _table(
        ["when", "who", "event", "status", "note"],
        [
            [
                esc(t["at"]),
                esc(t["actor"]),
                esc(t["event"]),
                f"{esc(t['status_from'] or '')} → {esc(t['status_to'])}"
                if t["status_to"]
                else None,
                opt_esc(t["note"] or None),
            ]
            for t in doc["timeline"]
        ],
    )


def audit(doc: dict[str, Any]) -> list[str]:
    """One line per change: time, who, field, old → new (the JSON export keeps full values)."""
    out = ["## Audit appendix", "", f"{len(doc['audit'])} changes, oldest first.", ""]
    out += [f"- {esc(a['line'])}" for a in doc["audit"]]
    return [*out, ""]
