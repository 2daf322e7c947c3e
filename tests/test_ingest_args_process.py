"""The second process that decodes a big trace's args: the same store with it as without it,
and an import that loses it (dead, failing, cancelled) still ends as one without it would."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import msgspec
import pytest

from ingest_helpers import HANDMADE, RANK0, ROOT, TORCH, TRACES, assert_same_run, run_tables
from workbench.store.importers.kineto import (
    args_process,
    args_spawn,
    chrome_stream,
    chrome_trace,
    kineto_json,
)
from workbench.store.importers.kineto.args_process import ArgsProcess, ArgsProcessFailed
from workbench.store.ingest import ingest
from workbench.store.progress import ImportCancelled, IngestProgress


class _Used:
    def __init__(self) -> None:
        self.results = 0
        self.decodes = 0


@pytest.fixture
def used(monkeypatch: pytest.MonkeyPatch) -> _Used:
    """Counts the second process's answers taken and the decodes tried."""
    count = _Used()
    real_results = ArgsProcess.results
    real_once = kineto_json._decode

    def results(self: ArgsProcess, sink: Any) -> Any:
        out = real_results(self, sink)
        count.results += 1
        return out

    def once(*args: Any) -> Any:
        count.decodes += 1
        return real_once(*args)

    monkeypatch.setattr(ArgsProcess, "results", results)
    monkeypatch.setattr(kineto_json, "_decode", once)
    return count


def _import(store: Path, src: Path, monkeypatch: pytest.MonkeyPatch, mode: str) -> Any:
    with monkeypatch.context() as m:
        m.setenv("WORKBENCH_ARGS_PROCESS", mode)
        return ingest(store, src, run_id="r")


@pytest.mark.parametrize(
    "src",
    [
        HANDMADE,
        TORCH / "serving_static_failing.pt.trace.json.gz",
        RANK0,
        TRACES / "serving" / "bert_small_h100.json.gz",
    ],
    ids=lambda p: p.name,
)
def test_a_second_process_stores_what_one_stores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, used: _Used, src: Path
) -> None:
    # Small chunks: many of them cross the pipe, each answered in order.
    monkeypatch.setattr(chrome_trace, "DECODE_CHUNK", 64 << 10)
    two = _import(tmp_path / "two", src, monkeypatch, "1")
    assert used.results == 1  # the second process answered, and was not fallen back from
    one = _import(tmp_path / "one", src, monkeypatch, "0")
    assert used.results == 1
    assert (two.events_read, two.events_kept, two.warnings) == (
        one.events_read, one.events_kept, one.warnings,
    )  # fmt: skip
    assert_same_run(run_tables(tmp_path / "two", "r"), run_tables(tmp_path / "one", "r"))


def test_the_whole_text_reader_uses_it_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, used: _Used
) -> None:
    """A file the stream hands to the whole-text reader (here: refused) decodes its args on the
    second process as well, to the same store."""
    monkeypatch.setattr(chrome_trace, "DECODE_CHUNK", 64 << 10)

    def refuse(self: chrome_stream.EventStream, path: Path) -> None:
        raise chrome_stream.Fallback("refused by the test")

    monkeypatch.setattr(chrome_stream.EventStream, "__init__", refuse)
    _import(tmp_path / "two", RANK0, monkeypatch, "1")
    assert used.results == 1
    _import(tmp_path / "one", RANK0, monkeypatch, "0")
    assert_same_run(run_tables(tmp_path / "two", "r"), run_tables(tmp_path / "one", "r"))


def _spawn_running(argv: list[str]) -> Any:
    def spawn() -> args_spawn.Spawned:
        out = open(os.devnull, "w+b")  # noqa: SIM115 - closed by Spawned.stop
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=out)
        return args_spawn.Spawned(proc, out)

    return spawn


@pytest.mark.parametrize(
    "helper",
    [
        "import sys; sys.exit(3)",  # dies at once: the pipe breaks under the sender
        "import sys; sys.stdin.buffer.read(); sys.exit(0)",  # reads all, answers nothing
        "import sys, time; sys.stdin.buffer.read(); time.sleep(600)",  # never finishes
    ],
    ids=["dies", "answers-nothing", "hangs"],
)
def test_an_import_that_loses_its_second_process_decodes_on_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, used: _Used, helper: str
) -> None:
    monkeypatch.setattr(chrome_trace, "DECODE_CHUNK", 64 << 10)
    monkeypatch.setattr(args_process, "ANSWER_WAIT", 1.0)
    monkeypatch.setattr(args_process, "spawn", _spawn_running([sys.executable, "-c", helper]))
    two = _import(tmp_path / "two", RANK0, monkeypatch, "1")
    assert two.status == "imported"
    assert used.results == 0 and used.decodes == 2  # the second try ran on one process
    _import(tmp_path / "one", RANK0, monkeypatch, "0")
    assert_same_run(run_tables(tmp_path / "two", "r"), run_tables(tmp_path / "one", "r"))


