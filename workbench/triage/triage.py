"""Headless triage: evidence, replay and localization of a failing run against a comparator."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

import duckdb

from accel.cost import op_times
from accel.localize import (
    SUMMARY_QNAMES,
    Localization,
    TriggerPolicy,
    localize,
    replayed,
)
from accel.ops import RunArrays
from accel.profiles import HardwareProfile, get_profile, match_profile
from workbench.errors import WorkbenchError
from workbench.store import db, heap
from workbench.store.arrays import compile_rows
from workbench.store.layout import check_run_id
from workbench.triage import evidence, graph_break, lanes, pairing, retuning, serving_slo
from workbench.triage.context import RunContext, load_present
from workbench.triage.evidence import EvidenceTable, Interval, StageRow
from workbench.triage.hardware_pair import check_enough_requests
from workbench.triage.triage_claims import Claim, jsonable, pair_claims
from workbench.triage.warmup import Warmup, warmup_of

Progress = Callable[[str, float], None]
DEFAULT_PROFILE: Final[str] = "h100"
MIN_TRIAGE_REQUESTS: Final[int] = 5  # below this no tail quantile means anything
# Locked tags whose difference is the environment, not a change the model can localize: a
# pair that differs in one is inconclusive (hardware is weighed by its profiles instead).
ENVIRONMENT_TAGS: Final[tuple[str, ...]] = ("device_count", "thermal_state")


@dataclass(frozen=True)
class TriageResult:
    failing: str
    comparator: str
    comparator_reasons: list[str]
    hardware: str
    warnings: list[str]
    stages: list[StageRow]  # steady state (warm-up requests left out)
    latency_with_warmup: StageRow
    origin_stage: str | None
    manifest_stage: str | None
    mechanism: str
    secondary_mechanism: str | None
    confidence: float
    explained_share: float  # share of the p99 gap the origin's plan swap (or mechanism) explains
    explained_share_method: str
    explained_share_by_stage: dict[str, dict[str, float]]
    p95_gap: Interval
    p99_gap: Interval
    triggered: bool
    claims: list[Claim]
    primary_metric: list[dict[str, Any]]
    retuning: list[retuning.Action]
    warmup: dict[str, Any]
    recompiles: dict[str, Any]
    drift_psi: float
    tail_drivers: list[dict[str, Any]]
    evidence: dict[str, EvidenceTable] = field(default_factory=dict)
    replay: dict[str, Any] = field(default_factory=dict)  # see to_json
    verdict: dict[str, Any] = field(default_factory=dict)  # see verdict_doc
    # LLM serving (serving_slo.py): the SLO every number above is in, each SLO's gaps with
    # intervals, and how each run's records were joined; None / {} for other runs.
    primary_slo: str | None = None
    slo_gaps: dict[str, Any] = field(default_factory=dict)
    serving_join: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The result as JSON; times in us, NaN as null. "replay" is {} or {"decided_by",
        "quantiles": ["p50", "p95", "p99"], "rows": [{"id": stage | "other" | "latency", "role":
        "origin" | "manifest" | "origin+manifest" | "", "failing" / "comparator": {"n",
        "modelled_share", "observed_<q>_us", "predicted_<q>_us"}, "residual_shift": {"hl_us",
        "hl_lo_us", "hl_hi_us", "p_value", "p95_share", "p99_share"} | null}]}."""
        doc: dict[str, Any] = jsonable(
            {
                "failing": self.failing,
                "comparator": self.comparator,
                "comparator_reasons": self.comparator_reasons,
                "hardware": self.hardware,
                "time_unit": "us",
                "warnings": self.warnings,
                "stages": [s.to_json() for s in self.stages],
                "latency_with_warmup": self.latency_with_warmup.to_json(),
                "origin_stage": self.origin_stage,
                "manifest_stage": self.manifest_stage,
                "mechanism": self.mechanism,
                "secondary_mechanism": self.secondary_mechanism,
                "explained_share": self.explained_share,
                "explained_share_method": self.explained_share_method,
                "explained_share_by_stage": self.explained_share_by_stage,
                "confidence": self.confidence,
                # the confidence is a calibrated probability (accel/localize/calibration.py)
                "origin_probability": self.confidence if self.triggered else None,
                "triggered": self.triggered,
                "p95_gap_us": self.p95_gap.to_json(),
                "p99_gap_us": self.p99_gap.to_json(),
                "claims": [c.to_json() for c in self.claims],
                "primary_metric": self.primary_metric,
                "retuning": [a.to_json() for a in self.retuning],
                "warmup": self.warmup,
                "recompiles": self.recompiles,
                "shape_drift_psi": self.drift_psi,
                "tail_drivers": self.tail_drivers,
                "evidence_queries": {
                    name: {"query": t.query, "parameters": t.parameters, "rows": t.table.num_rows}
                    for name, t in self.evidence.items()
                },
                "replay": self.replay,
                "verdict": self.verdict,
                "primary_slo": self.primary_slo,
                "slo_gaps": self.slo_gaps,
                "serving_join": self.serving_join,
            }
        )
        return doc


