"""Snapshots of every screen at 100x30 and 80x24, on the sample store's incident."""

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

SIZES = [(100, 30), (80, 24)]
# Fixed paths: screens show the store and the export folder.
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

        from workbench.tui.ingest_screen import IngestScreen

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
        from workbench.tui.error_modal import ErrorModal

        app = pilot.app
        await _goto("7", "close", lambda s: s.missing is not None)(pilot)
        await pilot.press("d", "ctrl+a", "ctrl+k", *"/no/such/folder", "enter", "m")
        for _ in range(200):
            if isinstance(app.screen, ErrorModal):
                break
            await pilot.pause(0.05)
        assert isinstance(app.screen, ErrorModal)
        await pilot.pause(0.2)

    return run()


SCREENS: dict[str, Callable[[Any], Awaitable[None]]] = {
    "runs": _goto("1", "runs", lambda s: True),
    "pair": _goto("2", "pair", lambda s: bool(s.ranked)),
    "evidence": _goto("3", "evidence", lambda s: s.bundle is not None),
    "localize": _goto("4", "localize", lambda s: s.shown_for is not None),
    "owners": _goto("5", "owners", lambda s: bool(s.proposals)),
    "validate": _goto(
        "6", "validate", lambda s: s.shown_validation is not None, "right_square_bracket"
    ),
    "close": _goto("7", "close", lambda s: s.missing is not None),
    "help": _goto("1", "runs", lambda s: True, "question_mark"),
    "ingest": _ingest,
    "error": _error,
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
    with frozen_time():
        app = make_app(incident_store)
        assert snap_compare(app, terminal_size=size, run_before=SCREENS[screen])
