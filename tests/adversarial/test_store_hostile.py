"""Hostile, broken and odd inputs to `workbench ingest`, through the real CLI: each refusal is
exit 2 with one line naming the file, no traceback, no hang, and the store and the input
folder byte-for-byte as they were; odd but valid inputs are read correctly."""

from __future__ import annotations

import codecs
import gzip
import json
import os
import shutil
import socket
import subprocess
import sys
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from harness import refused, tree_hash, workbench

from triage_stores import RunSpec, write_run
from workbench.store import layout


def _ev(**kw: object) -> dict[str, object]:
    return {"ph": "X", "cat": "kernel", "name": "k", "pid": 1, "tid": 1, "ts": 0, "dur": 5, **kw}


def _trace(extra: list[dict[str, object]] | None = None, n: int = 20) -> dict[str, object]:
    """A small valid trace: n kernels, plus `extra` events first."""
    return {"traceEvents": [*(extra or []), *(_ev(ts=i * 10) for i in range(n))]}


def _json(doc: object) -> bytes:
    return json.dumps(doc).encode()


def _deep(depth: int, array_form: bool) -> bytes:
    event = json.dumps(_ev())[:-1] + ',"args":{"a":' + "[" * depth + "]" * depth + "}}"
    body = "[" + event + "]"
    return (body if array_form else '{"traceEvents":' + body + "}").encode()


def _gzip_bomb(path: Path) -> None:
    """600 MB of zeros in well under 1 MB of gzip: past the inflation cap for its size."""
    comp = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = bytes(16 << 20)
    with open(path, "wb") as fh:
        for _ in range(600 // 16):
            fh.write(comp.compress(block))
        fh.write(comp.flush())


def _parquet_events(path: Path) -> None:
    table = pa.table(
        {"run_id": ["r"] * 3, "category": ["kernel"] * 3, "name": ["k"] * 3,
         "ts_us": [0.0, 1.0, 2.0], "dur_us": [1.0, 1.0, 1.0]}
    )  # fmt: skip
    pq.write_table(table, path)


def _write(data: bytes) -> Callable[[Path], None]:
    return lambda p: p.write_bytes(data)


def _symlink(target: str) -> Callable[[Path], None]:
    return lambda p: p.symlink_to(target)


def _loop(p: Path) -> None:
    other = p.with_name(p.name + ".other")
    other.symlink_to(p.name)
    p.symlink_to(other.name)


def _socket(p: Path) -> None:
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(p))
    s.close()


def _truncated_parquet(p: Path) -> None:
    _parquet_events(p)
    p.write_bytes(p.read_bytes()[:-30])


def _fake_parquet(p: Path) -> None:
    p.write_bytes(b"PAR1" + os.urandom(200))


def _other_parquet(p: Path) -> None:
    pq.write_table(pa.table({"x": [1, 2]}), p)


def _not_a_store(p: Path) -> None:
    p.mkdir()
    (p / "notes.txt").write_text("hello")


def _store_without_partitions(p: Path) -> None:
    write_run(p, RunSpec("r1", seed=1, n_requests=12))
    shutil.rmtree(layout.partition_dir(p, "events", "r1"))


def _damaged_store(p: Path) -> None:
    write_run(p, RunSpec("r1", seed=1, n_requests=12))
    f = layout.partition_dir(p, "requests", "r1") / layout.PART_FILE
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0xFF
    f.write_bytes(bytes(data))


