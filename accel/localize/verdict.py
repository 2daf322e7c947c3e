"""The verdict: origin stage, manifest stage and mechanism of a tail regression (DESIGN §5).

For a failing run against a comparator on one hardware profile:
  1. trigger (trigger.py): the p95 or p99 latency gap is significant (bootstrap interval above
     zero) and larger than fault-free A/A pairs produce;
  2. conditional replay (residuals.py): ingress is re-predicted from the observed downstream
     service times (queueing amplifies every downstream slowdown; not ingress's fault);
  3. plan swaps (swaps.py, batching.py): the failing run gets the comparator's decisions for one
     plan-bearing stage, the queue is re-run (requeue.py), and the share of the p95/p99 gap
     that disappears is measured;
  4. residual shift per stage (residuals.py) of observed - predicted.
Origin = the first stage in pipeline order whose swap explains most of the gap or whose residual
shifts significantly (and explains a real share of it); failing both, the manifest stage.
"""

from __future__ import annotations

from typing import Final

import numpy as np

from accel.localize.confidence import origin_confidence
from accel.localize.gaps import at_q, mean_share
from accel.localize.matching import SwapInputs, swap_inputs
from accel.localize.mechanism import mechanism_of, secondary_of
from accel.localize.records import Claim, Localization, _Common
from accel.localize.requeue import batch_heads, observed_queue, requeue
from accel.localize.residuals import Replayed, replayed, residual_shifts
from accel.localize.swaps import plan_swaps
from accel.localize.trigger import DEFAULT_CALIBRATION, Calibration, fired, tail_gaps
from accel.ops import RunArrays
from accel.profiles import HardwareProfile
from accel.stages import MECHANISMS, STAGE_CODE, STAGES
from accel.stats import hodges_lehmann_ci, mann_whitney_u

PLAN_STAGES: Final[tuple[str, ...]] = ("ingress", "lowering", "scheduling")
METHODS: Final[tuple[str, ...]] = ("full", "no_swap", "naive")

# Decision thresholds (shares of the tail gap, and test levels); see bench/localize.py.
SWAP_SHARE: Final[float] = 0.5  # a plan swap must remove at least half of the tail gap
RESIDUAL_SHARE: Final[float] = 0.3  # a residual shift must account for this share of the gap
RESIDUAL_ALPHA: Final[float] = 0.01 / len(STAGES)  # Bonferroni over the five stages
N_BOOT: Final[int] = 400
INGRESS = STAGE_CODE["ingress"]


