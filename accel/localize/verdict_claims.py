"""The verdict's claims about its origin: what decided it and where the time shows up."""

from __future__ import annotations

from accel.localize.records import Claim
from accel.stages import MECHANISMS


def verdict_claims(
    origin: str,
    manifest: str,
    mech: str,
    decided_by: str,
    explained: dict[str, dict[str, float]],
    residual: dict[str, dict[str, float]],
    manifest_gap: dict[str, float],
    label: str,
    formation: bool = False,
) -> list[Claim]:
    """What decided the origin, and where the time shows up, as claims; `formation`: ingress
    was tested on its batch's formation (the queue-free reading), not on the model's residual."""
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
        what = (
            "ingress (its batch's formation: the batcher's hold, batch-mates arriving) takes "
            "longer than the comparator's by"
            if formation and origin == "ingress"
            else f"{origin} runs slower than the model predicts by"
        )
        out.append(
            Claim(
                f"{what} {r['hl_us']:.0f} us "
                f"(Hodges-Lehmann, 95% CI {r['hl_lo_us']:.0f}..{r['hl_hi_us']:.0f}, "
                f"Mann-Whitney p={r['p_value']:.2g}); it accounts for {r['p95_share']:.0%} "
                "of the p95 gap",
                dict(r),
                "residual shift (Mann-Whitney + Hodges-Lehmann)",
            )
        )
    elif decided_by == "direct":
        sh = explained.get(origin, {"p95": float("nan"), "p99": float("nan")})
        out.append(
            Claim(
                f"{label} (time the model does not predict, compared as observed) grew; giving "
                f"the failing run the comparator's {label} time removes up to {sh['p95']:.0%} "
                f"of the p95 gap in {origin}",
                {"p95_share": sh["p95"], "p99_share": sh["p99"]},
                "direct evidence (direct.py) + queue re-run",
            )
        )
    else:
        out.append(
            Claim(
                f"no plan swap, residual shift or direct evidence explains the gap; origin = "
                f"manifest stage "
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


def manifest_cap_claim(origin: str, cap: float, ci: tuple[float, float], conf: float) -> Claim:
    """Why a manifest-decided origin's confidence is capped (confidence.manifest_cap)."""
    return Claim(
        f"no evidence explains the gap and {origin}'s own p95 growth is within noise "
        f"(95% CI {ci[0]:+.0f}..{ci[1]:+.0f} us): it is {cap:.0%} of the p95 tail gap, so "
        f"confidence is at most {cap:.0%}",
        {
            "manifest_share_of_gap": cap,
            "manifest_p95_ci_lo_us": ci[0],
            "manifest_p95_ci_hi_us": ci[1],
            "confidence": conf,
        },
        "manifest stage against the tail gap (block bootstrap of its own time)",
    )
