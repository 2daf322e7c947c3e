"""CLI bad input: one line on stderr naming the subject, exit 2, and no record changed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.incident_runs import incident_runs, triage_doc
from workbench.cli import main as cli_main
from workbench.cli.main import main
from workbench.incident.incident import create_incident, incident_path
from workbench.incident.workflow import attach_triage


@pytest.fixture(autouse=True)
def incident_commands_only(monkeypatch: pytest.MonkeyPatch) -> None:
    mine = ("incident", "assign", "validate", "export")
    monkeypatch.setattr(cli_main, "COMMANDS", {k: cli_main.COMMANDS[k] for k in mine})


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    s = incident_runs(tmp_path_factory.mktemp("cli") / "store")
    create_incident(s, "t", "sev2", "alice", incident_id="INC-cli")
    attach_triage(s, "INC-cli", triage_doc(), "alice")
    return s


@pytest.mark.parametrize(
    ("argv", "expect"),
    [
        (["validate", "--incident", "INC-nope", "--candidate", "x"], "INC-nope: no such incident"),
        (["incident", "show", "../x"], "'../x': invalid incident id"),
        (["incident", "new", "--title", "t", "--severity", "p0"], "'p0': unknown severity"),
        (["incident", "new", "--title", "t", "--failing", "failing"], "give both --failing"),
        (["incident", "pair", "INC-cli", "--failing", "failing", "--comparator", "nope"], "'nope'"),
        (["incident", "classify", "INC-cli", "--mechanism", "gremlins"], "unknown mechanism"),
        (["incident", "close", "INC-cli"], "cannot enter 'closed': missing"),
        (
            ["incident", "action", "INC-cli", "--add", "x", "--owner", "o", "--due", "soon"],
            "YYYY-MM-DD",
        ),
        (["incident", "rollback", "INC-cli", "--add", "e2e_p99", ">", "lots", "us"], "'lots'"),
        (["assign", "--incident", "INC-cli"], "nobody listed for compiler lead, runtime lead"),
        (["assign", "--incident", "INC-cli", "--role", "janitor", "--person", "x"], "unknown role"),
        (
            ["validate", "--incident", "INC-cli", "--candidate", "candidate-rollback"],
            "cannot validate yet",
        ),
        (
            ["export", "--incident", "INC-cli", "--format", "md", "-o", "/dev/null/dir/x.md"],
            "cannot write export",
        ),
    ],
)
def test_bad_input_is_one_line_and_changes_nothing(
    store: Path, capsys: pytest.CaptureFixture[str], argv: list[str], expect: str
) -> None:
    before = incident_path(store, "INC-cli").read_bytes()
    listed = sorted(p.name for p in (store / "incidents").iterdir())
    assert main([*argv, "--store", str(store), "--actor", "bob"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("workbench: ") and err.count("\n") == 1 and expect in err, err
    assert incident_path(store, "INC-cli").read_bytes() == before
    assert sorted(p.name for p in (store / "incidents").iterdir()) == listed


def test_show_json_and_stdout_export(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["incident", "show", "INC-cli", "--json", "--store", str(store)]) == 0
    assert '"schema_version": 1' in capsys.readouterr().out
    assert (
        main(
            ["export", "--incident", "INC-cli", "--format", "md", "-o", "-", "--store", str(store)]
        )
        == 0
    )
    assert capsys.readouterr().out.startswith("# Incident INC-cli: t\n")


def test_pair_keeps_the_suspect_tag(tmp_path: Path) -> None:
    from workbench.incident.incident import load_incident

    s = incident_runs(tmp_path / "store")
    create_incident(s, "t", "sev2", "alice", incident_id="INC-sus")
    argv = ["incident", "pair", "INC-sus", "--failing", "failing", "--comparator", "comparator"]
    assert main([*argv, "--suspect", "compiler_version", "--store", str(s)]) == 0
    assert load_incident(s, "INC-sus").suspect == "compiler_version"
    assert main([*argv, "--store", str(s)]) == 0
    assert load_incident(s, "INC-sus").suspect is None