def localize(
    failing: RunArrays,
    comparator: RunArrays,
    hw: HardwareProfile,
    calibration: Calibration | None = None,
    *,
    method: str = "full",
    n_boot: int = N_BOOT,
    seed: int = 0,
    replays: tuple[Replayed | None, Replayed | None] = (None, None),
    prepared: SwapInputs | None = None,
) -> Localization:
    """Origin stage, manifest stage and mechanism of failing's tail regression vs comparator.

    `method` "full" is DESIGN §5; "no_swap" skips the plan swaps; "naive" names the first stage
    whose raw time moved (kept for the ablation in bench/localize.py). `replays`: replayed(run,
    hw) of failing and of comparator, and `prepared`: swap_inputs(failing, comparator), when
    the caller made them already (None: made here).
    """
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; known: {', '.join(METHODS)}")
    for run, rep in zip((failing, comparator), replays, strict=True):
        if rep is not None and (rep.run_id != run.run_id or rep.profile != hw.name):
            raise ValueError(
                f"replay of {rep.run_id} on {rep.profile} is not of {run.run_id} on {hw.name}"
            )
    pair = (failing.run_id, comparator.run_id)
    if prepared is not None and (prepared.failing, prepared.comparator) != pair:
        raise ValueError(
            f"swap inputs of {prepared.failing} vs {prepared.comparator} are not of {pair[0]} "
            f"vs {pair[1]}"
        )
    cal = calibration or DEFAULT_CALIBRATION
    fr, cr = failing.requests, comparator.requests
    lf = np.asarray(fr.latency_us, dtype=np.float64)
    lc = np.asarray(cr.latency_us, dtype=np.float64)
    tg = tail_gaps(lf, lc, n_boot, seed)
    gaps, cis, rel = tg.gap, tg.ci, tg.rel
    t95, t99 = cal.scaled(min(fr.size, cr.size))
    fired_qs = fired(tg, cal, min(fr.size, cr.size))
    claims: list[Claim] = [
        Claim(
            f"p95 latency {at_q(lf, 0.95):.0f} us vs {at_q(lc, 0.95):.0f} us "
            f"(gap {gaps['p95']:+.0f} us, 95% CI {cis['p95'][0]:+.0f}..{cis['p95'][1]:+.0f}); "
            f"p99 gap {gaps['p99']:+.0f} us (CI {cis['p99'][0]:+.0f}..{cis['p99'][1]:+.0f})",
            {
                "p95_gap_us": gaps["p95"],
                "p99_gap_us": gaps["p99"],
                "p95_rel": rel["p95"],
                "p99_rel": rel["p99"],
                "p95_threshold_rel": t95,
                "p99_threshold_rel": t99,
                "n_failing": float(fr.size),
                "n_comparator": float(cr.size),
            },
            "bootstrap_quantile_diff; thresholds from A/A calibration",
        )
    ]
    common: _Common = {
        "p95_gap_us": gaps["p95"],
        "p99_gap_us": gaps["p99"],
        "p95_gap_ci": cis["p95"],
        "p99_gap_ci": cis["p99"],
        "n_failing": fr.size,
        "n_comparator": cr.size,
        "p95_rel_gap": rel["p95"],
        "p99_rel_gap": rel["p99"],
        "method": method,
    }
    if not fired_qs:
        claims.append(
            Claim(
                "no significant tail regression: gaps within what A/A pairs show",
                {"p95_rel": rel["p95"], "p99_rel": rel["p99"]},
                "trigger",
            )
        )
        return Localization(
            triggered=False,
            origin_stage=None,
            manifest_stage=None,
            mechanism="none",
            secondary_mechanism=None,
            confidence=0.0,
            explained_share={},
            claims=claims,
            **common,
        )
    return _localize_triggered(
        failing, comparator, hw, method, gaps, claims, common, replays, prepared
    )


