"""The incident record on disk: versioned atomic saves, conflicts, audit log, bad records, SIGKILL."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import pytest

from workbench.errors import WorkbenchError
from workbench.incident.incident import (
    create_incident,
    incident_path,
    list_incidents,
    load_incident,
    modify,
    save_incident,
)

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def store(tmp_path: Path) -> Path:
    s = tmp_path / "store"
    s.mkdir()
    return s


def test_create_load_list(store: Path) -> None:
    a = create_incident(store, "p99 up after compiler bump", "sev2", "alice")
    b = create_incident(store, "second", "sev3", "bob", incident_id="INC-custom")
    assert a.id.startswith("INC-") and a.id.endswith("-01") and a.version == 1
    assert load_incident(store, a.id) == a
    assert {s.id for s in list_incidents(store)} == {a.id, b.id}
    assert create_incident(store, "third", "sev4", "bob").id.endswith("-02")
    doc = json.loads(incident_path(store, a.id).read_text())
    assert doc["schema_version"] == 1 and doc["version"] == 1 and doc["status"] == "declared"
    assert doc["timeline"][0]["event"] == "declared" and doc["timeline"][0]["actor"] == "alice"


def test_each_save_bumps_version_and_audits(store: Path) -> None:
    inc = create_incident(store, "t", "sev2", "alice")
    inc2 = modify(store, inc.id, "bob", lambda i: msgspec.structs.replace(i, title="new title"))
    assert inc2.version == 2 and load_incident(store, inc.id).title == "new title"
    last = inc2.audit[-1]
    assert (last.actor, last.field, last.old, last.new) == ("bob", "title", '"t"', '"new title"')
    assert last.at and all(e.field not in ("version", "updated_at") for e in inc2.audit)


def test_second_writer_gets_a_conflict(store: Path) -> None:
    inc = create_incident(store, "t", "sev2", "alice")
    first = load_incident(store, inc.id)
    second = load_incident(store, inc.id)
    save_incident(store, msgspec.structs.replace(first, title="first"), first, "alice")
    with pytest.raises(WorkbenchError, match="conflict: version 2 was saved by someone else"):
        save_incident(store, msgspec.structs.replace(second, title="second"), second, "bob")
    assert load_incident(store, inc.id).title == "first"
    # The app passes the version it displayed: a stale screen is refused the same way.
    with pytest.raises(WorkbenchError, match="conflict"):
        modify(store, inc.id, "bob", lambda i: i, expected_version=1)


def test_same_id_cannot_be_created_twice(store: Path) -> None:
    create_incident(store, "t", "sev2", "alice", incident_id="INC-x")
    with pytest.raises(WorkbenchError, match="exists"):
        create_incident(store, "t", "sev2", "bob", incident_id="INC-x")


@pytest.mark.parametrize("bad", ["../etc", "a/b", "", "1abc", "x" * 80, "a..b"])
def test_unsafe_ids_are_refused(store: Path, bad: str) -> None:
    with pytest.raises(WorkbenchError, match="invalid incident id"):
        create_incident(store, "t", "sev2", "alice", incident_id=bad)
    assert not (store / "incidents").exists() or not list((store / "incidents").glob("*.json"))


def test_bad_input_is_a_one_line_error(store: Path) -> None:
    with pytest.raises(WorkbenchError, match="no such incident"):
        load_incident(store, "INC-missing")
    with pytest.raises(WorkbenchError, match="unknown severity"):
        create_incident(store, "t", "critical", "alice")
    inc = create_incident(store, "t", "sev2", "alice")
    path = incident_path(store, inc.id)
    good = path.read_bytes()
    path.write_bytes(good[: len(good) // 2])
    with pytest.raises(WorkbenchError, match="incident record malformed") as err:
        load_incident(store, inc.id)
    assert str(path) in err.value.one_line() and "\n" not in err.value.one_line()
    path.write_bytes(good.replace(b'"severity"', b'"sevrity"'))
    with pytest.raises(WorkbenchError, match="wrong schema"):
        load_incident(store, inc.id)
    path.write_bytes(good.replace(b'"schema_version": 1', b'"schema_version": 9'))
    with pytest.raises(WorkbenchError, match="schema_version 9 is not supported"):
        load_incident(store, inc.id)


def test_full_disk_leaves_record_as_it_was(store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    inc = create_incident(store, "t", "sev2", "alice")
    before = incident_path(store, inc.id).read_bytes()

    def no_space(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", no_space)
    with pytest.raises(WorkbenchError, match="cannot save incident: no space left on device"):
        modify(store, inc.id, "bob", lambda i: msgspec.structs.replace(i, title="x"))
    monkeypatch.undo()
    assert incident_path(store, inc.id).read_bytes() == before
    assert sorted(p.name for p in (store / "incidents").iterdir() if p.suffix != ".lock") == [
        f"{inc.id}.json"
    ]


_WRITER = """
import os, sys, time, msgspec
from pathlib import Path
from workbench.incident import incident
store, iid, mode = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
if mode == "before-rename":
    real_replace = os.replace
    def stalled_replace(src, dst):
        print("renaming", flush=True)  # the temporary file is complete and fsynced
        time.sleep(60)
        real_replace(src, dst)
    incident.os.replace = stalled_replace
