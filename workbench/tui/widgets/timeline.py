"""One request's events as bars per lane (device/stream) across the width; select, zoom, pan."""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import ClassVar

from rich.text import Text
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.reactive import reactive
from textual.widget import Widget

# Per stage: the bar glyph and the colour. Glyphs differ too, so stages stay apart with
# NO_COLOR or on a monochrome terminal; the legend names both.
STAGE_STYLE: dict[str, tuple[str, str]] = {
    "ingress": ("░", "cyan"),
    "lowering": ("▒", "magenta"),
    "scheduling": ("▚", "yellow"),
    "execution": ("█", "green"),
    "assembly": ("▓", "blue"),
}
OTHER_STYLE = ("·", "white")
LABEL_WIDTH = 8


@dataclass(frozen=True)
class Span:
    """One event of the request, its time relative to the request's first event."""

    start_us: float
    dur_us: float
    lane: str
    stage: str | None
    name: str
    category: str | None = None
    shape: str | None = None
    kernel: str | None = None
    args: str | None = None
    notes: str = ""  # tile, fusion group, memory tier, fallback / recompile flags

    @property
    def end_us(self) -> float:
        return self.start_us + max(self.dur_us, 0.0)


def legend() -> Text:
    """Which glyph and colour is which stage."""
    text = Text()
    for stage, (glyph, colour) in (*STAGE_STYLE.items(), ("other", OTHER_STYLE)):
        text.append(glyph * 2, colour)
        text.append(f" {stage}  ")
    return text


def lanes_of(spans: list[Span]) -> list[str]:
    """Lane names in first-use order (the order events started on them)."""
    return list(dict.fromkeys(s.lane for s in spans))


def cells(span: Span, view: tuple[float, float], width: int) -> tuple[int, int] | None:
    """[first, last) cell of a span inside the view at `width` cells; None when outside.
    A span shorter than a cell still gets one cell, so nothing in view is invisible."""
    lo, hi = view
    if width <= 0 or hi <= lo or span.end_us < lo or span.start_us > hi:
        return None
    scale = width / (hi - lo)
    first = max(0, int((span.start_us - lo) * scale))
    last = min(width, max(first + 1, int((span.end_us - lo) * scale + 0.999)))
    return (min(first, width - 1), last)


def axis(view: tuple[float, float], width: int) -> str:
    """'|0.00 ms ... 3.27 ms|' fitted to width."""
    left, right = f"{view[0] / 1000:.3f} ms", f"{view[1] / 1000:.3f} ms"
    gap = max(1, width - len(left) - len(right))
    return (left + "-" * gap + right)[:width]


