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
    text = f"{share * 100:.{digits}f}"
    # A share that rounds to zero is "0%", not "-0%" (a sign the reader would look for meaning in).
    return f"{0.0:.{digits}f}%" if float(text) == 0 else f"{text}%"


def ci_ms(low: float | None, high: float | None) -> str:
    """A confidence interval in ms."""
    if _missing(low) or _missing(high):
        return "[-]"
    return f"[{ms(low)}, {ms(high)}]"
