"""The sample incident end to end, headless: new -> paired -> localized -> classified -> assigned ->
validating -> closed, then both exports hold every DESIGN §8 section with numbers from the store."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from accel import stats
from tests.incident_runs import VALIDATION_N, incident_runs, triage_doc
from tests.test_export_summary import check_schema
from workbench.cli import main as cli_main
from workbench.cli.main import main
from workbench.incident.incident import list_incidents, load_incident
from workbench.incident.workflow import attach_triage
from workbench.store import db

SECTIONS_MD = [
    "# Incident",
    "## Impact",
    "## Reproduction",
    "## Localization",
    "### Claims and their proving artifacts",
    "## Closed loop",
    "### Compile profile",
    "### Runtime telemetry",
    "### Retuning action",
    "### Result run",
    "## Validation",
    "## Rollback criteria",
    "## Replay and guardrail checks",
    "## Owners and follow-ups",
    "## Timeline",
    "## Audit appendix",
]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    s = incident_runs(tmp_path_factory.mktemp("e2e") / "store")
    (s / "roster.toml").write_text(
        '[roles."compiler lead"]\npeople = ["carol", "erin"]\n'
        '[roles."runtime lead"]\npeople = ["dave"]\n',
        encoding="utf-8",
    )
    return s


@pytest.fixture(autouse=True)
def incident_commands_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """main() dispatch limited to this issue's commands, independent of the other commands."""
    mine = ("incident", "assign", "validate", "export")
    monkeypatch.setattr(cli_main, "COMMANDS", {k: cli_main.COMMANDS[k] for k in mine})


def cli(store: Path, *argv: str) -> int:
    return main([*argv, "--store", str(store), "--actor", "oncall"])


def status(store: Path, iid: str) -> str:
    return load_incident(store, iid).status


