"""The app shell on a real store: runs list, help, palette, keymap, errors, ingest, resume."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from test_tui_support import (
    SAMPLE_STORE,
    TRACES,
    copy_store,
    make_app,
    move_to,
    screen_text,
    table_keys,
    wait_for,
    watch_handlers,
)
from workbench.store.layout import run_ids
from workbench.store.runs import list_runs


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return copy_store(SAMPLE_STORE, tmp_path / "store")


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_runs_list_shows_every_run_with_its_tail(store: Path) -> None:
    expected = list_runs(store)
    assert len(expected) >= 2

    async def go() -> None:
        app = make_app(store)
        with watch_handlers() as watch:
            async with app.run_test(size=(100, 30)) as pilot:
                await wait_for(pilot, lambda: app.runs is not None, "runs list")
                await pilot.pause()
                assert table_keys(app, "#runs-table") == [r.run_id for r in expected]
                text = screen_text(app)
                first = expected[0]
                assert f"{first.p99_us / 1000:.2f}" in text
                assert "press f to declare the incident" in text
        assert watch.count > 0 and not watch.slow, watch.slow

    run(go())


def test_help_lists_every_binding_id(store: Path) -> None:
    from workbench.tui.app_keys import known_binding_ids

    async def go() -> None:
        app = make_app(store)
        async with app.run_test(size=(100, 30)) as pilot:
            await pilot.press("question_mark")
            await pilot.pause()
            from workbench.tui.screens.help_screen import HelpScreen

            assert isinstance(app.screen, HelpScreen)
            assert table_keys(app, "#help-table") == known_binding_ids()
            await pilot.press("escape")
            await pilot.pause()
            assert not isinstance(app.screen, HelpScreen)

    run(go())


def test_palette_provider_runs_main_actions(store: Path) -> None:
    from workbench.tui.palette import COMMANDS, WorkbenchCommands

    async def go() -> None:
        app = make_app(store)
        async with app.run_test(size=(100, 30)) as pilot:
            await wait_for(pilot, lambda: app.runs is not None, "runs list")
            provider = WorkbenchCommands(app.screen)
            titles = [hit.text async for hit in provider.discover()]
            assert titles == [c[0] for c in COMMANDS]
            hits = [hit async for hit in provider.search("evidence tails")]
            assert hits and "Evidence" in str(hits[0].text)
            await hits[0].command()
            await pilot.pause()
            assert app.current_mode == "evidence"
            # Through the real palette: ctrl+p, type, enter.
            await pilot.press("ctrl+p")
            await pilot.pause()
            for ch in "runs list":
                await pilot.press(ch if ch != " " else "space")
            await pilot.pause(0.3)
            await pilot.press("enter")
            await wait_for(pilot, lambda: app.current_mode == "runs", "palette to switch to Runs")

    run(go())


def test_keymap_rebinds_an_action(store: Path) -> None:
    async def go() -> None:
        app = make_app(store, keymap={"runs.mark_failing": "x"})
        async with app.run_test(size=(100, 30)) as pilot:
            await wait_for(pilot, lambda: app.runs is not None and app.incident_loaded, "runs")
            first = table_keys(app, "#runs-table")[0]
            await pilot.press("f")
            await pilot.pause(0.2)
            assert app.incident is None  # f no longer declares
            await pilot.press("x")
            await wait_for(pilot, lambda: app.incident is not None, "incident declared by x")
            assert app.incident.failing == first

    run(go())


def test_unreadable_store_shows_one_line_error_not_a_traceback(tmp_path: Path) -> None:
    store = tmp_path / "store"
    (store / "runs").mkdir(parents=True)
    (store / "runs" / "broken.parquet").write_bytes(b"PAR1 this is not parquet")

    async def go() -> None:
        from workbench.tui.screens.error_modal import ErrorModal

        app = make_app(store)
        async with app.run_test(size=(80, 24)) as pilot:
            for _ in range(200):
                if isinstance(app.screen, ErrorModal):
                    break
                await pilot.pause(0.05)
            assert isinstance(app.screen, ErrorModal)
            cause = app.screen.cause
            assert "\n" not in cause and "Traceback" not in cause and cause
            text = screen_text(app)
            assert "Traceback" not in text
            assert "broken.parquet" in cause or "Parquet" in cause or "parquet" in cause
            await pilot.press("enter")
            await pilot.pause()
            assert not isinstance(app.screen, ErrorModal)
            assert app.is_running

    run(go())


def test_launch_refuses_missing_store_and_bad_keymap(tmp_path: Path) -> None:
    from workbench.errors import WorkbenchError
    from workbench.tui.launch import launch

    with pytest.raises(WorkbenchError, match="store directory does not exist"):
        launch(tmp_path / "nope")
    bad = tmp_path / "keys.toml"
    bad.write_text('[keys]\n"runs.nothing" = "x"\n', encoding="utf-8")
    (tmp_path / "s").mkdir()
    with pytest.raises(WorkbenchError, match="unknown binding id"):
        launch(tmp_path / "s", bad)


def test_ingest_through_the_path_picker(store: Path) -> None:
    trace = TRACES / "mi250_minitoy_train_ROCm6_2_kineto.json.gz"
    before = set(run_ids(store))

    async def go() -> None:
        from workbench.tui.screens.ingest_screen import IngestScreen

        app = make_app(store)
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_for(pilot, lambda: app.runs is not None, "runs list")
            await pilot.press("i")
            await wait_for(pilot, lambda: isinstance(app.screen, IngestScreen), "ingest screen")
            path_input = app.screen.query_one("#ingest-path")
            path_input.value = str(trace.parent) + "/mi25"
            await pilot.press("tab")  # completes the one name that starts so
            assert path_input.value == str(trace)
            await pilot.press("enter")  # a file: on to the run id
            assert app.screen.focused.id == "ingest-run-id"
            for ch in "mi250-toy":
                await pilot.press(ch)
            await pilot.press("ctrl+s")
            await wait_for(pilot, lambda: not isinstance(app.screen, IngestScreen), "import done")
            await wait_for(pilot, lambda: "mi250-toy" in table_keys(app, "#runs-table"), "new row")

    run(go())
    assert set(run_ids(store)) == before | {"mi250-toy"}


def test_ingest_cancel_leaves_the_store_as_it_was(store: Path) -> None:
    trace = TRACES / "rank0.json.gz"
    before = sorted(p.relative_to(store) for p in store.rglob("*"))

    async def go() -> None:
        from workbench.tui.screens.ingest_screen import IngestScreen

        app = make_app(store)
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_for(pilot, lambda: app.runs is not None, "runs list")
            await pilot.press("i")
            await wait_for(pilot, lambda: isinstance(app.screen, IngestScreen), "ingest screen")
            screen = app.screen
            screen.query_one("#ingest-path").value = str(trace)
            # Start and cancel in one step (Pilot.press would wait for the whole import): the
            # import checks the event between its phases.
            screen.action_start()
            assert screen.cancel_event is not None
            screen.action_cancel()
            assert screen.cancel_event.is_set()
            await wait_for(pilot, lambda: screen.cancel_event is None, "import stopped", 60)
            status = str(screen.query_one("#ingest-status").render())
            assert "Import cancelled; nothing was written" in status
            assert app.screen is screen  # a cancel is not an error: no modal
            await pilot.press("escape")  # close the ingest screen
            await pilot.pause()
            assert not isinstance(app.screen, IngestScreen)

    run(go())
    assert sorted(p.relative_to(store) for p in store.rglob("*")) == before


def test_quit_and_reopen_resumes_the_incident(store: Path) -> None:
    async def declare() -> tuple[str, str]:
        app = make_app(store)
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_for(pilot, lambda: app.runs is not None and app.incident_loaded, "runs")
            await pilot.press("down", "f")
            await wait_for(pilot, lambda: app.incident is not None, "incident declared")
            await wait_for(pilot, lambda: app.current_mode == "pair", "pair screen")
            inc = app.incident
            await pilot.press("q", "y")
        return inc.id, inc.failing

    async def reopen() -> tuple[str, str, str]:
        app = make_app(store)
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_for(pilot, lambda: app.incident is not None, "incident resumed")
            await wait_for(pilot, lambda: app.current_mode == "pair", "back on pair")
            await pilot.pause(0.2)
            return app.incident.id, app.incident.failing, screen_text(app)

    iid, failing = run(declare())
    iid2, failing2, text = run(reopen())
    assert (iid2, failing2) == (iid, failing)
    assert iid in text and failing in text


def test_ingest_of_a_malformed_file_is_a_one_line_modal(store: Path, tmp_path: Path) -> None:
    bad = tmp_path / "broken.json"
    bad.write_text('{"traceEvents": [{"ph": "X", "name": ', encoding="utf-8")
    before = sorted(p.relative_to(store) for p in store.rglob("*"))

    async def go() -> None:
        from workbench.tui.screens.error_modal import ErrorModal
        from workbench.tui.screens.ingest_screen import IngestScreen

        app = make_app(store)
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_for(pilot, lambda: app.runs is not None, "runs list")
            await pilot.press("i")
            await wait_for(pilot, lambda: isinstance(app.screen, IngestScreen), "ingest screen")
            app.screen.query_one("#ingest-path").value = str(bad)
            await pilot.press("ctrl+s")
            for _ in range(400):
                if isinstance(app.screen, ErrorModal):
                    break
                await pilot.pause(0.05)
            assert isinstance(app.screen, ErrorModal)
            assert "broken.json" in app.screen.cause and "\n" not in app.screen.cause
            assert "Traceback" not in screen_text(app)

    run(go())
    assert sorted(p.relative_to(store) for p in store.rglob("*")) == before


def test_a_change_made_elsewhere_is_a_conflict_then_reloaded(store: Path) -> None:
    from workbench.incident import workflow

    async def go() -> None:
        from workbench.tui.screens.error_modal import ErrorModal

        app = make_app(store)
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_for(pilot, lambda: app.runs is not None and app.incident_loaded, "runs")
            first = table_keys(app, "#runs-table")[0]
            await pilot.press("f")
            await wait_for(pilot, lambda: app.incident is not None, "declared")
            shown = app.incident
            # Someone else (the CLI) changes the record while the app shows version `shown`.
            workflow.add_action(store, shown.id, "check the canary", "someone", "2030-01-01", "cli")
            await pilot.press("1")
            other = next(k for k in table_keys(app, "#runs-table") if k != first)
            await move_to(pilot, "#runs-table", other)
            await pilot.press("p")
            for _ in range(200):
                if isinstance(app.screen, ErrorModal):
                    break
                await pilot.pause(0.05)
            assert isinstance(app.screen, ErrorModal)
            assert "conflict" in app.screen.cause
            await pilot.press("enter")
            await wait_for(pilot, lambda: app.incident.version > shown.version, "reloaded")
            assert app.incident.fixed_metadata is None  # the refused change wrote nothing
            assert [a.text for a in app.incident.actions] == ["check the canary"]

    run(go())