def verdict_doc(loc: Localization) -> dict[str, Any]:
    """The trigger's outcome and reason, its thresholds and intervals, whether the base queue
    re-run reproduced each run's observed tail (and by how much), the origin's bootstrap
    agreement, direct evidence (tail first) and, across hardware, what the profiles predict."""
    return {
        "outcome": loc.outcome,
        "reason": loc.outcome_reason,
        "p95_gap_us": {"value": loc.p95_gap_us, "lo": loc.p95_gap_ci[0], "hi": loc.p95_gap_ci[1]},
        "p99_gap_us": {"value": loc.p99_gap_us, "lo": loc.p99_gap_ci[0], "hi": loc.p99_gap_ci[1]},
        "threshold_us": loc.threshold_us,
        "threshold_basis": loc.threshold_basis,
        "base_rerun": loc.rerun,
        "origin_agreement": loc.origin_agreement,
        "stability": loc.stability,
        "confidence_method": loc.confidence_method,
        "decided_by": loc.decided_by,
        "direct_evidence": loc.direct,
        "hardware_gap": loc.hardware_gap,
        "equal_traffic": loc.equal_traffic,
        "queue_free_tail": loc.queue_free_tail,
        "load_change": loc.load_change,
        "tail_exceedance": loc.tail_exceedance,
        "fidelity": fidelity_doc(loc),
    }


def fidelity_doc(loc: Localization) -> dict[str, dict[str, float]]:
    """Per run: the model's predicted latency p95/p99 beside the observed, their ratio, and
    the share of op time the model predicted at all (0: every op copied as observed, so the
    ratio says nothing of the model); {} when the pair was not replayed."""
    out: dict[str, dict[str, float]] = {}
    for role, summary in (loc.replay_summary or {}).items():
        row = summary.get("latency") or {}
        doc = {"modelled_share": float(row.get("modelled_share", math.nan))}
        for q in ("p95", "p99"):
            obs = float(row.get(f"observed_{q}_us", math.nan))
            pred = float(row.get(f"predicted_{q}_us", math.nan))
            doc[f"observed_{q}_us"], doc[f"predicted_{q}_us"] = obs, pred
            doc[f"ratio_{q}"] = pred / obs if obs > 0 else math.nan
        out[role] = doc
    return out


def replay_doc(loc: Localization) -> dict[str, Any]:
    """Observed vs predicted per stage for both runs, the residual shift, origin and manifest
    marked (the "replay" key of TriageResult.to_json); {} when the pair was not replayed."""
    if not loc.replay_summary:
        return {}
    rows = []
    for sid in loc.replay_summary["failing"]:
        marks = (("origin", loc.origin_stage), ("manifest", loc.manifest_stage))
        role = "+".join(mark for mark, stage in marks if stage == sid)
        rows.append(
            {
                "id": sid,
                "role": role,
                "failing": loc.replay_summary["failing"][sid],
                "comparator": loc.replay_summary["comparator"].get(sid, {}),
                "residual_shift": loc.residual_shift.get(sid),
            }
        )
    return {"decided_by": loc.decided_by, "quantiles": list(SUMMARY_QNAMES), "rows": rows}


NO_PROFILE: Final = "no hardware profile matches run hardware"


def profile_for(hardware_tag: str | None, requested: str | None) -> tuple[HardwareProfile, str]:
    """The profile to replay on, and a warning when it is a guess."""
    if requested:
        try:
            return get_profile(requested), ""
        except ValueError as exc:
            raise WorkbenchError(repr(requested), str(exc)) from exc
    name = match_profile(hardware_tag)
    if name is not None:
        return get_profile(name), ""
    return get_profile(DEFAULT_PROFILE), (
        f"{NO_PROFILE} {hardware_tag or 'unknown'}: replayed on {DEFAULT_PROFILE} (pass --hardware)"
    )


