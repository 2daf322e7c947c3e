"""The closure summary (DESIGN §8) as one plain dict: the JSON export, and the input of the Markdown.

Impact and closed-loop figures are recomputed from the store at export time (every delta with its
n and a bootstrap CI); everything else comes from the incident record. The layout is documented
in summary_schema.json; a section that cannot be filled yet is null and listed in `missing`.
"""

from __future__ import annotations

from datetime import date
from pathlib import Path
from typing import Any, Final

import duckdb
import msgspec

from accel.stages import DEFAULT_OWNER_ROLE, SERVING_STAGE_NAMES, STAGE_NAMES
from workbench.errors import WorkbenchError
from workbench.incident.audit_text import audit_line
from workbench.incident.brief import build_brief, lines_of
from workbench.incident.guardrails import RunSamples
from workbench.incident.impact import (
    delta_rows,
    finite,
    impact,
    recorded_reading,
    recorded_slo,
    recorded_tail,
)
from workbench.incident.incident import Incident, ReplayCheck, Validation, load_incident, now_iso
from workbench.incident.owners import overdue_actions
from workbench.incident.validation import load_samples
from workbench.incident.verdict import candidate_verdict
from workbench.store import db

SUMMARY_SCHEMA: Final[str] = "workbench.closure_summary/1"


def _reproduction(inc: Incident, con: duckdb.DuckDBPyConnection) -> dict[str, Any]:
    about = {r["run_id"]: r for r in db.query(con, "run_summary", {}).to_pylist()}
    runs = [
        {
            "role": role,
            "run_id": rid,
            "label": about.get(rid, {}).get("label"),
            "imported_at": _iso(about.get(rid, {}).get("imported_at")),
        }
        for role, rid in (
            ("failing", inc.failing),
            ("comparator", inc.comparator),
            ("fixed-metadata", inc.fixed_metadata),
        )
        if rid
    ]
    keys = list(dict.fromkeys(k for tags in inc.locked_tags.values() for k in tags))
    locked = set(inc.locked_keys)
    keys.sort(key=lambda k: (k not in locked, k))
    rows = []
    for key in keys:
        values = {r["run_id"]: inc.locked_tags.get(r["run_id"], {}).get(key) for r in runs}
        rows.append(
            {
                "key": key,
                "locked": key in locked,
                "values": values,
                "differs": len(set(values.values())) > 1,
            }
        )
    return {"runs": runs, "tags": rows, "warnings": list(inc.pair_warnings)}


def _iso(value: Any) -> str | None:
    return (
        None if value is None else str(value.isoformat() if hasattr(value, "isoformat") else value)
    )


# The evidence the app shows for a mechanism (Evidence screen), as facts failing vs comparator:
# (query, [(column, label, unit, n column, what n counts)]).
MECHANISM_EVIDENCE: Final[dict[str, tuple[str, list[tuple[str, str, str, str, str]]]]] = {
    "fusion_memory_burst": (
        "fusion_effect",
        [
            ("fused_ops", "fused ops", "count", "n_ops", "ops"),
            (
                "p95_group_working_set_bytes",
                "p95 working set per fusion group",
                "MB",
                "fusion_groups",
                "fusion-group instances",
            ),
        ],
    ),
    "recompile": (
        "fallback_recompile_rates",
        [
            (
                "requests_with_recompile",
                "requests with a recompile",
                "count",
                "n_requests",
                "requests",
            )
        ],
    ),
    "mapping_fallback": (
        "fallback_recompile_rates",
        [
            (
                "requests_with_fallback",
                "requests with a fallback op",
                "count",
                "n_requests",
                "requests",
            )
        ],
    ),
}


def _fact_text(value: Any, unit: str) -> str:
    if value is None:
        return "unknown"
    if unit == "MB":
        return f"{float(value) / 1e6:,.0f} MB"
    if unit == "count":
        return f"{int(value):,}"
    return f"{float(value):.3g}"


def _mechanism_evidence(inc: Incident, con: duckdb.DuckDBPyConnection) -> dict[str, Any] | None:
    """The mechanism's evidence query for the pair, its rows and the facts the brief quotes."""
    loc = inc.localization
    if (
        loc is None
        or not inc.failing
        or not inc.comparator
        or loc.mechanism not in MECHANISM_EVIDENCE
    ):
        return None
    query, facts = MECHANISM_EVIDENCE[loc.mechanism]
    params = {"failing": inc.failing, "comparator": inc.comparator}
    rows = db.query(con, query, params).to_pylist()
    first = {r["role"]: r for r in reversed(rows)}  # per-run figures repeat on every row
    if set(first) != {"failing", "comparator"}:
        return None
    f, c = first["failing"], first["comparator"]
    return {
        "mechanism": loc.mechanism,
        "query": query,
        "parameters": params,
        "facts": [
            {
                "label": label,
                "column": col,
                "failing": finite(float(f[col])) if f[col] is not None else None,
                "comparator": finite(float(c[col])) if c[col] is not None else None,
                "failing_text": _fact_text(f[col], unit),
                "comparator_text": _fact_text(c[col], unit),
                "n_failing": int(f[n_col]),
                "n_comparator": int(c[n_col]),
                "n_label": n_label,
            }
            for col, label, unit, n_col, n_label in facts
        ],
        "rows": [{k: finite(v) if isinstance(v, float) else v for k, v in r.items()} for r in rows],
    }


