"""The suspect tag of a pairing is saved in the incident record, and records written before the
field existed still load (as no suspect)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from workbench.cli.main import bundled_sample
from workbench.incident import workflow
from workbench.incident.incident import create_incident, incident_path, load_incident


@pytest.fixture
def store(tmp_path: Path) -> Path:
    s = tmp_path / "store"
    shutil.copytree(bundled_sample(), s, ignore=shutil.ignore_patterns("incidents", "*.md"))
    return s


def test_pair_keeps_the_suspect_and_leaves_it_out_of_the_warnings(store: Path) -> None:
    inc = create_incident(store, "p99 regression", "sev2", "oncall", "INC-s")
    inc = workflow.pair(
        store, inc.id, "failing", "comparator", "oncall", suspect="compiler_version"
    )
    saved = load_incident(store, inc.id)
    assert saved.suspect == "compiler_version"
    assert not any("compiler_version" in w for w in saved.pair_warnings)
    # Re-pairing without a suspect clears it, and the mismatch is a warning again.
    workflow.pair(store, inc.id, "failing", "comparator", "oncall")
    saved = load_incident(store, inc.id)
    assert saved.suspect is None
    assert any("compiler_version" in w for w in saved.pair_warnings)
    assert any(a.field == "suspect" for a in saved.audit)


def test_a_record_without_the_field_loads_as_no_suspect(store: Path) -> None:
    inc = create_incident(store, "p99 regression", "sev2", "oncall", "INC-old")
    workflow.pair(store, inc.id, "failing", "comparator", "oncall", suspect="compiler_version")
    path = incident_path(store, inc.id)
    doc = json.loads(path.read_text(encoding="utf-8"))
    del doc["suspect"]  # as an older version wrote it
    path.write_text(json.dumps(doc), encoding="utf-8")
    old = load_incident(store, inc.id)
    assert old.suspect is None and old.comparator == "comparator"
    # And it can be saved on from there.
    workflow.pair(store, inc.id, "failing", "comparator", "oncall", suspect="compiler_version")
    assert load_incident(store, inc.id).suspect == "compiler_version"
