"""Step 1: the store's runs with tags and tail latency; ingest, mark failing, pin fixed run."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.widgets import DataTable, Static

from workbench.tui.screens.step_screen import NEXT_STEP, StepScreen
from workbench.tui.units import ms
from workbench.tui.widgets.marked_table import MarkedTable

if TYPE_CHECKING:
    from workbench.store.runs import RunSummary

ROLE_MARK = {
    "failing": "FAIL",
    "comparator": "COMP",
    "fixed_metadata": "FIXED",
    "candidate": "CAND",
}


def run_roles(incident: Any, run_id: str) -> list[str]:
    """Which incident roles a run plays (failing, comparator, fixed-metadata, candidate)."""
    if incident is None:
        return []
    return [role for role in ROLE_MARK if getattr(incident, role, None) == run_id]


def tags_text(run: RunSummary) -> str:
    """Tags as k=v in key order; null tags are unknown and shown as k=?."""
    tags = dict(run.tags or {})
    return " ".join(f"{k}={'?' if v is None else v}" for k, v in sorted(tags.items()))


def serving_text(run: RunSummary) -> str:
    """The TTFT and ITL tails of an LLM-serving run, tail first, each with its n and unit."""
    if run.ttft_p99_us is None and run.itl_p99_us is None:
        return ""

    def tails(p99: float | None, p95: float | None, p50: float | None) -> str:
        return f"p99 {ms(p99)}  p95 {ms(p95)}  p50 {ms(p50)} ms"

    out = f"\nTTFT {tails(run.ttft_p99_us, run.ttft_p95_us, run.ttft_p50_us)} (n={run.n_requests} requests)"
    if run.itl_p99_us is not None:
        out += f"\nITL  {tails(run.itl_p99_us, run.itl_p95_us, run.itl_p50_us)} (n={run.n_tokens} tokens)"
    return out


class RunsScreen(StepScreen):
    """The store's runs; the highlighted run is the subject of f / p."""

    AUTO_FOCUS = "#runs-table"
    STEP = "runs"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("f", "mark_failing", "Failing", id="runs.mark_failing"),
        Binding("p", "pin_fixed", "Pin fixed", id="runs.pin_fixed"),
        Binding("i", "ingest", "Ingest", id="runs.ingest"),
        Binding("r", "reload", "Reload", id="runs.reload", show=False),
        Binding("v", "fleet", "Fleet view", id="runs.fleet", show=False),
        # The app's 0 shown where incidents start: switch, start another, reopen one.
        Binding("0", "app.incidents", "Incidents", id="runs.incidents"),
    ]

    class RunsLoaded(Message):
        """The worker read the runs of the store."""

        def __init__(self, runs: list[RunSummary]) -> None:
            super().__init__()
            self.runs = runs

    def compose_body(self) -> ComposeResult:
        yield MarkedTable(id="runs-table", fixed_columns=2)
        yield Static("Loading runs...", id="run-detail")

    def on_mount(self) -> None:
        table = self.query_one("#runs-table", DataTable)
        table.add_column("role", key="role")
        table.add_column("run", key="run")
        table.add_column("n", key="n")
        table.add_column("p50 ms", key="p50")
        table.add_column("p95 ms", key="p95")
        table.add_column("p99 ms", key="p99")
        # LLM serving: the SLO tails beside e2e (p50/p95 of each in the detail below).
        table.add_column("TTFT p99", key="ttft_p99")
        table.add_column("ITL p99", key="itl_p99")
        for key in ("hardware", "compiler", "runtime", "driver", "thermal", "tags"):
            table.add_column(key, key=key)
        super().on_mount()
        # After the first paint: the read (and the incident read it starts) must not compete
        # with drawing the first screen.
        self.call_after_refresh(self.load_runs)

    @work(thread=True, exclusive=True, exit_on_error=False, group="runs", description="Read runs")
    def load_runs(self, fresh: bool = False) -> None:
        """The runs list: from the app's cache while the store's files are unchanged (no
        duckdb at start), else read from the store and cached."""
        from workbench.tui.runs_cache import cached_runs, fingerprint, remember_runs

        store, state_dir = self.wb.store, self.wb.state_dir
        prints = fingerprint(store)
        runs = None if fresh else cached_runs(state_dir, store, prints)
        if runs is None:
            from workbench.store.runs import list_runs

            runs = list_runs(store)
            with contextlib.suppress(OSError):  # an unwritable state folder costs speed only
                remember_runs(state_dir, store, prints, runs)
        self.post_message(self.RunsLoaded(runs))

    def on_runs_screen_runs_loaded(self, message: RunsLoaded) -> None:
        self.wb.runs = message.runs
        self.wb.incident_rev += 1  # other screens list runs too (candidates, pair summary)

    def fill_table(self) -> None:
        table = self.query_one("#runs-table", DataTable)
        current = self.highlighted_run()
        table.clear()
        inc = self.wb.incident
        for r in self.wb.runs or []:
            roles = run_roles(inc, r.run_id)
            table.add_row(
                Text(" ".join(ROLE_MARK[x] for x in roles), style="bold"),
                r.run_id,
                str(r.n_requests),
                ms(r.p50_us),
                ms(r.p95_us),
                Text(ms(r.p99_us), style="bold"),
                ms(r.ttft_p99_us),
                ms(r.itl_p99_us),
                r.hardware or "?",
                f"{r.compiler or '?'} {r.compiler_version or ''}".strip(),
                f"{r.runtime or '?'} {r.runtime_version or ''}".strip(),
                r.driver_version or "?",
                r.thermal_state or "?",
                tags_text(r),
                key=r.run_id,
            )
        if current is not None and self.wb.runs and current in {r.run_id for r in self.wb.runs}:
            table.move_cursor(row=table.get_row_index(current))

    def highlighted_run(self) -> str | None:
        table = self.query_one("#runs-table", DataTable)
        if table.row_count == 0:
            return None
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key
        return None if key.value is None else str(key.value)

    @on(DataTable.RowHighlighted, "#runs-table")
    def _highlighted(self) -> None:
        self.show_detail()

    def show_detail(self) -> None:
        run_id = self.highlighted_run()
        runs = {r.run_id: r for r in self.wb.runs or []}
        detail = self.query_one("#run-detail", Static)
        if run_id is None or run_id not in runs:
            detail.update(
                f"No runs in {self.wb.store}. Press i to ingest a trace file."
                if self.wb.runs is not None
                else "Loading runs..."
            )
            return
        r = runs[run_id]
        roles = run_roles(self.wb.incident, run_id)
        detail.update(
            Text.assemble(
                (r.run_id, "bold"),
                f"  {r.label or ''}  " if r.label else "  ",
                (f"[{', '.join(roles)}]" if roles else "", "bold"),
                f"\nmodel {r.model or '?'}  workload {r.workload or '?'}  "
                f"n={r.n_requests} requests  imported "
                + (r.imported_at.strftime("%Y-%m-%d %H:%M") if r.imported_at else "?"),
                serving_text(r),
                f"\ntags: {tags_text(r) or 'none'}",
            )
        )

    def refresh_view(self) -> None:
        if self.wb.runs is not None:
            self.fill_table()
        self.show_detail()
        inc = self.wb.incident
        if self.wb.runs is None:
            self.set_hint("Reading the store...")
        elif not self.wb.runs:
            self.set_hint("The store is empty: press i to ingest a trace file.")
        elif not self.wb.incident_loaded:
            self.set_hint("Opening the incident record...")
        elif inc is None or not inc.failing:
            self.set_hint(
                "Next: move to the failing run (up/down) and press f to declare the incident."
            )
        elif not inc.comparator:
            self.set_hint("Next: press 2 to pick the comparator on Pair.")
        elif not inc.fixed_metadata and inc.status in ("paired", "localized"):
            self.set_hint(
                "Optional: p on a re-run of the failing config pins it as the reproduction. "
                f"Next: {NEXT_STEP.get(inc.status, '')}."
            )
        else:
            self.set_hint(f"Runs are set for {inc.id}. Next: {NEXT_STEP.get(inc.status, '')}.")

    def action_mark_failing(self) -> None:
        run_id = self.highlighted_run()
        if run_id is None:
            self.notify("No run highlighted: ingest a trace first (i).", severity="warning")
            return
        self.wb.mark_failing(run_id)

    def action_fleet(self) -> None:
        from workbench.tui.screens.fleet_screen import FleetScreen

        run_id = self.highlighted_run()
        if run_id is None:
            self.notify("No run highlighted.", severity="warning")
            return
        self.app.push_screen(FleetScreen(self.wb.store, [run_id]))

    def action_pin_fixed(self) -> None:
        run_id = self.highlighted_run()
        if run_id is None:
            self.notify("No run highlighted.", severity="warning")
            return
        self.wb.pin_fixed(run_id)

    def action_ingest(self) -> None:
        from workbench.tui.screens.ingest_screen import IngestScreen

        self.app.push_screen(IngestScreen(self.wb.store, Path.cwd()), self._ingested)

    def _ingested(self, run_id: str | None) -> None:
        if run_id:
            self.load_runs()

    def action_reload(self) -> None:
        self.load_runs(fresh=True)

    def worker_failed(self, worker: object) -> None:
        # An unreadable store still opens the incident (its record may be fine).
        self.wb.resume_once()
