"""The sample store's LLM-serving incident in the app, by keys only: the runs list shows TTFT and
ITL beside e2e, Evidence reads the tail in the SLO that regressed (s for the others, ITL over
tokens), the drill-down shows a tail request's engine steps with their batch mates, and the
triage attaches the recorded cause (scheduling, kv_preemption)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from test_tui_support import (
    SAMPLE_STORE,
    base_screen,
    copy_store,
    make_app,
    move_to,
    screen_text,
    table_keys,
    wait_for,
)
from workbench.sample.llm import RECORDED_PAIR


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return copy_store(SAMPLE_STORE, tmp_path / "store")


def test_llm_incident_by_keys(store: Path) -> None:
    truth = json.loads((RECORDED_PAIR / "truth.json").read_text())

    async def flow() -> None:
        app = make_app(store)
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_for(pilot, lambda: app.runs is not None and app.incident_loaded, "runs")
            llm = {r.run_id: r for r in app.runs if r.ttft_p99_us is not None}
            assert set(llm) == {"llm-failing", "llm-comparator"}
            assert all(r.itl_p99_us is not None and r.n_tokens for r in llm.values())
            await move_to(pilot, "#runs-table", "llm-failing")
            await pilot.pause(0.1)
            detail = " ".join(screen_text(app).split())
            assert "TTFT p99" in detail and f"(n={llm['llm-failing'].n_tokens} tokens)" in detail
            await pilot.press("f")
            await wait_for(pilot, lambda: app.current_mode == "pair", "pair screen")
            screen = base_screen(app)
            await wait_for(pilot, lambda: bool(screen.ranked), "comparator ranking")
            await move_to(pilot, "#pair-table", "llm-comparator")
            await pilot.press("a")
            await wait_for(pilot, lambda: app.incident.comparator == "llm-comparator", "paired")
            await wait_for(pilot, lambda: app.current_mode == "evidence", "evidence screen")
            ev = base_screen(app)
            await wait_for(pilot, lambda: ev.bundle is not None, "evidence queries")
            assert ev.slo == truth["slo"] == "ttft"
            assert table_keys(app, "#stage-table")[0] == "latency"
            text = " ".join(screen_text(app).split())
            assert "In time to first token (the triage's default), tails over requests" in text
            # The drivers are read on the end-to-end latency: said so beside a TTFT table.
            detail = str(ev.query_one("#stage-detail").render())
            assert "Drivers of the e2e p99 gap: " in detail
            await pilot.press("s")
            await pilot.pause(0.1)
            assert ev.slo == "itl"
            assert "In inter-token latency, tails over tokens" in " ".join(screen_text(app).split())
            itl = ev.shown_stages()[0]
            assert itl.n_failing == llm["llm-failing"].n_tokens
            # The tail request as the engine served it, beside its comparator twin: its
            # prefill chunks and decodes, each step with its batch mates.
            await pilot.press("o")
            await wait_for(pilot, lambda: getattr(app.screen, "picked", None) is not None, "drill")
            f, c = app.screen.picked
            assert f is not None and c is not None
            for picked in (f, c):
                names = [sp.name for sp in picked.spans]
                assert names and all(n.startswith("step ") for n in names)
                assert "prefill chunk of" in names[0] and names[-1].endswith("decode")
                assert all("batch mates:" in sp.notes for sp in picked.spans)
            assert f"{len(f.spans)} steps" in screen_text(app)
            await pilot.press("escape")
            await wait_for(pilot, lambda: not hasattr(app.screen, "picked"), "back to evidence")
            await pilot.press("4")
            await wait_for(pilot, lambda: app.current_mode == "localize", "localize screen")
            await wait_for(
                pilot, lambda: app.incident.status == "localized", "triage attached", timeout=120
            )
            loc = app.incident.localization
            assert (loc.origin, loc.mechanism) == (truth["origin_stage"], truth["mechanism"])
            assert app.incident.triage["primary_slo"] == "ttft"
            await pilot.pause(0.2)
            assert "kv_preemption" in screen_text(app)

    asyncio.run(flow())
