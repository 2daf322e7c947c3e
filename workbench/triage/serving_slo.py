"""LLM-serving triage: the SLO that paged (TTFT, ITL, TPOT or e2e p99), its gap with intervals
beside every other SLO's, the join each run's records had, and the verdict read in that SLO:
the stages of its tail, and a mechanism only where the trace holds the witness events."""

from __future__ import annotations

import math
from typing import Any, Final

import duckdb
import numpy as np

from accel.localize.trigger import TriggerPolicy
from accel.serving import ORIGIN, ServingRun, Witness, choose, witnesses
from accel.stages import OTHER, SLO_NAMES, SLOS, STAGES
from workbench.errors import WorkbenchError
from workbench.store import db
from workbench.store.serving.engine_trace import engine_steps, stalled_decodes
from workbench.triage.evidence import StageRow, stage_rows
from workbench.triage.serving_pair import serving_join
from workbench.triage.triage_claims import Claim

# ITL is a tail over tokens; the others over requests.
UNITS: Final[dict[str, str]] = {"ttft": "requests", "itl": "tokens", "tpot": "requests",
                                "e2e": "requests"}  # fmt: skip


def slo_rows(
    con: duckdb.DuckDBPyConnection, failing: str, comparator: str, slo: str
) -> list[StageRow]:
    """Latency (the SLO's value) and each stage, quantiles with intervals, in that SLO's units;
    an ITL interval resamples whole requests, since one request's token gaps move together."""
    params = {"failing": failing, "comparator": comparator, "slo": slo}
    samples = db.query(con, "slo_samples", params)
    if UNITS[slo] != "tokens":
        return stage_rows(samples)
    # itl units are "request#token": the request is the cluster.
    groups = [r.partition("#")[0] for r in samples.column("request_id").to_pylist()]
    return stage_rows(samples, groups=groups)


def gap_doc(slo: str, row: StageRow) -> dict[str, Any]:
    c99 = row.comparator["p99"].value
    lo = row.diff["p99"].lo
    return {
        "slo": slo,
        "name": SLO_NAMES[slo],
        "unit": UNITS[slo],
        "n_failing": row.n_failing,
        "n_comparator": row.n_comparator,
        "failing": {k: v.to_json() for k, v in row.failing.items()},
        "comparator": {k: v.to_json() for k, v in row.comparator.items()},
        "gap_us": {k: v.to_json() for k, v in row.diff.items()},
        # How far the p99 gap's interval stands above zero, as a share of the comparator's p99:
        # the default primary SLO is the one that regressed most against its interval.
        "p99_lower_bound_share": lo / c99 if c99 and math.isfinite(lo) else None,
    }


def primary_slo(gaps: dict[str, dict[str, Any]], requested: str | None) -> str:
    """The SLO asked for, else the one whose p99 gap's lower bound is largest against its
    comparator p99 (e2e when none has a finite bound)."""
    if requested is not None:
        if requested not in SLOS:
            raise WorkbenchError(f"--slo {requested!r}", f"unknown SLO (one of {', '.join(SLOS)})")
        return requested
    scored = [(g["p99_lower_bound_share"], s) for s, g in gaps.items()
              if g["p99_lower_bound_share"] is not None]  # fmt: skip
    return max(scored)[1] if scored else "e2e"


