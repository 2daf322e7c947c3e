"""Interruptions and concurrency: a store is never lost to another writer's rollback, debris
is cleaned by the next writer, and every signal exit says truthfully what was committed."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest
from harness import finish, spawn, tree_hash, workbench

from workbench.errors import WorkbenchError
from workbench.store import layout, schema

ROOT = Path(__file__).resolve().parents[2]


def _tables(run_id: str) -> layout.RunTables:
    run = pa.Table.from_pylist([{"run_id": run_id, "schema_version": 1}], schema=schema.RUNS)
    events = pa.Table.from_pylist(
        [{"event_id": 1, "name": "k", "ts_us": 0.0, "dur_us": 1.0}], schema=schema.EVENTS_FILE
    )
    return layout.RunTables(
        run, events, schema.REQUESTS_FILE.empty_table(), schema.COMPILES_FILE.empty_table()
    )


def test_a_failed_first_import_cannot_delete_the_store_a_waiting_writer_uses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A makes the store, fails while B waits on the lock; A's rollback (slow here) must not
    remove what B then commits. On the old code A removed the store after unlocking."""
    store = tmp_path / "new-store"
    a_staging, b_waiting, b_done = threading.Event(), threading.Event(), threading.Event()
    threads: dict[str, threading.Thread] = {}
    real_write, real_flock = layout._write, layout.fcntl.flock
    real_rmtree, real_rmdir = layout.shutil.rmtree, os.rmdir

    def in_a() -> bool:
        return threading.current_thread() is threads["a"]

    def write(table: pa.Table, path: Path) -> None:
        if in_a():
            a_staging.set()
            assert b_waiting.wait(10)
            time.sleep(0.2)  # B is inside flock() now
            raise OSError(errno.ENOSPC, "No space left on device")
        real_write(table, path)

    def flock(fd: int, op: int) -> None:
        if threading.current_thread() is threads["b"]:
            b_waiting.set()
        real_flock(fd, op)

    def slow_rollback(real):  # type: ignore[no-untyped-def]
        def remove(path, *args, **kwargs):  # type: ignore[no-untyped-def]
            if in_a():
                b_done.wait(2)  # B would finish first if A had released the lock
            return real(path, *args, **kwargs)

        return remove

    monkeypatch.setattr(layout, "_write", write)
    monkeypatch.setattr(layout.fcntl, "flock", flock)
    monkeypatch.setattr(layout.shutil, "rmtree", slow_rollback(real_rmtree))
    monkeypatch.setattr(os, "rmdir", slow_rollback(real_rmdir))
    errors: dict[str, BaseException] = {}

    def run(name: str) -> None:
        try:
            if name == "b":
                assert a_staging.wait(10)
            layout.commit_run(store, _tables(name), source=f"{name}.json")
        except BaseException as exc:
            errors[name] = exc
        finally:
            if name == "b":
                b_done.set()

    for name in ("a", "b"):
        threads[name] = threading.Thread(target=run, args=(name,))
    for t in threads.values():
        t.start()
    for t in threads.values():
        t.join(30)
    assert isinstance(errors.get("a"), WorkbenchError) and "no space left" in str(errors["a"])
    assert "b" not in errors, errors.get("b")
    assert layout.run_ids(store) == ["b"]
    for name in schema.PARTITIONED:
        assert (layout.partition_dir(store, name, "b") / layout.PART_FILE).is_file()
    assert not (store / layout.STAGING).exists()


