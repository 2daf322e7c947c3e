"""The closure summary (DESIGN §8) as one plain dict: the JSON export, and the input of the Markdown.

Impact and closed-loop figures are recomputed from the store at export time (every delta with its
n and a bootstrap CI); everything else comes from the incident record. The layout is documented
in summary_schema.json; a section that cannot be filled yet is null and listed in `missing`.
"""

from __future__ import annotations

import math
from datetime import date
from pathlib import Path
from typing import Any, Final

import duckdb
import msgspec
import numpy as np

from accel import stats
from accel.stages import STAGE_NAMES, STAGES
from workbench.errors import WorkbenchError
from workbench.store import db
from workbench.triage.guardrails import RunSamples
from workbench.triage.incident import Incident, ReplayCheck, Validation, load_incident, now_iso
from workbench.triage.judge import CONFIDENCE, N_BOOT, SEED
from workbench.triage.owners import overdue_actions
from workbench.triage.validation import load_samples
from workbench.triage.verdict import candidate_verdict

SUMMARY_SCHEMA: Final[str] = "workbench.closure_summary/1"
IMPACT_QUANTILES: Final[tuple[tuple[str, float], ...]] = (("p95", 0.95), ("p99", 0.99))


def _num(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def _delta_rows(
    label: str, x: np.ndarray, y: np.ndarray, x_name: str, y_name: str
) -> list[dict[str, Any]]:
    """p95 and p99 of x and y with the bootstrap CI of quantile(x) - quantile(y)."""
    rows = []
    nx, ny = int(stats.clean(x).size), int(stats.clean(y).size)
    for name, q in IMPACT_QUANTILES:
        d, lo, hi = stats.bootstrap_quantile_diff(
            x, y, q, n_boot=N_BOOT, seed=SEED, alpha=1 - CONFIDENCE
        )
        vy = float(stats.quantile(y, q))
        rows.append(
            {
                "metric": label,
                "quantile": name,
                f"{x_name}_us": _num(float(stats.quantile(x, q))),
                f"{y_name}_us": _num(vy),
                "delta_us": _num(d),
                "ci_low_us": _num(lo),
                "ci_high_us": _num(hi),
                "delta_pct": _num(100.0 * d / vy) if vy else None,
                f"n_{x_name}": nx,
                f"n_{y_name}": ny,
            }
        )
    return rows


def impact(failing: RunSamples, comparator: RunSamples) -> dict[str, Any]:
    """p95/p99 deltas failing - comparator, end to end then per stage, each with n and CI."""
    rows = _delta_rows(
        "end-to-end", failing.latency_us, comparator.latency_us, "failing", "comparator"
    )
    for s in STAGES:
        rows += _delta_rows(s, failing.stage_us[s], comparator.stage_us[s], "failing", "comparator")
    return {"confidence_level": CONFIDENCE, "rows": rows}


def _reproduction(inc: Incident) -> dict[str, Any]:
    runs = [
        {"role": role, "run_id": rid}
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
            "rows": _delta_rows(
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
            doc["impact"] = impact(samples[inc.failing], samples[inc.comparator])
            doc["reproduction"] = _reproduction(inc)
        else:
            doc["impact"] = doc["reproduction"] = None
            missing += ["impact", "reproduction"]
        if inc.localization is not None:
            loc = msgspec.to_builtins(inc.localization)
            loc["origin_name"] = STAGE_NAMES.get(inc.localization.origin)
            loc["manifest_name"] = STAGE_NAMES.get(inc.localization.manifest)
            doc["localization"] = {**loc, "claims": msgspec.to_builtins(inc.claims)}
        else:
            doc["localization"] = None
            missing.append("localization")
        rows = doc["impact"]["rows"] if doc["impact"] else []
        doc["closed_loop"] = _closed_loop(inc, con, samples, rows)
        if doc["closed_loop"] is None:
            missing.append("closed_loop")
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
    doc["audit"] = msgspec.to_builtins(inc.audit)
    doc["missing"] = missing
    return doc
