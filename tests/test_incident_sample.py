"""The bundled sample incident (sample_traces/README.md) walked headless through the real CLI:
new, triage --incident, classify, assign, validate (the synthetic candidate refused, the rollback
passing), close, export."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from workbench.cli.main import default_store, main
from workbench.triage.incident import load_incident


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
