"""Snapshots of every screen at 80x24 (designed for) and 120x40, on the sample store's incident."""

from __future__ import annotations

import shutil
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from test_tui_support import (
    SAMPLE_STORE,
    TRACES,
    base_screen,
    build_validating_incident,
    copy_store,
    frozen_time,
    make_app,
    wait_for,
)

SIZES = [(80, 24), (120, 40)]
# Fixed paths: screens show the store and the export folder. Under pytest-xdist this file's
# tests share one worker (--dist loadfile in pyproject), the folder's only user.
SNAP_ROOT = Path("/tmp/workbench-tui-snapshots")
INCIDENT_ID = "INC-20260115-01"


@pytest.fixture(scope="module")
def incident_store() -> Iterator[Path]:
    """The sample incident taken to 'validating' through the headless layers, clock frozen."""
    shutil.rmtree(SNAP_ROOT, ignore_errors=True)
    store = copy_store(SAMPLE_STORE, SNAP_ROOT / "store")
    folder = SNAP_ROOT / "traces"
    folder.mkdir()
    shutil.copy(TRACES / "mi250_minitoy_train_ROCm6_2_kineto.json.gz", folder)
    build_validating_incident(store, INCIDENT_ID)
    yield store
    shutil.rmtree(SNAP_ROOT, ignore_errors=True)


Before = Callable[[Any], Awaitable[None]]


def _goto(key: str, mode: str, ready: Callable[[Any], bool], *keys: str) -> Before:
    async def run_before(pilot: Any) -> None:
        app = pilot.app
        await wait_for(pilot, lambda: app.runs is not None and app.incident is not None, "open")
        # The "Resuming ..." toast fades after a few seconds, so whether a snapshot caught it
        # would depend on the machine's speed; cleared before the first key, it is gone from
        # every screen, those under a modal too (clearing later reaches the top screen only).
        app.clear_notifications()
        await pilot.press(key)
        await wait_for(pilot, lambda: app.current_mode == mode, f"{mode} screen")
        await wait_for(pilot, lambda: ready(base_screen(app)), f"{mode} data")
        if keys:
            await pilot.press(*keys)
        await pilot.pause(0.1)

    return run_before


def _ingest(pilot: Any) -> Awaitable[None]:
    async def run() -> None:
        from textual.widgets import DirectoryTree

        from workbench.tui.screens.ingest_screen import IngestScreen

        app = pilot.app
        await _goto("1", "runs", lambda s: True)(pilot)
        await pilot.press("i")
        await wait_for(pilot, lambda: isinstance(app.screen, IngestScreen), "ingest screen")
        tree = app.screen.query_one(DirectoryTree)
        await wait_for(pilot, lambda: len(tree.root.children) > 0, "folder listed")
        await pilot.pause(0.1)

    return run()


def _error(pilot: Any) -> Awaitable[None]:
    async def run() -> None:
        from workbench.tui.screens.error_modal import ErrorModal

        app = pilot.app
        await _goto("7", "close", lambda s: s.missing is not None)(pilot)
        # A "folder" under a file: offered to be created, which then fails in one line.
        await pilot.press("d", "ctrl+a", "ctrl+k", *"/etc/hostname/x", "enter", "m", "y")
        for _ in range(200):
            if isinstance(app.screen, ErrorModal):
                break
            await pilot.pause(0.05)
        assert isinstance(app.screen, ErrorModal)
        await pilot.pause(0.2)

    return run()


def _drill(pilot: Any) -> Awaitable[None]:
    async def run() -> None:
        from workbench.tui.screens.request_screen import RequestScreen

        app = pilot.app
        await _goto("3", "evidence", lambda s: s.bundle is not None)(pilot)
        await pilot.press("o")
        for _ in range(200):
            if isinstance(app.screen, RequestScreen) and app.screen.opened_in_s is not None:
                break
            await pilot.pause(0.05)
        await pilot.press("right", "right", "right")
        await pilot.pause(0.2)

    return run()


def _incidents(pilot: Any) -> Awaitable[None]:
    async def run() -> None:
        from workbench.tui.screens.incidents_screen import IncidentsScreen

        app = pilot.app
        await _goto("1", "runs", lambda s: True)(pilot)
        await pilot.press("0")
        await wait_for(
            pilot,
            lambda: isinstance(app.screen, IncidentsScreen) and app.screen.found is not None,
            "incidents",
        )
        await pilot.pause(0.1)

    return run()


def _confirm(pilot: Any) -> Awaitable[None]:
    async def run() -> None:
        from workbench.tui.screens.confirm_modal import ConfirmModal

        app = pilot.app
        await _goto("1", "runs", lambda s: True, "down", "down", "f")(pilot)
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal), "confirm")
        await pilot.pause(0.1)

    return run()


def _steady_cursor(before: Callable[[Any], Awaitable[None]]) -> Callable[[Any], Awaitable[None]]:
    """`before`, then the cursors held still: a focused Input or TextArea blinks every 0.5 s,
    so a loaded machine caught the ingest screen's file field in the off phase."""

    async def run(pilot: Any) -> None:
        await before(pilot)
        for widget in pilot.app.screen.query("Input, TextArea"):
            widget.cursor_blink = False  # stops the cycle with the cursor shown where focused
        await pilot.pause()

    return run


SCREENS: dict[str, Callable[[Any], Awaitable[None]]] = {
    "runs": _goto("1", "runs", lambda s: True),
    "pair": _goto("2", "pair", lambda s: bool(s.ranked)),
    "evidence": _goto("3", "evidence", lambda s: s.bundle is not None),
    "localize": _goto("4", "localize", lambda s: s.shown_for is not None),
    "localize-replay": _goto(
        "4", "localize", lambda s: s.shown_for is not None, "right_square_bracket"
    ),
    "owners": _goto("5", "owners", lambda s: bool(s.proposals)),
    "validate": _goto(
        "6", "validate", lambda s: s.shown_validation is not None, "right_square_bracket"
    ),
    "close": _goto("7", "close", lambda s: s.missing is not None),
    "help": _goto("1", "runs", lambda s: True, "question_mark"),
    "ingest": _ingest,
    "error": _error,
    "drill": _drill,
    "incidents": _incidents,
    "confirm": _confirm,
}


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("screen", list(SCREENS))
def test_screen_snapshot(
    screen: str,
    size: tuple[int, int],
    incident_store: Path,
    snap_compare: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(SNAP_ROOT / "traces")
    # A fresh resume state per snapshot (a fixed path: Close shows its exports folder).
    state = SNAP_ROOT / "state"
    shutil.rmtree(state, ignore_errors=True)

    with frozen_time():
        app = make_app(incident_store, state_dir=state)
        assert snap_compare(app, terminal_size=size, run_before=_steady_cursor(SCREENS[screen]))
