"""The verdict: origin stage, manifest stage and mechanism of a tail regression (DESIGN §5).

For a failing run against a comparator on one hardware profile:
  1. trigger (trigger.py): regression, no regression or inconclusive, with the reason;
  2. the queue and batch re-run (requeue.py) must give back the observed p50/p95/p99 of both
     runs within a tolerance before any counterfactual computed through it is trusted;
  3. plan swaps (swaps.py, batching.py): the failing run gets the comparator's decisions for
     one plan-bearing stage, the queue is re-run, and the share of the tail gap removed is
     measured; residual shifts (residuals.py) of observed - predicted per stage; direct
     evidence (direct.py) for time the model does not predict, and core imbalance;
  4. the origin (confidence.py): the first stage in pipeline order whose swap removes most of
     the gap, or whose residual or direct evidence shifts significantly and removes a real
     share of it; failing all, the manifest stage. Its confidence is the share of bootstrap
     resamples of the requests that name the same origin; for a manifest stage whose own p95
     did not grow beyond noise, at most the share of the tail gap its growth accounts for.
When the re-run does not reproduce the tail, only direct evidence is used (each request's own
latency minus what it blames, no queue), and the confidence is capped at FALLBACK_CAP. When the
trigger fired in the queue-free tail, steps 3 and 4 weigh the evidence against that reading's
gaps, each counterfactual re-run with a server free for every request (requeue.unqueued).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import Final

import numpy as np

from accel.localize.calibration import calibrated, fitted_on
from accel.localize.confidence import (
    Candidate,
    decide,
    manifest_cap,
    manifest_index,
    origin_agreement,
)
from accel.localize.decisions import novel_kernels, novel_mechanism
from accel.localize.direct import (
    IMBALANCE,
    Direct,
    burst_candidate,
    compare,
    direct_doc,
    direct_mechanism,
    load_candidate,
)
from accel.localize.events.lowering_events import graph_break_candidate, recompile_candidate
from accel.localize.events.observed_swap import observed_swaps
from accel.localize.events.witness import witness, witness_claim
from accel.localize.gaps import QNAMES, QS, at_q, gap_share, mean_share
from accel.localize.graph_break import graph_break
from accel.localize.hardware import hardware_gap
from accel.localize.matching import SwapInputs, swap_inputs, unmatched_reason
from accel.localize.mechanism import mechanism_of, secondary_of
from accel.localize.queue_bootstrap import queue_reaches
from accel.localize.records import Claim, Localization, _Common
from accel.localize.requeue import (
    QueueState,
    Reproduction,
    batch_heads,
    observed_queue,
    queue_free,
    reproduction,
    requeue,
    unqueued,
)
from accel.localize.residuals import Replayed, replayed, residual_shifts
from accel.localize.swaps import plan_swaps
from accel.localize.traffic import traffic_noise
from accel.localize.trigger import NO_REGRESSION, Trigger, TriggerPolicy
from accel.localize.trigger import decide as trigger
from accel.localize.trigger_claims import rerun_doc, trigger_claims
from accel.localize.verdict_claims import manifest_cap_claim, verdict_claims
from accel.ops import F64, I64, RunArrays
from accel.profiles import HardwareProfile
from accel.stages import STAGE_CODE, STAGES
from accel.stats import hodges_lehmann_ci, mann_whitney_u

PLAN_STAGES: Final[tuple[str, ...]] = ("ingress", "lowering", "scheduling")
METHODS: Final[tuple[str, ...]] = ("full", "no_swap", "naive")

# Decision thresholds (shares of the tail gap, and test levels); see bench/localize.py.
SWAP_SHARE: Final[float] = 0.5  # a plan swap must remove at least half of the tail gap
RESIDUAL_SHARE: Final[float] = 0.3  # a residual shift must account for this share of the gap
DIRECT_SHARE: Final[float] = 0.3  # so must direct evidence
RESIDUAL_ALPHA: Final[float] = 0.01 / len(STAGES)  # Bonferroni over the five stages
FALLBACK_CAP: Final[float] = 0.5  # confidence ceiling when the re-run missed the tail
N_BOOT: Final[int] = 400
INGRESS = STAGE_CODE["ingress"]
EXEC = STAGE_CODE["execution"]
NOVEL: Final[str] = "lowering:novel_kernels"


def _order(run: RunArrays) -> F64:
    """The run's latencies in arrival order (the trigger's block bootstrap reads runs of them)."""
    r = run.requests
    order = np.argsort(np.nan_to_num(np.asarray(r.arrival_us, dtype=np.float64)), kind="stable")
    return np.asarray(r.latency_us, dtype=np.float64)[order]


def _per_job(stage_us: F64, i: int, heads: I64) -> F64:
    """Stage i's column, one value per queue job: every request's ingress (its own wait), the
    batch heads' other stages (batch members carry copies of their batch's)."""
    return np.asarray(stage_us[:, i] if i == INGRESS else stage_us[heads, i], dtype=np.float64)


def _check_pair(swap: SwapInputs, failing: RunArrays, comparator: RunArrays) -> SwapInputs:
    pair = (failing.run_id, comparator.run_id)
    if (swap.failing, swap.comparator) != pair:
        raise ValueError(
            f"swap inputs of {swap.failing} vs {swap.comparator} are not of {pair[0]} vs {pair[1]}"
        )
    return swap


def _formations(fq: QueueState, cq: QueueState, kept: bool) -> tuple[F64, F64]:
    """Ingress's own time in the queue-free reading: each request's batch formation, or none
    where the reading set formation aside."""
    if kept:
        return fq.formation_us, cq.formation_us
    return np.zeros_like(fq.formation_us), np.zeros_like(cq.formation_us)


def localize(
    failing: RunArrays,
    comparator: RunArrays,
    hw: HardwareProfile,
    policy: TriggerPolicy | None = None,
    *,
    method: str = "full",
    n_boot: int = N_BOOT,
    seed: int = 0,
    replays: tuple[Replayed | None, Replayed | None] = (None, None),
    prepared: SwapInputs | Callable[[], SwapInputs] | None = None,
    comparator_hw: HardwareProfile | None = None,
    context: tuple[str, ...] = (),
) -> Localization:
    """Origin stage, manifest stage and mechanism of failing's tail regression vs comparator.

    `method` "full" is DESIGN §5; "no_swap" skips the plan swaps; "naive" names the first stage
    whose raw time moved (kept for the ablation in bench/localize.py). `replays`: replayed(run,
    hw) of failing and of comparator, and `prepared`: swap_inputs(failing, comparator), when
    the caller made them already (None: made here; a callable: called when first needed).
    `comparator_hw`: the comparator's own hardware when it differs from `hw`. `context`: reasons, known to the caller, that the
    pair cannot be compared (e.g. locked tags that differ), which make it inconclusive.
    """
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; known: {', '.join(METHODS)}")
    for run, rep in zip((failing, comparator), replays, strict=True):
        if rep is not None and (rep.run_id != run.run_id or rep.profile != hw.name):
            raise ValueError(
                f"replay of {rep.run_id} on {rep.profile} is not of {run.run_id} on {hw.name}"
            )
    if isinstance(prepared, SwapInputs):
        _check_pair(prepared, failing, comparator)
    pol = policy or TriggerPolicy()
    fr, cr = failing.requests, comparator.requests
    lf, lc = _order(failing), _order(comparator)
    reasons = list(context)
    hw_doc: dict[str, dict[str, float]] = {}
    if comparator_hw is not None and comparator_hw.name != hw.name:
        # Measured on gaps without a bootstrap first: the profiles' prediction is reported
        # whatever the trigger says.
        plain = {n: at_q(lf, q) - at_q(lc, q) for q, n in zip((0.95, 0.99), QNAMES, strict=True)}
        hg = hardware_gap(comparator, hw, comparator_hw, plain)
        hw_doc = {
            "predicted_gap_us": hg.predicted_gap_us,
            "share_of_gap": hg.share_of_gap,
            "remaining_gap_us": hg.remaining_gap_us,
        }
        reasons.append(
            f"hardware differs ({hw.name} vs {comparator_hw.name}): the profiles alone predict "
            f"{hg.predicted_gap_us['p95']:+.0f} us of the {plain['p95']:+.0f} us p95 gap "
            f"({hg.share_of_gap['p95']:.0%}); the remaining {hg.remaining_gap_us['p95']:+.0f} "
            "us is not localized across hardware"
        )
    fq, cq = observed_queue(fr), observed_queue(cr)
    rq_f, rq_c = reproduction(fq, fr), reproduction(cq, cr)
    # The queue bootstrap is a model of the run: used where the queue reaches the tail of
    # either run, and trusted only where the re-run gives back both tails.
    reach = queue_reaches(fq, max(QS)) or queue_reaches(cq, max(QS))
    use = pol.queue_bootstrap and reach and rq_f.reproduced and rq_c.reproduced
    queues = (fq, cq) if use else None
    trig = trigger(lf, lc, pol, n_boot=n_boot, seed=seed, context=tuple(reasons), queues=queues)
    claims, common = trigger_claims(trig, lf, lc, pol.alpha, method, hw_doc)
    # A regression read at equal traffic or in the queue-free tail has set the traffic aside.
    if trig.regression and not (trig.at_equal_traffic or trig.at_queue_free_tail):
        noise = traffic_noise(failing, comparator, trig, RESIDUAL_ALPHA)
        if noise:
            trig = replace(trig, outcome=NO_REGRESSION, reason=noise)
            claims.append(Claim(f"{trig.outcome}: {noise}", {}, "traffic swap (queue re-run)"))
            common["outcome"], common["outcome_reason"] = trig.outcome, trig.reason
    if not trig.regression:
        # Stated for every verdict: whether the queue model gives back each run's tail.
        rerun = {
            "failing": rerun_doc(rq_f),
            "comparator": rerun_doc(rq_c),
        }
        return Localization(
            triggered=False,
            origin_stage=None,
            manifest_stage=None,
            mechanism="none",
            secondary_mechanism=None,
            confidence=0.0,
            explained_share={},
            claims=claims,
            rerun=rerun,
            **common,
        )
    return _localize_triggered(
        failing,
        comparator,
        hw,
        method,
        trig,
        claims,
        common,
        replays,
        prepared,
        seed,
        (fq, cq, rq_f, rq_c),
    )


def _localize_triggered(
    failing: RunArrays,
    comparator: RunArrays,
    hw: HardwareProfile,
    method: str,
    trig: Trigger,
    claims: list[Claim],
    common: _Common,
    replays: tuple[Replayed | None, Replayed | None],
    prepared: SwapInputs | Callable[[], SwapInputs] | None,
    seed: int,
    queues: tuple[QueueState, QueueState, Reproduction, Reproduction],
) -> Localization:
    gaps = trig.gaps.gap
    fr, cr = failing.requests, comparator.requests
    f_stage = np.nan_to_num(np.asarray(fr.stage_us, dtype=np.float64), nan=0.0)
    c_stage = np.nan_to_num(np.asarray(cr.stage_us, dtype=np.float64), nan=0.0)
    lf = np.nan_to_num(np.asarray(fr.latency_us, dtype=np.float64), nan=0.0)
    lc = np.nan_to_num(np.asarray(cr.latency_us, dtype=np.float64), nan=0.0)
    f_heads, c_heads = batch_heads(fr), batch_heads(cr)
    fq, cq, rq_f, rq_c = queues
    reproduced = rq_f.reproduced and rq_c.reproduced
    rerun = {"failing": rerun_doc(rq_f), "comparator": rerun_doc(rq_c)}
    worst = max(rq_f.worst, rq_c.worst)
    claims.append(
        Claim(
            (
                f"the base queue re-run reproduces the observed tail (p50/p95/p99 within "
                f"{worst:.1%}, tolerance {rq_f.tolerance:.0%}): counterfactuals through the "
                "queue are used"
            )
            if reproduced
            else (
                f"the base queue re-run does NOT reproduce the observed tail (off by up to "
                f"{worst:.0%}, tolerance {rq_f.tolerance:.0%}): no counterfactual through the "
                "queue; direct evidence only, confidence capped"
            ),
            {f"{role}_{k}": v for role, d in rerun.items() for k, v in d.items()},
            "queue re-run of the observed service (requeue.reproduction)",
        )
    )
    base_lat = requeue(fq, f_stage) if reproduced else lf

    # Manifest: where the tail time shows up; ingress as the batcher's hold only, since queue
    # and batch-mate waits amplify every downstream slowdown.
    own_f, own_c = f_stage[:, :5].copy(), c_stage[:, :5].copy()
    own_f[:, INGRESS] = np.maximum(fq.hold, 0.0)
    own_c[:, INGRESS] = np.maximum(cq.hold, 0.0)
    manifest_gap = {
        s: at_q(own_f[:, i], 0.95) - at_q(own_c[:, i], 0.95) for i, s in enumerate(STAGES)
    }
    manifest = STAGES[manifest_index(own_f, own_c)]
    scores: dict[str, float] = {}

    if method == "naive":
        origin: str | None = None
        decided_by = "manifest"
        for i, s in enumerate(STAGES):
            a, b = _per_job(f_stage, i, f_heads), _per_job(c_stage, i, c_heads)
            _, p = mann_whitney_u(a, b)
            hl = hodges_lehmann_ci(a, b)[0]
            if p < RESIDUAL_ALPHA and hl > 0:
                origin, decided_by = s, "raw_shift"
                break
        origin = origin or manifest
        mech = mechanism_of(origin, failing, comparator, {}, scores)
        return Localization(
            triggered=True,
            origin_stage=origin,
            manifest_stage=manifest,
            mechanism=mech,
            secondary_mechanism=None,
            confidence=0.5,
            explained_share={},
            claims=claims,
            decided_by=decided_by,
            confidence_method="none (naive method)",
            rerun=rerun,
            manifest_gap_us=manifest_gap,
            **common,
        )

    observed = (fq, cq)  # the batch-policy swap simulates the runs as they were
    qf = trig.queue_free_tail
    in_queue_free = trig.at_queue_free_tail and qf is not None and reproduced
    if in_queue_free and qf is not None:
        # Fired in the queue-free tail: the evidence is weighed there, against its gaps, each
        # counterfactual re-run with a server free for every request. The observed gaps, swung
        # by the queue, can be below zero and would leave every share at zero.
        # (without formation where the reading set it aside: the service alone)
        form = trig.queue_free_formation
        fq, cq = unqueued(fq, form), unqueued(cq, form)
        lf, lc = queue_free(fq, form), queue_free(cq, form)
        gaps = qf.gap
        base_lat = requeue(fq, f_stage)
        claims.append(
            Claim(
                "the evidence is weighed in the queue-free tail, where the regression was "
                f"found: shares are of its p95/p99 gaps ({gaps['p95']:+.0f} / "
                f"{gaps['p99']:+.0f} us), each counterfactual re-run without the queue",
                {"queue_free_p95_gap_us": gaps["p95"], "queue_free_p99_gap_us": gaps["p99"]},
                "queue-free re-run (requeue.unqueued)",
            )
        )

    # One replay at a time, dropped once its residuals are out: each holds per-op costs.
    rep_f = replays[0] or replayed(failing, hw)
    rep_c = replays[1] or replayed(comparator, hw)
    residual_shift, res_cf = residual_shifts(
        (rep_f.residual_us, rep_c.residual_us),
        (f_heads, c_heads),
        f_stage,
        (fq, cq),
        base_lat,
        gaps,
        # without the queue, ingress is the batch's formation: the batcher's hold, mates arriving
        # (none where the reading set it aside, at a lighter load, where it is longer anyway)
        _formations(fq, cq, trig.queue_free_formation) if in_queue_free else None,
    )
    cands: list[Candidate] = []
    parts: dict[str, float] = {}
    # Asked for only now: a caller still making them (on another thread) overlaps the above.
    swap = _check_pair(prepared(), failing, comparator) if callable(prepared) else prepared
    if method == "full" and reproduced:
        swap = swap or swap_inputs(failing, comparator)
        swapped, parts, matched, notes = plan_swaps(
            failing, comparator, f_stage, observed, base_lat, gaps, swap, through=fq
        )
        claims.extend(Claim(note, {}, "batch-policy swap (simulated batcher)") for note in notes)
        if not matched:
            claims.append(Claim(unmatched_reason(failing.ops, comparator.ops), {}, "op matching"))
        for s, (b, cf) in swapped.items():
            cands.append(Candidate(s, "plan_swap", s, b, cf, True, SWAP_SHARE))
    if reproduced:
        for s, r in residual_shift.items():
            ok = r["p_value"] < RESIDUAL_ALPHA and r["hl_us"] > 0
            cands.append(Candidate(s, "residual", s, base_lat, res_cf[s], ok, RESIDUAL_SHARE))
    directs = compare(rep_f.kinds, rep_c.kinds, lf, lc, gaps["p95"])
    novel = novel_kernels(rep_f.kernels, rep_c.kernels, fr.size)
    novel_at = -1
    if novel is not None:
        cf = f_stage.copy()
        cf[:, EXEC] = np.maximum(cf[:, EXEC] - novel.saved_us, 0.0)
        b, cf_lat = (base_lat, requeue(fq, cf)) if reproduced else (lf, lf - novel.saved_us)
        novel_at = len(cands)
        ok = bool(novel.saved_us.any())
        cands.append(Candidate("lowering", "direct", NOVEL, b, cf_lat, ok, DIRECT_SHARE))
    for event_cand in (
        recompile_candidate(
            failing, comparator, f_stage, c_stage, fq, base_lat, lf, reproduced, DIRECT_SHARE
        ),
        graph_break_candidate(
            failing, comparator, f_stage, c_stage, fq, base_lat, lf, reproduced, DIRECT_SHARE
        ),
    ):
        if event_cand is not None:
            cands.append(event_cand)
    cands.extend(
        observed_swaps(
            f_stage, c_stage, (rep_f.summary, rep_c.summary), fq, base_lat, lf, reproduced,
            RESIDUAL_ALPHA,
        )
    )  # fmt: skip
    load = load_candidate(fr, cr, fq, f_stage, base_lat, reproduced, RESIDUAL_ALPHA, DIRECT_SHARE)
    if load is not None:
        cands.append(load)
    bursts = burst_candidate(
        fr, cr, fq, f_stage, base_lat, reproduced, RESIDUAL_ALPHA, DIRECT_SHARE
    )
    if bursts is not None:
        cands.append(bursts)
    direct_at: dict[int, Direct] = {}
    for d in directs:
        col = STAGE_CODE["execution"] if d.kind == IMBALANCE else STAGE_CODE[d.stage]
        if reproduced:
            cf = f_stage.copy()
            cf[:, col] = np.maximum(cf[:, col] - d.saved_us, 0.0)
            b, cf_lat = base_lat, requeue(fq, cf)
        else:
            b, cf_lat = lf, lf - d.saved_us
        ok = d.grew(RESIDUAL_ALPHA)
        direct_at[len(cands)] = d
        cands.append(Candidate(d.stage, "direct", d.kind, b, cf_lat, ok, DIRECT_SHARE))

    decision = decide(cands, lf, lc, own_f, own_c)
    origin, decided_by = decision.origin, decision.decided_by
    explained: dict[str, dict[str, float]] = {}
    for st in STAGES:
        mine = [c for c in cands if c.stage == st]
        pick = [c for c in mine if c.source == "plan_swap"] or mine
        if pick:
            best = max(pick, key=lambda c: mean_share(gap_share(c.base, c.cf, gaps)))
            explained[st] = gap_share(best.base, best.cf, gaps)
    direct_rows = sorted(
        (
            direct_doc(d, mean_share(gap_share(cands[j].base, cands[j].cf, gaps)))
            for j, d in direct_at.items()
        ),
        key=lambda x: -float(x["tail_share"]),
    )[:8]

    scores.update({f"lowering.{k}": v for k, v in parts.items()})
    if decided_by == "direct" and decision.candidate == novel_at and novel is not None:
        # A graph break splits the graph into more regions (new kernels too): it names itself.
        by_rule = mechanism_of(origin, failing, comparator, parts, scores)
        mech = by_rule if by_rule == "graph_break" else novel_mechanism(novel)
        claims.append(
            Claim(
                f"the failing run ran kernels the comparator never did: "
                f"{', '.join(novel.kernels[:4])}; at the comparator's efficiency they would "
                f"take {float(novel.saved_us.sum()) / max(float(novel.observed_us.sum()), 1e-9):.0%}"
                " less",
                {
                    "novel_us": float(novel.observed_us.sum()),
                    "saved_us": float(novel.saved_us.sum()),
                },
                "lowering decisions (decisions.py)",
            )
        )
    elif decided_by == "direct" and cands[decision.candidate].label.endswith(":observed"):
        # A stage's own time as a whole: its mechanism is read as for a residual shift.
        mech = mechanism_of(origin, failing, comparator, parts, scores)
    elif decided_by == "direct":
        mech = direct_mechanism(cands[decision.candidate].label, origin)
        # A graph break is read off the requests themselves (split into compiled regions),
        # whichever evidence decided the stage; otherwise the rule only adds its scores.
        if mechanism_of(origin, failing, comparator, parts, scores) == "graph_break":
            mech = "graph_break"
    else:
        mech = mechanism_of(origin, failing, comparator, parts, scores)
    if origin in ("scheduling", "execution") and graph_break(failing, comparator, scores):
        # The eager ops between compiled regions are execution time, but they run eagerly
        # because the graph split: the split, a lowering decision, is the origin.
        claims.append(
            Claim(
                f"{origin} time grew in ops that run eagerly between compiled regions the "
                "comparator does not split: the graph break (lowering) is the origin",
                {"graph_split_share": scores.get("lowering.graph_split_share", math.nan)},
                "runtime structure (compiled regions per request)",
            )
        )
        origin, mech = "lowering", "graph_break"
    mech, claim = witness_claim(mech, failing, comparator)
    claims.append(claim)
    secondary = secondary_of(*observed, mech, trig.gaps.gap)
    if secondary is not None and witness(secondary, failing, comparator) is None:
        secondary = None
    agreement = origin_agreement(cands, lf, lc, own_f, own_c, origin, seed=seed)
    conf = agreement if reproduced else min(agreement, FALLBACK_CAP)
    cap, tail_ci = math.nan, (math.nan, math.nan)
    if decided_by == "manifest":
        i = STAGES.index(origin)
        cap, tail_ci = manifest_cap(
            _per_job(own_f, i, f_heads),
            _per_job(own_c, i, c_heads),
            manifest_gap[origin],
            gaps.get("p95", math.nan),
            seed,
        )
        conf = min(conf, cap) if math.isfinite(cap) else conf
    claims.extend(
        verdict_claims(
            origin,
            manifest,
            mech,
            decided_by,
            explained,
            residual_shift,
            manifest_gap,
            cands[decision.candidate].label if decision.candidate >= 0 else "",
            formation=in_queue_free,
        )
    )
    claims.append(
        Claim(
            f"the same origin on {agreement:.0%} of bootstrap resamples of both runs' requests",
            {"origin_agreement": agreement, "confidence": conf},
            "bootstrap of the origin decision (confidence.py)",
        )
    )
    if math.isfinite(cap):
        claims.append(manifest_cap_claim(origin, cap, tail_ci, conf))
    stability = float(np.clip(conf, 0.0, 1.0))
    conf = calibrated(stability, decided_by, mech)
    claims.append(
        Claim(
            f"confidence {conf:.0%}: the probability that the origin is right, calibrated on "
            f"{fitted_on()}, from the stability {stability:.0%}, what decided the origin "
            f"({decided_by}) and whether a mechanism was witnessed",
            {"confidence": conf, "stability": stability},
            "calibrated confidence (calibration.py)",
        )
    )
    return Localization(
        triggered=True,
        origin_stage=origin,
        manifest_stage=manifest,
        mechanism=mech,
        secondary_mechanism=secondary,
        confidence=conf,
        stability=stability,
        explained_share=explained,
        claims=claims,
        decided_by=decided_by,
        residual_shift=residual_shift,
        mechanism_scores=scores,
        replay_summary={"failing": rep_f.summary, "comparator": rep_c.summary},
        origin_agreement=agreement,
        confidence_method=(
            f"probability the origin is right, calibrated on {fitted_on()}, from the stability: "
            "the share of bootstrap resamples of both runs' requests naming the same origin"
            + ("" if reproduced else f", capped at {FALLBACK_CAP} (re-run missed the tail)")
            + (", capped at the manifest stage's share of the gap" if math.isfinite(cap) else "")
        ),
        direct=direct_rows,
        rerun=rerun,
        manifest_gap_us=manifest_gap,
        **common,
    )
