"""Named baselines (`workbench baseline tag|list|show|rm`, workbench/store/baselines.py): kept in
the store, hostile names refused in one line with the store unchanged, a moved name remembers
what it pointed to, and two processes tagging at once both land, on disk and on a moto S3
server on 127.0.0.1."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ingest_helpers import one_line_error, run_workbench, store_hash
from moto_s3 import moto_s3
from triage_stores import RunSpec, write_run
from workbench.errors import WorkbenchError
from workbench.store import baselines, objstore

ROOT = Path(__file__).resolve().parents[1]
RUNS = ("base-a", "base-b", "cand")
BUCKET = "wb-baselines"


def _cli(
    args: list[str], env: dict[str, str] | None = None, home: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return run_workbench(args, env={**(env or {}), "USER": "tester"}, home=home, timeout=120)


def _one_line_error(proc: subprocess.CompletedProcess[str]) -> str:
    return one_line_error(proc)


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    store = tmp_path_factory.mktemp("baselines") / "store"
    for i, rid in enumerate(RUNS):
        write_run(store, RunSpec(rid, n_requests=20, seed=i, start_offset_s=60.0 * i))
    return store


@pytest.fixture
def store(template: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "store"
    shutil.copytree(template, dest)
    return dest


def test_tag_list_show_rm_round_trip(store: Path) -> None:
    got = _cli(["baseline", "tag", "main", "base-a", "--store", str(store)])
    assert got.returncode == 0, got.stderr
    assert got.stdout.strip() == "tagged baseline main -> run base-a (by tester)"
    assert _cli(["baseline", "tag", "nightly", "cand", "--store", str(store)]).returncode == 0
    listed = _cli(["baseline", "list", "--store", str(store), "--json"])
    doc = json.loads(listed.stdout)
    assert [(b["name"], b["run_id"], b["tagged_by"]) for b in doc] == [
        ("main", "base-a", "tester"),
        ("nightly", "cand", "tester"),
    ]
    text = _cli(["baseline", "list", "--store", str(store)]).stdout.splitlines()
    assert text[0].split()[:2] == ["name", "run"] and text[1].split()[:2] == ["main", "base-a"]
    shown = json.loads(_cli(["baseline", "show", "main", "--store", str(store), "--json"]).stdout)
    assert shown["run_id"] == "base-a" and shown["previous"] == []
    gone = _cli(["baseline", "rm", "nightly", "--store", str(store)])
    assert gone.returncode == 0 and "it pointed to run cand" in gone.stdout
    assert list(baselines.load(store).baselines) == ["main"]
    # The document on disk is what the store layer reads: version and log count every change.
    on_disk = json.loads((store / "baselines.json").read_text())
    assert on_disk["version"] == 3
    assert [e["action"] for e in on_disk["log"]] == ["tag", "tag", "rm"]
    assert on_disk["log"][-1]["previous_run_id"] == "cand"


def test_retag_needs_force_and_keeps_what_it_pointed_to(store: Path) -> None:
    assert _cli(["baseline", "tag", "main", "base-a", "--store", str(store)]).returncode == 0
    before = store_hash(store)
    refused = _one_line_error(_cli(["baseline", "tag", "main", "base-b", "--store", str(store)]))
    assert "already points to run 'base-a'" in refused and "--force" in refused
    assert store_hash(store) == before
    # The same run again is no change: nothing is written.
    same = _cli(["baseline", "tag", "main", "base-a", "--store", str(store), "--force"])
    assert same.returncode == 0 and "nothing written" in same.stdout
    assert store_hash(store) == before
    moved = _cli(
        ["baseline", "tag", "main", "base-b", "--store", str(store), "--force", "--actor", "ana"]
    )
    assert moved.returncode == 0, moved.stderr
    assert "run base-a -> base-b (by ana" in moved.stdout
    b = baselines.get(store, "main")
    assert (b.run_id, b.tagged_by) == ("base-b", "ana")
    assert [(p.run_id, p.tagged_by) for p in b.previous] == [("base-a", "tester")]
    shown = _cli(["baseline", "show", "main", "--store", str(store)]).stdout
    assert "before: run base-a, tagged by tester" in shown


HOSTILE_NAMES = [
    "nightly*",
    "a?b",
    "[ab]",
    "a/b",
    "../main",
    "..",
    "a..b",
    "line\nbreak",
    "**bold**",
    "`code`",
    "[link](http://x)",
    "a b",
    "\x1b[31mred",
    "1starts-with-digit",
    "x" * 65,
    "y" * 10_000,
    "ünïcode",
]


@pytest.mark.parametrize("name", HOSTILE_NAMES, ids=range(len(HOSTILE_NAMES)))
def test_hostile_names_are_refused_in_one_line(store: Path, name: str) -> None:
    assert _cli(["baseline", "tag", "main", "base-a", "--store", str(store)]).returncode == 0
    before = store_hash(store)
    line = _one_line_error(_cli(["baseline", "tag", name, "base-a", "--store", str(store)]))
    assert "invalid baseline" in line and "\x1b" not in line and len(line) < 400, line
    with pytest.raises(WorkbenchError, match="invalid baseline"):
        baselines.check_baseline_name(name)
    assert store_hash(store) == before


@pytest.mark.parametrize("name", ["../main", "line\nbreak", "y" * 10_000])
def test_every_entry_point_refuses_a_hostile_name(store: Path, name: str) -> None:
    assert _cli(["baseline", "tag", "main", "base-a", "--store", str(store)]).returncode == 0
    before = store_hash(store)
    for argv in (
        ["baseline", "show", name, "--store", str(store)],
        ["baseline", "rm", name, "--store", str(store)],
        ["gate", "--store", str(store), "--candidate", "cand", "--against", f"baseline:{name}"],
        ["triage", "--store", str(store), "--failing", "cand", "--against", f"baseline:{name}"],
    ):
        line = _one_line_error(_cli(argv))
        assert "invalid baseline" in line and len(line) < 400, line
    assert store_hash(store) == before


def test_unknown_runs_and_names_are_one_line_errors(store: Path) -> None:
    before = store_hash(store)
    line = _one_line_error(_cli(["baseline", "tag", "main", "no-such-run", "--store", str(store)]))
    assert "'no-such-run': run is not in the store" in line
    line = _one_line_error(_cli(["baseline", "tag", "main", "../etc", "--store", str(store)]))
    assert "invalid run id" in line
    line = _one_line_error(_cli(["baseline", "show", "main", "--store", str(store)]))
    assert "no such baseline" in line and "none yet" in line
    _one_line_error(_cli(["baseline", "rm", "main", "--store", str(store)]))
    line = _one_line_error(_cli(["baseline", "list", "--store", str(store / "nope")]))
    assert "store directory does not exist" in line
    assert not (store / "nope").exists()
    assert store_hash(store) == before


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"{not json", "baselines file unreadable"),
        (b'{"baselines": {"main": {"name": "main"}}}', "baselines file unreadable"),
        (b'{"baselines": {"main": {"name": "main", "run_id": 7, "tagged_by": "x", '
         b'"tagged_at": "t"}}}', "baselines file unreadable"),
        (b'{"baselines": {"../x": {"name": "../x", "run_id": "base-a", "tagged_by": "x", '
         b'"tagged_at": "t"}}}', "bad baseline name"),
        (b'{"baselines": {"m": {"name": "m", "run_id": "../../x", "tagged_by": "x", '
         b'"tagged_at": "t"}}}', "bad run id"),
        (b'{"schema_version": 9}', "schema_version 9"),
        (b'{"surprise": 1}', "baselines file unreadable"),
        (b"[1, 2]", "baselines file unreadable"),
    ],
)  # fmt: skip
def test_a_damaged_file_is_refused_and_left_as_it_was(
    store: Path, content: bytes, problem: str
) -> None:
    (store / "baselines.json").write_bytes(content)
    before = store_hash(store)
    for argv in (
        ["baseline", "list", "--store", str(store)],
        ["baseline", "tag", "other", "base-b", "--store", str(store)],
        ["baseline", "rm", "main", "--store", str(store)],
    ):
        line = _one_line_error(_cli(argv))
        assert "baselines.json" in line and problem in line, line
    assert store_hash(store) == before


def test_a_symlink_or_fifo_in_its_place_is_refused(store: Path, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere.json"
    outside.write_text("{}")
    (store / "baselines.json").symlink_to(outside)
    line = _one_line_error(_cli(["baseline", "tag", "main", "base-a", "--store", str(store)]))
    assert "symbolic link" in line
    assert outside.read_text() == "{}"
    (store / "baselines.json").unlink()
    os.mkfifo(store / "baselines.json")
    started = time.monotonic()
    line = _one_line_error(_cli(["baseline", "list", "--store", str(store)]))
    assert "not a regular file" in line and time.monotonic() - started < 60


def test_triage_against_a_baseline_names_it(store: Path) -> None:
    assert _cli(["baseline", "tag", "main", "base-a", "--store", str(store)]).returncode == 0
    got = _cli(["triage", "--store", str(store), "--failing", "cand", "--against", "baseline:main",
                "--json"])  # fmt: skip
    assert got.returncode == 0, got.stderr
    doc = json.loads(got.stdout)
    assert doc["comparator"] == "base-a"
    assert doc["comparator_reasons"][0].startswith("baseline main: run base-a, tagged by tester")
    both = _cli(["triage", "--store", str(store), "--failing", "cand", "--against",
                 "baseline:main", "--comparator", "base-b"])  # fmt: skip
    assert both.returncode == 2 and "not allowed with argument" in both.stderr
    line = _one_line_error(
        _cli(["triage", "--store", str(store), "--failing", "cand", "--against", "main"])
    )
    assert "expected baseline:NAME" in line


# Each process tags its own names as fast as it can, from the same moment (a start file both
# wait for), and reports the span it was tagging in and how many writes it needed.
RACE = r"""
import json, sys, time
from pathlib import Path
from workbench.store import baselines, objstore
where, who, n, start, run_id = sys.argv[1:]
store = objstore.open_store(where, ()) if objstore.is_remote(where) else Path(where)
Path(start + "." + who).touch()
while not Path(start).exists():
    time.sleep(0.001)
