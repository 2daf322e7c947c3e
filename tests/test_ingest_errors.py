"""Failed imports: exit 2, one line naming the file and the problem, store byte-for-byte unchanged."""

from __future__ import annotations

import errno
import gzip
import os
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from ingest_helpers import HANDMADE, cli, store_hash
from workbench.store.ingest import ingest


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """A store that already holds one run, so 'unchanged' means something."""
    s = tmp_path / "store"
    ingest(s, HANDMADE, run_id="base")
    return s


def _fails(
    argv: list[str],
    store: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    subject: str,
    problem: str,
) -> None:
    before = store_hash(store)
    code = cli(argv, monkeypatch)
    err = capsys.readouterr().err
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert subject in lines[0] and problem in lines[0], lines[0]
    assert store_hash(store) == before


def _write(tmp_path: Path, name: str, data: bytes) -> Path:
    p = tmp_path / name
    p.write_bytes(data)
    return p


def test_malformed_json(tmp_path: Path, store: Path, monkeypatch, capsys) -> None:
    bad = _write(tmp_path, "bad.json", b'{"traceEvents": [{"ph": "X",, }]}')
    _fails(["ingest", str(bad), "--store", str(store)], store, monkeypatch, capsys,
           str(bad), "malformed JSON")  # fmt: skip