def serving_run(con: duckdb.DuckDBPyConnection, run_id: str) -> ServingRun:
    """The witness quantities of one run, from its engine steps and requests."""
    steps = engine_steps(db.query(con, "serving_step_events", {"run_id": run_id}))
    reqs = db.query(con, "serving_requests", {"run_id": run_id}).to_pylist()
    pre = np.asarray([r["preemptions"] or 0 for r in reqs], dtype=np.int64)
    empty, iempty = np.zeros(0), np.zeros(0, dtype=np.int64)
    if steps is None:
        return ServingRun(empty, empty, pre, empty, empty, empty, iempty, iempty, iempty, iempty)
    tokens = {r["request_id"]: r["input_tokens"] for r in reqs}
    tok_us: dict[str, float] = {}
    for rid, a, b in zip(steps.tokenize_request, steps.tokenize_start.tolist(),
                         steps.tokenize_end.tolist(), strict=True):  # fmt: skip
        tok_us[str(rid)] = tok_us.get(str(rid), 0.0) + (b - a)
    ids = [r for r in tok_us if tokens.get(r)]
    return ServingRun(
        tokenize_us=np.asarray([tok_us[r] for r in ids], dtype=np.float64),
        tokenize_tokens=np.asarray([tokens[r] for r in ids], dtype=np.float64),
        preemptions=pre,
        step_forward_us=steps.phase["forward_us"],
        step_detokenize_us=steps.phase["detokenize_us"],
        step_compile_us=steps.phase["compile_us"],
        step_prefill_tokens=steps.prefill_tokens,
        step_n_prefill=steps.n_prefill,
        step_n_decode=steps.n_decode,
        step_stalled_decodes=stalled_decodes(steps),
    )


def _outcome(row: StageRow, policy: TriggerPolicy) -> tuple[str, float, str]:
    """(outcome, threshold us, reason) of the SLO's p95/p99 gaps against the practical
    threshold (policy.min_rel_gap of the comparator's quantile), as for e2e."""
    parts, fired, cleared = [], False, True
    threshold = math.nan
    for q in ("p95", "p99"):
        d = row.diff[q]
        threshold = policy.min_rel_gap * row.comparator[q].value
        fired |= d.lo > threshold
        cleared &= d.hi < threshold
        parts.append(f"{q} gap {d.value:+.0f} us (95% CI {d.lo:+.0f}..{d.hi:+.0f}) vs threshold "
                     f"{threshold:.0f} us")  # fmt: skip
    n = min(row.n_failing, row.n_comparator)
    if n < policy.min_requests:
        return "inconclusive", threshold, f"too few units ({n}) for a tail; " + "; ".join(parts)
    outcome = "regression" if fired else "no regression" if cleared else "inconclusive"
    return outcome, threshold, "; ".join(parts)


def _witness_doc(w: Witness) -> dict[str, Any]:
    return {"mechanism": w.mechanism, "fired": w.fired, "what": w.what, "value": w.value,
            "lo": w.lo, "hi": w.hi, "n_failing": w.n_failing, "n_comparator": w.n_comparator,
            **w.extra}  # fmt: skip


def slo_verdict(
    con: duckdb.DuckDBPyConnection,
    failing: str,
    comparator: str,
    rows: list[StageRow],
    policy: TriggerPolicy,
) -> dict[str, Any]:
    """The verdict in one SLO from its slo_rows: outcome, manifest stage (largest p99 growth),
    origin and mechanism from the witnesses that fired (unknown when none did)."""
    latency = rows[0]
    outcome, threshold, reason = _outcome(latency, policy)
    growth = {r.stage: r.diff["p99"].value for r in rows[1:] if r.stage != OTHER}
    manifest = max(STAGES, key=lambda s: growth.get(s, -math.inf))
    tests = witnesses(serving_run(con, failing), serving_run(con, comparator), policy.alpha)
    chosen = choose([w for w in tests if w.fired], growth)
    return {
        "rows": rows,
        "outcome": outcome,
        "reason": reason,
        "threshold_us": threshold,
        "manifest": manifest if outcome == "regression" else None,
        "witness": chosen,
        "witnesses": [_witness_doc(w) for w in tests],
    }


