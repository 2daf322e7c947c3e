"""`workbench gate`: a triage verdict plus the comparability rows, read as one CI outcome.

The verdict is triage's own (triage.triage, the same numbers and proof); the gate adds the
rows that say whether the two runs may be compared at all: hardware, driver, compiler/runtime
versions, workload shape and steady state. A failed row makes the outcome inconclusive,
whatever the verdict, never a pass. Exit codes: 0 pass, 1 regression, 2 error, 3 inconclusive.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import duckdb

from accel.localize.trigger import INCONCLUSIVE, NO_REGRESSION, REGRESSION
from accel.stages import SLOS
from workbench.store.baselines import Baseline
from workbench.terminal_text import for_terminal
from workbench.triage.pairing import TagMismatch, locked_mismatches
from workbench.triage.triage import TriageResult
from workbench.triage.triage_claims import jsonable

EXIT_PASS: Final[int] = 0
EXIT_REGRESSION: Final[int] = 1
EXIT_ERROR: Final[int] = 2
EXIT_INCONCLUSIVE: Final[int] = 3
EXIT_CODES: Final[dict[str, int]] = {
    "pass": EXIT_PASS,
    "regression": EXIT_REGRESSION,
    "error": EXIT_ERROR,
    "inconclusive": EXIT_INCONCLUSIVE,
}
# The SLO metrics a gate can read today; the LLM serving metrics need per-token times the
# store does not hold yet.
SLO_METRICS: Final[tuple[str, ...]] = SLOS

# The locked tags (pairing.LOCKED_TAGS) by comparability row; every locked tag is in one.
HARDWARE_TAGS: Final[tuple[str, ...]] = ("hardware", "device_count")
DRIVER_TAGS: Final[tuple[str, ...]] = ("driver_version",)
SOFTWARE_TAGS: Final[tuple[str, ...]] = (
    "compiler",
    "compiler_version",
    "runtime",
    "runtime_version",
)
STEADY_TAGS: Final[tuple[str, ...]] = ("thermal_state",)
# The change under test may be one of these (--suspect); hardware and thermal state never:
# a gate compares like with like (triage weighs hardware by its profiles instead).
SUSPECTABLE: Final[tuple[str, ...]] = DRIVER_TAGS + SOFTWARE_TAGS
WIDTH: Final[int] = 100


@dataclass(frozen=True)
class Row:
    """One comparability row: passed or not, and why in one line."""

    id: str
    title: str
    passed: bool
    detail: str
    facts: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "title": self.title,
            "passed": self.passed,
            "detail": self.detail,
            "facts": jsonable(self.facts),
        }


@dataclass(frozen=True)
class ShapeCheck:
    """The candidate's shape mix against the baseline's; `passed` None when neither run records
    request shapes (then there is nothing to compare, as with a tag unknown on both runs)."""

    passed: bool | None
    reason: str
    facts: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Subject:
    """What is gated against what, and by which rule."""

    candidate: str
    comparator: str
    baseline: Baseline | None
    tolerance: float
    slo_metric: str = "e2e"
    sla_us: float | None = None
    suspect: str | None = None

    def against(self) -> str:
        if self.baseline is None:
            return f"run {self.comparator}"
        return f"baseline {self.baseline.name} (run {self.comparator})"

    def to_json(self) -> dict[str, Any]:
        b = self.baseline
        return {
            "candidate": self.candidate,
            "comparator": self.comparator,
            "baseline": None
            if b is None
            else {"name": b.name, "run_id": b.run_id, "tagged_by": b.tagged_by,
                  "tagged_at": b.tagged_at},
            "tolerance": self.tolerance,
            "slo": {"metric": self.slo_metric, "sla_us": self.sla_us},
            "suspect": self.suspect,
        }  # fmt: skip


@dataclass(frozen=True)
class GateResult:
    """The outcome, its exit code and one-line message, the rows and the triage beneath."""

    subject: Subject
    outcome: str  # pass | regression | inconclusive
    message: str
    rows: list[Row]
    triage: TriageResult | None  # None when triage refused the pair (`refusal` says why)
    refusal: str | None = None

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.outcome]

    def to_json(self) -> dict[str, Any]:
        """{"gate": the outcome and rows, "triage": triage's own JSON document (or null)}."""
        verdict = None
        if self.triage is not None:
            v = self.triage.verdict
            verdict = {"outcome": v.get("outcome"), "reason": v.get("reason")}
        doc: dict[str, Any] = jsonable(
            {
                "gate": {
                    **self.subject.to_json(),
                    "outcome": self.outcome,
                    "exit_code": self.exit_code,
                    "message": self.message,
                    "comparability": [r.to_json() for r in self.rows],
                    "verdict": verdict,
                    "refusal": self.refusal,
                },
                "triage": self.triage.to_json() if self.triage is not None else None,
            }
        )
        return doc


def _known(value: object) -> str:
    return "unknown" if value is None or str(value).strip() == "" else str(value)


def _tag_row(
    row_id: str,
    title: str,
    keys: Sequence[str],
    found: Mapping[str, TagMismatch],
    candidate: Mapping[str, object],
    suspect: str | None,
    hint: str,
) -> Row:
    differs, same, changed = [], [], []
    facts: dict[str, Any] = {}
    for key in keys:
        m = found.get(key)
        if m is None:
            value = candidate.get(key)
            facts[key] = {"candidate": value, "baseline": value, "differs": False}
            same.append(
                f"{key} {_known(value)}" if _known(value) != "unknown" else f"{key} not recorded"
            )
            continue
        facts[key] = {"candidate": m.failing_value, "baseline": m.other_value, "differs": True}
        text = f"{key} {_known(m.other_value)} -> {_known(m.failing_value)}"
        if key == suspect:
            facts[key]["change_under_test"] = True
            changed.append(f"{text} is the change under test (--suspect)")
        else:
            differs.append(text)
    parts = []
    if differs:
        parts.append("differs (baseline -> candidate): " + ", ".join(differs))
    parts.extend(changed)
    if same:
        parts.append("same on both: " + ", ".join(same))
    detail = "; ".join(parts)
    if differs and hint:
        detail += f"; {hint}"
    return Row(row_id, title, not differs, detail, facts)


def mismatches(
    con: duckdb.DuckDBPyConnection, candidate: str, baseline: str
) -> dict[str, TagMismatch]:
    """The locked tags that differ between the runs, as pairing finds them, by tag."""
    return {m.key: m for m in locked_mismatches(con, candidate, [baseline])[baseline]}


def tag_rows(
    found: Mapping[str, TagMismatch], candidate_row: Mapping[str, object], suspect: str | None
) -> list[Row]:
    """The hardware, driver and compiler/runtime rows from the differing locked tags (see
    mismatches), the suspect allowed to differ as the change under test."""
    first = next((k for k in SUSPECTABLE if k in found and k != suspect), None)
    hint = f"if {first} is the change under test, pass --suspect {first}" if first else ""
    return [
        _tag_row("hardware", "hardware", HARDWARE_TAGS, found, candidate_row, None,
                 "a gate compares like with like: measure the candidate on the baseline's "
                 "hardware (triage weighs a hardware change by its profiles)"),
        _tag_row("driver", "driver", DRIVER_TAGS, found, candidate_row, suspect,
                 hint if first in DRIVER_TAGS else ""),
        _tag_row("compiler_runtime", "compiler/runtime versions", SOFTWARE_TAGS, found,
                 candidate_row, suspect, hint if first in SOFTWARE_TAGS else ""),
    ]  # fmt: skip


def workload_row(
    candidate_row: Mapping[str, object], baseline_row: Mapping[str, object], shapes: ShapeCheck
) -> Row:
    """Same model and workload, and the candidate measured on the baseline's shape mix."""
    differs, facts = [], {}
    for key in ("model", "workload"):
        c, b = candidate_row.get(key), baseline_row.get(key)
        facts[key] = {"candidate": c, "baseline": b, "differs": c != b}
        if c != b:
            differs.append(f"{key} {_known(b)} -> {_known(c)}")
    same = [
        f"{k} {_known(candidate_row.get(k))}"
        for k in ("model", "workload")
        if not facts[k]["differs"]
    ]
    parts = ["differs (baseline -> candidate): " + ", ".join(differs)] if differs else []
    if same:
        parts.append("same on both: " + ", ".join(same))
    if shapes.passed is None:
        parts.append(f"shape mix not compared: {shapes.reason}")
    else:
        parts.append(f"shape mix {'matches' if shapes.passed else 'differs'}: {shapes.reason}")
    facts["shapes"] = {"passed": shapes.passed, "reason": shapes.reason, **shapes.facts}
    passed = not differs and shapes.passed is not False
    return Row("workload_shape", "workload shape", passed, "; ".join(parts), facts)


def steady_row(
    result: TriageResult | None, found: Mapping[str, TagMismatch], refusal: str | None = None
) -> Row:
    """Both runs measured in a steady state: warm-up left out (triage's split), the baseline
    not still recompiling, the same thermal state."""
    problems: list[str] = []
    facts: dict[str, Any] = {}
    thermal = next((found[k] for k in STEADY_TAGS if k in found), None)
    if thermal is not None:
        facts["thermal_state"] = {"candidate": thermal.failing_value,
                                  "baseline": thermal.other_value, "differs": True}  # fmt: skip
        problems.append(
            f"thermal_state {_known(thermal.other_value)} -> {_known(thermal.failing_value)}"
        )
    if result is None:
        problems.append(f"not established: triage refused the pair ({refusal})")
        return Row("steady_state", "steady state", False, "; ".join(problems), facts)
    w_c = result.warmup.get("failing", {})
    w_b = result.warmup.get("comparator", {})
    lat = result.stages[0]
    facts.update(
        {
            "steady_requests": {"candidate": lat.n_failing, "baseline": lat.n_comparator},
            "warmup_excluded_requests": {
                "candidate": w_c.get("affected_requests", 0),
                "baseline": w_b.get("affected_requests", 0),
            },
            "steady_recompiles": {
                "candidate": w_c.get("steady_recompiles", 0),
                "baseline": w_b.get("steady_recompiles", 0),
            },
        }
    )
    if w_b.get("steady_recompiles", 0):
        problems.append(
            f"the baseline recompiled {w_b['steady_recompiles']} time(s) after its warm-up: its "
            "tail holds compile time, not a steady state"
        )
    if lat.n_failing == 0 or lat.n_comparator == 0:
        problems.append("no steady-state requests left after the warm-up")
    said = (
        f"warm-up left out ({w_c.get('affected_requests', 0)} candidate / "
        f"{w_b.get('affected_requests', 0)} baseline requests), "
        f"n={lat.n_failing}/{lat.n_comparator} steady-state requests"
    )
    if w_c.get("steady_recompiles", 0):
        said += f", {w_c['steady_recompiles']} candidate recompile(s) judged by the verdict"
    if thermal is None:
        said += "; same thermal_state"
    detail = "; ".join([*problems, said])
    return Row("steady_state", "steady state", not problems, detail, facts)


def decide(
    subject: Subject, rows: list[Row], result: TriageResult | None, refusal: str | None = None
) -> GateResult:
    """The gate outcome: a failed row -> inconclusive, whatever the verdict; else triage's
    verdict (regression -> regression, no regression -> pass, anything else -> inconclusive).
    `result` None: triage refused the pair, for `refusal`."""
    if result is not None:
        outcome = str(result.verdict.get("outcome", INCONCLUSIVE))
        reason = str(result.verdict.get("reason", ""))
        verdict = {REGRESSION: "regression", NO_REGRESSION: "pass"}.get(outcome, "inconclusive")
        said = f"{outcome}: {reason}"
    else:
        verdict, said = "inconclusive", f"refused: {refusal}"
    failed = [r for r in rows if not r.passed]
    if failed:
        names = "; ".join(f"{r.title} ({r.detail})" for r in failed)
        message = f"INCONCLUSIVE: not comparable: {names}; triage {said}"
        return GateResult(subject, "inconclusive", message, rows, result, refusal)
    if verdict == "pass":
        message = f"PASS: {said}"
    elif result is not None and verdict == outcome:
        message = f"{outcome.upper()}: {reason}"
    else:
        message = f"INCONCLUSIVE: triage {said}"
    return GateResult(subject, verdict, message, rows, result, refusal)


def _wrap(text: str, first: str, rest: str = "        ") -> list[str]:
    return textwrap.wrap(text, WIDTH, initial_indent=first, subsequent_indent=rest) or [first]


def policy_line(subject: Subject) -> str:
    slo = (
        f"SLO {subject.slo_metric} {subject.sla_us / 1e3:g} ms"
        if subject.sla_us is not None and math.isfinite(subject.sla_us)
        else f"SLO metric {subject.slo_metric} (the runs' own SLO where they carry one)"
    )
    return f"tolerance {subject.tolerance:.1%} of the baseline's quantile; {slo}"


def render(gate: GateResult, triage_text: str) -> str:
    """The gate's header, rows and message, then triage's own report (the proof)."""
    s = gate.subject
    out = [
        f"GATE  {gate.outcome.upper()} (exit {gate.exit_code})  candidate {s.candidate} vs "
        f"{s.against()}",
    ]
    if s.baseline is not None:
        out.extend(_wrap(s.baseline.describe(), "  "))
    out.extend(_wrap(policy_line(s), "  "))
    out.extend(_wrap(gate.message, "  "))
    out.append("COMPARABILITY")
    for r in gate.rows:
        out.extend(_wrap(f"{r.title}: {r.detail}", f"  {'pass' if r.passed else 'FAIL'}  "))
    text = "\n".join(for_terminal(line) for line in out) + "\n"
    return text + triage_text
