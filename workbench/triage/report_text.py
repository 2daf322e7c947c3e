"""The 30-second text rendering of a triage result: warnings first, then the verdict, the tail."""

from __future__ import annotations

import math
import textwrap
from typing import Any

from workbench.triage.evidence import Interval, StageRow
from workbench.triage.numbers_text import fmt_reading_level
from workbench.triage.readings import READINGS
from workbench.triage.triage import TriageResult


def _ms(us: float | None) -> str:
    if us is None or not math.isfinite(us):
        return "n/a"
    return f"{us / 1e3:.2f}"


def _signed(us: float | None) -> str:
    if us is None or not math.isfinite(us):
        return "n/a"
    return f"{us / 1e3:+.2f}"


def _ci(iv: Interval) -> str:
    return f"{_signed(iv.value)} [{_signed(iv.lo)}..{_signed(iv.hi)}]"


def _pct(x: Any) -> str:
    return "n/a" if x is None or not math.isfinite(float(x)) else f"{float(x):.0%}"


def _stage_line(row: StageRow) -> str:
    f, c = row.failing, row.comparator
    return (
        f"  {row.stage:<11}{row.n_failing:>6}/{row.n_comparator:<6}"
        f"{_ms(f['p50'].value):>9}{_ms(c['p50'].value):>8}"
        f"{_ms(f['p95'].value):>9}{_ms(c['p95'].value):>8}"
        f"{_ms(f['p99'].value):>9}{_ms(c['p99'].value):>8}   {_ci(row.diff['p99'])}"
    )


WIDTH = 100


def _wrap(text: str, first: str = "  ", rest: str = "      ") -> list[str]:
    return textwrap.wrap(text, WIDTH, initial_indent=first, subsequent_indent=rest) or [first]


def _rerun_line(rerun: dict[str, dict[str, float]]) -> str:
    """Whether the base queue re-run gave back each run's observed tail, and by how much."""
    parts = []
    for role, d in rerun.items():
        errs = [d.get(f"rel_error_{q}") for q in ("p50", "p95", "p99")]
        worst = max((e for e in errs if e is not None and math.isfinite(e)), default=math.nan)
        ok = "reproduces" if d.get("reproduced") else "does NOT reproduce"
        parts.append(f"{role} {ok} p50/p95/p99 (worst {_pct(worst)} off)")
    tol = next(iter(rerun.values()), {}).get("tolerance", math.nan)
    return f"base queue re-run ({_pct(tol)} tolerance): " + "; ".join(parts)


def render(r: TriageResult) -> str:
    """Plain text, widest line under 110 columns; times in milliseconds."""
    # A verdict read in a serving SLO rests on no replay (TriageResult.replay is then empty).
    how = "read in its SLOs" if r.primary_slo and not r.replay else f"replayed on {r.hardware}"
    out: list[str] = [f"TRIAGE  {r.failing} (failing) vs {r.comparator} (comparator), {how}"]
    # The warm-up and tail-driver readings are of the end-to-end latency: said so where the
    # verdict is in another SLO.
    e2e = " e2e" if r.primary_slo not in (None, "e2e") else ""
    if r.comparator_reasons:
        out.append("  comparator: " + "; ".join(r.comparator_reasons))
    if r.warnings:
        out.append("WARNINGS")
        for w in r.warnings:
            out.extend(_wrap(w, "  ! "))
    lat = r.stages[0]
    out.append("VERDICT")
    v = r.verdict
    if v:
        out.extend(_wrap(f"{v['outcome'].upper()}: {v['reason']}"))
    if r.triggered:
        mech = r.mechanism + (f" (then {r.secondary_mechanism})" if r.secondary_mechanism else "")
        out.append(
            f"  origin {r.origin_stage} -> manifest {r.manifest_stage}   mechanism {mech}   "
            f"confidence {_pct(r.confidence)}"
        )
        out.append(
            f"  explains {_pct(r.explained_share)} of the p99 gap ({r.explained_share_method})"
        )
        out.extend(_wrap(f"confidence: {v.get('confidence_method', '')}"))
    elif not v:
        out.append(f"  no significant tail regression (mechanism {r.mechanism})")
    if v.get("base_rerun"):
        out.extend(_wrap(_rerun_line(v["base_rerun"])))
    out.append(
        f"  p95 gap {_ci(r.p95_gap)} ms   p99 gap {_ci(r.p99_gap)} ms   "
        f"n={lat.n_failing}/{lat.n_comparator} (95% CI)"
    )
    for key, _, words, _ in READINGS:
        eq = v.get(key) or {} if v else {}
        if (eq.get("fired") or {}).get("value"):
            # The verdict fired on these: printed beside the observed ones it does not rest on.
            p95, p99 = (Interval(**eq[q]) for q in ("p95", "p99"))
            level = fmt_reading_level(eq["fired"])
            out.append(
                f"  {words} (the verdict's reading): p95 gap {_ci(p95)} ms   "
                f"p99 gap {_ci(p99)} ms ({level} CI)"
            )
    out.append("TAIL BY STAGE  steady state, ms; failing | comparator          d p99 [95% CI]")
    out.append(
        f"  {'stage':<11}{'n':>6} {'':<5}{'p50 f':>9}{'p50 c':>8}{'p95 f':>9}{'p95 c':>8}"
        f"{'p99 f':>9}{'p99 c':>8}"
    )
    out.extend(_stage_line(s) for s in r.stages)
    w = r.warmup.get("failing", {})
    wc = r.warmup.get("comparator", {})
    out.extend(
        _wrap(
            f"WARM-UP  failing {w.get('warmup_compiles', 0)} compile(s) "
            f"{_ms(w.get('warmup_compile_us'))} ms, comparator {wc.get('warmup_compiles', 0)} "
            f"compile(s) {_ms(wc.get('warmup_compile_us'))} ms; "
            f"{r.warmup.get('excluded_requests', 0)} requests left out;{e2e} p99 gap with warm-up "
            f"{_ci(r.latency_with_warmup.diff['p99'])} ms",
            "",
            "  ",
        )
    )
    rc = r.recompiles
    if rc.get("count"):
        out.append(
            f"RECOMPILES  {rc['count']} steady-state ({_ms(rc['total_us'])} ms); removing them "
            f"closes {_pct(rc['share_of_p95_gap'])} of the p95 and "
            f"{_pct(rc['share_of_p99_gap'])} of the p99 gap"
        )
        for g in rc["reasons"][:4]:
            out.append(f"  x{g['n']:<3} {_ms(g['total_us']):>9} ms  {g['reason'][:80]}")
    if r.tail_drivers:
        out.append(
            f"TAIL DRIVERS  share of{' the' + e2e if e2e else ''} p99 gap: "
            + ", ".join(f"{d['driver']} {_pct(d['share'])}" for d in r.tail_drivers)
        )
    out.append(f"SHAPE DRIFT  PSI {r.drift_psi:.3f}" if math.isfinite(r.drift_psi) else "")
    out.append("PROOF")
    for c in r.claims[:8]:
        out.extend(_wrap(f"{c.text}  [{c.query}]", "  - "))
    if r.retuning:
        out.append("RETUNING  predicted gain (model: queue re-run without the saved time)")
        for i, a in enumerate(r.retuning[:6], 1):
            out.extend(
                _wrap(
                    f"{a.text}: p95 {_signed(-a.predicted_p95_gain_us)} ms, "
                    f"p99 {_signed(-a.predicted_p99_gain_us)} ms",
                    f"  {i}. ",
                )
            )
    return "\n".join(line for line in out if line) + "\n"
