"""One run from many trace files, and fleet triage, on every engine: serial, local, Dask."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from generators.fleet_synth import Member, fleet_members, write_fleet, write_member
from tests.ingest_helpers import store_hash
from workbench.errors import WorkbenchError
from workbench.store import db, layout
from workbench.store.fleet.engine import open_engine
from workbench.store.fleet.fleet_ingest import ingest_fleet
from workbench.store.schema import SCHEMA_VERSION
from workbench.triage.fleet import fleet_view

ROOT = Path(__file__).resolve().parents[1]
SLOW_DRIVER = "535.54.03"


@pytest.fixture(scope="module")
def fleet_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """4 hosts x 2 ranks; host02 is slowed and runs the older driver."""
    d = tmp_path_factory.mktemp("fleet")
    write_fleet(d, fleet_members(4, 2, slow_hosts=(2,)), requests=120, ops=3)
    return d


@pytest.fixture(scope="module")
def dask_client() -> Iterator[Any]:
    """A LocalCluster of 2 worker processes on the loopback address only."""
    distributed = pytest.importorskip("distributed")
    cluster = distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address="127.0.0.1:0",
        worker_dashboard_address="127.0.0.1:0",
    )
    client = distributed.Client(cluster, set_as_default=False)
    try:
        yield client
    finally:
        client.close()
        cluster.close()


def _tables(store: Path, run_id: str) -> dict[str, list[dict[str, Any]]]:
    out = {}
    for name in ("events", "requests", "compiles"):
        path = layout.partition_dir(store, name, run_id) / layout.PART_FILE
        out[name] = pq.read_table(path).to_pylist()
    row = layout.read_run_row(store, run_id)
    assert row is not None
    row.pop("imported_at")
    out["runs"] = [row]
    return out


def _ingest(store: Path, sources: list[str], **engine: Any) -> None:
    with open_engine(**engine) as eng:
        report = ingest_fleet(
            store, sources, run_id="canary", engine=eng, tags={"compiler_version": "2.5.0"}
        )
    assert report.status == "imported" and report.files == 8


def test_same_store_rows_and_triage_on_every_engine(
    fleet_dir: Path, tmp_path: Path, dask_client: Any
) -> None:
    stores = {k: tmp_path / k for k in ("serial", "local", "dask")}
    _ingest(stores["serial"], [str(fleet_dir)], workers=1)
    _ingest(stores["local"], [str(fleet_dir)], workers=2)
    _ingest(stores["dask"], [str(fleet_dir)], client=dask_client)
    base = _tables(stores["serial"], "canary")
    assert len(base["requests"]) == 8 * 120
    for kind in ("local", "dask"):
        assert _tables(stores[kind], "canary") == base, kind
    # A comparator cohort of two runs: the same fleet before the slowdown.
    before = tmp_path / "before"
    write_fleet(before, fleet_members(4, 2), requests=120, ops=3, seed=1)
    with open_engine(workers=1) as eng:
        for rid, hosts in (("base-a", ["host00", "host01"]), ("base-b", ["host02", "host03"])):
            ingest_fleet(stores["serial"], [str(before / h) for h in hosts], run_id=rid,
                         engine=eng)  # fmt: skip
    views = []
    for kind, engine in (("serial", {"workers": 1}), ("local", {"workers": 2}),
                         ("dask", {"client": dask_client})):  # fmt: skip
        with open_engine(**engine) as eng:
            assert eng.kind == kind
            view = fleet_view(stores["serial"], ["canary"], ["base-a", "base-b"], engine=eng)
            views.append(view.to_json())
    assert views[0] == views[1] == views[2]
    assert views[0]["verdict"] == "regression"
    assert views[0]["comparator"]["runs"] == ["base-a", "base-b"]
    assert views[0]["comparator"]["flagged_hosts"] == []


def test_progress_counts_files_and_bytes(fleet_dir: Path, tmp_path: Path) -> None:
    seen: list[Any] = []
    with open_engine(workers=2) as eng:
        ingest_fleet(tmp_path / "s", [str(fleet_dir)], run_id="p", engine=eng,
                     progress=seen.append)  # fmt: skip
    total = sum(p.stat().st_size for p in fleet_dir.rglob("*.json"))
    assert [p.files_done for p in seen] == list(range(1, 9))
    assert {p.files_total for p in seen} == {8} and {p.bytes_total for p in seen} == {total}
    assert seen[-1].bytes_done == total and seen[-1].events > seen[0].events > 0


def test_cli_ingest_and_fleet_on_a_dask_scheduler(
    fleet_dir: Path, tmp_path: Path, dask_client: Any
) -> None:
    address = dask_client.scheduler.address
    assert address.startswith("tcp://127.0.0.1:")
    store = tmp_path / "s"
    got = _cli(["ingest", "--fleet", str(fleet_dir), "--run-id", "d", "--store", str(store)],
               tmp_path, WORKBENCH_SCHEDULER=address)  # fmt: skip
    assert got.returncode == 0, got.stderr
    assert "on dask (2 workers)" in got.stdout
    out = _cli(["fleet", "--store", str(store), "--failing", "d", "--json", "--scheduler", address],
               tmp_path)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["failing"]["flagged_hosts"] == ["host02"]
    bad = _cli(["fleet", "--store", str(store), "--failing", "d", "--scheduler", "nowhere"],
               tmp_path)  # fmt: skip
    assert bad.returncode != 0 and "tcp://HOST:PORT" in bad.stderr


def test_fleet_columns_and_shape(fleet_dir: Path, tmp_path: Path) -> None:
    store = tmp_path / "s"
    _ingest(store, [str(fleet_dir / "*" / "rank*.pt.trace.json")], workers=1)
    t = _tables(store, "canary")
    run = t["runs"][0]
    assert (run["hosts"], run["ranks"], run["windows"]) == (4, 8, 1)
    assert run["schema_version"] == SCHEMA_VERSION and run["host"] is None  # 4 hosts: one host
    assert run["hardware"] == "NVIDIA H100 80GB HBM3"  # every file agrees
    assert run["driver_version"] is None  # files differ: the members say
    drivers = {m["host"]: m["driver_version"] for m in run["members"]}
    assert drivers["host02"] == SLOW_DRIVER and drivers["host00"] != SLOW_DRIVER
    ev, rq = t["events"], t["requests"]
    assert {e["host"] for e in ev} == {f"host{h:02d}" for h in range(4)}
    assert {(r["host"], r["rank"]) for r in rq} == {(f"host{r // 2:02d}", r) for r in range(8)}
    ids = [e["event_id"] for e in ev]
    assert len(set(ids)) == len(ids) and ids == sorted(ids)
    rids = [r["request_id"] for r in rq]
    assert len(set(rids)) == len(rids) and rids[0].startswith("host00.0.0/")
    # Parent links stay within their own file after the id shift.
    by_id = {e["event_id"]: e for e in ev}
    linked = [e for e in ev if e["parent_id"] is not None]
    assert linked and all(by_id[e["parent_id"]]["host"] == e["host"] for e in linked)


def test_windows_count_captures_of_one_rank(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "h").mkdir(parents=True)
    for w in range(2):
        write_member(src / "h" / f"h_1.{w}.pt.trace.json", Member("hx", 1, "1"), requests=30)
    store = tmp_path / "s"
    with open_engine(workers=1) as eng:
        ingest_fleet(store, [str(src)], run_id="win", engine=eng)
    rq = _tables(store, "win")["requests"]
    assert sorted({r["window"] for r in rq}) == [0, 1]
    assert _tables(store, "win")["runs"][0]["windows"] == 2


@pytest.fixture(scope="module")
def windows_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """2 hosts x 2 ranks x 3 capture windows, each rank's captures next to each other in path
    order: with 2 workers a capture is sent while the one before it is still decoding."""
    d = tmp_path_factory.mktemp("windows")
    for h in range(2):
        (d / f"host{h}").mkdir()
        for r in range(2):
            for w in range(3):
                path = d / f"host{h}" / f"host{h}_{r}.{w}.pt.trace.json"
                write_member(path, Member(f"host{h}", 2 * h + r, "550"), requests=25, ops=2,
                             seed=w)  # fmt: skip
    return d


def test_windows_and_labels_equal_serial_and_two_workers(
    windows_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from workbench.store.fleet import fleet_ingest

    restamped: list[tuple[int, int]] = []
    real = fleet_ingest.restamp

    def counting(table: Any, host: Any, rank: Any, old: int, new: int) -> Any:
        restamped.append((old, new))
        return real(table, host, rank, old, new)

    monkeypatch.setattr(fleet_ingest, "restamp", counting)
    stores = {n: tmp_path / str(n) for n in (1, 2)}
    for n, store in stores.items():
        with open_engine(workers=n) as eng:
            ingest_fleet(store, [str(windows_dir)], run_id="w", engine=eng)
    assert restamped and all(new > old for old, new in restamped)  # 2 workers: some restamped
    serial, local = _tables(stores[1], "w"), _tables(stores[2], "w")
    assert local == serial
    for name in ("events", "requests"):  # the same bytes, too: same rows, same row groups
        a, b = (layout.partition_dir(s, name, "w") / layout.PART_FILE for s in stores.values())
        assert a.read_bytes() == b.read_bytes(), name
    run = serial["runs"][0]
    assert (run["hosts"], run["ranks"], run["windows"]) == (2, 4, 3)
    assert [(m["host"], m["rank"], m["window"]) for m in run["members"]] == [
        (f"host{h}", 2 * h + r, w) for h in range(2) for r in range(2) for w in range(3)
    ]
    for name in ("events", "requests"):
        rows = [x for x in serial[name] if x["request_id"] is not None]
        assert {(x["host"], x["rank"], x["window"]) for x in rows} == {
            (f"host{h}", 2 * h + r, w) for h in range(2) for r in range(2) for w in range(3)
        }
        for x in rows:
            assert x["request_id"].startswith(f"{x['host']}.{x['rank']}.{x['window']}/"), x
    # Each file's requests in file order, files in path order, ids unique in the run.
    rids = [x["request_id"] for x in serial["requests"]]
    assert len(set(rids)) == len(rids) == 12 * 25
    keys = [(x["host"], x["rank"], x["window"]) for x in serial["requests"]]
    assert keys == sorted(keys)


def test_reimport_unchanged_and_other_content_refused(fleet_dir: Path, tmp_path: Path) -> None:
    store = tmp_path / "s"
    _ingest(store, [str(fleet_dir)], workers=1)
    before = store_hash(store)
    with open_engine(workers=1) as eng:
        again = ingest_fleet(
            store, [str(fleet_dir)], run_id="canary", engine=eng,
            tags={"compiler_version": "2.5.0"},
        )  # fmt: skip
        assert again.status == "unchanged"
        with pytest.raises(WorkbenchError, match="different content or options"):
            ingest_fleet(store, [str(fleet_dir / "host00")], run_id="canary", engine=eng)
    assert store_hash(store) == before


def _cli(args: list[str], home: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "workbench", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "WORKBENCH_HOME": str(home), **env},
        timeout=120,
    )


def test_cli_slowed_host_first_with_its_shared_tag(fleet_dir: Path, tmp_path: Path) -> None:
    store = tmp_path / "s"
    got = _cli(
        ["ingest", "--fleet", str(fleet_dir), "--run-id", "canary", "--store", str(store),
         "--tag", "compiler_version=2.5.0", "--host-tag", "host02:rack=r7", "--workers", "2"],
        tmp_path,
    )  # fmt: skip
    assert got.returncode == 0, got.stderr
    assert "4 hosts, 8 ranks, 1 windows" in got.stdout
    out = _cli(
        ["fleet", "--store", str(store), "--failing-tag", "compiler_version=2.5.0", "--json"],
        tmp_path,
    )
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)["failing"]
    assert doc["flagged_hosts"] == ["host02"]
    assert doc["tests"][0]["host"] == "host02" and doc["tests"][0]["n"] == 240
    assert doc["hosts"][0]["key"] == "host02"  # highest p99 first
    shared = {(s["key"], s["value"]): s["others"] for s in doc["shared_tags"]}
    assert shared[("driver_version", SLOW_DRIVER)] == 0
    assert shared[("rack", "r7")] == 0


@pytest.mark.parametrize(("bad_name", "workers"), [("rank999", "1"), ("rank002b", "2")])
def test_cli_bad_member_leaves_store_unchanged(
    fleet_dir: Path, tmp_path: Path, bad_name: str, workers: str
) -> None:
    """A damaged file, last or in the middle of the fleet (files after it already decoding on
    the other worker), fails the import with one line naming it and leaves the store as it was."""
    src = tmp_path / "src"
    src.mkdir()
    for i, p in enumerate(sorted(fleet_dir.rglob("*.json"))[:6]):
        (src / f"rank{i:03d}.pt.trace.json").write_bytes(p.read_bytes())
    bad = src / f"{bad_name}.pt.trace.json"
    bad.write_text('{"traceEvents": [{"ph": "X", "ts": 1', encoding="utf-8")
    store = tmp_path / "s"
    _cli(["ingest", str(sorted(fleet_dir.rglob("*.json"))[0]), "--store", str(store)], tmp_path)
    before = store_hash(store)
    got = _cli(["ingest", "--fleet", str(src), "--run-id", "x", "--store", str(store),
                "--workers", workers], tmp_path)  # fmt: skip
    assert got.returncode != 0
    lines = got.stderr.strip().splitlines()
    assert len(lines) == 1 and bad.name in lines[0], got.stderr
    assert store_hash(store) == before


def test_cli_fleet_needs_a_run_id_and_a_known_cohort(fleet_dir: Path, tmp_path: Path) -> None:
    got = _cli(["ingest", "--fleet", str(fleet_dir), "--store", str(tmp_path / "s")], tmp_path)
    assert got.returncode != 0 and "--run-id" in got.stderr
    got = _cli(
        ["fleet", "--store", str(ROOT / "sample_traces"), "--failing-tag", "rack=nowhere"],
        tmp_path,
    )
    assert got.returncode != 0 and "matches no run" in got.stderr


def test_v1_store_reads_unchanged(tmp_path: Path) -> None:
    v1 = ROOT / "tests" / "fixtures" / "store_v1"
    store = tmp_path / "v1"
    shutil.copytree(v1, store)
    before = store_hash(store)
    row = layout.read_run_row(store, "failing")
    assert row is not None and row["schema_version"] == 1 and row["members"] is None
    assert "host" not in pq.read_schema(layout.partition_dir(store, "requests", "failing")
                                        / layout.PART_FILE).names  # fmt: skip
    view = fleet_view(store, ["failing"], ["comparator"])
    assert [h.key for h in view.failing.hosts] == [row["host"]]  # one host per v1 run
    assert view.failing.n > 0 and view.verdict == "regression"
    con = db.connect(store)
    try:
        n = con.sql("SELECT count(*) FROM requests WHERE run_id = 'failing'").fetchall()
    finally:
        con.close()
    assert n[0][0] == view.failing.n
    assert store_hash(store) == before


def test_workers_send_parquet_in_the_file_schema(fleet_dir: Path) -> None:
    """What crosses from a worker is a whole zstd Parquet file already in the store's schema,
    ids shifted by the file's index, stamped with the window the task's counts give."""
    import pyarrow.compute as pc

    from workbench.store import schema
    from workbench.store.attribution.rules import DEFAULT_RULES
    from workbench.store.fleet.fleet_member import MemberTask, decode, decode_member

    src = str(sorted(fleet_dir.rglob("*.json"))[0])
    first = decode_member(MemberTask(3, src, None, str(DEFAULT_RULES), None))
    assert first.error is None and first.window == 0
    events = decode(first.events)
    assert events.schema == schema.EVENTS_FILE and events.num_rows == first.n_events > 0
    assert len(first.events) < events.nbytes / 4  # compressed, not the raw buffers
    assert pc.all(pc.equal(pc.shift_right(events.column("event_id"), 32), 3)).as_py()
    assert set(events.column("host").to_pylist()) == {first.host} and first.host is not None
    label = f"{first.host}.{first.rank}."
    # Two captures of this rank merged before: this one is its window 2.
    seen = (((first.host, first.rank), 2), (("elsewhere", 0), 5))
    third = decode_member(MemberTask(3, src, None, str(DEFAULT_RULES), None, seen))
    assert third.window == 2
    for got, want in ((third.requests, first.requests), (third.events, first.events)):
        a, b = decode(got), decode(want)
        assert set(a.column("window").to_pylist()) == {2} and b.column("window")[0].as_py() == 0
        ids = [x for x in a.column("request_id").to_pylist() if x is not None]
        assert ids and all(x.startswith(label + "2/") for x in ids)
        assert [x and x.replace(label + "2/", label + "0/", 1) for x in
                a.column("request_id").to_pylist()] == b.column("request_id").to_pylist()  # fmt: skip
    assert first.pid > 0 and first.cpu_s > 0