def _fix(inc: Incident, con: duckdb.DuckDBPyConnection) -> dict[str, Any] | None:
    """The candidate, how its tags differ from the failing run, and who watches its rollout."""
    if not inc.candidate or not inc.failing or not inc.comparator:
        return None
    diff = db.query(
        con,
        "tag_diff",
        {"failing": inc.failing, "others": [inc.comparator, inc.candidate], "locked": []},
    ).to_pylist()
    comp = {r["key"]: r["other_value"] for r in diff if r["run_id"] == inc.comparator}
    tags = [
        {
            "key": r["key"],
            "failing": r["failing_value"],
            "comparator": comp.get(r["key"]),
            "candidate": r["other_value"],
        }
        for r in diff
        if r["run_id"] == inc.candidate and r["differs"]
    ]
    label = next(
        (
            r["label"]
            for r in db.query(con, "run_summary", {}).to_pylist()
            if r["run_id"] == inc.candidate
        ),
        None,
    )
    return {"candidate": inc.candidate, "label": label, "tags": tags, "watcher": _watcher(inc)}


def _watcher(inc: Incident) -> str | None:
    """Who watches the rollback triggers: the manifest stage's owner (the time shows there),
    else the origin's, else whoever declared the incident."""
    by_role = {o.role: o.person for o in inc.owners}
    loc = inc.localization
    for stage in (loc.manifest, loc.origin) if loc else ():
        person = by_role.get(DEFAULT_OWNER_ROLE.get(stage, ""))
        if person:
            return f"{person} ({DEFAULT_OWNER_ROLE[stage]}, owns {stage})"
    return inc.created_by or None


def _compile_profile(con: duckdb.DuckDBPyConnection, run_id: str) -> dict[str, Any]:
    row: dict[str, Any] = db.query(con, "incident_compile_profile", {"run_id": run_id}).to_pylist()[
        0
    ]
    return {
        "run_id": run_id,
        **{k: (float(v) if k == "compile_us" else int(v)) for k, v in row.items()},
    }


def _closed_loop(
    inc: Incident,
    con: duckdb.DuckDBPyConnection,
    samples: dict[str, RunSamples],
    impact_rows: list[dict[str, Any]],
) -> dict[str, Any] | None:
    if not inc.candidate or not inc.failing or inc.localization is None:
        return None
    loc = inc.localization
    telemetry = [
        r
        for r in impact_rows
        if r["metric"] in (loc.origin, loc.manifest) and r["quantile"] == "p99"
    ]
    cand, failing = samples[inc.candidate], samples[inc.failing]
    actions = [
        {"id": a.id, "text": a.text, "owner": a.owner, "status": a.status}
        for a in inc.actions
        if a.kind != "artifact"
    ]
    return {
        "compile_profile": [
            _compile_profile(con, r) for r in (inc.failing, inc.comparator, inc.candidate) if r
        ],
        "runtime_telemetry": telemetry,
        "retuning_action": {"triage": inc.triage.get("retuning"), "actions": actions},
        "result_run": {
            "run_id": inc.candidate,
            "against": inc.failing,
            "rows": delta_rows(
                "end-to-end", cand.latency_us, failing.latency_us, "candidate", "failing"
            ),
        },
    }


def _verdict_fields(v: Validation, check: ReplayCheck | None) -> dict[str, Any]:
    cv = candidate_verdict(v, check)
    return {
        "verdict": cv.verdict,
        "headline": cv.headline,
        "reasons": cv.reasons,
        "psi": cv.psi,
        "unseen_share": cv.unseen_share,
    }