t0, attempts = time.time(), 0
for i in range(int(n)):
    attempts += baselines.tag(store, f"{who}-{i}", run_id, who).attempts
print(json.dumps({"start": t0, "end": time.time(), "attempts": attempts}))
"""


def _race(where: str, tmp_path: Path, n: int, env: dict[str, str]) -> list[dict[str, Any]]:
    start = tmp_path / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RACE, where, who, str(n), str(start), "base-a"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env={**os.environ, **env, "WORKBENCH_HOME": str(tmp_path / f"home-{who}")},
        )
        for who in ("p", "q")
    ]
    deadline = time.monotonic() + 120
    while not all((tmp_path / f"go.{who}").exists() for who in ("p", "q")):
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs)
        time.sleep(0.01)
    start.touch()
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=300)
        assert p.returncode == 0, stderr
        out.append(json.loads(stdout))
    # The two spans overlap: the tags were made at the same time, not one process after the other.
    assert max(o["start"] for o in out) < min(o["end"] for o in out)
    return out


def test_two_processes_tagging_at_once_both_land_on_disk(store: Path, tmp_path: Path) -> None:
    n = 40
    _race(str(store), tmp_path, n, {})
    doc = baselines.load(store)
    assert sorted(doc.baselines) == sorted(f"{w}-{i}" for w in "pq" for i in range(n))
    assert doc.version == 2 * n and len(doc.log) == 2 * n


def test_same_name_at_once_one_wins_the_other_is_told(store: Path) -> None:
    def both(name: str, *extra: str) -> list[subprocess.CompletedProcess[str]]:
        argv = [sys.executable, "-m", "workbench", "baseline", "tag", name]
        procs = [
            subprocess.Popen(
                [*argv, rid, "--store", str(store), "--actor", rid, *extra],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                cwd=ROOT,
            )
            for rid in ("base-a", "base-b")
        ]
        return [subprocess.CompletedProcess(p.args, p.wait(120), *p.communicate()) for p in procs]

    done = both("shared")
    assert sorted(p.returncode for p in done) == [0, 2]
    loser = next(p for p in done if p.returncode == 2)
    assert "already points to run" in loser.stderr
    winner = next(p for p in done if p.returncode == 0)
    assert baselines.get(store, "shared").run_id == winner.args[6]
    # With --force both land, in some order: the last holds the name, the other is its past.
    assert [p.returncode for p in both("forced", "--force")] == [0, 0]
    final = baselines.get(store, "forced")
    other = "base-b" if final.run_id == "base-a" else "base-a"
    assert [(p.run_id, p.tagged_by) for p in final.previous] == [(other, other)]
    assert [e.action for e in baselines.load(store).log] == ["tag", "tag", "move"]


@pytest.fixture(scope="module")
def s3() -> Iterator[dict[str, str]]:
    """A moto S3 server bound to the loopback address; yields the environment that reaches it."""
    with moto_s3(BUCKET) as env:
        yield env


def _bucket_store(template: Path, prefix: str) -> str:
    """A bucket store holding the template's runs rows (all a tag needs to see a run)."""
    fs = objstore.filesystem()
    for rid in RUNS:
        fs.put_file(
            str(template / "runs" / f"{rid}.parquet"), f"{BUCKET}/{prefix}/runs/{rid}.parquet"
        )
    return f"s3://{BUCKET}/{prefix}"


