"""Stores on object storage, against a moto S3 server on 127.0.0.1 started here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from generators.fleet_synth import fleet_members, write_fleet
from moto_s3 import moto_s3
from workbench.errors import WorkbenchError
from workbench.store import objstore

ROOT = Path(__file__).resolve().parents[1]
BUCKET = "wb-test"


@pytest.fixture(scope="module")
def s3() -> Iterator[dict[str, str]]:
    """A moto S3 server bound to the loopback address; yields the environment that reaches it."""
    with moto_s3(BUCKET) as env:
        yield env


@pytest.fixture(scope="module")
def fleet_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("fleet")
    write_fleet(d, fleet_members(4, 2, slow_hosts=(1,)), requests=100, ops=3)
    return d


def _cli(args: list[str], home: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "workbench", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, **env, "WORKBENCH_HOME": str(home)},
        timeout=120,
    )


def _keys(prefix: str) -> list[str]:
    fs = objstore.filesystem()
    root = f"{BUCKET}/{prefix}"
    return sorted(str(p)[len(root) + 1 :] for p in fs.find(root))


def test_fleet_on_s3_same_layout_and_same_triage_as_local(
    s3: dict[str, str], fleet_dir: Path, tmp_path: Path
) -> None:
    url = f"s3://{BUCKET}/canary"
    args = ["--fleet", str(fleet_dir), "--run-id", "c1", "--tag", "compiler_version=2.5.0"]
    got = _cli(["ingest", *args, "--store", url], tmp_path / "home-a", s3)
    assert got.returncode == 0, got.stderr
    local = tmp_path / "local"
    assert _cli(["ingest", *args, "--store", str(local)], tmp_path / "home-l", s3).returncode == 0
    assert _keys("canary") == [
        "compiles/run_id=c1/part-0.parquet",
        "events/run_id=c1/part-0.parquet",
        "requests/run_id=c1/part-0.parquet",
        "runs/c1.parquet",
        "tokens/run_id=c1/part-0.parquet",
    ]
    # A fresh machine (another home, so another mirror) triages straight from the bucket.
    fleet = ["fleet", "--failing-tag", "compiler_version=2.5.0", "--json"]
    remote = _cli([*fleet, "--store", url], tmp_path / "home-b", s3)
    assert remote.returncode == 0, remote.stderr
    here = _cli([*fleet, "--store", str(local)], tmp_path / "home-l", s3)
    assert json.loads(remote.stdout) == json.loads(here.stdout)
    assert json.loads(remote.stdout)["failing"]["flagged_hosts"] == ["host01"]
    # fleet needs requests only: the mirror did not fetch the events.
    mirror_b = tmp_path / "home-b" / "s3" / BUCKET / "canary"
    assert (mirror_b / "requests" / "run_id=c1" / "part-0.parquet").is_file()
    assert not (mirror_b / "events").exists()
    again = _cli(["ingest", *args, "--store", url], tmp_path / "home-b", s3)
    assert again.returncode == 0 and "unchanged" in again.stdout


def test_interrupted_commit_leaves_no_visible_run(
    s3: dict[str, str], fleet_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"s3://{BUCKET}/cut"
    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path / "home"))
    mirror = objstore.open_store(url, ())
    from workbench.store.fleet.engine import open_engine
    from workbench.store.fleet.fleet_ingest import ingest_fleet

    real = objstore.filesystem

    class CutBeforeRunsRow:
        """The uploads go through; the connection drops on the runs row."""

        def __init__(self) -> None:
            self.fs = real()

        def __getattr__(self, name: str) -> Any:
            return getattr(self.fs, name)

        def pipe_file(self, path: str, *a: Any, **k: Any) -> Any:
            if "/runs/" in path:
                raise ConnectionResetError("connection reset by peer")
            return self.fs.pipe_file(path, *a, **k)

    with open_engine(workers=1) as eng:
        ingest_fleet(mirror, [str(fleet_dir)], run_id="c2", engine=eng)
    monkeypatch.setattr(objstore, "filesystem", CutBeforeRunsRow)
    with pytest.raises(WorkbenchError, match="cannot write to store s3://"):
        objstore.publish_run_or_undo(mirror, "c2", "run c2")
    monkeypatch.setattr(objstore, "filesystem", real)
    # The partitions landed, the runs row did not: no reader sees the run, here or elsewhere.
    assert "events/run_id=c2/part-0.parquet" in _keys("cut")
    assert objstore.run_ids(real(), objstore.parse_url(url)) == []
    assert not (mirror / "runs" / "c2.parquet").exists()
    runs = _cli(["runs", "--store", url], tmp_path / "home-2", s3)
    assert runs.returncode == 0 and "c2" not in runs.stdout
    # A retry commits over the debris.
    got = _cli(
        ["ingest", "--fleet", str(fleet_dir), "--run-id", "c2", "--store", url],
        tmp_path / "home-3",
        s3,
    )
    assert got.returncode == 0, got.stderr
    assert objstore.run_ids(real(), objstore.parse_url(url)) == ["c2"]


def test_incident_record_conflict_is_refused(
    s3: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from workbench.incident import incident

    url = f"s3://{BUCKET}/inc"
    objstore.filesystem().mkdir(f"{BUCKET}/inc/runs", create_parents=True)
    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path / "alice"))
    alice = objstore.open_store(url)
    incident.create_incident(alice, "p99 on canary", "sev2", "alice", incident_id="INC-1")
    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path / "bob"))
    bob = objstore.open_store(url)
    assert bob != alice
    base_b = incident.load_incident(bob, "INC-1")
    # Alice saves first; Bob's save, made from the record as it was, must not overwrite hers.
    incident.modify(alice, "INC-1", "alice", lambda i: _retitle(i, "alice's title"))
    with pytest.raises(WorkbenchError, match="conflict"):
        incident.save_incident(bob, _retitle(base_b, "bob's title"), base_b, "bob")
    assert incident.load_incident(bob, "INC-1").title == "p99 on canary"  # bob's copy unchanged
    data = objstore.filesystem().cat_file(f"{BUCKET}/inc/incidents/INC-1.json")
    assert json.loads(data)["title"] == "alice's title"
    # Reloaded, Bob's change applies on top of Alice's.
    bob = objstore.open_store(url)
    saved = incident.modify(bob, "INC-1", "bob", lambda i: _retitle(i, "bob's title"))
    assert saved.version == 3
    # A second declaration of the same id is refused by the bucket too.
    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path / "carol"))
    carol = objstore.open_store(url)
    (carol / "incidents" / "INC-1.json").unlink()
    with pytest.raises(WorkbenchError, match="conflict"):
        incident.create_incident(carol, "again", "sev2", "carol", incident_id="INC-1")


def _retitle(inc: Any, title: str) -> Any:
    import msgspec

    return msgspec.structs.replace(inc, title=title)


def test_server_without_conditional_writes_is_refused(
    s3: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = objstore.filesystem

    class IgnoresConditions:
        def __init__(self) -> None:
            self.fs = real()

        def __getattr__(self, name: str) -> Any:
            return getattr(self.fs, name)

        def pipe_file(self, path: str, data: bytes, mode: str = "overwrite", **k: Any) -> Any:
            k.pop("IfMatch", None)
            return self.fs.pipe_file(path, data)

    monkeypatch.setattr(objstore, "filesystem", IgnoresConditions)
    objstore.conditions_checked.cache_clear()
    try:
        with pytest.raises(WorkbenchError, match="ignores conditional writes"):
            objstore.conditions_checked(f"s3://{BUCKET}/plain")
    finally:
        objstore.conditions_checked.cache_clear()


def test_bad_urls_are_one_line_errors() -> None:
    for url in ("s3://", "s3://A_B/x", "s3://bucket/../x", "s3://bucket/a b"):
        with pytest.raises(WorkbenchError, match="expected s3://BUCKET"):
            objstore.parse_url(url)
    assert objstore.parse_url("s3://my-bucket/a/b/").root == "my-bucket/a/b"


def test_app_ingest_publishes_to_the_bucket(s3: dict[str, str], tmp_path: Path) -> None:
    """The app's Ingest screen on a store opened from a bucket sends the run up, as the CLI does;
    the bucket and the local mirror agree afterwards."""
    import asyncio
    import threading

    from textual.app import App

    from workbench.tui.screens.ingest_screen import IngestScreen

    trace = ROOT / "tests" / "fixtures" / "serving" / "handmade_serving.json"
    os.environ["WORKBENCH_HOME"] = str(tmp_path / "home")
    try:
        mirror = objstore.open_store(f"s3://{BUCKET}/app-ingest")

        async def go() -> object:
            app = App[None]()
            async with app.run_test(size=(80, 24)) as pilot:
                done: list[object] = []
                app.push_screen(IngestScreen(mirror, tmp_path), done.append)
                await pilot.pause()
                app.screen.run_import(trace, "from-app", None, None, threading.Event())  # type: ignore[attr-defined]
                for _ in range(600):  # the screen closes with the run id once imported
                    if done:
                        break
                    await pilot.pause(0.05)
                return done[0] if done else None

        dismissed_with = asyncio.run(go())
    finally:
        os.environ.pop("WORKBENCH_HOME", None)
    assert dismissed_with == "from-app"
    keys = _keys("app-ingest")
    assert "runs/from-app.parquet" in keys
    assert any(k.startswith("events/run_id=from-app/") for k in keys)
    assert (mirror / "runs" / "from-app.parquet").is_file()