elif mode == "mid-write":
    real_fsync = os.fsync
    def stalled_fsync(fd):
        os.ftruncate(fd, os.fstat(fd).st_size // 2)  # as if the kernel had written half of it
        print("writing", flush=True)
        time.sleep(60)
        real_fsync(fd)
    incident.os.fsync = stalled_fsync
print("ready", flush=True)
# A large record makes each save long, so random kills land inside a save most of the time.
blob = {"blob": "x" * 3_000_000}
while True:
    incident.modify(store, iid, "writer", lambda i: msgspec.structs.replace(
        i, title=f"v{i.version + 1}", triage=blob))
"""


def _kill_writer(store: Path, iid: str, mode: str, delay: float, saved_past: int = 0) -> None:
    """Start a writer and kill it: `delay` s after it is ready ("random"), or once it stalls
    inside a save; with saved_past, only once a save past that version is on disk."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(store), iid, mode],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    if mode == "random":
        # A loaded machine can take longer than any fixed delay to finish a 3 MB save.
        deadline = time.monotonic() + 120
        while saved_past and time.monotonic() < deadline:
            if json.loads(incident_path(store, iid).read_text())["version"] > saved_past:
                break
            time.sleep(0.05)
        time.sleep(delay)
    else:
        assert proc.stdout.readline().strip() in ("renaming", "writing")
    proc.send_signal(signal.SIGKILL)
    proc.wait()


@pytest.mark.parametrize("mode", ["before-rename", "mid-write"])
def test_sigkill_inside_save_keeps_the_old_record(store: Path, mode: str) -> None:
    inc = create_incident(store, "t", "sev2", "alice")
    before = incident_path(store, inc.id).read_bytes()
    _kill_writer(store, inc.id, mode, 0.0)
    assert incident_path(store, inc.id).read_bytes() == before
    assert load_incident(store, inc.id) == inc
    leftovers = [p.name for p in (store / "incidents").glob(".*.tmp")]
    assert len(leftovers) == 1  # the killed save's temporary file, never read as a record
    assert [s.id for s in list_incidents(store)] == [inc.id]
    after = modify(store, inc.id, "alice", lambda i: msgspec.structs.replace(i, title="after"))
    assert after.version == 2 and load_incident(store, inc.id).title == "after"
    assert not list((store / "incidents").glob(".*.tmp"))  # the next save cleans up


def test_sigkill_at_random_moments_leaves_old_or_new_record(store: Path) -> None:
    inc = create_incident(store, "t", "sev2", "alice")
    path = incident_path(store, inc.id)
    seen_versions = set()
    for delay, saved_past in ((0.4, 0), (0.6, 0), (0.8, 0), (0.3, inc.version)):
        _kill_writer(store, inc.id, "random", delay, saved_past)
        rec = load_incident(store, inc.id)  # parses, whatever moment the kill hit
        assert rec.title in ("t", f"v{rec.version}")
        assert json.loads(path.read_text())["version"] == rec.version
        seen_versions.add(rec.version)
    assert max(seen_versions) > 1  # the writer did save between kills
    after = modify(store, inc.id, "alice", lambda i: msgspec.structs.replace(i, title="after"))
    assert after.version == max(seen_versions) + 1