def test_a_full_disk_leaves_nothing_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = tmp_path / "store"
    layout.commit_run(store, _tables("first"), source="first.json")
    before = tree_hash(store)

    def full(table: pa.Table, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(layout, "_write", full)
    with pytest.raises(WorkbenchError, match="no space left on device"):
        layout.commit_run(store, _tables("second"), source="second.json")
    assert tree_hash(store) == before  # no lock file, no staging, no partial file
    fresh = tmp_path / "fresh" / "store"
    with pytest.raises(WorkbenchError, match="no space left on device"):
        layout.commit_run(fresh, _tables("second"), source="second.json")
    assert not (tmp_path / "fresh").exists()  # the directories it made are gone again


def test_stale_staging_of_a_killed_writer_is_cleaned_by_the_next(tmp_path: Path) -> None:
    store = tmp_path / "store"
    layout.commit_run(store, _tables("first"), source="first.json")
    debris = store / layout.STAGING / "0123abcd" / "events"
    debris.mkdir(parents=True)
    (debris / layout.PART_FILE).write_bytes(os.urandom(1 << 20))
    layout.commit_run(store, _tables("second"), source="second.json")
    assert not (store / layout.STAGING).exists()
    assert layout.run_ids(store) == ["first", "second"]


@pytest.mark.parametrize("name", [layout.STAGING, "runs", "events", "requests", "compiles"])
def test_store_directories_are_never_followed_as_symlinks(tmp_path: Path, name: str) -> None:
    store = tmp_path / "store"
    layout.commit_run(store, _tables("first"), source="first.json")
    outside = tmp_path / "outside"
    outside.mkdir()
    link = store / name
    if link.exists():
        os.rename(link, tmp_path / "moved")
        os.rename(tmp_path / "moved", outside / "moved")
    link.symlink_to(outside, target_is_directory=True)
    before, outside_before = tree_hash(store), tree_hash(outside)
    with pytest.raises(WorkbenchError, match="symbolic link"):
        layout.commit_run(store, _tables("second"), source="second.json")
    assert tree_hash(store) == before
    assert tree_hash(outside) == outside_before


def _trace(path: Path, n_requests: int) -> Path:
    """A Chrome trace of n_requests annotated requests of 8 kernels each."""
    events = []
    for r in range(n_requests):
        t0 = r * 1000.0
        events.append(
            {"ph": "X", "cat": "user_annotation", "name": f"request_{r}", "pid": 1, "tid": 1,
             "ts": t0, "dur": 900.0}
        )  # fmt: skip
        for k in range(8):
            events.append(
                {"ph": "X", "cat": "kernel", "name": f"gemm_{k}", "pid": 0, "tid": 7,
                 "ts": t0 + 10 + k * 100, "dur": 80.0, "args": {"correlation": r * 8 + k}}
            )  # fmt: skip
    path.write_text(json.dumps({"traceEvents": events}))
    return path


@pytest.fixture(scope="module")
def big_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _trace(tmp_path_factory.mktemp("trace") / "big.json", 40_000)


def _wait_until_handled(pid: int) -> None:
    """Wait until the CLI has its own signal handlers: SIGTERM caught in /proc/PID/status
    (Python catches SIGINT from the start; the CLI sets all three at once)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        status = Path(f"/proc/{pid}/status").read_text()
        caught = int(next(x for x in status.splitlines() if x.startswith("SigCgt:")).split()[1], 16)
        if caught >> (signal.SIGTERM - 1) & 1:
            return
        time.sleep(0.01)
    pytest.fail("the CLI never installed its signal handlers")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux /proc")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
@pytest.mark.parametrize("delay", [0.0, 0.5, 2.0])
def test_a_signal_exit_says_truthfully_what_was_committed(
    tmp_path: Path, big_trace: Path, sig: signal.Signals, delay: float
) -> None:
    store = tmp_path / "store"
    assert (
        workbench(["ingest", big_trace, "--store", store, "--run-id", "first"], tmp_path).code == 0
    )
    before = tree_hash(store)
    argv = ["ingest", big_trace, "--store", store, "--run-id", "second"]
    proc = spawn(argv, tmp_path)
    _wait_until_handled(proc.pid)  # a signal before that meets Python's defaults, not ours
    time.sleep(delay)
    proc.send_signal(sig)
    out = finish(proc, argv)
    assert "Traceback" not in out.stderr, str(out)
    if out.code == 0:
        # The import finished before the signal (a fast machine, a long delay): then it is
        # whole and reported, and the late signal changed nothing.
        assert layout.run_ids(store) == ["first", "second"], str(out)
        assert "second" in out.stdout and not out.err_lines, str(out)
        return
    if out.code == -sig:
        # Python restores the default handlers when the interpreter shuts down: a signal in
        # that last moment ends the process after the commit and its report, never before.
        assert layout.run_ids(store) == ["first", "second"], str(out)
        assert "second" in out.stdout, str(out)
        return
    assert out.code == 128 + sig, str(out)
    assert len(out.err_lines) == 1, str(out)
    line = out.err_lines[0]
    if "while importing" in line:  # else the signal came before the import began
        assert sig.name in line, str(out)
    if "committed run second" in line:
        assert layout.run_ids(store) == ["first", "second"]
    else:
        assert "nothing was written" in line, str(out)
        assert tree_hash(store) == before


def _run_script(body: str) -> subprocess.CompletedProcess[str]:
    """Run `body` in a fresh interpreter, after the CLI's imports and a helper that sends
    SIGTERM inside a library which swallows it."""
    head = """
        import os, signal, sys, time
        from workbench.cli import main as cli
        from workbench.errors import WorkbenchError
        from workbench.store import ingest as store_ingest, layout
        def signal_in_library():  # a library that catches everything around a signal
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)  # the handler runs here
            except BaseException as exc:
                return exc
            raise AssertionError("no signal")
        """
    script = textwrap.dedent(head) + textwrap.dedent(body)
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=ROOT
    )


def test_a_signal_during_the_final_rename_reports_the_commit(tmp_path: Path) -> None:
    """The runs file's rename is the commit: a SIGTERM sent during it is handled after it, and
    the line says the run was committed (it used to say "nothing was written")."""
    trace = _trace(tmp_path / "t.json", 50)
    store = tmp_path / "store"
    proc = _run_script(
        f"""
        real = os.rename
        def rename(a, b):
            if str(b).endswith(".parquet") and "/runs/" in str(b):
                os.kill(os.getpid(), signal.SIGTERM)
            real(a, b)
        layout.os.rename = rename
        sys.exit(cli.main(["ingest", {str(trace)!r}, "--store", {str(store)!r}]))
        """
    )
    assert proc.returncode == 128 + signal.SIGTERM, proc.stderr
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "committed run t" in lines[0], proc.stderr
    assert layout.run_ids(store) == ["t"]


def test_a_signal_that_library_code_swallows_leaves_the_finished_commands_word(
    tmp_path: Path,
) -> None:
    """The import went on and committed: its report stands, exit 0, and no line at exit says
    "nothing was written" (the old code said so after a whole import, seen on a slow CI)."""
    trace = _trace(tmp_path / "t.json", 50)
    store = tmp_path / "store"
    proc = _run_script(
        f"""
        real = store_ingest.ingest
        def ingest(*args, **kwargs):
            signal_in_library()
            return real(*args, **kwargs)
        store_ingest.ingest = ingest
        sys.exit(cli.main(["ingest", {str(trace)!r}, "--store", {str(store)!r}]))
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert "imported as run t" in proc.stdout and not proc.stderr.strip(), proc.stderr
    assert layout.run_ids(store) == ["t"]


