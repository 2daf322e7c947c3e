"""Drill-down: one tail request's timeline beside the comparator's request of the same shape."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, Static

from workbench.terminal_text import for_terminal
from workbench.tui.widgets.timeline import Span, Timeline, legend

if TYPE_CHECKING:
    import duckdb

    from workbench.triage.twins import PickedRequest


@dataclass(frozen=True)
class Picked:
    """The request chosen in one run, what it was ranked by and how its events look."""

    run_id: str
    request_id: str
    shape_key: str | None
    latency_us: float
    value_us: float
    n_requests: int
    spans: list[Span]
    total_us: float
    note: str = ""  # why this request (e.g. no request of the shape: the run's own quantile)


@dataclass(frozen=True)
class DrillTarget:
    """What to open: the failing run's request at quantile q (by a stage's time or latency)."""

    failing: str
    comparator: str | None
    stage: str | None = None  # None: total latency
    q: float = 0.99


def _lane(row: dict[str, Any]) -> str:
    dev, stream, core = row.get("device"), row.get("stream"), row.get("core")
    lane = f"s{stream}" if stream is not None else f"c{core}" if core is not None else "-"
    return f"d{dev}/{lane}" if dev is not None else lane


def _notes(row: dict[str, Any]) -> str:
    parts = [
        f"tile {row['tile']}" if row.get("tile") else "",
        f"fusion group {row['fusion_group']}" if row.get("fusion_group") is not None else "",
        f"memory {row['mem_tier']}" if row.get("mem_tier") else "",
        "FALLBACK" if row.get("fallback") else "",
        "RECOMPILE" if row.get("recompile") else "",
    ]
    return "  ".join(p for p in parts if p)


def spans_of(rows: list[dict[str, Any]]) -> tuple[list[Span], float]:
    """The events of a request as spans from its first event; and the time they cover."""
    if not rows:
        return [], 0.0
    t0 = min(float(r["ts_us"]) for r in rows)
    spans = [
        Span(
            start_us=float(r["ts_us"]) - t0,
            dur_us=float(r.get("dur_us") or 0.0),
            lane=_lane(r),
            stage=r.get("stage"),
            name=for_terminal(r.get("name") or "?"),
            category=for_terminal(r["category"]) if r.get("category") else None,
            shape=for_terminal(r["shape"]) if r.get("shape") else None,
            kernel=for_terminal(r["kernel"]) if r.get("kernel") else None,
            args=for_terminal(r["args"]) if r.get("args") else None,
            notes=_notes(r),
        )
        for r in rows
    ]
    return spans, max(s.end_us for s in spans)


def with_events(con: duckdb.DuckDBPyConnection, p: PickedRequest, note: str = "") -> Picked:
    """A picked request with its events as timeline spans."""
    from workbench.store.db import query_rows

    events = query_rows(con, "request_events", {"run_id": p.run_id, "request_id": p.request_id})
    spans, total = spans_of(events)
    return Picked(
        run_id=p.run_id,
        request_id=p.request_id,
        shape_key=p.shape_key,
        latency_us=p.latency_us,
        value_us=p.value_us,
        n_requests=p.n_requests,
        spans=spans,
        total_us=total,
        note=note,
    )


def serving_spans(
    con: duckdb.DuckDBPyConnection, run_id: str, request_id: str
) -> tuple[list[Span], float] | None:
    """An LLM request as the engine served it: one bar per step it was in (its prefill chunks,
    then its decodes), each with its batch mates; None when the run has no engine steps."""
    from workbench.store.db import query
    from workbench.store.serving.engine_trace import PREFILL, engine_steps, member_steps

    steps = engine_steps(query(con, "serving_step_events", {"run_id": run_id}))
    mine = member_steps(steps, request_id) if steps is not None else []
    if not mine:
        return None
    t0 = mine[0].start_us
    spans = []
    for m in mine:
        mates = ", ".join(for_terminal(r) for r in m.mates[:8]) + (
            " ..." if len(m.mates) > 8 else ""
        )
        part = f"prefill chunk of {m.tokens} tokens" if m.role == PREFILL else "decode"
        spans.append(
            Span(
                start_us=m.start_us - t0,
                dur_us=m.end_us - m.start_us,
                lane="engine",
                stage="scheduling" if m.preempted else "execution",
                name=f"step {m.number}: {part}",
                category="engine step",
                shape=None,
                kernel=None,
                args=None,
                notes=f"{len(m.mates)} batch mates: {mates or 'none'}"
                + ("  PREEMPTED" if m.preempted else ""),
            )
        )
    return spans, max(sp.end_us for sp in spans)


def with_serving_steps(con: duckdb.DuckDBPyConnection, p: PickedRequest, note: str = "") -> Picked:
    """A picked LLM request with its engine steps as spans (else its trace events)."""
    got = serving_spans(con, p.run_id, p.request_id)
    if got is None:
        return with_events(con, p, note)
    spans, total = got
    return Picked(p.run_id, p.request_id, p.shape_key, p.latency_us, p.value_us,
                  p.n_requests, spans, total, note)  # fmt: skip


def drill(store: Path, target: DrillTarget) -> tuple[Picked | None, Picked | None]:
    """The failing run's request and its twin in the comparator (workbench.triage.twins)."""
    from workbench.store.db import connect
    from workbench.triage.serving_pair import serving_join
    from workbench.triage.twins import pick_request, twin_pair

    con = connect(store)
    try:
        if target.comparator is None:
            f = pick_request(con, target.failing, None, target.stage, target.q)
            return (with_events(con, f) if f else None), None
        f, c, note = twin_pair(
            con, target.failing, target.comparator, stage=target.stage, q=target.q
        )
        # LLM serving: the steps each request was in, not the trace's events of a step.
        served = serving_join(con, target.failing, target.comparator) is not None
        show = with_serving_steps if served else with_events
        # The comparator without requests: no timeline, the screen says none was paired.
        return (show(con, f) if f else None), (show(con, c, note) if c else None)
    finally:
        con.close()


