"""The app's fleet panel at 80x24: the slowed host first with its shared tag; a bad cohort is a
one-line error in the panel, not a crash."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from textual.app import App, ComposeResult
from textual.widgets import Static

from generators.fleet_synth import fleet_members, write_fleet
from workbench.store.fleet.engine import open_engine
from workbench.store.fleet.fleet_ingest import ingest_fleet
from workbench.tui.widgets.fleet_panel import FleetPanel

SLOW_DRIVER = "535.54.03"


@pytest.fixture(scope="module")
def fleet_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """4 hosts x 2 ranks as one run `canary`; host02 is slowed and runs the older driver."""
    src = tmp_path_factory.mktemp("fleet_src")
    write_fleet(src, fleet_members(4, 2, slow_hosts=(2,)), requests=120, ops=3)
    store = tmp_path_factory.mktemp("fleet_store")
    with open_engine(workers=1) as eng:
        ingest_fleet(store, [str(src)], run_id="canary", engine=eng)
    return store


class PanelApp(App[None]):
    def compose(self) -> ComposeResult:
        yield FleetPanel(id="fleet")


async def _shown(store: Path, failing: list[str]) -> tuple[FleetPanel, str]:
    app = PanelApp()
    async with app.run_test(size=(80, 24)) as pilot:
        panel = app.query_one(FleetPanel)
        panel.show(store, failing)
        await pilot.pause()
        await app.workers.wait_for_complete()
        await pilot.pause()
        text = str(panel.query_one("#fleet-text", Static).render())
        return panel, text


def test_slowed_host_first_with_its_shared_tag(fleet_store: Path) -> None:
    panel, text = asyncio.run(_shown(fleet_store, ["canary"]))
    assert panel.view is not None and panel.error is None
    assert panel.view.failing.flagged == ["host02"]
    lines = text.splitlines()
    assert lines[0] == "Fleet view: failing canary"
    flagged = [ln for ln in lines if ln.startswith("  * ")]
    assert len(flagged) == 1 and flagged[0].split()[1] == "host02"
    assert f"shared by the flagged hosts: driver_version={SLOW_DRIVER} (0 of 3" in text
    hosts = lines[lines.index("  p99 by host (n, p99 [95% CI]):") + 1]
    assert hosts.split()[0] == "host02"  # the highest p99 first
    assert "n=" in hosts and "[" in hosts  # each figure with its n and interval


def test_unknown_run_is_one_line_in_the_panel(fleet_store: Path) -> None:
    panel, text = asyncio.run(_shown(fleet_store, ["nope"]))
    assert panel.view is None and panel.error is not None
    assert text.startswith("Fleet view failed: ") and "nope" in text
    assert "\n" not in panel.error


def test_fleet_screen_opens_over_the_app_and_closes(fleet_store: Path) -> None:
    from workbench.tui.screens.fleet_screen import FleetScreen

    async def go() -> tuple[str, bool]:
        app = App[None]()
        async with app.run_test(size=(80, 24)) as pilot:
            app.push_screen(FleetScreen(fleet_store, ["canary"]))
            await pilot.pause()
            await app.workers.wait_for_complete()
            await pilot.pause()
            shown = str(app.screen.query_one("#fleet-text", Static).render())
            await pilot.press("escape")
            await pilot.pause()
            return shown, isinstance(app.screen, FleetScreen)

    shown, still_open = asyncio.run(go())
    assert shown.startswith("Fleet view: failing canary") and "  * host02" in shown
    assert not still_open