def test_no_second_process_to_be_had_is_no_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, used: _Used
) -> None:
    """A machine out of processes (or of temp space) imports on one process."""

    def spawn() -> args_spawn.Spawned:
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(args_process, "spawn", spawn)
    two = _import(tmp_path / "two", HANDMADE, monkeypatch, "1")
    assert two.status == "imported" and used.decodes == 2
    _import(tmp_path / "one", HANDMADE, monkeypatch, "0")
    assert_same_run(run_tables(tmp_path / "two", "r"), run_tables(tmp_path / "one", "r"))


def test_a_second_process_that_fails_says_why() -> None:
    """Args that are no JSON (a Raw the decoder cannot read) fail in the second process, which
    says so: the first hears it as ArgsProcessFailed with the decoder's words."""
    helper = ArgsProcess()
    try:
        helper.submit([msgspec.Raw(b'{"a": 1}'), msgspec.Raw(b"{")])
        with pytest.raises(ArgsProcessFailed, match="DecodeError"):
            helper.results(None)
    finally:
        helper.close()
    assert helper._helper.proc.returncode == 1


def test_a_cancelled_import_stops_its_second_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(chrome_trace, "DECODE_CHUNK", 64 << 10)
    monkeypatch.setenv("WORKBENCH_ARGS_PROCESS", "1")
    started: list[args_spawn.Spawned] = []
    real_spawn = args_process.spawn

    def spawn() -> args_spawn.Spawned:
        started.append(real_spawn())
        return started[-1]

    monkeypatch.setattr(args_process, "spawn", spawn)
    cancel = threading.Event()

    def progress(p: IngestProgress) -> None:
        if p.phase == "decode" and p.bytes_done > 0:
            cancel.set()

    with pytest.raises(ImportCancelled):
        ingest(tmp_path / "s", RANK0, run_id="r", progress=progress, cancel=cancel)
    assert len(started) == 1
    assert started[0].proc.returncode is not None  # reaped, not left running
    assert started[0].out.closed
    assert not (tmp_path / "s" / "runs").exists()


def test_start_early_only_for_a_big_regular_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("WORKBENCH_ARGS_PROCESS", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    small = tmp_path / "small.json"
    small.write_bytes(b"{}")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    big = tmp_path / "big [1]*.json"  # glob characters: a path, not a pattern
    sqlite = tmp_path / "big.sqlite"  # no JSON: another importer, on one process
    for path, head in ((big, b'{"traceEvents": ['), (sqlite, b"SQLite format 3\x00")):
        with open(path, "wb") as fh:
            fh.write(head)
            fh.truncate(args_spawn.MIN_BYTES)  # sparse: no disk used
    try:
        args = ["--store", str(tmp_path), str(small), str(fifo), str(tmp_path), str(sqlite)]
        args_spawn.start_early(args)
        assert args_spawn._early == []
        args_spawn.start_early(["--run-id", "x", str(big)])
        assert len(args_spawn._early) == 1
        early = args_spawn._early[0]
        assert args_spawn.spawn() is early  # the import takes the one started early
        assert args_spawn._early == []
        args_spawn._early.append(early)  # as if the import never came to want it
    finally:
        args_spawn._stop_unused()
    assert args_spawn._early == []
    assert early.proc.returncode is not None and early.out.closed


def test_a_small_gzip_of_much_text_wants_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The size that counts is the text's: a gzip's trailer says it (a 64 MB array of blanks
    packs into ~64 KB); a gzip of little text and a plain file count their own bytes."""
    monkeypatch.delenv("WORKBENCH_ARGS_PROCESS", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    text = b"[" + b" " * args_spawn.MIN_BYTES + b"]"
    packed, little, plain = tmp_path / "a.json.gz", tmp_path / "b.json.gz", tmp_path / "c.json"
    packed.write_bytes(gzip.compress(text, compresslevel=1))
    little.write_bytes(gzip.compress(b"[]"))
    plain.write_bytes(b"[" + b" " * 1000 + b"]")
    sizes = {p: args_spawn.text_bytes(p, p.stat().st_size) for p in (packed, little, plain)}
    assert sizes == {packed: len(text), little: little.stat().st_size, plain: 1002}
    assert args_spawn.wanted(sizes[packed]) and not args_spawn.wanted(sizes[little])
    try:
        args_spawn.start_early([str(packed)])
        assert len(args_spawn._early) == 1
    finally:
        args_spawn._stop_unused()


def test_the_cli_with_and_without_a_second_process(tmp_path: Path) -> None:
    """`workbench ingest` as a user runs it: forced on, the second process is started before
    the command's imports (start_early) and the store is the one a single process writes."""
    stores = {}
    for mode in ("1", "0"):
        store = tmp_path / f"s{mode}"
        env = {**os.environ, "WORKBENCH_ARGS_PROCESS": mode}
        r = subprocess.run(
            [sys.executable, "-m", "workbench", "ingest", str(RANK0),
             "--store", str(store), "--run-id", "r"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        stores[mode] = run_tables(store, "r")
    assert_same_run(stores["1"], stores["0"])
