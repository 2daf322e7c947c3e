"""Step 6: validate a candidate against guardrails (the matrix), edit the rollback criteria."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.widgets import DataTable, Input, Label, Static, TabbedContent, TabPane

from workbench.tui.screens.step_screen import StepScreen
from workbench.tui.units import ms
from workbench.tui.widgets.marked_table import MarkedTable

if TYPE_CHECKING:
    from workbench.incident.incident import Cell, Incident, RollbackCriterion
    from workbench.incident.verdict import CandidateVerdict

# The verdict computed in workbench.incident.verdict, shown with a glyph as well as a colour.
VERDICT_MARK = {
    "PASS": ("PASS", "bold green"),
    "FAIL": ("FAIL", "bold red"),
    "REFUSED": ("REFUSED", "bold red"),
    "INCONCLUSIVE": ("INCONCLUSIVE", "bold yellow"),
}
# A guardrail's outcome: moving the good way ("better") is neutral, never red.
OUTCOME_MARK = {
    "pass": ("ok", ""),
    "better": ("ok, better", ""),
    "fail": ("x FAIL", "bold red"),
    "undecided": ("? undecided", "bold yellow"),
    "too few samples": ("? too few", "bold yellow"),
}


def verdict_of(inc: Incident | None) -> CandidateVerdict | None:
    """The one verdict on the incident's candidate (pure Python over the record's cells)."""
    if inc is None or inc.validation is None:
        return None
    from workbench.incident.verdict import incident_verdict

    return incident_verdict(inc)


def value_text(x: float | None, unit: str) -> str:
    """A guardrail value in its unit (us shown as ms)."""
    if x is None:
        return "-"
    if unit == "us":
        return f"{ms(x)} ms"
    if unit in ("share", "ratio"):
        return f"{x * 100:.2f}%"
    return f"{x:.4g} {unit}".strip()


def cell_diff(c: Cell) -> str:
    if c.diff is None:
        return "-"
    ci = f" [{value_text(c.ci_low, c.unit)}, {value_text(c.ci_high, c.unit)}]"
    return value_text(c.diff, c.unit) + (ci if c.ci_low is not None else "")


class ValidateScreen(StepScreen):
    """Candidate -> judge matrix -> rollback criteria."""

    AUTO_FOCUS = "#candidate-table"
    STEP = "validate"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("v", "validate", "Validate", id="validate.run"),
        Binding("right_square_bracket", "tab(1)", "Next view", id="validate.next_view"),
        Binding("left_square_bracket", "tab(-1)", "Prev view", id="validate.prev_view", show=False),
        Binding("e", "edit", "Edit", id="validate.edit_criterion"),
        Binding("n", "add", "Add", id="validate.add_criterion"),
        Binding("x", "delete", "Delete", id="validate.delete_criterion"),
        Binding("escape", "leave_input", "Back", id="validate.back", show=False),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.shown_validation: str | None = None
        self.validating = False

    def compose_body(self) -> ComposeResult:
        yield Static("", id="verdict")
        with TabbedContent(id="validate-tabs"):
            with TabPane("Candidate", id="tab-candidate"):
                yield MarkedTable(id="candidate-table")
            with TabPane("Matrix", id="tab-matrix"):
                yield MarkedTable(id="matrix-table")
                yield Static("", id="cell-detail", classes="detail")
            with TabPane("Rollback criteria", id="tab-rollback"):
                yield MarkedTable(id="criteria-table")
                with Horizontal(classes="field"):
                    yield Label("edit  ", classes="field-label")
                    yield Input(
                        placeholder="e: THRESHOLD (unit shown) [WINDOW_REQUESTS]; Enter saves",
                        id="criterion-input",
                        compact=True,
                    )

    def on_mount(self) -> None:
        c = self.query_one("#candidate-table", DataTable)
        for key, label in (
            ("run", "run"),
            ("n", "n"),
            ("p95", "p95 ms"),
            ("p99", "p99 ms"),
            ("label", "label"),
            ("tags", "tags"),
        ):
            c.add_column(label, key=key)
        m = self.query_one("#matrix-table", DataTable)
        for key, label in (
            ("label", "guardrail"),
            ("class", "result"),
            ("base", "baseline"),
            ("cand", "candidate"),
            ("diff", "Δ [95% CI]"),
            ("n", "n b/c"),
            ("crit", "critical"),
        ):
            m.add_column(label, key=key)
        r = self.query_one("#criteria-table", DataTable)
        for key, label in (
            ("label", "roll back when"),
            ("op", "op"),
            ("thr", "threshold"),
            ("win", "window"),
            ("noise", "noise ±"),
            ("src", "source"),
        ):
            r.add_column(label, key=key)
        super().on_mount()

    def refresh_view(self) -> None:
        inc = self.wb.incident
        shown = inc.validation.validated_at if inc and inc.validation else None
        if shown is not None and shown != self.shown_validation:
            if self.shown_validation is not None or self.validating:
                # A new verdict: show its matrix.
                self.query_one("#validate-tabs", TabbedContent).active = "tab-matrix"
                self.focus_pane("tab-matrix")
            self.shown_validation = shown
        self.validating = False
        self.fill_candidates()
        self.fill_matrix()
        self.fill_criteria()
        self.show_verdict()
        self.update_hint()

    def fill_candidates(self) -> None:
        from workbench.tui.screens.runs_screen import tags_text

        inc = self.wb.incident
        t = self.query_one("#candidate-table", DataTable)
        row = t.cursor_row
        t.clear()
        excluded = {inc.failing, inc.comparator, inc.fixed_metadata} if inc else set()
        for r in self.wb.runs or []:
            if r.run_id in excluded:
                continue
            chosen = inc is not None and inc.candidate == r.run_id
            t.add_row(
                Text(r.run_id + (" (validated)" if chosen else ""), style="bold" if chosen else ""),
                str(r.n_requests),
                ms(r.p95_us),
                ms(r.p99_us),
                r.label or "",
                tags_text(r),
                key=r.run_id,
            )
        if t.row_count:
            t.move_cursor(row=min(row, t.row_count - 1))

    def fill_matrix(self) -> None:
        inc = self.wb.incident
        t = self.query_one("#matrix-table", DataTable)
        row = t.cursor_row
        t.clear()
        v = inc.validation if inc else None
        judged = verdict_of(inc)
        outcomes = [cv.outcome for cv in judged.cells] if judged else []
        for i, c in enumerate(v.cells if v else []):
            word, style = OUTCOME_MARK.get(outcomes[i] if i < len(outcomes) else "", ("?", ""))
            t.add_row(
                c.label,
                Text(word, style=style),
                value_text(c.baseline_value, c.unit),
                value_text(c.candidate_value, c.unit),
                cell_diff(c),
                f"{c.n_baseline}/{c.n_candidate}",
                "yes" if c.critical else "",
                key=str(i),
            )
        if t.row_count:
            t.move_cursor(row=min(row, t.row_count - 1))
        self.show_cell()

    @on(DataTable.RowHighlighted, "#matrix-table")
    def _cell_highlighted(self) -> None:
        self.show_cell()

    def show_cell(self) -> None:
        inc = self.wb.incident
        v = inc.validation if inc else None
        t = self.query_one("#matrix-table", DataTable)
        detail = self.query_one("#cell-detail", Static)
        if v is None or t.row_count == 0:
            detail.update(
                "No validation yet: choose the candidate run on the Candidate view, press v."
            )
            return
        c = v.cells[t.cursor_row]
        judged = verdict_of(inc)
        cv = judged.cells[t.cursor_row] if judged and t.cursor_row < len(judged.cells) else None
        word, style = OUTCOME_MARK.get(cv.outcome if cv else "", ("?", ""))
        text = Text.assemble((f"{c.label}: ", "bold"), (word, style), f" - {cv.why if cv else ''}")
        text.append(f"\n{c.statistic}; bad direction {c.direction}, tolerance {c.tolerance:.0%}")
        for w in c.warnings:
            text.append("\nWARNING ", "bold reverse")
            text.append(f" {w}")
        detail.update(text)

    def criteria(self) -> list[RollbackCriterion]:
        inc = self.wb.incident
        return list(inc.rollback_criteria) if inc else []

    def fill_criteria(self) -> None:
        t = self.query_one("#criteria-table", DataTable)
        row = t.cursor_row
        t.clear()
        for i, c in enumerate(self.criteria()):
            thr = value_text(c.threshold, c.unit)
            noise = value_text(c.noise, c.unit) if c.noise is not None else "-"
            t.add_row(c.label, c.op, thr, f"{c.window_requests} req", noise, c.source, key=str(i))
        if t.row_count:
            t.move_cursor(row=min(row, t.row_count - 1))

    def show_verdict(self) -> None:
        inc = self.wb.incident
        judged = verdict_of(inc)
        text = Text()
        if inc is None or inc.validation is None or judged is None:
            text.append("No verdict yet. ", "bold")
            text.append(f"Baseline will be the comparator {inc.comparator if inc else '?'}.")
        else:
            # One verdict, then its reasons: nothing here may read as a different verdict.
            word, style = VERDICT_MARK.get(judged.verdict, (judged.verdict, "bold"))
            text.append(f"{judged.candidate}: ", "bold")
            text.append(f" {word} ", f"{style} reverse")
            text.append(f" vs {inc.validation.baseline} ({inc.validation.baseline_role})")
            for reason in judged.reasons:
                text.append(f"\n- {reason}")
        self.query_one("#verdict", Static).update(text)

    def update_hint(self) -> None:
        inc = self.wb.incident
        if inc is None or not inc.owners:
            self.set_hint("Validation needs the owners first: press 5 (Owners).")
        elif inc.validation is None:
            self.set_hint("Next: highlight the rollback/fix candidate run and press v to validate.")
        elif (judged := verdict_of(inc)) is not None and judged.verdict != "PASS":
            self.set_hint(
                f"{judged.verdict}, not a PASS: validate another candidate ([ then v), "
                "or review the matrix (])."
            )
        elif not inc.rollback_criteria:
            self.set_hint("Add rollback criteria: ] to the Rollback view, n adds one.")
        else:
            self.set_hint("PASS. Review the rollback criteria (] view, e edits), then 7 Close.")

    # -- actions ------------------------------------------------------------------------------

    def action_tab(self, step: int) -> None:
        tabs = self.query_one("#validate-tabs", TabbedContent)
        ids = ["tab-candidate", "tab-matrix", "tab-rollback"]
        current = tabs.active if tabs.active in ids else ids[0]
        tabs.active = ids[(ids.index(current) + step) % len(ids)]
        self.focus_pane(tabs.active)

    def action_validate(self) -> None:
        t = self.query_one("#candidate-table", DataTable)
        if t.row_count == 0:
            self.notify(
                "No candidate run in the store: ingest one on Runs (1, i).", severity="warning"
            )
            return
        tabs = self.query_one("#validate-tabs", TabbedContent)
        if tabs.active != "tab-candidate":
            tabs.active = "tab-candidate"
            self.focus_pane("tab-candidate")
            self.notify("Highlight the candidate run and press v again.")
            return
        key = t.coordinate_to_cell_key(t.cursor_coordinate).row_key.value
        self.set_hint(f"Validating {key} against the guardrails...")
        self.validating = True
        self.wb.validate_candidate(str(key))

    @on(DataTable.RowSelected, "#candidate-table")
    def _candidate_selected(self) -> None:
        self.action_validate()

    def _selected_criterion(self) -> int | None:
        t = self.query_one("#criteria-table", DataTable)
        return t.cursor_row if t.row_count else None

    def action_edit(self) -> None:
        self.query_one("#validate-tabs", TabbedContent).active = "tab-rollback"
        self.focus_pane("tab-rollback")
        i = self._selected_criterion()
        if i is None:
            self.notify("No criterion to edit: press n to add one.", severity="warning")
            return
        c = self.criteria()[i]
        field = self.query_one("#criterion-input", Input)
        shown = c.threshold / 1000 if c.unit == "us" else c.threshold
        field.value = f"{shown:g} {c.window_requests}"
        field.focus()

    @on(Input.Submitted, "#criterion-input")
    def _edited(self, event: Input.Submitted) -> None:
        import msgspec

        i = self._selected_criterion()
        if i is None:
            return
        parts = event.value.split()
        try:
            threshold = float(parts[0])
            window = int(parts[1]) if len(parts) > 1 else self.criteria()[i].window_requests
        except (IndexError, ValueError):
            self.notify(
                "Type the threshold (in the unit shown), then optionally the window in "
                "requests, e.g. 41 1000",
                severity="error",
                markup=False,
            )
            return
        if window <= 0:
            self.notify("The window must be a positive number of requests.", severity="error")
            return
        criteria = self.criteria()
        if criteria[i].unit == "us":
            threshold *= 1000  # edited in ms, as shown
        criteria[i] = msgspec.structs.replace(
            criteria[i], threshold=threshold, window_requests=window, source="manual"
        )
        self.wb.set_rollback_criteria(criteria)
        event.input.value = ""
        self.query_one("#criteria-table", DataTable).focus()

    def action_add(self) -> None:
        import msgspec

        self.query_one("#validate-tabs", TabbedContent).active = "tab-rollback"
        self.focus_pane("tab-rollback")
        criteria = self.criteria()
        i = self._selected_criterion()
        if i is None:
            self.notify(
                "Validate a candidate first: it proposes criteria from the guardrails.",
                severity="warning",
            )
            return
        criteria.insert(i + 1, msgspec.structs.replace(criteria[i], source="manual"))
        self.wb.set_rollback_criteria(criteria)

    def action_delete(self) -> None:
        i = self._selected_criterion()
        if i is None:
            return
        criteria = self.criteria()
        gone = criteria.pop(i)
        self.wb.confirm(
            f"Delete the rollback criterion '{gone.label} {gone.op} "
            f"{value_text(gone.threshold, gone.unit)}'?",
            lambda: self.wb.set_rollback_criteria(criteria),
            yes="delete it",
        )

    def action_leave_input(self) -> None:
        self.query_one("#criteria-table", DataTable).focus()