# name -> (maker(path), subject beyond the file itself, or None for the file)
BAD: dict[str, tuple[Callable[[Path], None], str | None]] = {
    "fifo": (lambda p: os.mkfifo(p), None),
    "char-device": (_symlink("/dev/null"), None),
    "socket": (_socket, None),
    "symlink-loop": (_loop, None),
    "self-loop": (lambda p: p.symlink_to(p.name), None),
    "broken-symlink": (_symlink("nowhere.json"), None),
    "missing": (lambda p: None, None),
    "not-a-store-dir": (_not_a_store, None),
    "empty": (_write(b""), None),
    "whitespace-only": (_write(b" \n\t\n"), None),
    "truncated-gzip": (_write(gzip.compress(_json(_trace()))[:-20]), None),
    "gzip-garbage": (_write(b"\x1f\x8b" + os.urandom(300)), None),
    "gzip-bomb": (_gzip_bomb, None),
    "not-json": (_write(b"hello, world\n"), None),
    "json-number": (_write(b"42"), None),
    "json-string": (_write(b'"traceEvents"'), None),
    "no-trace-events": (_write(_json({"events": []})), None),
    "trace-events-object": (_write(_json({"traceEvents": {"a": 1}})), None),
    "trace-events-null": (_write(_json({"traceEvents": None})), None),
    "no-events": (_write(_json({"traceEvents": []})), None),
    "array-of-numbers": (_write(b"[1, 2, 3]"), None),
    "deep-args-object": (_write(_deep(20_000, array_form=False)), None),
    "deep-args-array": (_write(_deep(20_000, array_form=True)), None),
    "pid-2**70": (_write(_json(_trace([_ev(pid=2**70)]))), None),
    "tid-minus-2**70": (_write(_json(_trace([_ev(tid=-(2**70))]))), None),
    "flow-id-2**64": (_write(_json(_trace([_ev(ph="s", id=2**64, name="flow")]))), None),
    "event-without-ts": (_write(_json(_trace([{"ph": "X", "name": "k", "dur": 1}]))), None),
    "bad-utf16": (_write(codecs.BOM_UTF16_LE + b"\x00\xd8{\x00"), None),
    "binary-garbage": (_write(b"\x00\x01\x02" + os.urandom(500)), None),
    "fake-parquet": (_fake_parquet, None),
    "truncated-parquet": (_truncated_parquet, None),
    "parquet-other-table": (_other_parquet, None),
    "store-missing-partition": (_store_without_partitions, "events/run_id=r1"),
    "store-damaged-file": (_damaged_store, f"requests/run_id=r1/{layout.PART_FILE}"),
}


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every bad input, made once, each in its own folder."""
    root = tmp_path_factory.mktemp("bad")
    for name, (maker, _) in BAD.items():
        folder = root / name
        folder.mkdir()
        maker(folder / "input.json")
    return root


@pytest.fixture(params=["new-store", "store-with-a-run"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    s = tmp_path / "store"
    if request.param == "store-with-a-run":
        write_run(s, RunSpec("kept", seed=3, n_requests=12))
    return s


@pytest.mark.parametrize("name", list(BAD))
def test_bad_input_is_refused_in_one_line(made: Path, store: Path, name: str) -> None:
    path = made / name / "input.json"
    suffix = BAD[name][1]
    subject = str(path / suffix) if suffix else str(path)
    refused(["ingest", path, "--store", store], store.parent, subject, [store, made / name])


@pytest.fixture
def fifo_with_writer(tmp_path: Path) -> Iterator[Path]:
    """A FIFO that a writer is feeding a valid trace into."""
    fifo = tmp_path / "in" / "trace.json"
    fifo.parent.mkdir()
    os.mkfifo(fifo)
    data = tmp_path / "data.json"
    data.write_bytes(_json(_trace()))
    code = f"open({str(fifo)!r}, 'wb').write(open({str(data)!r}, 'rb').read())"
    writer = subprocess.Popen([sys.executable, "-c", code])
    yield fifo
    writer.kill()
    writer.wait()


def test_a_fifo_with_a_writer_is_refused_too(fifo_with_writer: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    refused(
        ["ingest", fifo_with_writer, "--store", store], tmp_path, str(fifo_with_writer), [store]
    )


# Valid but odd: each must import, with the numbers right.
ODD: dict[str, bytes] = {
    "utf8-bom": codecs.BOM_UTF8 + _json(_trace()),
    "utf16-bom": _json(_trace()).decode().encode("utf-16"),
    "utf16-le": _json(_trace()).decode().encode("utf-16-le"),
    "utf16-be": _json(_trace()).decode().encode("utf-16-be"),
    "leading-whitespace": b"\n\n \t " + _json(_trace()),
    "gzip-with-bom": gzip.compress(codecs.BOM_UTF8 + _json(_trace())),
    "bare-array": _json(_trace()["traceEvents"]),
    "moderate-args-nesting": _deep(50, array_form=False),
}
# Events whose ts or dur no trace can hold: skipped and counted, never stored.
HUGE: dict[str, dict[str, object]] = {
    "dur-1e308": _ev(dur=1e308),
    "ts-1e308": _ev(ts=1e308),
    "ts-minus-1e308": _ev(ts=-1e308),
    "dur-2**60": _ev(dur=float(2**60)),
}


@pytest.mark.parametrize("name", list(ODD))
def test_odd_but_valid_json_is_read(tmp_path: Path, name: str) -> None:
    path = tmp_path / "trace.json"
    path.write_bytes(ODD[name])
    store = tmp_path / "store"
    out = workbench(["ingest", path, "--store", store, "--run-id", "odd"], tmp_path)
    assert out.code == 0 and not out.stderr.strip(), str(out)
    kept = 1 if name == "moderate-args-nesting" else 20
    assert f"kept {kept}" in out.stdout, str(out)


@pytest.mark.parametrize("name", list(HUGE))
def test_values_past_what_a_trace_holds_are_skipped_and_counted(tmp_path: Path, name: str) -> None:
    path = tmp_path / "trace.json"
    path.write_bytes(_json(_trace([HUGE[name]])))
    store = tmp_path / "store"
    out = workbench(["ingest", path, "--store", store, "--run-id", "huge"], tmp_path)
    assert out.code == 0, str(out)
    assert "kept 20, skipped 1" in out.stdout and "past 2**53 us" in out.stdout, str(out)
    runs = workbench(["runs", "--store", store, "--json"], tmp_path)
    (row,) = json.loads(runs.stdout)
    assert row["p99_us"] is not None and row["p99_us"] < 1e6, runs.stdout


# A 1 MB span name against patterns that backtrack catastrophically in Python's re.
EVIL = [r"(a+)+$", r"(a|aa)*x", r".*.*.*x", r"\w+x", r"(a*)*b"]
UNSUPPORTED = [r"(?<=a)b", r"(a)\1", r"(?=a)a", r"("]


@pytest.fixture(scope="module")
def long_name_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("long") / "long.json"
    path.write_bytes(_json(_trace([_ev(name="a" * 1_000_000, cat="user_annotation", dur=500)])))
    return path


@pytest.mark.parametrize("pattern", EVIL)
def test_a_backtracking_pattern_runs_in_bounded_time(
    long_name_trace: Path, tmp_path: Path, pattern: str
) -> None:
    store = tmp_path / "store"
    argv = ["ingest", long_name_trace, "--store", store, "--request-pattern", pattern]
    out = workbench(argv, tmp_path, timeout=30)
    assert out.code == 0, str(out)


@pytest.mark.parametrize("pattern", UNSUPPORTED)
def test_a_pattern_that_needs_backtracking_is_refused(
    long_name_trace: Path, tmp_path: Path, pattern: str
) -> None:
    store = tmp_path / "store"
    argv = ["ingest", long_name_trace, "--store", store, "--request-pattern", pattern]
    refused(argv, tmp_path, "--request-pattern", [store])


def _store_with_link(root: Path, name: str) -> tuple[Path, Path]:
    store = root / "store"
    write_run(store, RunSpec("kept", seed=3, n_requests=12))
    outside = root / "outside"
    outside.mkdir()
    target = store / name
    if target.exists():
        shutil.move(target, outside / name)
    target.symlink_to(outside, target_is_directory=True)
    return store, target


@pytest.mark.parametrize("name", [layout.STAGING, "runs", "events", "requests", "compiles"])
def test_a_symlinked_store_directory_is_refused_not_followed(tmp_path: Path, name: str) -> None:
    store, link = _store_with_link(tmp_path, name)
    trace = tmp_path / "t.json"
    trace.write_bytes(_json(_trace()))
    argv = ["ingest", trace, "--store", store, "--run-id", "new"]
    refused(argv, tmp_path, str(link), [store, tmp_path / "outside"])


@pytest.mark.parametrize("kind", ["a-file", "a-fifo"])
def test_a_store_path_that_is_not_a_directory_is_refused(tmp_path: Path, kind: str) -> None:
    store = tmp_path / "store"
    if kind == "a-file":
        store.write_text("not a store")
    else:
        os.mkfifo(store)
    trace = tmp_path / "t.json"
    trace.write_bytes(_json(_trace()))
    before = tree_hash(tmp_path)
    out = workbench(["ingest", trace, "--store", store], tmp_path)
    assert out.code == 2 and len(out.err_lines) == 1 and str(store) in out.err_lines[0], str(out)
    assert "Traceback" not in out.stderr
    assert tree_hash(tmp_path) == before


@pytest.mark.parametrize("kind", ["fifo", "loop", "missing"])
def test_a_bad_compile_log_is_named(tmp_path: Path, kind: str) -> None:
    log = tmp_path / "log" / "trace.log"
    log.parent.mkdir()
    if kind == "fifo":
        os.mkfifo(log)
    elif kind == "loop":
        _loop(log)
    trace = tmp_path / "t.json"
    trace.write_bytes(_json(_trace()))
    store = tmp_path / "store"
    argv = ["ingest", trace, "--store", store, "--compile-log", log]
    refused(argv, tmp_path, str(log), [store, log.parent])