def _localize_triggered(
    failing: RunArrays,
    comparator: RunArrays,
    hw: HardwareProfile,
    method: str,
    gaps: dict[str, float],
    claims: list[Claim],
    common: _Common,
    replays: tuple[Replayed | None, Replayed | None],
    prepared: SwapInputs | None,
) -> Localization:
    fr, cr = failing.requests, comparator.requests
    f_stage = np.nan_to_num(np.asarray(fr.stage_us, dtype=np.float64), nan=0.0)
    c_stage = np.nan_to_num(np.asarray(cr.stage_us, dtype=np.float64), nan=0.0)
    f_heads, c_heads = batch_heads(fr), batch_heads(cr)
    fq, cq = observed_queue(fr), observed_queue(cr)
    base_lat = requeue(fq, f_stage)

    # Manifest: where the tail time shows up; ingress without the queue wait (the batcher's
    # hold and admission work only), since queueing amplifies every downstream slowdown.
    own_f, own_c = f_stage[:, :5].copy(), c_stage[:, :5].copy()
    own_f[:, INGRESS] = fq.hold
    own_c[:, INGRESS] = cq.hold
    manifest_gap = {
        s: at_q(own_f[:, i], 0.95) - at_q(own_c[:, i], 0.95) for i, s in enumerate(STAGES)
    }
    manifest = max(STAGES, key=lambda s: manifest_gap[s])

    explained: dict[str, dict[str, float]] = {}
    scores: dict[str, float] = {}
    origin: str | None = None
    decided_by = "manifest"

    if method == "naive":
        for i, s in enumerate(STAGES):
            a = f_stage[:, i] if i == INGRESS else f_stage[f_heads, i]
            b = c_stage[:, i] if i == INGRESS else c_stage[c_heads, i]
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
            manifest_gap_us=manifest_gap,
            **common,
        )

    # One replay at a time, dropped once its residuals are out: each holds per-op costs.
    rep_f = replays[0] or replayed(failing, hw)
    rep_c = replays[1] or replayed(comparator, hw)
    res_f, res_c = rep_f.residual_us, rep_c.residual_us

    residual_shift = residual_shifts(
        (res_f, res_c), (f_heads, c_heads), f_stage, fq, base_lat, gaps
    )

    # Plan swaps.
    parts: dict[str, float] = {}
    if method == "full":
        swap = prepared or swap_inputs(failing, comparator)
        explained, parts, matched = plan_swaps(
            failing, comparator, f_stage, (fq, cq), base_lat, gaps, swap
        )
        if not matched:
            claims.append(
                Claim("ops carry no names or kernels: lowering/scheduling swaps skipped", {}, "")
            )

    for s in STAGES:
        if s in explained and mean_share(explained[s]) >= SWAP_SHARE:
            origin, decided_by = s, "plan_swap"
            break
        r = residual_shift[s]
        if (
            r["p_value"] < RESIDUAL_ALPHA
            and r["hl_us"] > 0
            and (r["p95_share"] + r["p99_share"]) / 2 >= RESIDUAL_SHARE
        ):
            origin, decided_by = s, "residual"
            break
    if origin is None:
        origin = manifest
    for s, r in residual_shift.items():
        if s not in explained:
            explained[s] = {"p95": r["p95_share"], "p99": r["p99_share"]}

    scores.update({f"lowering.{k}": v for k, v in parts.items()})
    mech = mechanism_of(origin, failing, comparator, parts, scores)
    secondary = secondary_of(fq, cq, mech, gaps)
    conf = origin_confidence(origin, decided_by, explained, residual_shift)
    claims.extend(
        _verdict_claims(origin, manifest, mech, decided_by, explained, residual_shift, manifest_gap)
    )
    return Localization(
        triggered=True,
        origin_stage=origin,
        manifest_stage=manifest,
        mechanism=mech,
        secondary_mechanism=secondary,
        confidence=conf,
        explained_share=explained,
        claims=claims,
        decided_by=decided_by,
        residual_shift=residual_shift,
        manifest_gap_us=manifest_gap,
        mechanism_scores=scores,
        replay_summary={"failing": rep_f.summary, "comparator": rep_c.summary},
        **common,
    )


def _verdict_claims(
    origin: str,
    manifest: str,
    mech: str,
    decided_by: str,
    explained: dict[str, dict[str, float]],
    residual: dict[str, dict[str, float]],
    manifest_gap: dict[str, float],
) -> list[Claim]:
    out = []
    if decided_by == "plan_swap":
        sh = explained[origin]
        out.append(
            Claim(
                f"giving the failing run the comparator's {origin} decisions removes "
                f"{sh['p95']:.0%} of the p95 gap and {sh['p99']:.0%} of the p99 gap",
                {"p95_share": sh["p95"], "p99_share": sh["p99"]},
                "plan_swap + queue re-run",
            )
        )
    elif decided_by == "residual":
        r = residual[origin]
        out.append(
            Claim(
                f"{origin} runs slower than the model predicts by {r['hl_us']:.0f} us "
                f"(Hodges-Lehmann, 95% CI {r['hl_lo_us']:.0f}..{r['hl_hi_us']:.0f}, "
                f"Mann-Whitney p={r['p_value']:.2g}); it accounts for {r['p95_share']:.0%} "
                "of the p95 gap",
                dict(r),
                "residual shift (Mann-Whitney + Hodges-Lehmann)",
            )
        )
    else:
        out.append(
            Claim(
                f"no plan swap or residual shift explains the gap; origin = manifest stage "
                f"{manifest}",
                {"p95_gap_us": manifest_gap[manifest]},
                "manifest",
            )
        )
    out.append(
        Claim(
            f"the time shows up in {manifest} (p95 own-time gap {manifest_gap[manifest]:+.0f} us);"
            f" mechanism {mech}",
            {f"{s}_p95_gap_us": v for s, v in manifest_gap.items()},
            "per-stage p95 difference",
        )
    )
    assert mech in MECHANISMS
    return out
