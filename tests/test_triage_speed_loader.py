"""The Parquet op reader (workbench.store.arrays) against queries/run_ops.sql, its definition.

The reader goes to the run's events file directly (no duckdb); queries/run_ops.sql and
run_op_values.sql say what the ops are. These stores hold what a real trace can: nested events
with 1-3 children, null durations, texts and stages, events of unknown requests, ids out of
order, and files of an older schema without some columns.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from accel.cost import op_times
from accel.ops import OpArrays, name_codes
from accel.primary_metric import primary_metric
from accel.profiles import get_profile
from accel.stages import MEM_TIERS, STAGES
from triage_stores import RunSpec, build_run, write_run
from workbench.errors import WorkbenchError
from workbench.store import arrays, db, heap, layout, op_columns, op_table
from workbench.triage import retuning
from workbench.triage.warmup import warmup_of


def _oracle(con: duckdb.DuckDBPyConnection, run_id: str, skip: list[str]) -> dict[str, object]:
    """The ops as the two queries define them, in event order, skipped requests left out."""
    stages = list(STAGES)
    values: dict[str, list[str]] = {"shape": [], "tile": [], "kernel": [], "name": []}
    for row in db.query(con, "run_op_values", {"run_id": run_id, "stages": stages}).to_pylist():
        values[row["kind"]].append(row["value"])
    params = {"run_id": run_id, "stages": stages, "tiers": list(MEM_TIERS)}
    lists = {"shapes": "shape", "tiles": "tile", "kernels": "kernel", "names": "name"}
    t = db.query(con, "run_ops", {**params, **{k: values[v] for k, v in lists.items()}})
    t = t.take(np.argsort(t.column("event_id").to_numpy(), kind="stable"))
    ids = db.query(con, "run_requests", {"run_id": run_id, "skip_requests": []})
    keep = np.array([r not in skip for r in ids.column("request_id").to_pylist()], dtype=bool)
    t = t.filter(pa.array(keep[t.column("req").to_numpy()]))

    def num(name: str) -> np.ndarray:
        return np.asarray(t.column(name).to_numpy(zero_copy_only=False), dtype=np.float64)

    def text(name: str, kind: str) -> list[str]:
        table = [*values[kind], ""]
        return [table[i] for i in t.column(name).to_numpy()]

    shape = [op_columns.parse_shape_mn(v) for v in text("shape_id", "shape")]
    names = text("name_id", "name")
    tile = [op_columns.parse_tile(v) for v in text("tile_id", "tile")]
    return {
        "req": (np.cumsum(keep) - 1)[t.column("req").to_numpy()],
        "stage": t.column("stage").to_numpy(),
        "observed_us": num("observed_us"),
        "flops": num("flops"),
        "bytes": num("bytes"),
        "predicted_us": num("predicted_us"),
        "m": np.array([x[0] for x in shape]),
        "n": np.array([x[1] for x in shape]),
        "tile_m": np.array([x[0] for x in tile]),
        "tile_n": np.array([x[1] for x in tile]),
        "fusion_group": t.column("fusion_group").to_numpy(),
        "mem_tier": t.column("mem_tier").to_numpy(),
        "core": t.column("core").to_numpy(),
        "fallback": t.column("fallback").to_numpy(zero_copy_only=False),
        "recompile": t.column("recompile").to_numpy(zero_copy_only=False),
        "name": names,
        "kernel": text("kernel_id", "kernel"),
        # the names the loaded ops use, sorted ('' among them when some op has none)
        "name_vocab": tuple(sorted(set(names))),
        "name_vocab_used": True,
    }


def _assert_matches(ops: OpArrays, want: dict[str, object]) -> None:
    for field, expected in want.items():
        got = getattr(ops, field)
        if isinstance(expected, np.ndarray):
            assert got.shape == expected.shape, field
            assert np.array_equal(got, expected.astype(got.dtype), equal_nan=got.dtype.kind == "f")
        else:
            assert got == expected, field
    assert [ops.name_vocab[c] for c in ops.name_code] == ops.name
    assert [ops.kernel_vocab[c] for c in ops.kernel_code] == ops.kernel


def _hostile_events(events: pa.Table, seed: int) -> pa.Table:
    """events with nesting, nulls, strays and shuffled rows (same event ids)."""
    rng = np.random.default_rng(seed)
    n = events.num_rows
    ids = events.column("event_id").to_numpy()
    parent = np.full(n, -1, dtype=np.int64)
    # Parents with 1, 2 and 3 children, and a parent id that is no event.
    for p, kids in ((0, [1]), (7, [8, 9]), (14, [15, 16, 17]), (30, [31])):
        parent[kids] = ids[p]
    parent[40] = 10**9
    dur = events.column("dur_us").to_numpy().copy()
    dur[9] = np.nan
    cols = {name: events.column(name) for name in events.column_names}
    cols["parent_id"] = pa.array(parent, mask=parent < 0)
    cols["dur_us"] = pa.array(dur, mask=np.isin(np.arange(n), [16, 22]))
    stage = events.column("stage").to_pylist()
    stage[3], stage[5] = None, "decode"  # unattributed, and no stage of the model
    cols["stage"] = pa.array(stage, pa.string())
    req = events.column("request_id").to_pylist()
    req[11], req[12] = None, "r-unknown"
    cols["request_id"] = pa.array(req, pa.string())
    for name in ("name", "kernel", "shape", "tile", "mem_tier"):
        v = cols[name].to_pylist()
        for i in rng.choice(n, 6, replace=False):
            v[i] = None
        if name == "name":  # names only ops of a skipped or an unknown request carry
            v[2], v[12] = "only-in-r0", "only-unknown"
        cols[name] = pa.array(v, pa.string())
    for name in ("core", "fusion_group", "flops", "fallback"):
        mask = np.zeros(n, dtype=bool)
        mask[rng.choice(n, 5, replace=False)] = True
        cols[name] = pa.array(cols[name].to_numpy(zero_copy_only=False), mask=mask)
    return pa.table(cols).take(rng.permutation(n))


@pytest.fixture
def hostile(tmp_path: Path) -> Path:
    t = build_run(RunSpec("h", n_requests=40, drift_share=0.3, recompile_us=4000.0, seed=3))
    t = layout.RunTables(t.run, _hostile_events(t.events, 3), t.requests, t.compiles)
    layout.commit_run(tmp_path, t, source="test")
    return tmp_path


@pytest.mark.parametrize("table", [False, True], ids=["parquet", "op-table"])
@pytest.mark.parametrize("skip", [[], ["r0"], ["r0", "r7", "r39"]])
def test_reader_matches_run_ops_sql(
    hostile: Path, skip: list[str], table: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    con = db.connect(hostile)
    want = _oracle(con, "h", skip)
    assert isinstance(want["req"], np.ndarray) and want["req"].size > 200
    events = layout.partition_dir(hostile, "events", "h") / layout.PART_FILE
    for rows in (1 << 17, 37):  # one batch, and many batches with their own dictionaries
        monkeypatch.setattr(op_columns, "_BATCH_ROWS", rows)
        if table:  # made for the requests in another order than the loader's: mapped by id
            ids = pq.read_table(layout.partition_dir(hostile, "requests", "h")).column("request_id")
            op_table.write(events, ids.to_pylist()[::-1])
            assert op_table.read(events) is not None
        run = arrays.load_run_arrays(con, "h", skip_requests=skip)
        _assert_matches(run.ops, want)
        ids = db.query(con, "run_requests", {"run_id": "h", "skip_requests": skip})
        assert run.requests.request_id == ids.column("request_id").to_pylist()
    # a NaN child duration makes its parent's exclusive time NaN, as in the query
    assert np.isnan(np.asarray(want["observed_us"])).sum() == 2


def test_reader_of_an_older_file_without_some_columns(tmp_path: Path) -> None:
    # Beside a run of today's schema (duckdb's view then has every column, nulls for "old").
    write_run(tmp_path, RunSpec("new", n_requests=5, seed=4))
    write_run(tmp_path, RunSpec("old", n_requests=20, seed=5))
    path = layout.partition_dir(tmp_path, "events", "old") / layout.PART_FILE
    drop = ["kernel", "predicted_us", "core", "parent_id", "mem_tier"]
    pq.write_table(pq.read_table(path).drop_columns(drop), path)
    # An older file comes from an older store, committed before content hashes were recorded.
    runs_file = layout.run_file(tmp_path, "old")
    runs = pq.read_table(runs_file)
    pq.write_table(runs.replace_schema_metadata(None), runs_file)
    con = db.connect(tmp_path)
    ops = arrays.load_run_arrays(con, "old").ops
    _assert_matches(ops, _oracle(con, "old", []))
    assert set(ops.kernel) == {""} and np.all(ops.core == -1) and np.all(ops.mem_tier == -1)


def test_unreadable_events_file_names_the_file(tmp_path: Path) -> None:
    write_run(tmp_path, RunSpec("cut", n_requests=10))
    path = layout.partition_dir(tmp_path, "events", "cut") / layout.PART_FILE
    con = db.connect(tmp_path)  # (duckdb reads the footers here: cut the file after)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(WorkbenchError, match=r"part-0\.parquet"):
        arrays.load_run_arrays(con, "cut")
    assert path.read_bytes() == data[: len(data) // 2]  # read only


def test_without_texts_the_codes_carry_names_and_kernels(tmp_path: Path) -> None:
    write_run(tmp_path, RunSpec("f", n_requests=60, fallback_share=0.3, drift_share=0.3, seed=2))
    con = db.connect(tmp_path)
    full = arrays.load_run_arrays(con, "f")
    lean = arrays.load_run_arrays(con, "f", texts=False)
    assert lean.ops.name == [] and lean.ops.kernel == []
    assert [lean.ops.kernel_vocab[c] for c in lean.ops.kernel_code] == full.ops.kernel
    assert name_codes(lean.ops)[1] == name_codes(full.ops)[1]
    hw, warm = get_profile("h100"), warmup_of(con, "f")
    a = retuning.propose(full, warm, [], hw)
    b = retuning.propose(lean, warm, [], hw, op_cost=op_times(lean.ops, hw))
    assert [x.to_json() for x in a] == [x.to_json() for x in b]
    assert any(x.kind == "pin_kernel" for x in a)
    pm_a = primary_metric(full, hw, compile_us=3000.0)
    pm_b = primary_metric(lean, hw, compile_us=3000.0, op_cost=op_times(lean.ops, hw))
    assert repr(pm_a) == repr(pm_b)


def test_reused_heap_restores_numpy_and_nests() -> None:
    before = heap._set_hugepage(True)
    try:
        with heap.reused_heap():
            with heap.reused_heap():
                assert heap._set_hugepage(False) is False  # off inside
            assert heap._HEAP.depth == 1 and heap._set_hugepage(False) is False
            x = np.ones(10_000_000)  # a block over glibc's mmap threshold: comes from the heap
            del x
        assert heap._HEAP.depth == 0 and heap._set_hugepage(True) is True  # back on after
    finally:
        heap._set_hugepage(before)


class _FakeLibc:
    """Records the allocator calls reused_heap makes."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    def mallopt(self, param: int, value: int) -> int:
        self.calls.append(("mallopt", param))
        return 1

    def malloc_trim(self, pad: int) -> int:
        self.calls.append(("malloc_trim", pad))
        return 1


