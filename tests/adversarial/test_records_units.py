"""The pieces behind the records half of the adversarial suite, in-process: the terminal
escaping, the number checks, the output writer's no-clobber and the record codec."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import msgspec
import pytest

from workbench.errors import WorkbenchError
from workbench.incident.incident import create_incident, load_incident, save_incident
from workbench.incident.incident_record import (
    RecordProblem,
    encode_record,
    parse_record,
    record_from_raw,
)
from workbench.incident.numbers import finite, parse_finite, parse_whole, whole
from workbench.incident.output_file import write_output
from workbench.terminal_text import TerminalSafeWriter, for_terminal, stream_for_terminal

HOSTILE = "a\x1b[31mb\x07c\rd\ne\x9bf\u202eg\x7fh\x00i\u2028j"


def test_for_terminal_escapes_every_control_and_keeps_the_rest() -> None:
    shown = for_terminal(HOSTILE)
    assert shown == "a\\x1b[31mb\\x07c\\rd\\ne\\x9bf\\u202eg\\x7fh\\x00i\\u2028j"
    assert for_terminal("naïve µs → ok") == "naïve µs → ok"


def test_stream_escaping_keeps_newlines_and_the_json_value() -> None:
    doc = {"title": HOSTILE, "n": [1, 2.5]}
    for text in (json.dumps(doc, ensure_ascii=False), msgspec.json.encode(doc).decode()):
        safe = stream_for_terminal(text + "\n")
        assert safe.endswith("\n") and "\x1b" not in safe and "\x9b" not in safe
        assert json.loads(safe) == doc


def test_the_safe_writer_escapes_what_passes_through(capsys: pytest.CaptureFixture[str]) -> None:
    import sys

    writer = TerminalSafeWriter(sys.stdout)
    assert writer.write("x\x1b[2Jy\n") == len("x\x1b[2Jy\n")
    writer.flush()
    assert capsys.readouterr().out == "x\\u001b[2Jy\n"


@pytest.mark.parametrize(
    ("value", "ok"),
    [(1, True), (0.5, True), (math.nan, False), (math.inf, False), (True, False), ("1", False)],
)
def test_finite_accepts_only_finite_numbers(value: object, ok: bool) -> None:
    if ok:
        assert finite(value, "f") == float(value)  # type: ignore[arg-type]
    else:
        with pytest.raises(WorkbenchError, match=r"^f: "):
            finite(value, "f")


def test_ranges_and_typed_text() -> None:
    with pytest.raises(WorkbenchError, match="from 0 to 1"):
        finite(1.5, "share", 0, 1)
    with pytest.raises(WorkbenchError, match="finite"):
        parse_finite(" -inf ", "x")
    assert parse_finite(" 1e3 ", "x") == 1000.0
    with pytest.raises(WorkbenchError, match="whole number"):
        whole(2.0, "n", 0, 5)
    with pytest.raises(WorkbenchError, match="from 0 to 5"):
        parse_whole("9" * 31, "n", 0, 5)
    assert parse_whole(" 5 ", "n", 0, 5) == 5


def test_write_output_never_replaces_what_appeared_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "x.md"
    real_link = os.link

    def racing_link(src: str, dst: str) -> None:
        Path(dst).write_text("someone else's\n", encoding="utf-8")  # lands between check and link
        real_link(src, dst)

    monkeypatch.setattr(os, "link", racing_link)
    with pytest.raises(WorkbenchError, match="exists; add --force"):
        write_output(target, "mine\n")
    assert target.read_text(encoding="utf-8") == "someone else's\n"
    assert [p.name for p in tmp_path.iterdir()] == ["x.md"]  # no temporary file left


def test_a_save_that_could_not_be_read_back_is_refused(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    inc = create_incident(store, "t", "sev2", "alice", incident_id="INC-1")
    before = (store / "incidents" / "INC-1.json").read_bytes()
    bad = msgspec.structs.replace(inc, severity="sev9")
    with pytest.raises(WorkbenchError, match=r"refusing to save: unknown severity"):
        save_incident(store, bad, inc, "bob")
    assert (store / "incidents" / "INC-1.json").read_bytes() == before


def test_unknown_top_level_fields_round_trip_beside_the_known_ones(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    inc = create_incident(store, "t", "sev2", "alice", incident_id="INC-1")
    raw = parse_record(encode_record(inc))
    raw["ticket"] = {"system": "jira", "id": 7}
    again = record_from_raw(raw)
    assert again.unknown_fields == {"ticket": {"system": "jira", "id": 7}}
    assert parse_record(encode_record(again)) == raw
    (store / "incidents" / "INC-1.json").write_bytes(encode_record(again))
    saved = save_incident(store, msgspec.structs.replace(again, title="t2"), again, "bob")
    assert load_incident(store, "INC-1").unknown_fields == saved.unknown_fields


@pytest.mark.parametrize(
    ("change", "where"),
    [
        ({"version": 2**64}, "$.version"),
        ({"status": "nope"}, "$.status"),
        ({"rollback_criteria": [{"metric": "m"}]}, "$.rollback_criteria[0]"),
        ({"claims": [{"text": "t", "numbers": {"x": 1e999}}]}, "$.claims[0].numbers.x"),
    ],
)
def test_a_record_problem_names_its_place(
    tmp_path: Path, change: dict[str, object], where: str
) -> None:
    store = tmp_path / "store"
    store.mkdir()
    raw = parse_record(encode_record(create_incident(store, "t", "sev2", "a", incident_id="I-1")))
    raw.update(change)
    with pytest.raises(RecordProblem) as err:
        record_from_raw(raw)
    assert err.value.where == where, err.value