def _validation(inc: Incident) -> dict[str, Any] | None:
    """The validation with the one verdict (verdict.py) and every cell's outcome and why; the
    earlier candidates with theirs (a refusal stays in the summary after a later PASS)."""
    if inc.validation is None:
        return None
    v = inc.validation
    out: dict[str, Any] = {**msgspec.to_builtins(v), **_verdict_fields(v, inc.replay_check)}
    cv = candidate_verdict(v, inc.replay_check)
    out["cells"] = [
        {**msgspec.to_builtins(c), "outcome": o.outcome, "why": o.why}
        for c, o in zip(v.cells, cv.cells, strict=True)
    ]
    out["history"] = [
        {
            "candidate": h.candidate,
            "validated_at": h.validated_at,
            "validated_by": h.validated_by,
            # Earlier candidates' shape checks are not kept: their stored verdict has it.
            "verdict": h.verdict,
            "reasons": h.reasons,
        }
        for h in inc.validation_history
    ]
    return out


def build_summary(store: Path, incident_id: str, today: date | None = None) -> dict[str, Any]:
    """The closure summary of one incident as plain JSON-able data."""
    inc = load_incident(store, incident_id)
    doc: dict[str, Any] = {
        "schema": SUMMARY_SCHEMA,
        "generated_at": now_iso(),
        "header": {
            "id": inc.id,
            "title": inc.title,
            "severity": inc.severity,
            "status": inc.status,
            "created_at": inc.created_at,
            "created_by": inc.created_by,
            "updated_at": inc.updated_at,
            "version": inc.version,
            "failing": inc.failing,
            "comparator": inc.comparator,
            "fixed_metadata": inc.fixed_metadata,
            "candidate": inc.candidate,
        },
    }
    missing: list[str] = []
    samples: dict[str, RunSamples] = {}
    con = db.connect(store)
    try:
        for rid in (inc.failing, inc.comparator, inc.candidate):
            if rid and rid not in samples:
                try:
                    samples[rid] = load_samples(con, rid)
                except WorkbenchError as exc:
                    raise WorkbenchError(inc.id, f"cannot export: {exc.one_line()}") from exc
        if inc.failing and inc.comparator:
            doc["impact"] = impact(
                samples[inc.failing],
                samples[inc.comparator],
                recorded_tail(inc),
                recorded_reading(inc),
                recorded_slo(inc),
            )
            doc["reproduction"] = _reproduction(inc, con)
        else:
            doc["impact"] = doc["reproduction"] = None
            missing += ["impact", "reproduction"]
        if inc.localization is not None:
            loc = msgspec.to_builtins(inc.localization)
            serving = any(c.query == "slo_samples" for c in inc.claims)
            names = SERVING_STAGE_NAMES if serving else STAGE_NAMES
            loc["origin_name"] = names.get(inc.localization.origin)
            loc["manifest_name"] = names.get(inc.localization.manifest)
            doc["localization"] = {**loc, "claims": msgspec.to_builtins(inc.claims)}
        else:
            doc["localization"] = None
            missing.append("localization")
        rows = doc["impact"]["rows"] if doc["impact"] else []
        doc["closed_loop"] = _closed_loop(inc, con, samples, rows)
        if doc["closed_loop"] is None:
            missing.append("closed_loop")
        doc["mechanism_evidence"] = _mechanism_evidence(inc, con)
        doc["fix"] = _fix(inc, con)
        if doc["fix"] is None:
            missing.append("fix")
    finally:
        con.close()
    doc["validation"] = _validation(inc)
    if inc.validation is None:
        missing.append("validation")
    doc["rollback_criteria"] = msgspec.to_builtins(inc.rollback_criteria)
    if not inc.rollback_criteria:
        missing.append("rollback_criteria")
    doc["checks"] = {
        "replay": msgspec.to_builtins(inc.replay_check) if inc.replay_check else None,
        "guardrails": msgspec.to_builtins(inc.validation.guardrails) if inc.validation else [],
    }
    if inc.replay_check is None:
        missing.append("checks.replay")
    late = {a.id for a in overdue_actions(inc, today or date.today())}
    doc["owners"] = {
        "owners": msgspec.to_builtins(inc.owners),
        "follow_ups": [{**msgspec.to_builtins(a), "overdue": a.id in late} for a in inc.actions],
    }
    if not inc.owners:
        missing.append("owners")
    doc["timeline"] = msgspec.to_builtins(inc.timeline)
    doc["audit"] = [
        {**msgspec.to_builtins(a), "line": audit_line(a.at, a.actor, a.field, a.old, a.new)}
        for a in inc.audit
    ]
    # The images beside a Markdown export file (export.export_file fills this in; text with no
    # file of its own has none).
    doc["plots"] = []
    doc["missing"] = missing
    # The brief opens the document (JSON key order too), built from everything above.
    return {"schema": doc.pop("schema"), "brief": build_brief(doc), **doc}


def brief_lines(store: Path, incident_id: str) -> list[str]:
    """The brief of one incident as the export opens with it (for the app's Close screen)."""
    return lines_of(build_summary(store, incident_id)["brief"])