def triage(
    store: Path,
    failing: str,
    comparator: str | None = None,
    *,
    hardware: str | None = None,
    suspect: str | None = None,
    fixed: str | None = None,
    progress: Progress | None = None,
    release_heap: bool = True,
    policy: TriggerPolicy | None = None,
    slo: str | None = None,
) -> TriageResult:
    """Pair, gather evidence, replay and localize; pure: reads the store, writes nothing.
    `slo`: for LLM-serving runs, the SLO to read the verdict in (ttft, itl, tpot, e2e; default
    the one that regressed most against its interval).
    `release_heap` False keeps the freed heap (see heap.reused_heap), for a command that exits.
    `policy`: what counts as a regression (default TriggerPolicy; the runs' SLO fills sla_us
    when it is not set)."""

    def step(msg: str, frac: float) -> None:
        if progress:
            progress(msg, frac)

    for rid in (failing, comparator, fixed):
        if rid is not None:
            check_run_id(rid)
    con = db.connect(store)
    # No async (I/O) threads: each one that idles 0.5 s calls malloc_trim, which hands back
    # every free page of the heap reused_heap keeps, and numpy faults them in again (~0.3 GB
    # per 10M-event triage). Stopped now, while the heap is small; the evidence queries run
    # no slower.
    con.execute("SET async_threads = 0")
    step("checking the runs' files", 0.0)
    # Each run's context is loaded here once and handed on; damaged files are an error, not a
    # verdict.
    present = load_present(con, failing, comparator, fixed)
    # One duckdb thread: the evidence queries run beside this thread's numpy work, which has
    # the other core.
    con.execute("SET threads = 1")
    try:
        with heap.reused_heap(release=release_heap):
            result = _triage(
                present,
                con,
                failing,
                comparator,
                hardware,
                suspect,
                fixed,
                step,
                policy,
                release_heap,
            )
            serving = serving_slo.apply(
                con, result.failing, result.comparator, result.triggered, result.verdict, slo,
                policy or TriggerPolicy(),
            )  # fmt: skip
            if serving.get("replay") == {}:
                # Read in its SLOs, not replayed: a guessed replay profile says nothing of it.
                serving["warnings"] = [w for w in result.warnings if not w.startswith(NO_PROFILE)]
            return replace(result, **serving)
    finally:
        con.close()


