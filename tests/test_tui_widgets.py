"""Small pieces of the screens: formats, header text, tag parsing, key catalogue."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from workbench.errors import WorkbenchError
from workbench.tui.screens.error_modal import one_line
from workbench.tui.screens.ingest_screen import parse_tags
from workbench.tui.units import ci_ms, ms, pct
from workbench.tui.widgets.incident_header import IncidentLine, elapsed, incident_text, steps_text

T0 = datetime(2026, 1, 15, 8, 0, tzinfo=UTC)


def test_elapsed_counts_hours_and_days() -> None:
    assert elapsed(T0, T0 + timedelta(seconds=59)) == "0:00:59"
    assert elapsed(T0, T0 + timedelta(hours=2, minutes=3, seconds=4)) == "2:03:04"
    assert elapsed(T0, T0 + timedelta(days=1, seconds=61)) == "1d 0:01:01"
    assert elapsed(T0, T0 - timedelta(seconds=5)) == "0:00:00"


def test_header_names_incident_status_pair_origin_and_time() -> None:
    line = IncidentLine("INC-1", "localized", "failing", "comparator", "lowering", T0)
    text = incident_text(line, T0 + timedelta(minutes=5)).plain
    for part in ("INC-1", "localized", "failing", "comparator", "origin lowering", "0:05:00"):
        assert part in text
    closed = IncidentLine("INC-1", "closed", "f", "c", "lowering", T0, T0 + timedelta(hours=1))
    assert "1:00:00" in incident_text(closed, T0 + timedelta(days=3)).plain
    assert "press f" in incident_text(None, T0).plain
    assert "3 Evidence" in steps_text("evidence").plain


def test_numbers_are_written_tail_units() -> None:
    assert ms(1234.5) == "1.23"
    assert ms(None) == "-" and ms(float("nan")) == "-"
    assert pct(0.256) == "26%"
    assert pct(-0.0012) == "0%" and pct(-0.004, 1) == "-0.4%" and pct(-0.02) == "-2%"
    assert ci_ms(1000.0, 2500.0) == "[1.00, 2.50]"
    assert ci_ms(None, 1.0) == "[-]"


def test_parse_tags() -> None:
    assert parse_tags(" a=1, b = x y ,") == {"a": "1", "b": "x y"}
    assert parse_tags("") == {}
    for bad in ("a=1, oops", "a=1, k=", "=v"):  # the rule of `workbench ingest --tag`
        with pytest.raises(WorkbenchError, match="KEY=VALUE with a non-empty KEY and VALUE"):
            parse_tags(bad)


def test_one_line_cause() -> None:
    assert one_line(WorkbenchError("f.json", "bad\nthing")) == "f.json: bad thing"
    assert one_line(ValueError("x\n  y")) == "ValueError: x y"
    assert len(one_line(RuntimeError("z" * 1000))) <= 300
