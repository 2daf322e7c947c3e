"""The op table of a big run: a cache made on its first load, outside the store, holding the
same ops as the Parquet; passed over (and made again) when it does not check out, and never
needed for a verdict."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from accel.ops import OpArrays
from ingest_helpers import HANDMADE, ROOT, TORCH, TRACES
from triage_stores import RunSpec, write_run
from workbench.store import arrays, db, integrity, layout, op_columns, op_table
from workbench.store.ingest import ingest
from workbench.triage.triage import triage

sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "nsys"))
from make_nsys_export import write_export

SAXPY = TRACES / "nsys" / "saxpy_a100.sqlite"


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test's own state directory (where the cache lives), and runs of 500 events count
    as big."""
    state = tmp_path / "home"
    monkeypatch.setenv("WORKBENCH_HOME", str(state))
    monkeypatch.setattr(op_table, "MIN_EVENTS", 500)
    return state


def _events(store: Path, run_id: str) -> Path:
    return layout.partition_dir(store, "events", run_id) / layout.PART_FILE


def _cache_file(store: Path, run_id: str) -> Path:
    hashes = integrity.recorded(layout.run_file(store, run_id))
    assert hashes is not None
    return op_table.cache_path(hashes[f"events/run_id={run_id}/{layout.PART_FILE}"])


def _from_parquet(store: Path, run_id: str, skip: list[str], mp: pytest.MonkeyPatch) -> OpArrays:
    with mp.context() as m:
        m.setattr(op_table, "MIN_EVENTS", 10**12)
        return arrays.load_run_arrays(db.connect(store), run_id, skip_requests=skip).ops


def _same(a: OpArrays, b: OpArrays) -> None:
    for name, value in vars(a).items():
        other = getattr(b, name)
        if isinstance(value, np.ndarray):
            np.testing.assert_array_equal(value, other, err_msg=name)
            assert value.dtype == other.dtype, name
        else:
            assert value == other, name


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.fixture
def big(tmp_path: Path) -> Path:
    store = tmp_path / "store"
    write_run(store, RunSpec("base", n_requests=120, drift_share=0.3, seed=1))
    spec = RunSpec("slow", n_requests=120, drift_share=0.3, recompile_us=8000.0, seed=2)
    write_run(store, spec)
    return store


def test_a_commit_writes_no_table_and_the_first_load_caches_one_outside_the_store(
    tmp_path: Path, home: Path
) -> None:
    store = tmp_path / "store"
    write_run(store, RunSpec("small", n_requests=20))  # 140 events
    write_run(store, RunSpec("large", n_requests=100))  # 700 events
    assert not list(store.rglob(op_table.FILE)) and not list(store.rglob("*.arrow"))
    hashes = integrity.recorded(layout.run_file(store, "large"))
    assert hashes is not None and not any(op_table.FILE in rel for rel in hashes)
    before = _tree(store)
    for run_id in ("small", "large"):
        arrays.load_run_arrays(db.connect(store), run_id)
    op_table.flush()  # written on a background thread
    assert _tree(store) == before  # a load never writes into the store
    cached = sorted(p.name for p in op_table.cache_dir().iterdir())
    assert cached == [_cache_file(store, "large").name, _cache_file(store, "large").name + ".xxh3"]
    assert op_table.cache_dir().is_relative_to(home)


