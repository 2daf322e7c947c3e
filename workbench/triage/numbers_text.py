"""Numbers as the summary writes them, so the brief, the tables and the app print one value one way."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from accel.stats import level_text

# The level of the trigger's further readings in records made before it was stored with them:
# then always 1 - alpha/2.
UNSTORED_READING_LEVEL: Final[float] = 0.975


def fmt_us(x: float | None) -> str | None:
    """Microseconds: "941.9 µs" below a millisecond, "2.642 ms" above."""
    if x is None:
        return None
    return f"{x / 1000:,.3f} ms" if abs(x) >= 1000 else f"{x:,.1f} µs"


def fmt_value(x: float | None, unit: str) -> str | None:
    if x is None:
        return None
    if unit == "us":
        return fmt_us(x)
    if unit == "share":
        return f"{100 * x:.2f}%"
    return f"{x:,.4g} {unit}"


def fmt_signed(x: float | None, unit: str = "us") -> str | None:
    if x is None:
        return None
    v = fmt_value(abs(x), unit)
    return f"+{v}" if x >= 0 else f"−{v}"


def fmt_ci(lo: float | None, hi: float | None, unit: str = "us") -> str | None:
    if lo is None or hi is None:
        return None
    return f"[{fmt_value(lo, unit)}, {fmt_value(hi, unit)}]"


def fmt_pct(x: float | None) -> str | None:
    return None if x is None else f"{x:+.1f}%"


def fmt_reading_level(fired: Mapping[str, Any]) -> str:
    """The level of a further reading's intervals, from its verdict's "fired" entry."""
    return level_text(float(fired.get("level", UNSTORED_READING_LEVEL)))
