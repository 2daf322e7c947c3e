"""The op table written at commit for big runs: same ops as the Parquet, or not used at all."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from accel.ops import OpArrays
from triage_stores import RunSpec, build_run, write_run
from workbench.errors import WorkbenchError
from workbench.store import arrays, db, integrity, layout, op_table
from workbench.triage.triage import triage


def _events(store: Path, run_id: str) -> Path:
    return layout.partition_dir(store, "events", run_id) / layout.PART_FILE


def _from_parquet(store: Path, run_id: str, skip: list[str], mp: pytest.MonkeyPatch) -> OpArrays:
    with mp.context() as m:
        m.setattr(op_table, "read", lambda _: None)
        return arrays.load_run_arrays(db.connect(store), run_id, skip_requests=skip).ops


def _same(a: OpArrays, b: OpArrays) -> None:
    for name, value in vars(a).items():
        other = getattr(b, name)
        if isinstance(value, np.ndarray):
            np.testing.assert_array_equal(value, other, err_msg=name)
            assert value.dtype == other.dtype, name
        else:
            assert value == other, name


@pytest.fixture
def big(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A store whose runs count as big: both got an op table at commit."""
    monkeypatch.setattr(op_table, "MIN_EVENTS", 500)
    write_run(tmp_path, RunSpec("base", n_requests=120, drift_share=0.3, seed=1))
    spec = RunSpec("slow", n_requests=120, drift_share=0.3, recompile_us=8000.0, seed=2)
    write_run(tmp_path, spec)
    return tmp_path


def test_commit_writes_an_op_table_for_big_runs_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(op_table, "MIN_EVENTS", 500)
    write_run(tmp_path, RunSpec("small", n_requests=20))  # 140 events
    write_run(tmp_path, RunSpec("large", n_requests=100))  # 700 events
    assert not (_events(tmp_path, "small").parent / op_table.FILE).exists()
    stored = op_table.read(_events(tmp_path, "large"))
    assert stored is not None and stored.ops.size == 700
    # no temporary file is left beside it
    assert sorted(p.name for p in _events(tmp_path, "large").parent.iterdir()) == [
        op_table.FILE,
        layout.PART_FILE,
    ]


@pytest.mark.parametrize("skip", [[], ["r0"], ["r0", "r5", "r119"], ["r118", "r119"]])
def test_ops_from_the_table_are_those_of_the_parquet(
    big: Path, skip: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    run = arrays.load_run_arrays(db.connect(big), "slow", skip_requests=skip)
    _same(run.ops, _from_parquet(big, "slow", skip, monkeypatch))
    if not skip:  # mapped, not copied: the columns are the file's pages
        assert not run.ops.flops.flags.writeable and not run.ops.req.flags.writeable


def test_triage_is_the_same_with_and_without_op_tables(
    big: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    used: list[bool] = []
    read = op_table.read

    def spy(path: Path) -> op_table.OpTable | None:
        found = read(path)
        used.append(found is not None)
        return found

    monkeypatch.setattr(op_table, "read", spy)
    with_tables = json.dumps(triage(big, "slow", "base").to_json(), sort_keys=True)
    assert used == [True, True]
    for run_id in ("base", "slow"):
        (_events(big, run_id).parent / op_table.FILE).unlink()
    without = json.dumps(triage(big, "slow", "base").to_json(), sort_keys=True)
    assert not any(used[2:])  # a missing table is not even looked for
    assert with_tables == without


def test_a_rewritten_events_file_is_not_shadowed(
    big: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _events(big, "slow")
    events = pq.read_table(path)
    dur = events.column("dur_us").to_numpy(zero_copy_only=False).copy()
    dur[:50] += 1000.0
    pq.write_table(
        events.set_column(events.schema.get_field_index("dur_us"), "dur_us", [dur]), path
    )
    assert op_table.read(path) is None  # made from the file before it was rewritten
    # The file no longer has the content hash recorded at commit: refused, named.
    with pytest.raises(WorkbenchError, match=r"part-0\.parquet: damaged"):
        arrays.load_run_arrays(db.connect(big), "slow")
    # In a store from before content hashes, the rewritten file is read, not its old table.
    run_file = layout.run_file(big, "slow")
    runs = pq.read_table(run_file)
    meta = {k: v for k, v in (runs.schema.metadata or {}).items() if k != integrity.FILES_KEY}
    pq.write_table(runs.replace_schema_metadata(meta), run_file)
    ops = arrays.load_run_arrays(db.connect(big), "slow").ops
    _same(ops, _from_parquet(big, "slow", [], monkeypatch))


@pytest.mark.parametrize("damage", ["truncated", "garbage", "other format"])
def test_a_damaged_op_table_is_ignored(
    big: Path, damage: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = _events(big, "slow").parent / op_table.FILE
    if damage == "truncated":
        table.write_bytes(table.read_bytes()[: table.stat().st_size // 2])
    elif damage == "garbage":
        table.write_bytes(b"ARROW1" + bytes(4096))
    else:
        monkeypatch.setattr(op_table, "FORMAT", op_table.FORMAT + 1)
    assert op_table.read(_events(big, "slow")) is None
    ops = arrays.load_run_arrays(db.connect(big), "slow").ops
    _same(ops, _from_parquet(big, "slow", [], monkeypatch))


def test_a_full_disk_while_writing_the_table_leaves_the_store_as_it_was(
    big: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = sorted(str(p.relative_to(big)) for p in big.rglob("*"))

    def full(events_file: Path, request_ids: list[str], ops: object = None) -> None:
        (events_file.parent / ".ops.arrow.partial.tmp").write_bytes(b"x")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(op_table, "write", full)
    with pytest.raises(WorkbenchError, match=r"third\.json.*no space left"):
        layout.commit_run(big, build_run(RunSpec("third", n_requests=100)), source="third.json")
    assert sorted(str(p.relative_to(big)) for p in big.rglob("*")) == before


def test_a_store_without_op_tables_gets_them_when_merged_into_a_new_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A store written before op tables existed: merging it into a new store (what the README
    # says to do) commits every run again, and the big ones get their table.
    from workbench.store.ingest import ingest

    old, new = tmp_path / "old", tmp_path / "new"
    write_run(old, RunSpec("slow", n_requests=100, seed=2))
    assert not (_events(old, "slow").parent / op_table.FILE).exists()
    monkeypatch.setattr(op_table, "MIN_EVENTS", 500)
    ingest(new, old)
    assert op_table.read(_events(new, "slow")) is not None
    _same(
        arrays.load_run_arrays(db.connect(new), "slow").ops,
        _from_parquet(old, "slow", [], monkeypatch),
    )
