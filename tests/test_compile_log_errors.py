"""Bad input to read_compile_log: one-line WorkbenchError naming the file and the problem."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from workbench.errors import WorkbenchError
from workbench.store.importers.compile_log.compile_log import read_compile_log

FIXTURES = Path(__file__).parent / "fixtures" / "torch"
REAL_LOG = FIXTURES / "serving_static_failing.torch_trace" / "dedicated_log_torch_trace.log.gz"


def real_lines() -> list[str]:
    with gzip.open(REAL_LOG, "rt", encoding="utf-8") as fh:
        return fh.read().split("\n")


def expect_error(path: Path, problem: str) -> WorkbenchError:
    with pytest.raises(WorkbenchError) as info:
        read_compile_log(path)
    err = info.value
    assert err.subject == str(path)
    assert problem in err.problem
    assert "\n" not in str(err)
    return err


def test_empty_and_blank_files(tmp_path: Path) -> None:
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    expect_error(empty, "empty")
    blank = tmp_path / "blank.log"
    blank.write_text("\n  \n\n", encoding="utf-8")
    expect_error(blank, "empty")


def test_garbage_text_and_binary(tmp_path: Path) -> None:
    text = tmp_path / "notes.log"
    text.write_text("hello, this is not a torch trace\n", encoding="utf-8")
    expect_error(text, "line 1: not a TORCH_TRACE structured log line")
    binary = tmp_path / "random.log"
    binary.write_bytes(bytes(range(1, 256)) * 8)
    expect_error(binary, "not a TORCH_TRACE structured log line")
    # A zero byte beside a non-zero one first reads as UTF-16 (as editors on Windows save
    # logs); bytes that then do not decode say so.
    zero_first = tmp_path / "zero_first.log"
    zero_first.write_bytes(bytes(range(256)) * 8)
    expect_error(zero_first, "looks like UTF-16 but does not decode")


def test_a_kineto_trace_is_not_a_compile_log() -> None:
    expect_error(FIXTURES / "serving_static_failing.pt.trace.json.gz", "line 1: not a TORCH_TRACE")


def test_truncated_json_line_names_its_line(tmp_path: Path) -> None:
    lines = real_lines()
    idx = next(i for i, line in enumerate(lines) if '{"compilation_metrics"' in line)
    cut = tmp_path / "killed.log"
    # What a process killed mid-write leaves: the file ends inside a record.
    cut.write_text("\n".join([*lines[:idx], lines[idx][:300]]), encoding="utf-8")
    expect_error(cut, f"line {idx + 1}: truncated or malformed JSON")


def test_stray_line_inside_a_real_log(tmp_path: Path) -> None:
    lines = real_lines()
    bad = tmp_path / "spliced.log"
    bad.write_text("\n".join([*lines[:10], "Traceback (most recent call last):", *lines[10:]]))
    expect_error(bad, "line 11: not a TORCH_TRACE structured log line")


def test_truncated_gzip(tmp_path: Path) -> None:
    data = REAL_LOG.read_bytes()
    cut = tmp_path / "cut.log.gz"
    cut.write_bytes(data[: len(data) // 2])
    expect_error(cut, "truncated")


def test_wrong_value_types(tmp_path: Path) -> None:
    lines = real_lines()
    idx = next(i for i, line in enumerate(lines) if '{"compilation_metrics"' in line)
    lines[idx] = lines[idx].replace('"guard_count": 106', '"guard_count": "many"', 1)
    assert '"many"' in lines[idx]
    bad = tmp_path / "typed.log"
    bad.write_text("\n".join(lines), encoding="utf-8")
    expect_error(bad, f"line {idx + 1}: guard_count is not a number")


def test_record_that_is_not_an_object(tmp_path: Path) -> None:
    bad = tmp_path / "list.log"
    bad.write_text('V1129 19:27:23.987000 8841 torch/_dynamo/utils.py:1] ["x"]\n')
    # The envelope pattern wants an object, so a list is not a structured record at all.
    expect_error(bad, "not a TORCH_TRACE structured log line")
    metrics = tmp_path / "metrics.log"
    metrics.write_text(
        'V1129 19:27:23.987000 8841 torch/_dynamo/utils.py:1] {"compilation_metrics": 3}\n'
    )
    expect_error(metrics, "line 1: compilation_metrics is not an object")


def test_missing_path_and_directory_without_logs(tmp_path: Path) -> None:
    expect_error(tmp_path / "nope", "no such file or directory")
    (tmp_path / "readme.txt").write_text("x")
    expect_error(tmp_path, "no TORCH_TRACE log")


def test_a_log_without_compilations_is_an_empty_table(tmp_path: Path) -> None:
    """A valid log of a process that never finished a compile holds no rows, not an error."""
    lines = [line for line in real_lines() if "compilation_metrics" not in line]
    log = tmp_path / "nocompile.log"
    log.write_text("\n".join(lines[:50]), encoding="utf-8")
    assert read_compile_log(log).num_rows == 0
