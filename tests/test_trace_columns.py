"""ColumnBuilder's phase counts and name dictionary across chunks."""

from __future__ import annotations

from workbench.store.columns.trace_columns import ColumnBuilder, TraceEvent


def _ev(ph: str, name: str | None, ts: float) -> TraceEvent:
    return TraceEvent(ph=ph, name=name or "", cat=None if name is None else "cpu_op", pid=1,
                      tid=1, ts=ts, dur=1.0)  # fmt: skip


def test_phases_counted_in_order_and_odd_ones_not_taken_for_letters() -> None:
    b = ColumnBuilder("t")
    b.add([_ev("X", "a", 0), _ev("i", "b", 1), _ev("M", "process_name", 2), _ev("X", "a", 3)])
    b.add([_ev("C", "c", 4), _ev("X", "b", 5)])
    # Lengths 2 + 0 sum to the count of 2 events: neither may be read as the letter "X".
    b.add([_ev("XX", "d", 6), _ev("", "e", 7)])
    cols, _ = b.finish()
    assert list(b.read.items()) == [("X", 3), ("i", 1), ("M", 1), ("C", 1), ("XX", 1), ("", 1)]
    assert cols.kept_by_phase == {"X": 3, "i": 1, "C": 1}
    assert cols.skipped_by_phase == {"M": 1, "XX": 1, "": 1}
    names = [cols.names[c] for c in cols.name_codes.tolist()]
    assert names == ["a", "b", "a", "c", "b"]
    assert cols.names == ["a", "b", "c"]  # numbered in order of first appearance