def _what(p: Picked) -> str:
    """A timeline's title: short, so it fits one line at 80 columns."""
    unit = "steps" if p.spans and p.spans[0].category == "engine step" else "events"
    return f"{p.run_id} {p.request_id}  {p.latency_us / 1000:.3f} ms  {len(p.spans)} {unit}"


def headline(f: Picked, c: Picked | None, target: DrillTarget) -> Text:
    """Which requests these are and why: the quantile, what it ranks by, n, the shape."""
    by = f"{target.stage} time" if target.stage else "latency"
    q = f"p{round(target.q * 100)}"
    text = Text.assemble(
        ("Request drill-down: ", "bold"),
        f"the {q} request by {by} of {f.run_id} (n={f.n_requests}), shape {f.shape_key or '?'}",
    )
    if c is None:
        return text
    text.append(f"; {f.latency_us / c.latency_us:.1f}x the comparator's " if c.latency_us else "; ")
    if c.note:
        text.append(f"\n{c.note}", "bold")
    else:
        text.append(f"{q} of the same shape (n={c.n_requests})")
    return text


class RequestScreen(Screen[None]):
    """Two timelines (failing above, comparator below) and the selected event in full."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,backspace", "back", "Back", id="request.back"),
        Binding("tab", "app.focus_next", "Other request", id="request.other", show=False),
    ]

    class Loaded(Message):
        def __init__(self, failing: Picked | None, comparator: Picked | None) -> None:
            super().__init__()
            self.failing = failing
            self.comparator = comparator

    def __init__(self, store: Path, target: DrillTarget) -> None:
        super().__init__()
        self.store = store
        self.target = target
        self.started = time.monotonic()
        self.opened_in_s: float | None = None  # keypress to both timelines drawn
        self.picked: tuple[Picked | None, Picked | None] | None = None

    def compose(self) -> ComposeResult:
        yield Static("Loading the request's events...", id="request-title")
        yield Timeline(id="timeline-failing")
        yield Timeline(id="timeline-comparator")
        yield Static(legend(), id="timeline-legend")
        yield Static("", id="span-detail", classes="detail")
        yield Static(
            "left/right event  + - zoom  < > pan  Home whole  Tab other request  Esc back",
            id="request-hint",
            classes="hint",
        )
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#timeline-failing", Timeline).focus()
        self.load()

    @work(thread=True, exclusive=True, exit_on_error=False, description="Load the request")
    def load(self) -> None:
        failing, comparator = drill(self.store, self.target)
        self.post_message(self.Loaded(failing, comparator))

    def on_request_screen_loaded(self, message: Loaded) -> None:
        self.picked = (message.failing, message.comparator)
        title = self.query_one("#request-title", Static)
        if message.failing is None:
            title.update(f"{self.target.failing} has no requests to drill into.")
            return
        f, c = message.failing, message.comparator
        # One time scale for both, so equal lengths mean equal time.
        total = max(f.total_us, c.total_us if c else 0.0)
        self.query_one("#timeline-failing", Timeline).set_spans(f.spans, _what(f), total)
        comp = self.query_one("#timeline-comparator", Timeline)
        if c is not None:
            comp.set_spans(c.spans, _what(c), total)
        else:
            comp.set_spans([], "no comparator paired")
        title.update(headline(f, c, self.target))
        self.call_after_refresh(self._drawn)

    def _drawn(self) -> None:
        self.opened_in_s = time.monotonic() - self.started

    @on(Timeline.Selected)
    def _selected(self, event: Timeline.Selected) -> None:
        if not event.timeline.has_focus and self.focused is not None:
            return
        self.show_span(event.timeline, event.span)

    def on_descendant_focus(self) -> None:
        if isinstance(self.focused, Timeline):
            self.show_span(self.focused, self.focused.current())

    def show_span(self, timeline: Timeline, span: Span | None) -> None:
        detail = self.query_one("#span-detail", Static)
        if span is None:
            detail.update("No event selected.")
            return
        which = "failing" if timeline.id == "timeline-failing" else "comparator"
        text = Text.assemble(
            (span.name, "bold"),
            f"  [{which}, {span.stage or 'no stage'}, {span.lane}]  ",
            (f"{span.dur_us / 1000:.3f} ms", "bold"),
            f" at +{span.start_us / 1000:.3f} ms",
        )
        text.append(f"\nshape {span.shape or '-'}  kernel {span.kernel or '-'}")
        if span.notes:
            text.append(f"  {span.notes}")
        if span.args:
            text.append(f"\nargs {span.args}")
        detail.update(text)

    def action_back(self) -> None:
        self.dismiss(None)
