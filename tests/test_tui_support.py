"""Shared helpers of the app tests: stores, a driven app, waiting, the slow-handler watch."""

from __future__ import annotations

import gc
import io
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
# The bundled sample store; WORKBENCH_TEST_STORE points the app tests at another store.
SAMPLE_STORE = Path(os.environ.get("WORKBENCH_TEST_STORE", str(ROOT / "sample_traces")))
TRACES = ROOT.parent / "shared" / "traces"  # beside the checkout, as in CI
FIXED_NOW = datetime(2026, 1, 15, 9, 30, tzinfo=UTC)
# Textual's own slow-handler threshold (ms); the issue sets it to 200.
SLOW_MS = max(100, int(os.environ.get("TEXTUAL_SLOW_THRESHOLD", "200")))


def copy_store(src: Path, dst: Path) -> Path:
    """A private copy of a store's runs, without incidents (tests never write into the bundled
    store, and each starts before any incident is declared)."""
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(".staging", "*.lock", "incidents"))
    return dst


def make_app(store: Path, **kwargs: Any) -> Any:
    """The real app on `store` with a fixed clock and actor; 256 colours like a plain terminal."""
    import textual.constants

    from workbench.tui.app import WorkbenchApp

    textual.constants.COLOR_SYSTEM = "256"  # type: ignore[misc]
    kwargs.setdefault("clock", lambda: FIXED_NOW)
    kwargs.setdefault("actor", "tester")
    # The resume place is per user; tests keep theirs beside the store, never in $HOME.
    kwargs.setdefault("state_dir", store.parent / f"{store.name}-wbstate")
    return WorkbenchApp(store, **kwargs)


def screen_text(app: Any) -> str:
    """What the terminal shows, as plain text."""
    from rich.console import Console

    width, height = app.size
    console = Console(
        width=width, height=height, file=io.StringIO(), force_terminal=True, record=True
    )
    console.print(
        app.screen._compositor.render_update(
            full=True, screen_stack=app._background_screens, simplify=True
        )
    )
    return console.export_text(styles=False)


async def wait_for(
    pilot: Any, predicate: Callable[[], bool], what: str, timeout: float = 30.0
) -> None:
    """Let the app run until predicate() holds; fail with the screen when it does not, or when
    an error modal shows up instead."""
    from workbench.tui.screens.error_modal import ErrorModal

    deadline = time.monotonic() + timeout
    while True:
        app = pilot.app
        if isinstance(app.screen, ErrorModal):
            pytest.fail(f"waiting for {what}: error modal: {app.screen.cause}")
        if predicate():
            await pilot.pause()  # let the screen repaint what the state now says
            return
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}; screen:\n{screen_text(app)}")
        await pilot.pause(0.05)


@dataclass
class SlowWatch:
    """Every message whose handler took longer than the threshold (Textual's definition), in
    CPU time of the event loop's thread less its garbage collections (gc_ms, kept apart)."""

    threshold_ms: int
    slow: list[tuple[str, str, float]] = field(default_factory=list)
    count: int = 0
    gc_ms: float = 0.0


@contextmanager
def watch_handlers(threshold_ms: int = SLOW_MS) -> Iterator[SlowWatch]:
    """Time every message handler exactly where Textual's TEXTUAL_SLOW_THRESHOLD check does:
    around MessagePump._on_message, for messages that are not events. In CPU time of the event
    loop's thread: what a handler itself spends, which a machine that stalls or pauses the test
    process (page-fault storms, other jobs) does not inflate, where wall time flaked.

    Less the thread's garbage collections: a full one walks the whole process's heap, which in
    pytest is the suite's: the close screen's preview handler, ~15 ms run alone, measured 830 ms
    in a full CI run, about what a full collection of the suite's heap takes there."""
    from textual.events import Event
    from textual.message_pump import MessagePump

    watch = SlowWatch(threshold_ms)
    original = MessagePump._on_message
    loop_thread = threading.get_ident()
    in_gc = {"start": 0.0, "total": 0.0}

    def on_gc(phase: str, _info: dict[str, int]) -> None:
        if threading.get_ident() != loop_thread:
            return
        if phase == "start":
            in_gc["start"] = time.thread_time()
        else:
            in_gc["total"] += time.thread_time() - in_gc["start"]

    async def timed(self: MessagePump, message: Any) -> None:
        if isinstance(message, Event):
            await original(self, message)
            return
        start, gc_before = time.thread_time(), in_gc["total"]
        await original(self, message)
        gc_ms = (in_gc["total"] - gc_before) * 1000
        took = (time.thread_time() - start) * 1000 - gc_ms
        watch.count += 1
        watch.gc_ms += gc_ms
        if took > threshold_ms:
            watch.slow.append((type(self).__name__, type(message).__name__, round(took, 1)))

    MessagePump._on_message = timed  # type: ignore[method-assign]
    gc.callbacks.append(on_gc)
    try:
        yield watch
    finally:
        gc.callbacks.remove(on_gc)
        MessagePump._on_message = original  # type: ignore[method-assign]


