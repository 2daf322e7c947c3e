"""A DataTable whose cursor row carries a glyph, not only a colour (NO_COLOR, monochrome, colour
blindness), and whose first column stays put while the others scroll sideways."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.coordinate import Coordinate
from textual.widgets import DataTable

MARK = "▶"


class MarkedTable(DataTable[Any]):
    """Row cursor by default; the row label column shows the mark on the cursor row."""

    def __init__(self, *, id: str | None = None, fixed_columns: int = 1, **kwargs: Any) -> None:
        kwargs.setdefault("cursor_type", "row")
        kwargs.setdefault("zebra_stripes", True)
        super().__init__(id=id, fixed_columns=fixed_columns, **kwargs)

    def add_row(
        self,
        *cells: Any,
        height: int | None = 1,
        key: str | None = None,
        label: Any = None,
    ) -> Any:
        # Every row gets a one-cell label, so the label column exists before any cursor move.
        at_cursor = self.row_count == self.cursor_row
        return super().add_row(
            *cells, height=height, key=key, label=label or Text(MARK if at_cursor else " ", "bold")
        )

    def _update_dimensions(self, new_rows: Any) -> None:
        # Lines rendered between clear() and this update were cached without the label column
        # (DataTable does not drop them when the first labelled row arrives): drop them here.
        super()._update_dimensions(new_rows)
        self._clear_caches()

    def watch_cursor_coordinate(self, old: Coordinate, new: Coordinate) -> None:
        self._mark(old.row, " ")
        self._mark(new.row, MARK)
        super().watch_cursor_coordinate(old, new)

    def _mark(self, row: int, glyph: str) -> None:
        if not 0 <= row < self.row_count:
            return
        self.ordered_rows[row].label = Text(glyph, "bold")
        # Rendered rows are cached with their labels; update_cell clears the same caches.
        self._clear_caches()
        self.refresh_row(row)