@pytest.mark.parametrize("release", [True, False])
def test_reused_heap_hands_memory_back_only_when_asked(
    release: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    libc = _FakeLibc()
    monkeypatch.setattr(heap, "_glibc", lambda: libc)
    with heap.reused_heap(release=release):
        assert ("malloc_trim", 0) not in libc.calls
    assert (("malloc_trim", 0) in libc.calls) is release
    # the settings go back to glibc's defaults either way: four mallopt calls in all
    assert [c for c, _ in libc.calls].count("mallopt") == 4


_ARENAS = """
import sys, threading
from workbench.store import heap
if sys.argv[1] == "one":
    heap.one_arena()
import ctypes
import numpy as np  # starts threads of its own
def grab() -> None:
    for _ in range(3):
        x = np.ones(2_000_000)
        del x
threads = [threading.Thread(target=grab) for _ in range(2)]
for t in threads:
    t.start()
for t in threads:
    t.join()
ctypes.CDLL("libc.so.6").malloc_stats()  # one 'Arena N:' line per arena, on stderr
"""


@pytest.mark.skipif(heap._glibc() is None, reason="one_arena tunes glibc's allocator only")
@pytest.mark.parametrize("mode", ["one", "default"])
def test_one_arena_before_the_imports_keeps_threads_on_the_main_heap(mode: str) -> None:
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-c", _ARENAS, mode], cwd=root, capture_output=True, text=True, check=True
    )
    arenas = [ln for ln in done.stderr.splitlines() if ln.startswith("Arena ")]
    # Threads that allocate get arenas of their own unless one_arena came first.
    assert (len(arenas) == 1) == (mode == "one"), done.stderr
