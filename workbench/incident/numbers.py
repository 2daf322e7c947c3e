"""Numbers entering a record, guardrail, criterion or option: finite, in range, checked on entry.

The CLI, the TOML loaders and the app's forms all call these, so a `nan` threshold or a due date
ten thousand years out is refused with one line naming the field before anything is saved.
"""

from __future__ import annotations

import math

from workbench.errors import WorkbenchError


def _range_text(lo: float | None, hi: float | None) -> str:
    if lo is not None and hi is not None:
        return f"from {lo:g} to {hi:g}"
    if lo is not None:
        return f">= {lo:g}"
    return f"<= {hi:g}" if hi is not None else ""


def finite(value: object, field: str, lo: float | None = None, hi: float | None = None) -> float:
    """`value` as a finite float within [lo, hi]; a bool or a string is not a number."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise WorkbenchError(field, f"must be a number (got {value!r})")
    try:
        out = float(value)
    except OverflowError:  # an int past float's range
        raise WorkbenchError(field, f"must be a finite number (got {value!r})") from None
    if not math.isfinite(out):
        raise WorkbenchError(field, f"must be a finite number (got {value!r})")
    if (lo is not None and out < lo) or (hi is not None and out > hi):
        raise WorkbenchError(field, f"must be a number {_range_text(lo, hi)} (got {value!r})")
    return out


def whole(value: object, field: str, lo: int, hi: int) -> int:
    """`value` as an int within [lo, hi]; a bool or a float is not a whole number."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise WorkbenchError(field, f"must be a whole number (got {value!r})")
    if not lo <= value <= hi:
        raise WorkbenchError(field, f"must be a whole number from {lo} to {hi} (got {value})")
    return value


def parse_finite(text: str, field: str, lo: float | None = None, hi: float | None = None) -> float:
    """A number typed by a user (CLI argument or form field), checked like `finite`."""
    try:
        value = float(text.strip())
    except ValueError:
        raise WorkbenchError(field, f"must be a number (got {text!r})") from None
    if not math.isfinite(value):
        raise WorkbenchError(field, f"must be a finite number (got {text!r})")
    return finite(value, field, lo, hi)


def parse_whole(text: str, field: str, lo: int, hi: int) -> int:
    """A whole number typed by a user, checked like `whole`."""
    stripped = text.strip()
    if len(stripped) > 30:  # int() of a huge digit string is slow and no range needs it
        raise WorkbenchError(field, f"must be a whole number from {lo} to {hi}")
    try:
        value = int(stripped)
    except ValueError:
        raise WorkbenchError(field, f"must be a whole number (got {text!r})") from None
    return whole(value, field, lo, hi)