def test_sample_incident_end_to_end(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        cli(
            store,
            "incident",
            "new",
            "--title",
            "p99 regression on canary",
            "--severity",
            "sev2",
            "--id",
            "INC-e2e",
        )
        == 0
    )
    assert status(store, "INC-e2e") == "declared"
    assert (
        cli(
            store,
            "incident",
            "pair",
            "INC-e2e",
            "--failing",
            "failing",
            "--comparator",
            "comparator",
            "--fixed-metadata",
            "fixed-metadata",
        )
        == 0
    )
    assert status(store, "INC-e2e") == "paired"
    # What `workbench triage ... --incident ID` does after its analysis.
    attach_triage(store, "INC-e2e", triage_doc(), "oncall")
    assert status(store, "INC-e2e") == "localized"
    assert cli(store, "incident", "classify", "INC-e2e") == 0
    assert status(store, "INC-e2e") == "classified"
    capsys.readouterr()
    assert cli(store, "assign", "--incident", "INC-e2e", "--propose") == 0
    proposals = capsys.readouterr().out.splitlines()
    assert proposals[0].startswith("compiler lead: carol — owns the origin stage lowering")
    assert proposals[1].startswith("runtime lead: dave — owns the manifest stage execution")
    assert cli(store, "assign", "--incident", "INC-e2e") == 0
    inc = load_incident(store, "INC-e2e")
    assert inc.status == "assigned"
    assert [(o.role, o.person, o.artifact) for o in inc.owners] == [
        ("compiler lead", "carol", "design rationale and trade-offs"),
        ("runtime lead", "dave", "profile traces and bottleneck map"),
    ]
    assert (
        cli(
            store,
            "incident",
            "action",
            "INC-e2e",
            "--add",
            "add an SRAM-fit check to the fusion pass",
            "--owner",
            "carol",
            "--due",
            "2026-01-02",
        )
        == 0
    )
    # A synthetic candidate is refused by the shape check (exit 1), the rollback passes.
    assert (
        cli(store, "validate", "--incident", "INC-e2e", "--candidate", "candidate-synthetic") == 1
    )
    assert cli(store, "incident", "close", "INC-e2e") == 2
    assert "production-like shapes" in capsys.readouterr().err
    assert cli(store, "validate", "--incident", "INC-e2e", "--candidate", "candidate-rollback") == 0
    assert status(store, "INC-e2e") == "validating"
    capsys.readouterr()
    assert cli(store, "incident", "close", "INC-e2e", "--note", "rollback shipped") == 0
    inc = load_incident(store, "INC-e2e")
    assert inc.status == "closed"
    walk = [t.status_to for t in inc.timeline if t.status_to]
    assert walk == [
        "declared",
        "paired",
        "localized",
        "classified",
        "assigned",
        "validating",
        "closed",
    ]
    assert [(s.id, s.overdue_actions) for s in list_incidents(store)] == [("INC-e2e", 1)]
    capsys.readouterr()
    assert cli(store, "incident", "list") == 0
    listed = capsys.readouterr().out
    assert (
        "INC-e2e" in listed and "closed" in listed and "PASS" in listed and "(1 overdue)" in listed
    )
    assert cli(store, "incident", "show", "INC-e2e") == 0
    shown = capsys.readouterr().out
    assert (
        "OVERDUE" in shown
        and "validation of candidate-rollback vs comparator comparator:\n    verdict PASS" in shown
    )

    md_path, json_path = tmp_path / "summary.md", tmp_path / "summary.json"
    assert cli(store, "export", "--incident", "INC-e2e", "--format", "md", "-o", str(md_path)) == 0
    assert (
        cli(store, "export", "--incident", "INC-e2e", "--format", "json", "-o", str(json_path)) == 0
    )
    md, doc = md_path.read_text(), json.loads(json_path.read_text())
    check_schema(doc)
    assert doc["missing"] == []
    for heading in SECTIONS_MD:
        assert heading in md, heading
    assert "_Not" not in md and "_No " not in md and "_None" not in md

    # Impact numbers are the store's: recompute the end-to-end p99 delta from the requests.
    con = db.connect(store)
    lat = {
        r: con.execute("SELECT latency_us FROM requests WHERE run_id = $r", {"r": r}).fetchnumpy()[
            "latency_us"
        ]
        for r in ("failing", "comparator")
    }
    p99 = next(
        r for r in doc["impact"]["rows"] if r["metric"] == "end-to-end" and r["quantile"] == "p99"
    )
    expect = float(stats.quantile(lat["failing"], 0.99)) - float(
        stats.quantile(lat["comparator"], 0.99)
    )
    assert p99["delta_us"] == pytest.approx(expect)
    assert p99["ci_low_us"] < p99["delta_us"] < p99["ci_high_us"] and p99["n_failing"] == 400
    assert f"{p99['failing_us'] / 1000:,.3f} ms" in md
    assert len(doc["impact"]["rows"]) == 12
    assert doc["reproduction"]["runs"][2]["role"] == "fixed-metadata"
    assert doc["reproduction"]["runs"][2]["run_id"] == "fixed-metadata"
    assert {t["key"] for t in doc["reproduction"]["tags"] if t["locked"]} >= {
        "hardware",
        "compiler_version",
    }
    assert doc["localization"]["claims"][0]["query"] == "stage_quantiles"
    loop = doc["closed_loop"]
    assert [p["run_id"] for p in loop["compile_profile"]] == [
        "failing",
        "comparator",
        "candidate-rollback",
    ]
    assert [(p["compiles"], p["ops"]) for p in loop["compile_profile"]] == [
        (1, 400),
        (1, VALIDATION_N),
        (1, VALIDATION_N),
    ]
    assert {r["metric"] for r in loop["runtime_telemetry"]} == {"lowering", "execution"}
    assert loop["retuning_action"]["actions"][0]["text"].startswith("add an SRAM-fit check")
    assert loop["retuning_action"]["triage"][0]["kind"] == "split_fusion"
    assert "proposed by triage: split fusion group 7 so its working set fits SRAM" in md
    assert "(predicted p99 gain 410.0 µs)" in md
    assert loop["result_run"]["rows"][1]["delta_us"] < 0  # the rollback removed the regression
    v = doc["validation"]
    assert v["verdict"] == "PASS" and v["candidate"] == "candidate-rollback"
    assert len(v["cells"]) == 7 and all(
        c["n_baseline"] == VALIDATION_N for c in v["cells"] if c["unit"] == "us"
    )
    assert doc["rollback_criteria"] and all(
        c["source"] == "guardrail" for c in doc["rollback_criteria"]
    )
    p99_rule = next(c for c in doc["rollback_criteria"] if c["metric"] == "e2e_p99")
    assert p99_rule["op"] == ">" and p99_rule["threshold"] == pytest.approx(
        1.05 * float(stats.quantile(lat["comparator"], 0.99))
    )
    assert doc["checks"]["replay"]["passed"] and doc["checks"]["replay"]["psi"] < 0.25
    overdue = [a for a in doc["owners"]["follow_ups"] if a["overdue"]]
    assert [a["owner"] for a in overdue] == ["carol"] and "**overdue**" in md
    assert len(doc["timeline"]) >= 7 and len(doc["audit"]) > 10
    assert np.isfinite([c["diff"] for c in v["cells"]]).all()