@pytest.mark.parametrize("skip", [[], ["r0"], ["r0", "r5", "r119"], ["r118", "r119"]])
def test_ops_from_the_table_are_those_of_the_parquet(
    big: Path, skip: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    want = _from_parquet(big, "slow", skip, monkeypatch)
    first = arrays.load_run_arrays(db.connect(big), "slow", skip_requests=skip)  # makes it
    _same(first.ops, want)
    op_table.flush()
    again = arrays.load_run_arrays(db.connect(big), "slow", skip_requests=skip)
    _same(again.ops, want)
    if not skip:  # mapped, not copied: the columns are the file's pages
        assert not again.ops.flops.flags.writeable and not again.ops.req.flags.writeable


def test_triage_is_the_same_cold_warm_and_with_the_cache_dropped(
    big: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hits: list[bool] = []
    cached = op_table.cached

    def spy(*args: object) -> op_table.OpTable | None:
        found = cached(*args)  # type: ignore[arg-type]
        hits.append(found is not None)
        return found

    monkeypatch.setattr(op_table, "cached", spy)
    cold = json.dumps(triage(big, "slow", "base").to_json(), sort_keys=True)
    op_table.flush()
    warm = json.dumps(triage(big, "slow", "base").to_json(), sort_keys=True)
    assert hits == [False, False, True, True]
    for p in op_table.cache_dir().iterdir():
        p.unlink()  # dropping the cache: the next triage decodes and makes it again
    dropped = json.dumps(triage(big, "slow", "base").to_json(), sort_keys=True)
    assert cold == warm == dropped


@pytest.mark.parametrize(
    "damage",
    ["truncated", "bytes inside", "garbage", "no hash", "hash is a fifo", "other format",
     "other ids"],
)  # fmt: skip
def test_a_table_that_does_not_check_out_is_passed_over_and_made_again(
    big: Path, damage: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    want = _from_parquet(big, "slow", [], monkeypatch)
    arrays.load_run_arrays(db.connect(big), "slow")
    op_table.flush()
    path = _cache_file(big, "slow")
    events = _events(big, "slow")
    ids = op_table.read(events, path)
    assert ids is not None
    data = bytearray(path.read_bytes())
    if damage == "truncated":
        path.write_bytes(bytes(data[: len(data) // 2]))
    elif damage == "bytes inside":
        # Inside the mapped columns: the file still opens, with other numbers.
        mid = len(data) // 2
        data[mid : mid + 64] = b"\x7f" * 64
        path.write_bytes(bytes(data))
        assert op_table.read(events, path) is not None  # its own checks do not see it
    elif damage == "garbage":
        path.write_bytes(b"ARROW1" + bytes(4096))
    elif damage == "no hash":
        path.with_name(path.name + ".xxh3").unlink()
    elif damage == "hash is a fifo":  # read, it would block the load for ever
        path.with_name(path.name + ".xxh3").unlink()
        os.mkfifo(path.with_name(path.name + ".xxh3"))
    elif damage == "other format":
        monkeypatch.setattr(op_table, "FORMAT", op_table.FORMAT + 1)
    if damage == "other ids":
        assert op_table.cached(events, _digest(big), ids.request_ids[::-1]) is None
    else:
        assert op_table.cached(events, _digest(big), ids.request_ids) is None
    _same(arrays.load_run_arrays(db.connect(big), "slow").ops, want)
    op_table.flush()
    # made again: the next load finds a table that checks out
    assert op_table.cached(events, _digest(big), ids.request_ids) is not None


def _digest(store: Path) -> str:
    hashes = integrity.recorded(layout.run_file(store, "slow"))
    assert hashes is not None
    return hashes[f"events/run_id=slow/{layout.PART_FILE}"]


@pytest.mark.parametrize("where", ["home is a file", "cache folder is a file", "full disk"])
def test_a_cache_that_cannot_be_written_only_costs_the_decode(
    big: Path, home: Path, where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    want = _from_parquet(big, "slow", [], monkeypatch)
    if where == "home is a file":
        home.parent.mkdir(parents=True, exist_ok=True)
        home.write_text("not a directory")
    elif where == "cache folder is a file":
        op_table.cache_dir().parent.mkdir(parents=True)
        op_table.cache_dir().write_text("not a directory")
    else:

        def full(*args: object, **kwargs: object) -> None:
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(op_table, "write", full)
    before = _tree(big)
    _same(arrays.load_run_arrays(db.connect(big), "slow").ops, want)
    verdict = triage(big, "slow", "base").to_json()
    op_table.flush()
    assert verdict["origin_stage"]
    assert _tree(big) == before
    if where == "full disk":
        assert not list(op_table.cache_dir().glob("*.arrow"))
        assert not list(op_table.cache_dir().glob(".*tmp"))


def test_a_run_without_recorded_hashes_reads_its_parquet(
    big: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A store from before content hashes: its events file cannot name a table; no cache.
    run_file = layout.run_file(big, "slow")
    runs = pq.read_table(run_file)
    meta = {k: v for k, v in (runs.schema.metadata or {}).items() if k != integrity.FILES_KEY}
    pq.write_table(runs.replace_schema_metadata(meta), run_file)
    _same(arrays.load_run_arrays(db.connect(big), "slow").ops,
          _from_parquet(big, "slow", [], monkeypatch))  # fmt: skip
    assert not op_table.cache_dir().exists()


def test_a_table_beside_the_events_file_from_an_older_store_is_still_read(
    big: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = _events(big, "slow")
    ids = pq.read_table(layout.partition_dir(big, "requests", "slow")).column("request_id")
    op_table.write(events, ids.to_pylist())
    read = op_table.read
    seen: list[Path | None] = []

    def spy(events_file: Path, path: Path | None = None) -> op_table.OpTable | None:
        seen.append(path)
        return read(events_file, path)

    monkeypatch.setattr(op_table, "read", spy)
    run = arrays.load_run_arrays(db.connect(big), "slow")
    assert seen == [None]  # the one beside, and no cache looked for
    assert not run.ops.flops.flags.writeable
    _same(run.ops, _from_parquet(big, "slow", [], monkeypatch))


def test_the_least_recently_used_tables_go_first(big: Path) -> None:
    for run_id in ("base", "slow"):
        arrays.load_run_arrays(db.connect(big), run_id)
    op_table.flush()
    base, slow = _cache_file(big, "base"), _cache_file(big, "slow")
    arrays.load_run_arrays(db.connect(big), "base")  # base used last
    os.utime(slow, ns=(1, 1))
    op_table.prune(base.stat().st_size)
    assert base.is_file() and not slow.exists()
    assert not slow.with_name(slow.name + ".xxh3").exists()


def _source(key: str, tmp: Path) -> Path:
    if key == "saxpy_a100":
        if not SAXPY.is_file():
            pytest.skip(f"needs the real traces folder {TRACES} (nsys/saxpy_a100.sqlite)")
        return SAXPY
    if key == "generated":
        path = tmp / "generated.sqlite"
        write_export(path, 7, 2, 5)  # 7 requests per process, 2 processes, 5 kernels each
        return path
    return {
        "current_schema": ROOT / "tests" / "fixtures" / "nsys" / "current_schema.sqlite",
        "kineto_torch": TORCH / "aa_first.pt.trace.json.gz",
        "kineto_serving": HANDMADE,
    }[key]


@pytest.mark.parametrize(
    "key", ["saxpy_a100", "current_schema", "generated", "kineto_torch", "kineto_serving"]
)
def test_the_cached_table_of_every_importer_is_the_file_read_back(
    key: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(op_table, "MIN_EVENTS", 1)  # every run counts as big
    store = tmp_path / "store"
    ingest(store, _source(key, tmp_path), run_id="r")
    arrays.load_run_arrays(db.connect(store), "r")
    op_table.flush()
    events = _events(store, "r")
    stored = op_table.read(events, _cache_file(store, "r"))
    assert stored is not None and stored.ops.size > 0
    index = {r: i for i, r in enumerate(stored.request_ids)}
    got, want = stored.ops, op_columns.read(events, index)
    assert (got.name_vocab, got.kernel_vocab) == (want.name_vocab, want.kernel_vocab)
    assert sorted(got.cols) == sorted(want.cols)
    for name, col in got.cols.items():
        assert col.dtype == want.cols[name].dtype, name
        np.testing.assert_array_equal(col, want.cols[name], err_msg=name)