def test_two_processes_tagging_at_once_both_land_on_s3(
    s3: dict[str, str], template: Path, tmp_path: Path
) -> None:
    url = _bucket_store(template, "race")
    n = 25
    out = _race(url, tmp_path, n, s3)
    data = objstore.filesystem().cat_file(f"{BUCKET}/race/baselines.json")
    doc = baselines.decode(data, "bucket")
    assert sorted(doc.baselines) == sorted(f"{w}-{i}" for w in "pq" for i in range(n))
    assert doc.version == 2 * n and len(doc.log) == 2 * n
    # Writes that lost a conditional PUT were made again on the fresh object, not dropped.
    print("conditional-write retries:", sum(o["attempts"] for o in out) - 2 * n)


def test_baselines_on_s3_through_the_cli(
    s3: dict[str, str], template: Path, tmp_path: Path
) -> None:
    url = _bucket_store(template, "cli")
    got = _cli(["baseline", "tag", "main", "base-a", "--store", url], s3, tmp_path / "alice")
    assert got.returncode == 0, got.stderr
    # Another machine (another home, so another mirror) sees it and moves it.
    listed = _cli(["baseline", "list", "--json", "--store", url], s3, tmp_path / "bob")
    assert [b["run_id"] for b in json.loads(listed.stdout)] == ["base-a"]
    refused = _one_line_error(
        _cli(["baseline", "tag", "main", "base-b", "--store", url], s3, tmp_path / "bob")
    )
    assert "--force" in refused
    moved = _cli(["baseline", "tag", "main", "base-b", "--store", url, "--force"], s3,
                 tmp_path / "bob")  # fmt: skip
    assert moved.returncode == 0, moved.stderr
    shown = _cli(["baseline", "show", "main", "--json", "--store", url], s3, tmp_path / "alice")
    doc = json.loads(shown.stdout)
    assert doc["run_id"] == "base-b" and doc["previous"][0]["run_id"] == "base-a"
    # The bucket's object is the only copy: the mirrors hold none.
    for home in ("alice", "bob"):
        assert not (tmp_path / home / "s3" / BUCKET / "cli" / "baselines.json").exists()
    line = _one_line_error(
        _cli(["baseline", "tag", "x", "nope", "--store", url], s3, tmp_path / "c")
    )
    assert "run is not in the store" in line


