"""commit_run: a run lands whole or not at all, whatever interrupts it."""

from pathlib import Path

import pyarrow as pa
import pytest

from workbench.store import layout, schema


def _tables(run_id: str) -> layout.RunTables:
    run = pa.Table.from_pylist([{"run_id": run_id, "schema_version": 1}], schema=schema.RUNS)
    events = pa.Table.from_pylist(
        [{"event_id": 1, "name": "k", "ts_us": 0.0, "dur_us": 1.0}], schema=schema.EVENTS_FILE
    )
    return layout.RunTables(
        run, events, schema.REQUESTS_FILE.empty_table(), schema.COMPILES_FILE.empty_table()
    )


def _snapshot(store: Path) -> list[tuple[str, bytes]]:
    return sorted(
        (str(p.relative_to(store)), p.read_bytes() if p.is_file() else b"")
        for p in store.rglob("*")
    )


def test_interrupt_between_renames_leaves_store_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "store"
    layout.commit_run(store, _tables("first"), source="first.json")
    before = _snapshot(store)
    real_rename = layout.os.rename
    calls = {"n": 0}

    def rename_then_interrupt(src: Path, dst: Path) -> None:
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        real_rename(src, dst)

    monkeypatch.setattr(layout.os, "rename", rename_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        layout.commit_run(store, _tables("second"), source="second.json")
    assert _snapshot(store) == before
    assert layout.run_ids(store) == ["first"]


@pytest.mark.parametrize(
    "bad", ["", "1abc", "../x", "a/b", "a'; DROP", ".hidden", "a..b", "x" * 65]
)
def test_unsafe_run_ids_are_refused(bad: str) -> None:
    with pytest.raises(layout.WorkbenchError):
        layout.check_run_id(bad)
