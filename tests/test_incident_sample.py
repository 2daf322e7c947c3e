"""The bundled sample incident (sample_traces/README.md) walked headless through the real CLI:
new, triage --incident, classify, assign, validate (the synthetic candidate refused, the rollback
passing), close, export."""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path
from typing import Any

import pytest

from workbench.cli.main import default_store, main
from workbench.incident.brief import lines_of
from workbench.incident.incident import load_incident
from workbench.incident.summary import brief_lines
from workbench.triage.numbers_text import fmt_us


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the sample store, so incident records never land in the repository."""
    s = tmp_path_factory.mktemp("sample") / "store"
    shutil.copytree(default_store(), s, ignore=shutil.ignore_patterns("incidents", "*.md"))
    (s / "roster.toml").write_text(
        '[roles."compiler lead"]\npeople = ["mei"]\n[roles."runtime lead"]\npeople = ["raj"]\n',
        encoding="utf-8",
    )
    return s


def cli(store: Path, *argv: str) -> int:
    return main([*argv, "--store", str(store), "--actor", "oncall"])


def test_sample_incident_walk(store: Path, tmp_path: Path) -> None:
    assert (
        cli(
            store,
            "incident",
            "new",
            "--title",
            "p99 regression after compiler 2.5.0",
            "--id",
            "INC-sample",
            "--failing",
            "failing",
            "--comparator",
            "comparator",
            "--fixed-metadata",
            "fixed-metadata",
        )
        == 0
    )
    inc = load_incident(store, "INC-sample")
    assert inc.status == "paired"
    assert any("compiler_version" in w for w in inc.pair_warnings)
    assert (
        cli(
            store,
            "triage",
            "--failing",
            "failing",
            "--comparator",
            "comparator",
            "--incident",
            "INC-sample",
        )
        == 0
    )
    inc = load_incident(store, "INC-sample")
    assert inc.status == "localized" and inc.localization is not None
    assert (inc.localization.origin, inc.localization.manifest, inc.localization.mechanism) == (
        "lowering",
        "execution",
        "fusion_memory_burst",
    )
    assert inc.claims and all(c.has_artifact() for c in inc.claims)
    assert cli(store, "incident", "classify", "INC-sample") == 0
    assert cli(store, "assign", "--incident", "INC-sample") == 0
    inc = load_incident(store, "INC-sample")
    assert inc.status == "assigned"
    assert [(o.role, o.person) for o in inc.owners] == [
        ("compiler lead", "mei"),
        ("runtime lead", "raj"),
    ]
    assert (
        cli(store, "validate", "--incident", "INC-sample", "--candidate", "candidate-synthetic")
        == 1
    )
    inc = load_incident(store, "INC-sample")
    assert inc.replay_check is not None and not inc.replay_check.passed
    assert inc.validation is not None and inc.validation.verdict == "REFUSED"
    refusal = inc.timeline[-1].note  # the refusal is on the record, with its two numbers
    assert refusal.startswith("REFUSED: candidate-synthetic not measured on production-like")
    assert "PSI 11.374 (limit 0.25), unseen shapes 79.6% (limit 5%)" in refusal
    verdict_line = next(ln for ln in brief_lines(store, "INC-sample") if ln.startswith("Valid"))
    assert verdict_line == (
        "Validation: candidate-synthetic REFUSED: not measured on production-like shapes against "
        "failing: PSI 11.374 (limit 0.25), unseen shapes 79.6% (limit 5%)"
    )
    assert cli(store, "incident", "close", "INC-sample") == 2
    assert (
        cli(store, "validate", "--incident", "INC-sample", "--candidate", "candidate-rollback") == 0
    )
    inc = load_incident(store, "INC-sample")
    assert inc.validation is not None and inc.validation.verdict == "PASS"
    assert inc.replay_check is not None and inc.replay_check.passed
    assert cli(store, "incident", "close", "INC-sample") == 0
    assert load_incident(store, "INC-sample").status == "closed"
    out = tmp_path / "summary.json"
    assert cli(store, "export", "--incident", "INC-sample", "--format", "json", "-o", str(out)) == 0
    doc = json.loads(out.read_text())
    assert doc["missing"] == []
    p99 = next(
        r for r in doc["impact"]["rows"] if r["metric"] == "end-to-end" and r["quantile"] == "p99"
    )
    assert p99["ci_low_us"] > 0 and p99["n_failing"] == 240  # the regression, with its n and CI
    assert doc["closed_loop"]["result_run"]["rows"][1]["ci_high_us"] < 0  # the fix removes it
    check_brief(store, doc, tmp_path)


def first_screenful(text: str, rows: int = 24, cols: int = 80) -> str:
    """What `less` shows first in an 80x24 terminal: lines folded at 80 columns."""
    folded = [part for line in text.splitlines() for part in (textwrap.wrap(line, cols) or [""])]
    return "\n".join(folded[:rows])


def check_brief(store: Path, doc: dict[str, Any], tmp_path: Path) -> None:
    """The export opens with the brief: the fix's compiler version and the fusion numbers in the
    first screenful, the same lines in JSON, Markdown and brief_lines (the app's Close screen)."""
    brief = doc["brief"]
    assert list(doc)[:2] == ["schema", "brief"]
    assert brief_lines(store, "INC-sample") == lines_of(brief)
    what = brief["what_regressed"][0]
    assert what.startswith("end-to-end p99 +1.655 ms (+119.1%, 95% CI [")
    assert "since compiler_version 2.4.0 → 2.5.0" in what and "NVIDIA H100" in what
    # One interval, one number: the brief's p99 CI is the triage claim's and the impact table's.
    claim = next(c for c in doc["localization"]["claims"] if c["query"] == "stage_quantiles")
    lo, hi = claim["numbers"]["p99_gap_ci"]
    assert f"[{fmt_us(lo)}, {fmt_us(hi)}]" in what
    row = next(
        r for r in doc["impact"]["rows"] if r["metric"] == "end-to-end" and r["quantile"] == "p99"
    )
    assert (row["ci_low_us"], row["ci_high_us"]) == (lo, hi) and row["interval"].startswith(
        "triage"
    )
    why = " ".join(brief["why"])
    assert "fused ops 9,600 vs 96,000 (n = 11,520 / 288,000 ops)" in why
    assert "p95 working set per fusion group 673 MB vs 172 MB (n = 480 / 12,000" in why
    assert brief["fix"][0].startswith("candidate-rollback: compiler_version 2.5.1 (failing 2.5.0")
    assert brief["verdict"][0] == "candidate-rollback PASS: 7/7 guardrails pass (score 1.00)"
    assert brief["verdict"][1].startswith("Earlier: candidate-synthetic REFUSED: not measured")
    plan = brief["rollback_plan"][0]
    assert plan.startswith("to compiler_version 2.4.0 if over 1000 requests end-to-end p95 >")
    assert "(noise ±" in plan and "watcher raj (runtime lead, owns execution)" in plan
    assert any(f.startswith("#1 mei, due") for f in brief["follow_ups"])
    out = tmp_path / "summary.md"
    assert cli(store, "export", "--incident", "INC-sample", "-o", str(out)) == 0
    top = first_screenful(out.read_text(encoding="utf-8"))
    for needle in ("compiler_version 2.5.1", "9,600 vs 96,000", "673 MB vs 172 MB", "PASS"):
        assert needle in top, (needle, top)