@pytest.mark.parametrize(
    ("where", "when"),
    [("__del__", "ingest"), ("weakref callback", "ingest"), ("weakref callback", "start")],
)
def test_a_signal_python_swallows_in_a_callback_still_ends_the_import(
    tmp_path: Path, where: str, when: str
) -> None:
    """Python swallows what a __del__ or a weakref callback raises and prints a traceback (seen
    on CI: a SIGTERM in importlib's module-lock callback; the import went on and committed),
    in the import or while the CLI starts (start_early's import, seen on this machine). The
    signal's exit comes again outside the callback: one line, the store as it was."""
    trace = _trace(tmp_path / "t.json", 50)
    store = tmp_path / "store"
    assert workbench(["ingest", trace, "--store", store, "--run-id", "first"], tmp_path).code == 0
    before = tree_hash(store)
    drop = "Dropped()" if where == "__del__" else "weakref.ref(Target(), on_drop)"
    patched = "store_ingest.ingest" if when == "ingest" else "args_spawn.start_early"
    proc = _run_script(
        f"""
        import weakref
        from workbench.store.importers.kineto import args_spawn
        def on_drop(*_):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.5)  # the handler runs here, inside the callback
        class Dropped:
            __del__ = on_drop
        class Target:
            pass
        real = {patched}
        def dropping(*args, **kwargs):
            {drop}
            return real(*args, **kwargs)
        {patched} = dropping
        sys.exit(cli.main(["ingest", {str(trace)!r}, "--store", {str(store)!r}]))
        """
    )
    assert proc.returncode == 128 + signal.SIGTERM, proc.stderr
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "interrupted by SIGTERM" in lines[0], proc.stderr
    assert "nothing was written" in lines[0], proc.stderr
    assert tree_hash(store) == before