class Timeline(Widget, can_focus=True):
    """Bars per lane; left/right select the previous/next event, + - zoom, < > pan."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("right", "select(1)", "Event", id="timeline.next"),
        Binding("left", "select(-1)", "Prev event", id="timeline.prev", show=False),
        Binding("plus,equals_sign", "zoom(0.5)", "Zoom", id="timeline.zoom_in"),
        Binding("minus", "zoom(2.0)", "Zoom out", id="timeline.zoom_out", show=False),
        Binding("greater_than_sign,full_stop", "pan(0.25)", "Pan", id="timeline.pan_right"),
        Binding(
            "less_than_sign,comma", "pan(-0.25)", "Pan left", id="timeline.pan_left", show=False
        ),
        Binding("home", "reset", "Whole request", id="timeline.reset", show=False),
    ]

    selected: reactive[int] = reactive(0, init=False)

    class Selected(Message):
        """The selected event changed (or the spans were replaced)."""

        def __init__(self, timeline: Timeline, span: Span | None) -> None:
            super().__init__()
            self.timeline = timeline
            self.span = span

        @property
        def control(self) -> Timeline:
            return self.timeline

    def __init__(self, title: str = "", *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.title = title
        self.spans: list[Span] = []
        self.starts: list[float] = []
        self.lanes: list[str] = []
        self.total_us = 0.0
        self.view: tuple[float, float] = (0.0, 1.0)

    def set_spans(self, spans: list[Span], title: str, total_us: float | None = None) -> None:
        """Show `spans` (sorted by start) over [0, total_us], the first event selected."""
        self.spans = sorted(spans, key=lambda s: (s.start_us, s.lane))
        self.starts = [s.start_us for s in self.spans]
        self.lanes = lanes_of(self.spans)
        self.title = title
        end = max((s.end_us for s in self.spans), default=0.0)
        self.total_us = max(end, total_us or 0.0, 1.0)
        self.view = (0.0, self.total_us)
        self.set_reactive(Timeline.selected, 0)
        self.post_message(self.Selected(self, self.current()))
        self.refresh(layout=True)

    def current(self) -> Span | None:
        return self.spans[self.selected] if self.spans else None

    def watch_selected(self, _old: int, _new: int) -> None:
        span = self.current()
        if span is not None:
            lo, hi = self.view
            if span.start_us < lo or span.start_us > hi:  # keep the selection in view
                width = hi - lo
                lo = max(0.0, min(span.start_us - width / 4, self.total_us - width))
                self.view = (lo, lo + width)
        self.post_message(self.Selected(self, span))
        self.refresh()

    def action_select(self, step: int) -> None:
        if self.spans:
            self.selected = max(0, min(len(self.spans) - 1, self.selected + step))

    def action_zoom(self, factor: float) -> None:
        """Zoom around the selected event (or the view's middle)."""
        lo, hi = self.view
        span = self.current()
        centre = span.start_us + span.dur_us / 2 if span else (lo + hi) / 2
        width = min(self.total_us, max((hi - lo) * factor, 1.0))
        lo = max(0.0, min(centre - width / 2, self.total_us - width))
        self.view = (lo, lo + width)
        self._select_in_view()
        self.refresh()

    def action_pan(self, share: float) -> None:
        lo, hi = self.view
        width = hi - lo
        lo = max(0.0, min(lo + share * width, self.total_us - width))
        self.view = (lo, lo + width)
        self._select_in_view()
        self.refresh()

    def action_reset(self) -> None:
        self.view = (0.0, self.total_us)
        self.refresh()

    def _select_in_view(self) -> None:
        """After a pan or zoom, move the selection to the first event in view if it left it."""
        span = self.current()
        lo, hi = self.view
        if span is None or lo <= span.start_us <= hi:
            return
        i = bisect.bisect_left(self.starts, lo)
        if i < len(self.spans) and self.spans[i].start_us <= hi:
            self.selected = i

    def render(self) -> Text:
        width = max(1, self.size.width - LABEL_WIDTH)
        marker = "▶ " if self.has_focus else "  "
        text = Text(marker, "bold")
        # One line: the widget's height counts one title row.
        text.append(self.title[: max(0, self.size.width - 2)], "bold" if self.has_focus else "")
        if not self.spans:
            text.append("\n  no events recorded for this request")
            return text
        chosen = self.current()
        for lane in self.lanes:
            row: list[tuple[str, str]] = [(" ", "")] * width
            # The selected event last, so a later one on its cells never hides it.
            mine = [s for s in self.spans if s.lane == lane and s is not chosen]
            if chosen is not None and chosen.lane == lane:
                mine.append(chosen)
            for span in mine:
                at = cells(span, self.view, width)
                if at is None:
                    continue
                glyph, colour = STAGE_STYLE.get(span.stage or "", OTHER_STYLE)
                style = f"bold reverse {colour}" if span is chosen else colour
                for i in range(*at):
                    row[i] = (glyph, style)
            text.append("\n" + lane[: LABEL_WIDTH - 1].ljust(LABEL_WIDTH), "bold")
            for glyph, style in row:
                text.append(glyph, style)
        text.append("\n" + " " * LABEL_WIDTH + axis(self.view, width))
        return text
