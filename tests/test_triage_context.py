"""A run's context is loaded once per triage and handed on (runs row read once, files hashed
once), a picked comparator is checked like a named one, and the app's triage and the CLI's
give the same document through the same entry point."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from ingest_helpers import store_hash
from workbench.errors import WorkbenchError
from workbench.store import arrays, db, layout
from workbench.triage import context
from workbench.triage.context import load_present
from workbench.triage.triage import triage

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_traces"


def test_context_holds_the_runs_row_and_its_files() -> None:
    con = db.connect(SAMPLE)
    try:
        ctx = load_present(con, "failing", "no-such-run", None, "comparator", "failing")
    finally:
        con.close()
    assert list(ctx) == ["failing", "comparator"]  # absent runs left to the caller, no repeats
    f = ctx["failing"]
    assert f.hardware == "NVIDIA H100-SXM5-80GB"
    assert f.tags["traffic"] == "production-mirror"
    assert f.schema_version == layout.read_run_row(SAMPLE, "failing")["schema_version"]  # type: ignore[index]
    assert any(rel.startswith("events/") for rel in f.files) and f.table_ok


def test_triage_reads_each_runs_row_once_and_hashes_once(monkeypatch: pytest.MonkeyPatch) -> None:
    reads: Counter[str] = Counter()
    real_read = context.read_run_row

    def counted(store: Path, run_id: str) -> dict[str, object] | None:
        reads[run_id] += 1
        return real_read(store, run_id)

    def refuse(*_: object) -> bool:
        raise AssertionError("a run was verified again after its context was loaded")

    monkeypatch.setattr(context, "read_run_row", counted)
    monkeypatch.setattr(arrays, "verify", refuse)
    monkeypatch.setattr(layout, "read_run_row", lambda *_: refuse())
    result = triage(SAMPLE, "failing", "comparator", fixed="fixed-metadata")
    assert result.origin_stage is not None
    assert reads == {"failing": 1, "comparator": 1, "fixed-metadata": 1}
    # A comparator triage picks that is also the fixed run already has its context.
    reads.clear()
    picked = triage(SAMPLE, "failing").comparator
    reads.clear()
    assert triage(SAMPLE, "failing", fixed=picked).comparator == picked
    assert reads == {"failing": 1, picked: 1}


def test_a_picked_comparator_is_checked_before_use(tmp_path: Path) -> None:
    store = tmp_path / "store"
    shutil.copytree(SAMPLE, store)
    picked = triage(store, "failing").comparator
    events = next((store / "events" / f"run_id={picked}").glob("*.parquet"))
    data = bytearray(events.read_bytes())
    data[len(data) // 2] ^= 0xFF
    events.write_bytes(bytes(data))
    with pytest.raises(WorkbenchError) as info:
        triage(store, "failing")
    assert str(events) in str(info.value) and "damaged" in str(info.value)


def test_app_and_cli_triage_give_the_same_document(tmp_path: Path) -> None:
    """The app's worker (tui/triage_run.triage_doc) and `workbench triage --json` both call
    triage.triage: the same pair gives the same document, and neither writes to the store."""
    from workbench.tui.triage_run import triage_doc

    before = store_hash(SAMPLE)
    steps: list[float] = []
    app_doc = triage_doc(SAMPLE, "failing", "comparator", None, None, lambda _, f: steps.append(f))
    out = subprocess.run(
        [
            *(sys.executable, "-m", "workbench", "triage", "--store", str(SAMPLE)),
            *("--failing", "failing", "--comparator", "comparator", "--json"),
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    ).stdout
    assert json.loads(json.dumps(app_doc, allow_nan=False)) == json.loads(out)
    assert steps and steps[-1] == 1.0
    assert store_hash(SAMPLE) == before
