"""The claims of a triage: each statement with the query, parameters and numbers that prove it,
and the pair-level claims built from the evidence tables and the localization."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from accel import stats
from accel.localize import Localization
from accel.profiles import HardwareProfile
from workbench.triage import evidence
from workbench.triage.evidence import EvidenceTable, StageRow
from workbench.triage.warmup import Warmup


@dataclass(frozen=True)
class Claim:
    """A statement and its proving artifact: the query, its parameters and its numbers."""

    text: str
    query: str
    parameters: dict[str, Any]
    numbers: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "query": self.query,
            "parameters": self.parameters,
            "numbers": jsonable(self.numbers),
        }


def jsonable(value: Any) -> Any:
    """JSON-safe: NaN/inf -> None, numpy scalars -> Python, tuples -> lists."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def pair_claims(
    failing: str,
    comparator: str,
    latency: StageRow,
    with_warmup: StageRow,
    loc: Localization,
    tables: dict[str, EvidenceTable],
    warm: Warmup,
    recompiles: dict[str, Any],
    drift: evidence.ShapeDrift,
    hw: HardwareProfile,
) -> list[Claim]:
    sq = tables["stage_quantiles"]
    d99, d95 = latency.diff["p99"], latency.diff["p95"]
    claims = [
        Claim(
            text=(
                f"steady-state p99 latency {latency.failing['p99'].value / 1e3:.2f} ms vs "
                f"{latency.comparator['p99'].value / 1e3:.2f} ms: +{d99.value / 1e3:.2f} ms "
                f"(95% CI {d99.lo / 1e3:.2f}..{d99.hi / 1e3:.2f}), n={latency.n_failing}/"
                f"{latency.n_comparator}"
            ),
            query=sq.query,
            parameters=sq.parameters,
            numbers={
                "failing_p95_us": latency.failing["p95"].value,
                "comparator_p95_us": latency.comparator["p95"].value,
                "failing_p99_us": latency.failing["p99"].value,
                "comparator_p99_us": latency.comparator["p99"].value,
                "p95_gap_us": d95.value,
                "p95_gap_ci": [d95.lo, d95.hi],
                "p99_gap_us": d99.value,
                "p99_gap_ci": [d99.lo, d99.hi],
                "n_failing": latency.n_failing,
                "n_comparator": latency.n_comparator,
                "p99_gap_with_warmup_us": with_warmup.diff["p99"].value,
            },
        )
    ]
    params = {"failing": failing, "comparator": comparator, "hardware": hw.name}
    # The model's own claims: their artifact is the replay of this pair on this profile.
    for c in loc.claims:
        claims.append(
            Claim(
                text=c.text, query=f"replay:{c.method}", parameters=params, numbers=dict(c.numbers)
            )
        )
    if recompiles["count"]:
        top = recompiles["reasons"][0]
        claims.append(
            Claim(
                text=(
                    f"{recompiles['count']} steady-state recompiles in {failing} "
                    f"({recompiles['total_us'] / 1e3:.1f} ms; warm-up excluded), top reason: "
                    f"{top['reason']} (x{top['n']}); removing them closes "
                    f"{_pct(recompiles['share_of_p95_gap'])} of the p95 and "
                    f"{_pct(recompiles['share_of_p99_gap'])} of the p99 gap"
                ),
                query="compile_phases",
                parameters=tables["compile_phases"].parameters,
                numbers={
                    "recompiles": recompiles["count"],
                    "recompile_us": recompiles["total_us"],
                    "warmup_compiles": len(warm.warmup),
                    "share_of_p95_gap": recompiles["share_of_p95_gap"],
                    "share_of_p99_gap": recompiles["share_of_p99_gap"],
                    "reasons": {r["reason"]: r["n"] for r in recompiles["reasons"]},
                },
            )
        )
    td = tables["tail_drivers"]
    rows = td.rows()
    if rows:
        top_driver = rows[0]
        claims.append(
            Claim(
                text=(
                    f"largest direct tail driver: {top_driver['driver']} "
                    f"(+{(top_driver['delta_us'] or 0) / 1e3:.2f} ms per tail request, "
                    f"{_pct(top_driver['share'])} of the p99 gap; "
                    f"n={top_driver['n_failing_tail']}/{top_driver['n_comparator_tail']} "
                    f"tail requests)"
                ),
                query=td.query,
                parameters=td.parameters,
                numbers={r["driver"]: r["share"] for r in rows},
            )
        )
    fr = tables["fallback_recompile_rates"]
    rates = {r["role"]: r for r in fr.rows()}
    f_r, c_r = rates.get("failing"), rates.get("comparator")
    if f_r and c_r and (f_r["fallback_ops"] or c_r["fallback_ops"]):
        wf = stats.wilson_interval(int(f_r["fallback_ops"]), int(f_r["n_ops"]))
        wc = stats.wilson_interval(int(c_r["fallback_ops"]), int(c_r["n_ops"]))
        claims.append(
            Claim(
                text=(
                    f"mapping fallback on {wf[0]:.2%} of ops (95% CI {wf[1]:.2%}..{wf[2]:.2%}, "
                    f"n={f_r['n_ops']}) vs {wc[0]:.2%} ({wc[1]:.2%}..{wc[2]:.2%}, "
                    f"n={c_r['n_ops']})"
                ),
                query=fr.query,
                parameters=fr.parameters,
                numbers={
                    "failing_fallback_rate": wf[0],
                    "failing_ci": [wf[1], wf[2]],
                    "comparator_fallback_rate": wc[0],
                    "comparator_ci": [wc[1], wc[2]],
                    "failing_fallback_ops": f_r["fallback_ops"],
                    "comparator_fallback_ops": c_r["fallback_ops"],
                },
            )
        )
    sd = tables["shape_drift"]
    claims.append(
        Claim(
            text=f"shape mix drift between runs: PSI {drift.psi:.3f} over "
            f"{len(drift.buckets)} shape buckets",
            query=sd.query,
            parameters=sd.parameters,
            numbers={"psi": drift.psi, "buckets": len(drift.buckets)},
        )
    )
    return claims


def _pct(x: Any) -> str:
    return "n/a" if x is None or not math.isfinite(float(x)) else f"{float(x):.0%}"
