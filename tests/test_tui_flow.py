"""The whole flow on the sample store, by keys only: runs list -> exported closure summary.

Every message handler must stay under TEXTUAL_SLOW_THRESHOLD (200 ms of CPU time) along the way,
and quitting in the middle and starting again must resume the same incident where it was.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from accel.stages import STAGES
from test_tui_support import (
    SAMPLE_STORE,
    base_screen,
    copy_store,
    make_app,
    move_to,
    screen_text,
    table_keys,
    wait_for,
    watch_handlers,
)
from workbench.tui.screens.confirm_modal import ConfirmModal

OWNERS = {"compiler lead": "Ada Compiler", "runtime lead": "Rui Runtime"}


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return copy_store(SAMPLE_STORE, tmp_path / "store")


async def type_text(pilot: Any, text: str) -> None:
    for ch in text:
        await pilot.press("space" if ch == " " else ch)


def status(app: Any) -> str | None:
    return app.incident.status if app.incident else None


async def declare_and_pair(pilot: Any) -> None:
    """Runs: f on the failing run; Pair: pin the reproduction, suspect the changed tag, accept."""
    app = pilot.app
    await wait_for(pilot, lambda: app.runs is not None and app.incident_loaded, "runs list")
    assert "press f to declare the incident" in screen_text(app)
    await move_to(pilot, "#runs-table", "failing")
    await pilot.press("f")
    await wait_for(pilot, lambda: status(app) == "declared", "incident declared")
    await wait_for(pilot, lambda: app.current_mode == "pair", "pair screen")
    screen = base_screen(app)
    await wait_for(pilot, lambda: bool(screen.ranked), "comparator ranking")
    # The suggestion: the canary before the compiler upgrade, which differs only in the
    # compiler version and so isolates that change.
    assert table_keys(app, "#pair-table")[0] == "comparator"
    assert screen.ranked[0].eligible
    assert "isolates that change" in screen_text(app)
    # The re-run of the failing config is the reproduction, listed but not eligible as the
    # comparator, and saying so: pin it from here.
    await move_to(pilot, "#pair-table", "fixed-metadata")
    repro = next(c for c in screen.ranked if c.run_id == "fixed-metadata")
    # The LLM incident's runs (another model and workload) are listed but not eligible.
    others = [c for c in screen.ranked if c is not repro and not c.run_id.startswith("llm-")]
    assert not repro.eligible and all(c.eligible for c in others)
    assert "fixed-metadata: same configuration as the failing run, run after it" in " ".join(
        screen_text(app).split()
    )
    await pilot.press("p")
    await wait_for(
        pilot,
        lambda: (
            app.incident.fixed_metadata == "fixed-metadata"
            and "fixed-metadata" not in table_keys(app, "#pair-table")
        ),
        "reproduction pinned",
    )
    assert "Reproduction (fixed-metadata run) fixed-metadata" in screen_text(app)
    await move_to(pilot, "#pair-table", "comparator")
    await pilot.press("a")
    # The triage may finish (localized) before we look: paired is the comparator being set.
    await wait_for(pilot, lambda: app.incident.comparator == "comparator", "paired")
    await wait_for(pilot, lambda: app.current_mode == "evidence", "evidence screen")


async def evidence_and_localize(pilot: Any) -> None:
    app = pilot.app
    screen = base_screen(app)
    await wait_for(pilot, lambda: screen.bundle is not None, "evidence queries")
    assert table_keys(app, "#stage-table")[0] == "latency"
    for _ in range(7):  # every evidence view, by keys
        await pilot.press("right_square_bracket")
    await pilot.press("4")
    await wait_for(pilot, lambda: app.current_mode == "localize", "localize screen")
    await wait_for(pilot, lambda: status(app) == "localized", "triage attached", timeout=120)
    await pilot.pause(0.2)
    loc = app.incident.localization
    assert (loc.origin, loc.manifest, loc.mechanism) == (
        "lowering",
        "execution",
        "fusion_memory_burst",
    )
    text = screen_text(app)
    # The verdict view, in plain words, every warning whole (80x24).
    assert "Starts in lowering" in text and "fusion_memory_burst" in text
    assert "probability the origin is right" in text and "confidence" not in text
    for warning in app.incident.triage["warnings"]:
        assert " ".join(warning.split()) in " ".join(text.split()), warning
    # Replay per stage, at 80x24: every stage row on screen, origin (O) and manifest (M) marked,
    # the failing run's observed/predicted p99 latency as the attached triage says.
    await pilot.press("right_square_bracket")
    await pilot.pause(0.1)
    text = screen_text(app)
    assert "observed / model-predicted" in text  # the legend under the table
    keys = table_keys(app, "#replay-table")
    assert keys == [*STAGES, "other", "latency"]
    lat = next(r for r in app.incident.triage["replay"]["rows"] if r["id"] == "latency")["failing"]
    f99 = f"{lat['observed_p99_us'] / 1e3:.2f}/{lat['predicted_p99_us'] / 1e3:.2f}"
    await move_to(pilot, "#replay-table", "execution")
    await pilot.pause(0.1)
    text = screen_text(app)
    lines = [ln.replace("▶", " ") for ln in text.splitlines()]
    assert any(ln.split()[:2] == ["execution", "M"] for ln in lines if ln.strip())
    assert "execution manifest  n=" in text and "(failing - comparator)" in text
    assert "comparator obs " in text  # the detail's last line is not cut off
    await move_to(pilot, "#replay-table", "latency")
    await pilot.pause(0.1)
    lines = [ln.replace("▶", " ") for ln in screen_text(app).splitlines()]
    assert any(ln.split()[:1] == ["latency"] and f99 in ln for ln in lines), f99
    await move_to(pilot, "#replay-table", "lowering")
    await pilot.pause(0.1)
    lines = [ln.replace("▶", " ") for ln in screen_text(app).splitlines()]
    assert any(ln.split()[:2] == ["lowering", "O"] for ln in lines if ln.strip())
    await pilot.press("right_square_bracket", "right_square_bracket")  # proof, primary metric
    await pilot.press("c")
    await wait_for(pilot, lambda: status(app) == "classified", "classified")
    await wait_for(pilot, lambda: app.current_mode == "owners", "owners screen")


async def owners(pilot: Any) -> None:
    app = pilot.app
    screen = base_screen(app)
    await wait_for(pilot, lambda: bool(screen.proposals), "owner proposals")
    roles = table_keys(app, "#owners-table")
    assert roles[0] == "compiler lead"  # owners follow the origin
    for role in roles:
        await move_to(pilot, "#owners-table", role)
        await pilot.press("e")
        await pilot.press("ctrl+a", "ctrl+k")  # clear the proposal, if any
        await type_text(pilot, OWNERS[role])
        await pilot.press("enter")
        await wait_for(
            pilot,
            lambda role=role: any(o.role == role for o in app.incident.owners),
            f"owner of {role}",
        )
    await wait_for(pilot, lambda: status(app) == "assigned", "assigned")


async def validate(pilot: Any) -> None:
    app = pilot.app
    await pilot.press("6")
    await wait_for(pilot, lambda: app.current_mode == "validate", "validate screen")
    await wait_for(
        pilot, lambda: "candidate-synthetic" in table_keys(app, "#candidate-table"), "candidates"
    )
    # The synthetic-shape measurement first: the shape gate must refuse it.
    await move_to(pilot, "#candidate-table", "candidate-synthetic")
    await pilot.press("v")
    await wait_for(
        pilot,
        lambda: (
            app.incident.replay_check is not None
            and app.incident.replay_check.candidate == "candidate-synthetic"
        ),
        "synthetic validated",
        timeout=60,
    )
    assert not app.incident.replay_check.passed
    await pilot.pause(0.2)
    # One verdict on screen: REFUSED, and nothing that reads as a pass (issue 14, point 1).
    words = screen_text(app).replace("\n", " ")
    assert "candidate-synthetic:  REFUSED" in words
    assert "PASS " not in words.replace("not a PASS", "") and "Pass" not in words
    await pilot.press("left_square_bracket")  # back to the candidates
    await move_to(pilot, "#candidate-table", "candidate-rollback")
    await pilot.press("v")
    await wait_for(
        pilot,
        lambda: (
            app.incident.validation is not None
            and app.incident.validation.candidate == "candidate-rollback"
        ),
        "rollback validated",
        timeout=60,
    )
    assert app.incident.validation.verdict == "PASS"
    assert app.incident.replay_check.passed
    assert app.incident.rollback_criteria
    text = screen_text(app)
    assert "candidate-rollback:  PASS " in text and "REFUSED" not in text
    # Edit a rollback criterion: its window goes to 2000 requests, saved at once.
    await pilot.press("e")
    await pilot.press("ctrl+a", "ctrl+k")
    first = app.incident.rollback_criteria[0]
    shown = first.threshold / 1000 if first.unit == "us" else first.threshold
    await type_text(pilot, f"{shown:g} 2000")
    await pilot.press("enter")
    await wait_for(
        pilot,
        lambda: app.incident.rollback_criteria[0].window_requests == 2000,
        "criterion edited",
    )
    assert app.incident.rollback_criteria[0].source == "manual"
    # Add a criterion (a manual copy of the highlighted one), then delete it again.
    count = len(app.incident.rollback_criteria)
    await pilot.press("n")
    await wait_for(pilot, lambda: len(app.incident.rollback_criteria) == count + 1, "added")
    await pilot.press("down", "x", "y")  # delete asks first
    await wait_for(pilot, lambda: len(app.incident.rollback_criteria) == count, "deleted")
    assert app.incident.rollback_criteria[0].window_requests == 2000


async def close_and_export(pilot: Any, folder: Path) -> tuple[Path, Path]:
    app = pilot.app
    await pilot.press("7")
    await wait_for(pilot, lambda: app.current_mode == "close", "close screen")
    screen = base_screen(app)
    await wait_for(pilot, lambda: screen.missing == [], "close gate passes")
    await pilot.press("x")
    await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal), "asked to close")
    assert status(app) != "closed"  # nothing happens before the answer
    await pilot.press("y")
    await wait_for(pilot, lambda: status(app) == "closed", "closed")
    await pilot.press("d")
    await pilot.press("ctrl+a", "ctrl+k")
    await type_text(pilot, str(folder))
    await pilot.press("enter")
    await pilot.press("m")
    md = folder / f"{app.incident.id}.md"
    await wait_for(pilot, lambda: screen.last_export == md.resolve(), "markdown export")
    assert app.clipboard == str(md.resolve())  # OSC 52 copy
    # The app's Markdown export writes its images beside it and links them, as the CLI's does.
    images = folder / f"{app.incident.id}.files"
    assert (images / "latency.png").is_file() and (images / "stages.png").is_file()
    assert f"{images.name}/latency.png" in md.read_text()
    await pilot.press("j")
    js = folder / f"{app.incident.id}.json"
    await wait_for(pilot, lambda: screen.last_export == js.resolve(), "json export")
    assert "path copied" in screen_text(app)
    return md, js


def test_whole_flow_by_keys_with_a_restart_in_the_middle(store: Path, tmp_path: Path) -> None:
    """Runs list -> exported summary; the app is quit after the classification and started
    again, and the incident resumes exactly where it was."""
    out = tmp_path / "out"
    out.mkdir()

    async def first_half() -> tuple[str, int, Any]:
        app = make_app(store)
        with watch_handlers() as watch:
            async with app.run_test(size=(80, 24)) as pilot:
                await declare_and_pair(pilot)
                await evidence_and_localize(pilot)
                inc = app.incident
                await pilot.press("q", "y")
        return inc.id, inc.version, watch

    async def second_half() -> tuple[str, int, str, str, Path, Path, Any]:
        app = make_app(store)
        with watch_handlers() as watch:
            async with app.run_test(size=(80, 24)) as pilot:
                await wait_for(pilot, lambda: app.incident is not None, "incident resumed")
                resumed = (app.incident.id, app.incident.version, app.incident.status)
                await wait_for(pilot, lambda: app.current_mode == "owners", "back on owners")
                await wait_for(pilot, lambda: bool(base_screen(app).proposals), "proposals")
                await pilot.pause(0.1)
                text = screen_text(app)
                await owners(pilot)
                await validate(pilot)
                md, js = await close_and_export(pilot, out)
        return (*resumed, text, md, js, watch)

    iid, version, watch1 = asyncio.run(first_half())
    iid2, version2, state, text, md, js, watch2 = asyncio.run(second_half())
    assert (iid2, version2, state) == (iid, version, "classified")
    assert iid in text and "classified" in text and "compiler lead" in text
    for watch in (watch1, watch2):
        assert watch.count > 100
        assert not watch.slow, f"handlers over {watch.threshold_ms} ms: {watch.slow}"
    summary = md.read_text(encoding="utf-8")
    # The export's first screenful is the brief: the fix's compiler version, the fusion numbers.
    first = "\n".join(summary.splitlines()[:24])
    assert "## Brief" in first and "2.5.1" in first and "9,600 vs 96,000" in first
    for needle in (
        iid,
        "closed",
        "failing",
        "comparator",
        "fixed-metadata",
        "lowering",
        "execution",
        "fusion_memory_burst",
        "candidate-rollback",
        "PASS",
        *OWNERS.values(),
        "2000",
    ):
        assert needle in summary, f"{needle!r} missing from the Markdown summary"
    doc = json.loads(js.read_text(encoding="utf-8"))
    flat = json.dumps(doc)
    for needle in (iid, "fusion_memory_burst", "candidate-rollback", *OWNERS.values()):
        assert needle in flat, f"{needle!r} missing from the JSON summary"