def test_truncated_object(tmp_path: Path, store: Path, monkeypatch, capsys) -> None:
    text = HANDMADE.read_bytes()
    bad = _write(tmp_path, "cut.json", text[: len(text) // 2])
    _fails(["ingest", str(bad), "--store", str(store)], store, monkeypatch, capsys,
           str(bad), "truncated")  # fmt: skip


def test_bad_gzip(tmp_path: Path, store: Path, monkeypatch, capsys) -> None:
    gz = gzip.compress(HANDMADE.read_bytes())
    bad = _write(tmp_path, "bad.json.gz", gz[:10] + b"\x00garbage" + gz[20:])
    _fails(["ingest", str(bad), "--store", str(store)], store, monkeypatch, capsys,
           str(bad), "gzip")  # fmt: skip
    cut = _write(tmp_path, "cut.json.gz", gz[: len(gz) // 2])
    _fails(["ingest", str(cut), "--store", str(store)], store, monkeypatch, capsys,
           str(cut), "gzip stream is truncated")  # fmt: skip


def test_empty_file(tmp_path: Path, store: Path, monkeypatch, capsys) -> None:
    bad = _write(tmp_path, "empty.json", b"")
    _fails(["ingest", str(bad), "--store", str(store)], store, monkeypatch, capsys,
           str(bad), "file is empty")  # fmt: skip


def test_not_a_trace(tmp_path: Path, store: Path, monkeypatch, capsys) -> None:
    bad = _write(tmp_path, "t.json", b'{"traceEvents": [{"ph": "X", "ts": "soon"}]}')
    _fails(["ingest", str(bad), "--store", str(store)], store, monkeypatch, capsys,
           str(bad), "not a Chrome trace")  # fmt: skip


def test_run_id_exists_with_different_content(
    tmp_path: Path, store: Path, monkeypatch, capsys
) -> None:
    other = _write(tmp_path, "o.json", HANDMADE.read_bytes().replace(b"request#1", b"request#9"))
    _fails(["ingest", str(other), "--store", str(store), "--run-id", "base"], store,
           monkeypatch, capsys, str(other), "already exists")  # fmt: skip
    # Same file, other options: also a different run.
    _fails(["ingest", str(HANDMADE), "--store", str(store), "--run-id", "base", "--label", "x"],
           store, monkeypatch, capsys, str(HANDMADE), "different content or options")  # fmt: skip


def test_bad_tag(store: Path, monkeypatch, capsys) -> None:
    _fails(["ingest", str(HANDMADE), "--store", str(store), "--tag", "novalue"], store,
           monkeypatch, capsys, "--tag 'novalue'", "KEY=VALUE")  # fmt: skip
    _fails(["ingest", str(HANDMADE), "--store", str(store), "--tag", "=v"], store,
           monkeypatch, capsys, "--tag '=v'", "KEY=VALUE")  # fmt: skip
    _fails(["ingest", str(HANDMADE), "--store", str(store), "--tag", "k= "], store,
           monkeypatch, capsys, "--tag 'k= '", "non-empty KEY and VALUE")  # fmt: skip


def test_bad_run_id_and_pattern(store: Path, monkeypatch, capsys) -> None:
    _fails(["ingest", str(HANDMADE), "--store", str(store), "--run-id", "9lives"], store,
           monkeypatch, capsys, "'9lives'", "invalid run id")  # fmt: skip
    _fails(["ingest", str(HANDMADE), "--store", str(store), "--request-pattern", "(x"], store,
           monkeypatch, capsys, "--request-pattern", "bad regex")  # fmt: skip


def test_store_under_a_regular_file(tmp_path: Path, monkeypatch, capsys) -> None:
    blocker = _write(tmp_path, "plainfile", b"x")
    store = blocker / "store"
    code = cli(["ingest", str(HANDMADE), "--store", str(store)], monkeypatch)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert str(HANDMADE) in err[0] and "cannot write to store" in err[0]
    assert blocker.read_bytes() == b"x"


@pytest.mark.parametrize(
    ("target", "code", "text"),
    [
        ("write", errno.ENOSPC, "no space left on device"),
        ("rename", errno.EROFS, "store is not writable"),
    ],
)
def test_full_or_read_only_store(
    store: Path, monkeypatch, capsys, target: str, code: int, text: str
) -> None:
    real_write, real_rename = pq.write_table, os.rename
    calls = {"n": 0}

    def failing_write(*a, **k):
        calls["n"] += 1
        if calls["n"] == 2:  # after the first file is staged: a disk that fills mid-import
            raise OSError(code, os.strerror(code))
        return real_write(*a, **k)

    def failing_rename(src, dst):
        calls["n"] += 1
        if calls["n"] == 2:  # after one partition was moved into place
            raise OSError(code, os.strerror(code))
        return real_rename(src, dst)

    if target == "write":
        monkeypatch.setattr(pq, "write_table", failing_write)
    else:
        monkeypatch.setattr(os, "rename", failing_rename)
    _fails(["ingest", str(HANDMADE), "--store", str(store), "--run-id", "new"], store,
           monkeypatch, capsys, str(HANDMADE), text)  # fmt: skip
    assert calls["n"] >= 2


def test_reimport_is_idempotent(store: Path, monkeypatch, capsys) -> None:
    before = store_hash(store)
    code = cli(["ingest", str(HANDMADE), "--store", str(store), "--run-id", "base"], monkeypatch)
    out = capsys.readouterr().out
    assert code == 0 and "unchanged" in out
    assert store_hash(store) == before
    report = ingest(store, HANDMADE, run_id="base")
    assert report.status == "unchanged"
    assert store_hash(store) == before


def test_cli_imports_and_default_run_id(tmp_path: Path, monkeypatch, capsys) -> None:
    src = tmp_path / "7 odd name.pt.trace.json"
    shutil.copy(HANDMADE, src)
    store = tmp_path / "s"
    code = cli(["ingest", str(src), "--store", str(store), "--tag", "model=m1",
                "--label", "canary"], monkeypatch)  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0 and "imported as run run_7_odd_name" in out
    run = pq.read_table(store / "runs" / "run_7_odd_name.parquet").to_pylist()[0]
    assert (run["model"], run["label"], dict(run["tags"])) == ("m1", "canary", {"model": "m1"})


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (b'{"traceEvents": []}', "trace holds no events"),
        (b"[]", "trace holds no events"),
        (b"null", "expected a JSON object or array"),
        (b'{"traceEvents": {}}', "traceEvents is not an array"),
        (b'{"schemaVersion": 1}', "object has no traceEvents"),
        (b'[{"ph": "X", "ts": 1, "dur": 2}, {"ph": "X", "ts": 1] ', "malformed JSON"),
        (b'[{"ph": "X", "ts": "1"}]', "not a Chrome trace"),
        (b" \n\t ", "file is empty"),
    ],
)
def test_not_importable(tmp_path: Path, store: Path, monkeypatch, capsys, text, problem) -> None:
    bad = _write(tmp_path, "bad.json", text)
    _fails(["ingest", str(bad), "--store", str(store)], store, monkeypatch, capsys,
           str(bad), problem)  # fmt: skip