def apply(
    con: duckdb.DuckDBPyConnection,
    failing: str,
    comparator: str,
    e2e_triggered: bool,
    e2e_verdict: dict[str, Any],
    slo: str | None,
    policy: TriggerPolicy,
) -> dict[str, Any]:
    """The TriageResult fields to replace when both runs are LLM-serving runs: primary_slo,
    per-SLO gaps and the join; in an SLO other than e2e, its stages, gaps and verdict too."""
    join = serving_join(con, failing, comparator)
    if join is None:
        if slo not in (None, "e2e"):
            raise WorkbenchError(f"--slo {slo}", "needs LLM-serving runs (ingest --records)")
        return {}
    # Each SLO's rows once: their latency row gives the gaps, the chosen one's the verdict.
    rows_by_slo = {s: slo_rows(con, failing, comparator, s) for s in SLOS}
    gaps = {s: gap_doc(s, rows[0]) for s, rows in rows_by_slo.items()}
    chosen = primary_slo(gaps, slo)
    out: dict[str, Any] = {"primary_slo": chosen, "slo_gaps": gaps, "serving_join": join}
    v = slo_verdict(con, failing, comparator, rows_by_slo[chosen], policy)
    w: Witness | None = v["witness"]
    triggered = v["outcome"] == "regression"
    manifest = v["manifest"]
    origin = ORIGIN[w.mechanism] if (triggered and w is not None) else manifest
    mechanism = (
        w.mechanism if (triggered and w is not None) else ("unknown" if triggered else "none")
    )
    if chosen == "e2e" and not triggered and e2e_triggered:
        # The e2e replay fired where the serving reading did not: keep the replay's verdict.
        return {**out, "verdict": {**e2e_verdict, "serving_witnesses": v["witnesses"]}}
    rows: list[StageRow] = v["rows"]
    lat = rows[0]
    name = SLO_NAMES[chosen]
    claims = [
        Claim(
            text=f"p99 {name} {lat.failing['p99'].value:.0f} us vs {lat.comparator['p99'].value:.0f} "
            f"us: {lat.diff['p99'].value:+.0f} us (95% CI {lat.diff['p99'].lo:+.0f}.."
            f"{lat.diff['p99'].hi:+.0f}), n={lat.n_failing}/{lat.n_comparator} {UNITS[chosen]}",
            query="slo_samples",
            parameters={"failing": failing, "comparator": comparator, "slo": chosen},
            # The stages' split of the SLO too: the closure summary reads its stages in it.
            numbers={**gaps[chosen], "stages": {r.stage: gap_doc(chosen, r) for r in rows[1:]}},
        )
    ]
    if w is not None and triggered:
        claims.append(Claim(
            text=f"{w.mechanism}: {w.what} {w.value:+.3g} (95% CI {w.lo:+.3g}..{w.hi:+.3g}), "
            f"n={w.n_failing}/{w.n_comparator}",
            # Preemptions are counted per request; the other witnesses are read off the steps.
            query="serving_requests" if w.mechanism == "kv_preemption" else "serving_step_events",
            parameters={"run_id": failing},
            numbers=_witness_doc(w),
        ))  # fmt: skip
    verdict = {
        "outcome": v["outcome"],
        "reason": f"p99 {name} ({UNITS[chosen]}): " + v["reason"],
        "p95_gap_us": lat.diff["p95"].to_json(),
        "p99_gap_us": lat.diff["p99"].to_json(),
        "threshold_us": v["threshold_us"],
        "threshold_basis": "5% of the comparator's quantile",
        "confidence_method": "not yet calibrated for LLM serving: no probability is stated",
        "decided_by": f"serving SLO {chosen}",
        "serving_witnesses": v["witnesses"],
    }
    return dict(
        out,
        stages=rows,
        origin_stage=origin,
        manifest_stage=manifest,
        mechanism=mechanism,
        secondary_mechanism=None,
        confidence=math.nan,
        explained_share=math.nan,
        explained_share_method="not measured for serving SLOs",
        explained_share_by_stage={},
        p95_gap=lat.diff["p95"],
        p99_gap=lat.diff["p99"],
        triggered=triggered,
        claims=claims,
        verdict=verdict,
        replay={},
    )