def base_screen(app: Any) -> Any:
    """The step screen of the current mode, under any modal."""
    return app.screen_stack[0]


def table_keys(app: Any, selector: str) -> list[str]:
    """Row keys of a DataTable on the current screen."""
    from textual.widgets import DataTable

    found = app.screen.query(selector)
    table = found.first(DataTable) if found else base_screen(app).query_one(selector, DataTable)
    return [str(k.value) for k in table.rows]


async def move_to(pilot: Any, selector: str, key: str) -> None:
    """Move a table's cursor to the row `key` with the arrow keys, as a user would."""
    from textual.widgets import DataTable

    app = pilot.app
    found = app.screen.query(selector)  # a modal's table, else the step screen's
    table = found.first(DataTable) if found else base_screen(app).query_one(selector, DataTable)
    table.focus()
    keys = table_keys(app, selector)
    assert key in keys, f"{key} not in {keys}"
    # Bounded: a cursor that does not move (focus lost to a modal) fails instead of hanging.
    for _ in range(len(keys)):
        if table.cursor_row == keys.index(key):
            break
        await pilot.press("up" if table.cursor_row > keys.index(key) else "down")
    assert table.cursor_row == keys.index(key), f"cursor stuck at row {table.cursor_row}"


def test_screen_text_and_wait_helpers_see_the_app(tmp_path: Path) -> None:
    """The helpers themselves: an empty store shows the empty-store hint."""
    import asyncio

    store = tmp_path / "store"
    store.mkdir()

    async def run() -> str:
        app = make_app(store)
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_for(pilot, lambda: app.runs is not None, "runs read")
            await pilot.pause()
            return screen_text(app)

    text = asyncio.run(run())
    assert "The store is empty: press i to ingest" in text


# When the incident record says things happened (snapshots must not depend on the wall clock).
FROZEN_AT = datetime(2026, 1, 15, 8, 7, tzinfo=UTC)


@contextmanager
def frozen_time(at: datetime = FROZEN_AT) -> Iterator[None]:
    """Every timestamp the headless layers write (records, timelines, due dates, summaries)."""
    import importlib
    from datetime import date

    stamp = at.isoformat(timespec="seconds")

    class FrozenDateTime(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> FrozenDateTime:  # type: ignore[override]
            return cls.fromtimestamp(at.timestamp(), tz or UTC)

    class FrozenDate(date):
        @classmethod
        def today(cls) -> FrozenDate:
            return cls(at.year, at.month, at.day)

    patch = pytest.MonkeyPatch()
    try:
        for name in ("incident", "lifecycle", "summary", "validation", "workflow"):
            module = importlib.import_module(f"workbench.incident.{name}")
            if hasattr(module, "now_iso"):
                patch.setattr(module, "now_iso", lambda: stamp)
            if isinstance(getattr(module, "datetime", None), type):
                patch.setattr(module, "datetime", FrozenDateTime)
            if isinstance(getattr(module, "date", None), type):
                patch.setattr(module, "date", FrozenDate)
        yield
    finally:
        patch.undo()


INCIDENT_ID = "INC-20260115-01"


def build_validating_incident(store: Path, incident_id: str = INCIDENT_ID) -> None:
    """The sample incident taken to 'validating' through the headless layers, clock frozen:
    paired (with the reproduction pinned), triaged, classified, owned, candidate validated."""
    from workbench.incident import workflow
    from workbench.incident.incident import create_incident, load_incident
    from workbench.incident.owners import load_roster, propose_owners
    from workbench.incident.validation import validate_incident
    from workbench.triage.triage import triage

    with frozen_time():
        inc = create_incident(
            store, "Tail latency regression in run failing", "sev2", "tester", incident_id
        )
        workflow.pair(store, inc.id, "failing", "comparator", "tester", "fixed-metadata")
        doc = triage(store, "failing", "comparator", fixed="fixed-metadata").to_json()
        workflow.attach_triage(store, inc.id, doc, "tester")
        workflow.classify(store, inc.id, "tester")
        roster = load_roster(store)
        people = iter(["Ada Compiler", "Rui Runtime", "Obi Observer", "Sam Serving"])
        for p in propose_owners(load_incident(store, inc.id), roster):
            workflow.assign(store, inc.id, p.role, next(people), "tester", roster)
        validate_incident(store, inc.id, "candidate-rollback", "tester")
