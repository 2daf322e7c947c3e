"""A gate outcome as JUnit XML, the test report CI systems render (Jenkins, GitLab, GitHub
Actions reporters): <testsuites><testsuite name="workbench gate">, one <testcase> per
comparability row and one for the verdict.

A failed row is a <failure> (its check failed, and the report names it). The verdict is a
<failure> for a regression, <skipped> when inconclusive (an outcome the gate foresees: the data
did not decide, so nothing was judged; <error> in JUnit is an unexpected problem) and <error>
only when the gate itself failed (exit 2). Every text passes through the terminal escaping
(control characters shown as \\x1b), and what XML 1.0 cannot hold (lone surrogates, U+FFFE/F)
is escaped too, so that hostile tags and trace names always give a well-formed report.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

from workbench.terminal_text import for_terminal, lines_for_terminal
from workbench.triage.gate import GateResult

SUITE: Final[str] = "workbench gate"
ROWS_CLASS: Final[str] = "workbench.gate.comparability"
VERDICT_CLASS: Final[str] = "workbench.gate"
_NOT_XML: Final[re.Pattern[str]] = re.compile("[\ud800-\udfff\ufffe\uffff]")


@dataclass(frozen=True)
class Case:
    """One <testcase>: status passed, failure, skipped or error, with its message and text."""

    name: str
    classname: str
    status: str = "passed"
    message: str = ""
    kind: str = ""  # the failure / error type attribute
    text: str = ""
    seconds: float = 0.0


def _attr(text: str) -> str:
    """An attribute value: one line, every control character escaped."""
    return _NOT_XML.sub(lambda m: f"\\u{ord(m.group()):04x}", for_terminal(text))


def _body(text: str) -> str:
    """Element text: newlines kept, every other control character escaped."""
    return _NOT_XML.sub(lambda m: f"\\u{ord(m.group()):04x}", lines_for_terminal(text))


def _seconds(value: float) -> str:
    """Surefire's time format: seconds with at most three decimals, no exponent."""
    return f"{max(value, 0.0):.3f}"


def report(
    cases: Sequence[Case],
    *,
    properties: Mapping[str, str],
    system_out: str,
    seconds: float,
    timestamp: datetime | None = None,
) -> str:
    """The XML document of one suite of `cases`."""
    counts = {s: sum(c.status == s for c in cases) for s in ("failure", "error", "skipped")}
    totals = {
        "tests": str(len(cases)),
        "failures": str(counts["failure"]),
        "errors": str(counts["error"]),
    }
    when = (timestamp or datetime.now(UTC)).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")
    root = ET.Element("testsuites", {"name": SUITE, **totals, "time": _seconds(seconds)})
    suite = ET.SubElement(
        root,
        "testsuite",
        {"name": SUITE, **totals, "skipped": str(counts["skipped"]),
         "time": _seconds(seconds), "timestamp": when},
    )  # fmt: skip
    if properties:
        props = ET.SubElement(suite, "properties")
        for key, value in properties.items():
            ET.SubElement(props, "property", {"name": _attr(key), "value": _attr(value)})
    for c in cases:
        case = ET.SubElement(
            suite,
            "testcase",
            {"name": _attr(c.name), "classname": _attr(c.classname), "time": _seconds(c.seconds)},
        )
        if c.status == "skipped":
            ET.SubElement(case, "skipped", {"message": _attr(c.message)}).text = _body(c.text)
        elif c.status in ("failure", "error"):
            attrs = {"message": _attr(c.message), "type": _attr(c.kind or c.status)}
            ET.SubElement(case, c.status, attrs).text = _body(c.text)
    ET.SubElement(suite, "system-out").text = _body(system_out)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, "unicode") + "\n"


def properties_of(gate: GateResult) -> dict[str, str]:
    s = gate.subject
    props = {
        "candidate": s.candidate,
        "comparator": s.comparator,
        "outcome": gate.outcome,
        "exit_code": str(gate.exit_code),
        "tolerance": f"{s.tolerance:g}",
        "slo_metric": s.slo_metric,
    }
    if s.baseline is not None:
        props["baseline"] = s.baseline.name
    if s.sla_us is not None:
        props["sla_us"] = f"{s.sla_us:g}"
    if s.suspect:
        props["suspect"] = s.suspect
    return props


def gate_report(gate: GateResult, text: str, seconds: float) -> str:
    """The gate's JUnit XML: a testcase per row and one for the verdict; `text` (the gate's
    text report, with triage's proof) as the suite's system-out."""
    cases = [
        Case(f"comparability: {r.title}", ROWS_CLASS)
        if r.passed
        else Case(f"comparability: {r.title}", ROWS_CLASS, "failure",
                  f"{r.title}: {r.detail}", "comparability", r.detail)
        for r in gate.rows
    ]  # fmt: skip
    name = f"verdict: {gate.subject.candidate} vs {gate.subject.against()}"
    status = {"pass": "passed", "regression": "failure", "inconclusive": "skipped"}
    proof = ""
    if gate.triage is not None:
        proof = "\n".join(c.text for c in gate.triage.claims)
    cases.append(
        Case(name, VERDICT_CLASS, status[gate.outcome], gate.message, gate.outcome, proof, seconds)
    )
    return report(cases, properties=properties_of(gate), system_out=text, seconds=seconds)


def error_report(message: str, seconds: float, properties: Mapping[str, str]) -> str:
    """The JUnit XML of a gate that could not run (exit 2): one testcase holding the error."""
    case = Case("verdict", VERDICT_CLASS, "error", message, "error", message, seconds)
    props = {**properties, "outcome": "error", "exit_code": "2"}
    return report([case], properties=props, system_out=message + "\n", seconds=seconds)
