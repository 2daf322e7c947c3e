"""`workbench export` without -o writes to $WORKBENCH_HOME/exports/, making missing folders;
`workbench incident edit` sets the title and severity, audited old -> new. Real CLI, subprocesses."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from ingest_helpers import run_workbench
from tests.incident_runs import incident_runs, triage_doc
from workbench.incident.incident import create_incident, incident_path, load_incident
from workbench.incident.workflow import attach_triage


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    s = incident_runs(tmp_path_factory.mktemp("export-cli") / "store")
    create_incident(s, "t", "sev3", "alice", incident_id="INC-x")
    attach_triage(s, "INC-x", triage_doc(), "alice")
    return s


def workbench(home: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return run_workbench(list(argv), home=home, timeout=120)


def test_export_defaults_to_workbench_home_exports(store: Path, tmp_path: Path) -> None:
    home = tmp_path / "home" / "not-yet"  # neither it nor exports/ exists
    done = workbench(home, "export", "--incident", "INC-x", "--store", str(store))
    assert done.returncode == 0, done.stderr
    out = home / "exports" / "INC-x.md"
    assert out.read_text(encoding="utf-8").startswith("# Incident INC-x: t\n\n## Brief\n")
    assert done.stdout.splitlines() == [
        f"created folder {home / 'exports'}",
        f"wrote {out} ({out.stat().st_size} bytes)",
    ]
    again = workbench(
        home, "export", "--incident", "INC-x", "--format", "json", "--store", str(store)
    )
    assert again.returncode == 0 and again.stdout.startswith(
        f"wrote {home / 'exports' / 'INC-x.json'}"
    )
    # -o into missing folders makes them too.
    nested = tmp_path / "a" / "b" / "s.md"
    assert (
        workbench(
            home, "export", "--incident", "INC-x", "-o", str(nested), "--store", str(store)
        ).returncode
        == 0
    )
    assert nested.is_file()


def test_export_into_a_file_as_folder_fails_in_one_line(store: Path, tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    done = workbench(
        tmp_path,
        "export",
        "--incident",
        "INC-x",
        "-o",
        str(tmp_path / "f" / "s.md"),
        "--store",
        str(store),
    )
    assert (
        done.returncode == 2
        and done.stderr.count("\n") == 1
        and "cannot write export" in done.stderr
    )


def test_incident_edit_sets_title_and_severity(store: Path, tmp_path: Path) -> None:
    done = workbench(
        tmp_path,
        "incident",
        "edit",
        "INC-x",
        "--title",
        "p99 +47% after compiler 2.5",
        "--severity",
        "sev1",
        "--store",
        str(store),
        "--actor",
        "bob",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("INC-x  [sev1]  p99 +47% after compiler 2.5\n")
    inc = load_incident(store, "INC-x")
    changes = {(a.field, a.old, a.new, a.actor) for a in inc.audit[-2:]}
    assert changes == {
        ("title", '"t"', '"p99 +47% after compiler 2.5"', "bob"),
        ("severity", '"sev3"', '"sev1"', "bob"),
    }
    before = incident_path(store, "INC-x").read_bytes()
    for argv, expect in (
        (["--severity", "p0"], "'p0': unknown severity"),
        (["--title", "  "], "a title cannot be empty"),
        ([], "nothing to change"),
    ):
        bad = workbench(tmp_path, "incident", "edit", "INC-x", *argv, "--store", str(store))
        assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and expect in bad.stderr
    assert incident_path(store, "INC-x").read_bytes() == before
