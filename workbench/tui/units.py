"""How numbers are written on screen: times in ms, shares in %, CIs in brackets."""

from __future__ import annotations

import math


def _missing(x: float | None) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def ms(us: float | None, digits: int = 2) -> str:
    """Microseconds as milliseconds; unknown as '-'."""
    if _missing(us):
        return "-"
    assert us is not None
    return f"{us / 1000:.{digits}f}"


def pct(share: float | None, digits: int = 0) -> str:
    """A 0..1 share as a percentage."""
    if _missing(share):
        return "-"
    assert share is not None
    return f"{share * 100:.{digits}f}%"


def ci_ms(low: float | None, high: float | None) -> str:
    """A confidence interval in ms."""
    if _missing(low) or _missing(high):
        return "[-]"
    return f"[{ms(low)}, {ms(high)}]"