def _triage(
    present: dict[str, RunContext],
    con: duckdb.DuckDBPyConnection,
    failing: str,
    comparator: str | None,
    hardware: str | None,
    suspect: str | None,
    fixed: str | None,
    step: Progress,
    policy: TriggerPolicy | None,
    release: bool,
) -> TriageResult:
    if failing not in present:
        raise WorkbenchError(repr(failing), "failing run is not in the store")
    f_run = present[failing]
    step("pairing", 0.0)
    reasons: list[str] = []
    if comparator is None:
        best = pairing.pick_comparator(con, failing, suspect=suspect)
        comparator, reasons = best.run_id, [f"picked as rank {best.rank}", *best.reasons]
        if comparator not in present:  # the fixed run may be picked: its context is loaded
            present = {**present, **load_present(con, comparator)}
    elif comparator not in present:
        raise WorkbenchError(repr(comparator), "comparator run is not in the store")
    if comparator == failing:
        raise WorkbenchError(repr(comparator), "comparator is the failing run itself")
    if fixed is not None and fixed not in present:
        raise WorkbenchError(repr(fixed), "fixed-metadata run is not in the store")
    c_run = present[comparator]
    # Too few requests for a tail: one line, leading with the hardware when the runs differ.
    check_enough_requests(con, f_run, c_run, MIN_TRIAGE_REQUESTS)
    hw, hw_warning = profile_for(f_run.hardware, hardware)

    # Two lanes that spend most of their time outside the GIL. A worker, on its own cursor,
    # finds the failing run's shape buckets, loads and replays the comparator, finds the
    # pair's warnings and the comparator's half of the placement swap (while it waits for the
    # primary metric), prepares the plan swaps (all but the placement swap) and runs the
    # evidence queries (beside the localization); this thread reads the pair's context, loads
    # the failing run, works out its primary metric, retuning and replay (one op_times shared by
    # the three), then localizes.
    duck, metric_done = threading.Lock(), threading.Event()
    cur = con.cursor()
    try:
        with ThreadPoolExecutor(max_workers=1) as pool:
            try:
                fetched = pool.submit(compile_rows, cur, failing)
                shapes = pool.submit(lanes.shape_buckets, cur, failing, fetched)
                lane = pool.submit(lanes.comparator_lane, cur, c_run, hw, metric_done)
                # Read only for the result: found by the worker while it waits for the primary
                # metric, not on this thread's way to the localization (~0.1 s of queries).
                paired = pool.submit(
                    pairing.pair_warnings, cur, failing, comparator, suspect=suspect, fixed=fixed
                )
                shares = pool.submit(lanes.placement_shares, lane)
                with duck:
                    comparator_hw, context = _pair_context(con, f_run, c_run, hw, suspect)
                    pol = policy or TriggerPolicy()
                    if pol.sla_us is None:
                        pol = replace(pol, sla_us=_sla(con, comparator))
                    step("warm-up", 0.1)
                    warm_f = warmup_of(con, failing, fetched=fetched.result())
                    step("primary metric, retuning and replay", 0.15)
                    # Steady state only: warm-up requests are not a regression (not even loaded).
                    steady_f = lanes.load_steady(con, f_run, warm_f)
                swap = pool.submit(lanes.swap_inputs_lane, metric_done, steady_f, lane, shares)
                found = pool.submit(
                    lanes.evidence_lane,
                    cur,
                    duck,
                    failing,
                    comparator,
                    warm_f,
                    fetched.result(),
                    lane,
                    release,
                )
                op_cost = op_times(steady_f.ops, hw)
                pm_rows = lanes.metric_rows("failing", steady_f, warm_f, hw, op_cost)
                metric_done.set()
                bucket_params, buckets = shapes.result()
                actions = retuning.propose(
                    steady_f, warm_f, buckets.to_pylist(), hw, op_cost=op_cost
                )
                replay_f = replayed(steady_f, hw, op_cost)
                del op_cost
                warm_c, steady_c, replay_c = lane.result()
                step("localization", 0.6)
                loc = localize(
                    steady_f,
                    steady_c,
                    hw,
                    n_boot=evidence.N_BOOT,
                    replays=(replay_f, replay_c),
                    prepared=swap.result,  # waited for only when the swaps need it
                    policy=pol,
                    comparator_hw=comparator_hw,
                    context=context,
                )
                tables, stages, with_warmup, drift = found.result()
                warnings = paired.result()
                if hw_warning:
                    warnings.append(hw_warning)
            finally:
                metric_done.set()  # also on an error, or the worker would wait for ever
    finally:
        cur.close()

    share_by_stage = {
        s: {k: float(v) for k, v in d.items()} for s, d in loc.explained_share.items()
    }
    origin_share = share_by_stage.get(loc.origin_stage or "", {}).get("p99", math.nan)
    share_method = "plan swap of the origin stage"
    if (loc.queue_free_tail.get("fired") or {}).get("value") == 1.0:
        share_method += "; of the queue-free tail's gap, re-run without the queue"

    step("claims", 0.9)
    tables["shape_buckets"] = EvidenceTable("shape_buckets", bucket_params, buckets)
    # One set of tail-gap intervals everywhere: the ones the trigger decided on.
    gap95 = Interval(loc.p95_gap_us, *loc.p95_gap_ci)
    gap99 = Interval(loc.p99_gap_us, *loc.p99_gap_ci)
    stages[0] = replace(stages[0], diff={**stages[0].diff, "p95": gap95, "p99": gap99})
    latency = stages[0]
    recompiles = _recompile_summary(steady_f, warm_f, latency)
    if loc.mechanism == "recompile" and not origin_share > 0:
        # No plan swap could be made (e.g. ops without cores): the recompile counterfactual
        # is the model's measure of what the mechanism explains.
        origin_share = float(recompiles["share_of_p99_gap"])
        share_method = "queue re-run without the steady-state recompiles"
    drivers = tables["tail_drivers"].rows()
    claims = pair_claims(
        failing, comparator, latency, with_warmup, loc, tables, warm_f, recompiles, drift, hw
    )
    if loc.mechanism == "graph_break":
        params = {"run_id": failing}
        gb = EvidenceTable("graph_breaks", params, db.query(con, "graph_breaks", params))
        tables["graph_breaks"] = gb
        p = graph_break.proof(gb, steady_f, steady_c, loc.mechanism_scores)
        claims.insert(1, Claim(text=f"{p.text}; action: {p.action}", query=gb.query,
                               parameters=gb.parameters, numbers={**p.numbers,
                               "action": p.action}))  # fmt: skip
    step("done", 1.0)
    return TriageResult(
        failing=failing,
        comparator=comparator,
        comparator_reasons=reasons,
        hardware=hw.name,
        warnings=warnings,
        stages=stages,
        latency_with_warmup=with_warmup,
        origin_stage=loc.origin_stage,
        manifest_stage=loc.manifest_stage,
        mechanism=loc.mechanism,
        secondary_mechanism=loc.secondary_mechanism,
        confidence=float(loc.confidence),
        explained_share=origin_share,
        explained_share_method=share_method,
        explained_share_by_stage=share_by_stage,
        p95_gap=gap95,
        p99_gap=gap99,
        triggered=bool(loc.triggered),
        claims=claims,
        primary_metric=pm_rows,
        retuning=actions,
        warmup={
            "failing": _warm_json(warm_f),
            "comparator": _warm_json(warm_c),
            "excluded_requests": len(warm_f.affected_requests) + len(warm_c.affected_requests),
        },
        recompiles=recompiles,
        drift_psi=drift.psi,
        tail_drivers=drivers,
        evidence=tables,
        replay=replay_doc(loc),
        verdict=verdict_doc(loc),
    )


