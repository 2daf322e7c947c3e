"""The Pair screen's suspect tag (s) is saved with the pairing and comes back after a restart."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from test_tui_support import (
    SAMPLE_STORE,
    base_screen,
    copy_store,
    make_app,
    move_to,
    screen_text,
    wait_for,
)
from workbench.incident.incident import list_incidents, load_incident


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return copy_store(SAMPLE_STORE, tmp_path / "store")


def test_suspect_tag_survives_a_restart(store: Path) -> None:
    async def pair_with_suspect() -> None:
        app = make_app(store)
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_for(pilot, lambda: app.runs is not None and app.incident_loaded, "runs")
            await move_to(pilot, "#runs-table", "failing")
            await pilot.press("f")
            await wait_for(pilot, lambda: app.current_mode == "pair", "pair screen")
            screen = base_screen(app)
            await wait_for(pilot, lambda: bool(screen.ranked), "ranked")
            await pilot.press("s")  # compiler_version: the only locked tag that differs
            await wait_for(pilot, lambda: screen.suspect == "compiler_version", "suspected")
            await wait_for(pilot, lambda: bool(screen.ranked), "re-ranked")
            await move_to(pilot, "#pair-table", "comparator")
            await pilot.press("a")
            await wait_for(pilot, lambda: app.incident.comparator == "comparator", "paired")
            # Let the background triage finish so the app quits cleanly.
            await wait_for(pilot, lambda: app.triage_state() != "running", "triage", timeout=120)

    async def reopen() -> tuple[str | None, str]:
        app = make_app(store)
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_for(pilot, lambda: app.incident is not None, "incident resumed")
            await pilot.press("2")
            await wait_for(pilot, lambda: app.current_mode == "pair", "pair screen")
            screen = base_screen(app)
            await wait_for(pilot, lambda: bool(screen.ranked), "ranked")
            await pilot.pause(0.1)
            return screen.suspect, screen_text(app)

    asyncio.run(pair_with_suspect())
    (summary,) = list_incidents(store)
    saved = load_incident(store, summary.id)
    assert saved.suspect == "compiler_version"
    assert not any("compiler_version" in w for w in saved.pair_warnings)
    suspect, text = asyncio.run(reopen())
    assert suspect == "compiler_version"
    assert "suspect tag: compiler_version" in text