def test_a_lost_conditional_write_is_retried_not_dropped(
    s3: dict[str, str], template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another writer lands between this writer's read and its PUT: the PUT is refused by its
    If-Match, and the change is made again on the object as the other writer left it."""
    url = _bucket_store(template, "interleave")
    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path / "home"))
    mirror = objstore.open_store(url, ())
    baselines.tag(mirror, "first", "base-a", "ana")
    real = objstore.filesystem
    sneaked = []

    class OtherWriterFirst:
        def __init__(self) -> None:
            self.fs = real()

        def __getattr__(self, name: str) -> Any:
            return getattr(self.fs, name)

        def pipe_file(self, path: str, data: bytes, **kw: Any) -> Any:
            if not sneaked and path.endswith("baselines.json"):
                sneaked.append(path)
                monkeypatch.setattr(objstore, "filesystem", real)
                baselines.tag(mirror, "sneaky", "base-b", "raj")  # lands first
                monkeypatch.setattr(objstore, "filesystem", OtherWriterFirst)
            return self.fs.pipe_file(path, data, **kw)

    monkeypatch.setattr(objstore, "filesystem", OtherWriterFirst)
    change = baselines.tag(mirror, "mine", "cand", "ana")
    monkeypatch.setattr(objstore, "filesystem", real)
    assert sneaked and change.attempts == 2
    assert sorted(baselines.load(mirror).baselines) == ["first", "mine", "sneaky"]


def test_names_are_checked_by_the_store_layer_too(store: Path) -> None:
    for bad in ("a/b", "..", "x" * 200, "a\x00b"):
        with pytest.raises(WorkbenchError, match="invalid baseline"):
            baselines.tag(store, bad, "base-a", "ana")
    with pytest.raises(WorkbenchError, match="expected baseline:NAME"):
        baselines.resolve(store, "main")
    assert not (store / "baselines.json").exists()
