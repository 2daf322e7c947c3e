"""A line filter that keeps every character readable: text whose colour is too close to its
background (WCAG contrast under 4.5:1, level AA) is redrawn in black or white, and faint (dim)
text is drawn normally. Under NO_COLOR, Textual turns colours into greys by luminance, so red
on black becomes dark grey on black (about 1.6:1); this filter runs after that one."""

from __future__ import annotations

from functools import lru_cache

from rich.color import Color as RichColor
from rich.segment import Segment
from rich.style import Style
from textual.color import Color
from textual.filter import LineFilter

AA_TEXT = 4.5
_WHITE = RichColor.from_rgb(255, 255, 255)
_BLACK = RichColor.from_rgb(0, 0, 0)


def luminance(rgb: tuple[int, int, int]) -> float:
    """WCAG 2 relative luminance of an sRGB colour."""

    def channel(c: int) -> float:
        v = c / 255
        return v / 12.92 if v <= 0.03928 else ((v + 0.055) / 1.055) ** 2.4

    r, g, b = (channel(c) for c in rgb)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(fg: tuple[int, int, int], bg: tuple[int, int, int]) -> float:
    """WCAG contrast ratio, 1 to 21."""
    a, b = sorted((luminance(fg), luminance(bg)), reverse=True)
    return (a + 0.05) / (b + 0.05)


def _rgb(color: RichColor | None, fallback: tuple[int, int, int]) -> tuple[int, int, int]:
    if color is None or color.is_default:
        return fallback
    return Color.from_rich_color(color).rgb


@lru_cache(4096)
def readable(style: Style, background: tuple[int, int, int]) -> Style:
    """`style` with its foreground replaced by black or white when it fails AA on its
    background, and without dim."""
    if style.dim:
        style = style + Style(dim=False)
    bg = _rgb(style.bgcolor, background)
    # Default foreground: the terminal's own, readable by the user's choice; leave it.
    if style.color is None or style.color.is_default:
        return style
    fg = _rgb(style.color, bg)
    if style.reverse:
        fg, bg = bg, fg
    if contrast(fg, bg) >= AA_TEXT:
        return style
    better = _WHITE if luminance(bg) < 0.18 else _BLACK
    if style.reverse:  # the background colour is what shows as text
        return style + Style(bgcolor=better)
    return style + Style(color=better)


class ContrastFloor(LineFilter):
    """Every segment at WCAG AA contrast or better (see module docstring)."""

    def apply(self, segments: list[Segment], background: Color) -> list[Segment]:
        bg = background.rgb
        return [
            Segment(text, None if style is None else readable(style, bg), control)
            for text, style, control in segments
        ]