def test_a_signal_library_code_turns_into_an_input_error_exits_as_the_signal(
    tmp_path: Path,
) -> None:
    """An importer that caught the signal's exit and blamed the file: the line names the
    signal, not a fault in the trace, and the store is as it was."""
    trace = _trace(tmp_path / "t.json", 50)
    store = tmp_path / "store"
    assert workbench(["ingest", trace, "--store", store, "--run-id", "first"], tmp_path).code == 0
    before = tree_hash(store)
    proc = _run_script(
        f"""
        def ingest(*args, **kwargs):
            raise WorkbenchError("t.json", f"not a Chrome trace ({{signal_in_library()!r}})")
        store_ingest.ingest = ingest
        sys.exit(cli.main(["ingest", {str(trace)!r}, "--store", {str(store)!r}]))
        """
    )
    assert proc.returncode == 128 + signal.SIGTERM, proc.stderr
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "interrupted by SIGTERM while importing" in lines[0], proc.stderr
    assert "nothing was written" in lines[0] and "Chrome" not in lines[0], proc.stderr
    assert tree_hash(store) == before


def test_a_signal_after_the_command_finished_ends_it_without_a_false_line(
    tmp_path: Path,
) -> None:
    """The import committed and reported; a SIGTERM while the program exits ends it as any
    program (the old handler exited 143 saying "nothing was written")."""
    trace = _trace(tmp_path / "t.json", 50)
    store = tmp_path / "store"
    proc = _run_script(
        f"""
        sys.argv = ["workbench", "ingest", {str(trace)!r}, "--store", {str(store)!r}]
        code = cli.main()
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
        sys.exit(code)
        """
    )
    assert proc.returncode == -signal.SIGTERM, proc.stderr
    assert "imported as run t" in proc.stdout and not proc.stderr.strip(), proc.stderr
    assert layout.run_ids(store) == ["t"]


def test_a_signal_wrapped_by_a_class_body_exits_with_one_line(tmp_path: Path) -> None:
    """Python 3.11 wraps an exception raised in __set_name__ as RuntimeError: a signal that
    lands while a module defines a dataclass (seen while the CLI imports its parsers) must
    still exit with the signal's code and one line, never a traceback."""
    proc = _run_script(
        f"""
        class Field:
            def __set_name__(self, owner, name):
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)
        real = cli.build_parser
        def build_parser():
            class Holder:
                field = Field()
            return real()
        cli.build_parser = build_parser
        sys.exit(cli.main(["runs", "--store", {str(tmp_path / "store")!r}]))
        """
    )
    assert proc.returncode == 128 + signal.SIGTERM, proc.stderr
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert lines == ["workbench: interrupted by SIGTERM; nothing was written"], proc.stderr
    assert not (tmp_path / "store").exists()


def test_two_identical_imports_at_once_the_loser_says_unchanged(
    tmp_path: Path, big_trace: Path
) -> None:
    store = tmp_path / "store"
    argv = ["ingest", big_trace, "--store", store]
    procs = [spawn(argv, tmp_path) for _ in range(2)]
    outs = [finish(p, argv) for p in procs]
    assert [o.code for o in outs] == [0, 0], "\n".join(map(str, outs))
    status = sorted(o.stdout.split(": ", 1)[1].split(" ", 1)[0] for o in outs)
    assert status == ["imported", "unchanged"], "\n".join(map(str, outs))
    assert layout.run_ids(store) == ["big"]


def test_importing_the_sample_store_twice_changes_nothing(tmp_path: Path) -> None:
    store = tmp_path / "store"
    sample = ROOT / "sample_traces"
    first = workbench(["ingest", sample, "--store", store], tmp_path)
    assert first.code == 0, str(first)
    before = tree_hash(store)
    again = workbench(["ingest", sample, "--store", store], tmp_path)
    assert again.code == 0, str(again)
    assert "unchanged" in again.stdout
    assert tree_hash(store) == before
