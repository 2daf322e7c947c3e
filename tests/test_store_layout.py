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


def test_debris_of_a_killed_commit_is_replaced(tmp_path: Path) -> None:
    store = tmp_path / "store"
    layout.commit_run(store, _tables("first"), source="first.json")
    # What SIGKILL between the partition renames and the runs row leaves: partitions, no row.
    debris = layout.partition_dir(store, "events", "second")
    debris.mkdir(parents=True)
    (debris / layout.PART_FILE).write_bytes(b"half a file")
    assert layout.run_ids(store) == ["first"]
    layout.commit_run(store, _tables("second"), source="second.json")
    assert layout.run_ids(store) == ["first", "second"]
    assert (debris / layout.PART_FILE).read_bytes() != b"half a file"


def test_a_committed_run_is_not_overwritten(tmp_path: Path) -> None:
    store = tmp_path / "store"
    layout.commit_run(store, _tables("first"), source="first.json")
    before = _snapshot(store)
    with pytest.raises(layout.WorkbenchError, match="already exists"):
        layout.commit_run(store, _tables("first"), source="again.json")
    assert _snapshot(store) == before


def test_sigterm_during_the_renames_lands_after_them(tmp_path: Path) -> None:
    """A signal between two renames waits for the last one: the run is whole, never half
    (the CLI turns SIGTERM into SystemExit once the commit is done; subprocess test)."""
    import subprocess
    import sys
    import textwrap

    store = tmp_path / "store"
    layout.commit_run(store, _tables("first"), source="first.json")
    before = _snapshot(store)
    # Deliver SIGTERM to ourselves between the first and second partition rename.
    script = textwrap.dedent(
        f"""
        import os, signal, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_store_layout import _tables
        from workbench.cli import main as cli
        from workbench.store import layout
        cli._exit_cleanly_on_hangup()
        real = os.rename
        n = [0]
        def rename(a, b):
            n[0] += 1
            real(a, b)
            if n[0] == 1:
                os.kill(os.getpid(), signal.SIGTERM)
        layout.os.rename = rename
        layout.commit_run(__import__("pathlib").Path({str(store)!r}), _tables("second"), source="x")
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == 128 + 15, proc.stderr
    after = dict(_snapshot(store))
    assert set(dict(before)) < set(after)
    assert layout.run_ids(store) == ["first", "second"]
    for name in schema.PARTITIONED:
        assert (layout.partition_dir(store, name, "second") / layout.PART_FILE).is_file()
    assert not (store / layout.STAGING).exists()


def test_partitioned_table_names_match_the_schemas() -> None:
    # layout names the folders without loading pyarrow; schema defines their files.
    assert tuple(schema.PARTITIONED) == layout.PARTITIONED_TABLES