def _pair_context(
    con: duckdb.DuckDBPyConnection,
    f_run: RunContext,
    c_run: RunContext,
    hw: HardwareProfile,
    suspect: str | None,
) -> tuple[HardwareProfile | None, tuple[str, ...]]:
    """The comparator's hardware profile when it differs from the failing run's, and reasons
    the pair is inconclusive: environment tags that differ, hardware without a profile."""
    failing, comparator = f_run.run_id, c_run.run_id
    reasons = [
        f"locked tag {m.key} differs ({m.failing_value or 'unknown'} vs "
        f"{m.other_value or 'unknown'}): the environment changed, not something the model can "
        "localize"
        for m in pairing.locked_mismatches(con, failing, [comparator], suspect=suspect)[comparator]
        if m.key in ENVIRONMENT_TAGS
    ]
    f_tag, c_tag = f_run.hardware, c_run.hardware
    if (f_tag or "").strip().lower() == (c_tag or "").strip().lower():
        return None, tuple(reasons)
    c_hw, c_unknown = profile_for(c_tag, None)
    _, f_unknown = profile_for(f_tag, None)
    if c_unknown or f_unknown or c_hw.name == hw.name:
        reasons.append(
            f"hardware differs ({f_tag or 'unknown'} vs {c_tag or 'unknown'}) and the "
            "profiles cannot say how much of the gap that explains"
        )
        return None, tuple(reasons)
    return c_hw, tuple(reasons)


def _sla(con: duckdb.DuckDBPyConnection, run_id: str) -> float | None:
    """The run's SLO in us, when its requests carry one."""
    row = db.query(con, "run_sla", {"run_id": run_id}).to_pylist()[0]
    v = row["sla_us"]
    return float(v) if v is not None and math.isfinite(float(v)) and v > 0 else None


def _warm_json(w: Warmup) -> dict[str, Any]:
    return {
        "warmup_compiles": len(w.warmup),
        "warmup_compile_us": w.warmup_us,
        "steady_recompiles": len(w.steady),
        "steady_recompile_us": w.steady_us,
        "affected_requests": len(w.affected_requests),
    }


def _recompile_summary(run: RunArrays, warm: Warmup, latency: StageRow) -> dict[str, Any]:
    """Steady-state recompiles, their reasons, and the share of the tail gap they explain:
    the model's queue re-run on the failing run without their time."""
    cf = retuning.Counterfactual.of(run, warm)
    saved = retuning.compile_time_per_request(run, warm.steady)
    g95, g99 = cf.gain(saved) if warm.steady else (0.0, 0.0)
    gap95, gap99 = latency.diff["p95"].value, latency.diff["p99"].value
    return {
        "count": len(warm.steady),
        "total_us": warm.steady_us,
        "reasons": warm.reasons(),
        "p95_gain_us": g95,
        "p99_gain_us": g99,
        "share_of_p95_gap": g95 / gap95 if gap95 > 0 else math.nan,
        "share_of_p99_gap": g99 / gap99 if gap99 > 0 else math.nan,
    }
