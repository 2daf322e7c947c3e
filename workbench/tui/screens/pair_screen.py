"""Step 2: the failing run, ranked comparator candidates with reasons, tag mismatches as warnings."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.widgets import DataTable, Static

from workbench.terminal_text import for_terminal
from workbench.tui.screens.step_screen import StepScreen
from workbench.tui.units import ms
from workbench.tui.widgets.marked_table import MarkedTable

if TYPE_CHECKING:
    from workbench.triage.pairing import Candidate


class PairScreen(StepScreen):
    """Choose the comparator: the best eligible candidate comes first."""

    AUTO_FOCUS = "#pair-table"
    STEP = "pair"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("a", "accept", "Use it", id="pair.accept"),
        Binding("p", "pin_fixed", "Pin repro", id="pair.pin_fixed"),
        Binding("s", "suspect", "Suspect tag", id="pair.suspect"),
        Binding("r", "rank", "Re-rank", id="pair.rank", show=False),
    ]

    class Ranked(Message):
        def __init__(
            self, failing: str, suspect: str | None, ranked: list[Candidate], warnings: list[str]
        ) -> None:
            super().__init__()
            self.failing = failing
            self.suspect = suspect
            self.ranked = ranked
            self.warnings = warnings

    def __init__(self) -> None:
        super().__init__()
        self.suspect: str | None = None
        self.suspect_of: str | None = None  # the incident whose saved suspect tag was read
        self.ranked: list[Candidate] = []
        self.warnings: list[str] = []
        self.ranked_for: tuple[str, str | None, str | None, str | None] | None = None
        # Locked tags that differ between the failing run and some candidate: the ones worth
        # suspecting (allowing to differ) when the regression followed a change of that tag.
        self.suspects: list[str] = []

    def compose_body(self) -> ComposeResult:
        yield Static("", id="pair-summary")
        yield MarkedTable(id="pair-table", fixed_columns=2)
        yield Static("", id="pair-detail")

    def on_mount(self) -> None:
        table = self.query_one("#pair-table", DataTable)
        # The tag that differs is a column of its own, right after the (fixed) run column.
        for key, label in (
            ("rank", "#"),
            ("run", "candidate run"),
            ("tags", "differs from failing"),
            ("ok", "eligible"),
            ("n", "n"),
            ("apart", "apart"),
            ("p99", "p99 ms"),
            ("label", "label"),
        ):
            table.add_column(label, key=key)
        super().on_mount()

    # -- data ---------------------------------------------------------------------------------

    def failing(self) -> str | None:
        return self.wb.pending_failing or (self.wb.incident.failing if self.wb.incident else None)

    def refresh_view(self) -> None:
        failing = self.failing()
        inc = self.wb.incident
        if inc is not None and inc.id != self.suspect_of:
            # The suspect tag saved with the pairing comes back with the incident (restart).
            self.suspect_of, self.suspect = inc.id, inc.suspect
        comparator = inc.comparator if inc and inc.failing == failing else None
        fixed = inc.fixed_metadata if inc else None
        key = (failing, self.suspect, fixed, comparator) if failing else None
        if key is not None and key != self.ranked_for:
            self.ranked_for = key
            self.set_hint("Ranking comparator candidates...")
            self.rank(failing, self.suspect, fixed, comparator)
        self.show_summary()
        self.show_detail()
        self.update_hint()

    @work(
        thread=True,
        exclusive=True,
        exit_on_error=False,
        group="pair",
        description="Rank comparators",
    )
    def rank(
        self, failing: str, suspect: str | None, fixed: str | None, comparator: str | None
    ) -> None:
        from workbench.store import db
        from workbench.triage.pairing import pair_warnings, rank_comparators

        con = db.connect(self.wb.store)
        try:
            ranked = rank_comparators(con, failing, suspect=suspect, fixed=fixed)
            warnings = (
                pair_warnings(con, failing, comparator, suspect=suspect, fixed=fixed)
                if comparator
                else []
            )
        finally:
            con.close()
        self.post_message(self.Ranked(failing, suspect, ranked, warnings))

    def on_pair_screen_ranked(self, message: Ranked) -> None:
        # Already imported by the rank worker that posted this message: no cost here.
        from workbench.triage.pairing import format_apart

        inc = self.wb.incident
        fixed = inc.fixed_metadata if inc else None
        # The pinned reproduction of the failing config is not a comparator.
        self.ranked = [c for c in message.ranked if c.run_id != fixed]
        self.warnings = message.warnings
        for c in self.ranked:
            for m in c.mismatches:
                if m.key not in self.suspects:
                    self.suspects.append(m.key)
        runs = {r.run_id: r for r in self.wb.runs or []}
        table = self.query_one("#pair-table", DataTable)
        table.clear()
        for i, c in enumerate(self.ranked, 1):
            chosen = (
                inc is not None and inc.comparator == c.run_id and inc.failing == message.failing
            )
            table.add_row(
                str(i),
                Text(c.run_id + (" (chosen)" if chosen else ""), style="bold" if chosen else ""),
                Text(
                    ", ".join(f"{m.key} {m.other_value or '?'}" for m in c.mismatches),
                    style="bold",
                )
                if c.mismatches
                else "none",
                Text("yes") if c.eligible else Text("NO", style="bold red"),
                str(c.n_requests),
                format_apart(c.seconds_apart, compact=True),
                ms(runs[c.run_id].p99_us) if c.run_id in runs else "?",
                for_terminal(runs[c.run_id].label or "") if c.run_id in runs else "",
                key=c.run_id,
            )
        if self.ranked:
            table.focus()
        self.show_detail()
        self.update_hint()

    # -- view ---------------------------------------------------------------------------------

    def show_summary(self) -> None:
        failing = self.failing()
        inc = self.wb.incident
        runs = {r.run_id: r for r in self.wb.runs or []}
        if failing is None:
            self.query_one("#pair-summary", Static).update(
                "No failing run yet: on Runs (1), highlight it and press f."
            )
            return
        f = runs.get(failing)
        text = Text.assemble(("Failing ", "bold"), (failing, "bold red"))
        if f is not None:
            text.append(f"  n={f.n_requests}  p99 {f.p99_us / 1000:.2f} ms" if f.p99_us else "")
        comp = inc.comparator if inc and inc.failing == failing else None
        text.append("\nComparator ", "bold")
        text.append(comp or "not chosen yet", "bold green" if comp else "dim")
        text.append(f"   suspect tag: {self.suspect or 'none'} (s cycles)")
        fixed = inc.fixed_metadata if inc else None
        text.append("\nReproduction (fixed-metadata run) ", "bold")
        text.append(fixed or "none pinned (optional: 1 Runs, p on it)", "bold" if fixed else "dim")
        if self.wb.pending_failing and inc and inc.failing and inc.failing != failing:
            text.append(
                f"\nRe-pairing: the incident pairs {inc.failing} vs {inc.comparator}", "yellow"
            )
        self.query_one("#pair-summary", Static).update(text)

    def highlighted(self) -> Candidate | None:
        table = self.query_one("#pair-table", DataTable)
        if table.row_count == 0 or not self.ranked:
            return None
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        return next((c for c in self.ranked if c.run_id == key), None)

    @on(DataTable.RowHighlighted, "#pair-table")
    def _highlighted(self) -> None:
        self.show_detail()

    @on(DataTable.RowSelected, "#pair-table")
    def _selected(self) -> None:
        self.action_accept()

    def show_detail(self) -> None:
        detail = self.query_one("#pair-detail", Static)
        c = self.highlighted()
        text = Text()
        if c is not None:
            text.append(f"Why {c.run_id}: ", "bold")
            text.append("; ".join(c.reasons) or "no reasons given")
            inc = self.wb.incident
            role = "comparator" if inc is not None and inc.comparator == c.run_id else "candidate"
            for m in c.mismatches:
                text.append("\nWARNING ", "bold reverse")
                text.append(f" {m.warning(role)}")
        shown = {m.warning("comparator") for m in c.mismatches} if c is not None else set()
        for w in self.warnings:
            if w not in shown:  # the chosen pair's own warnings, once each
                text.append("\nWARNING (chosen pair) ", "bold reverse")
                text.append(f" {w}")
        detail.update(text)

    def update_hint(self) -> None:
        inc = self.wb.incident
        if self.failing() is None:
            self.set_hint("Press 1 for Runs, highlight the failing run, press f.")
        elif inc is not None and inc.comparator and inc.failing == self.failing():
            self.set_hint(
                "Paired. 3 Evidence (triage runs in the background); a picks another "
                "comparator; optional: 1 Runs, p pins the fixed-metadata run."
            )
        elif self.ranked and not self.ranked[0].eligible and self.suspect is None and self.suspects:
            self.set_hint(
                f"No candidate matches every locked tag ({', '.join(self.suspects)} differ). "
                "If the regression followed a change of that tag, press s to suspect it."
            )
        elif self.ranked:
            self.set_hint(
                "Next: a/Enter uses the highlighted known-good run as comparator. p pins a "
                "re-run of the failing config (same tags and tail) as the reproduction."
            )
        else:
            self.set_hint("Ranking comparator candidates...")

    # -- actions ------------------------------------------------------------------------------

    def action_accept(self) -> None:
        c = self.highlighted()
        failing = self.failing()
        if c is None or failing is None:
            self.notify("No candidate highlighted.", severity="warning")
            return
        if not c.eligible:
            self.notify(
                f"{c.run_id} is not eligible ({'; '.join(c.reasons)}); paired anyway, "
                "see the warnings.",
                severity="warning",
            )
        self.wb.pair(failing, c.run_id, self.suspect)

    def action_pin_fixed(self) -> None:
        c = self.highlighted()
        if c is None:
            self.notify("No candidate highlighted.", severity="warning")
            return
        self.wb.pin_fixed(c.run_id)

    def action_suspect(self) -> None:
        options: list[str | None] = [None, *self.suspects]
        if len(options) == 1:
            self.notify("Every candidate has the failing run's locked tags; nothing to suspect.")
            return
        i = options.index(self.suspect) if self.suspect in options else 0
        self.suspect = options[(i + 1) % len(options)]
        self.refresh_view()

    def action_rank(self) -> None:
        self.ranked_for = None
        self.refresh_view()
