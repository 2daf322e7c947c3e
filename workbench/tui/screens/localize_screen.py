"""Step 4: where it went wrong: origin vs manifest, mechanism, replay per stage, proof, metric."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import DataTable, Static, TabbedContent, TabPane

from workbench.tui.localize_text import (
    METRIC_COLUMNS,
    METRIC_LEGEND,
    REPLAY_COLUMNS,
    REPLAY_LEGEND,
    capped_gain,
    verdict_text,
)
from workbench.tui.screens.step_screen import NEXT_STEP, StepScreen
from workbench.tui.units import ms, pct
from workbench.tui.widgets.marked_table import MarkedTable
from workbench.tui.widgets.plot_box import fresh_plot


def _num(x: Any) -> str:
    if isinstance(x, bool) or x is None:
        return str(x) if x is not None else "-"
    if isinstance(x, int):
        return f"{x:,}"
    if isinstance(x, float):
        return f"{x:.4g}"
    if isinstance(x, list | dict):
        return str(x)[:60]
    return str(x)


class LocalizeScreen(StepScreen):
    """The triage verdict with what proves it; c confirms the classification."""

    AUTO_FOCUS = "#localize-tabs Tabs"
    STEP = "localize"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("c", "classify", "Confirm", id="localize.classify"),
        Binding("t", "retriage", "Re-triage", id="localize.retriage"),
        Binding("o", "drill", "Request", id="localize.drill"),
        Binding("right_square_bracket", "tab(1)", "Next view", id="localize.next_view"),
        Binding("left_square_bracket", "tab(-1)", "Prev view", id="localize.prev_view", show=False),
        Binding("p", "perfetto", "Perfetto trace", id="localize.perfetto", show=False),
    ]

    class PerfettoWritten(Message):
        """The A/B trace is written: the one line that says where and what."""

        def __init__(self, path: Path, line: str) -> None:
            super().__init__()
            self.path = path
            self.line = line

    def __init__(self) -> None:
        super().__init__()
        self.shown_for: tuple[str, int] | None = None

    def compose_body(self) -> ComposeResult:
        with TabbedContent(id="localize-tabs"):
            # The verdict has a view of its own: at 80x24 every warning and caveat fits whole.
            with TabPane("Verdict", id="tab-verdict"):
                yield Static("", id="verdict-box")
            with TabPane("Replay per stage", id="tab-replay"):
                yield MarkedTable(
                    id="replay-table", cursor_type="row", zebra_stripes=True, header_height=2
                )
                yield Static(REPLAY_LEGEND, classes="legend")
                yield Static("", id="replay-detail", classes="detail")
            with TabPane("Proof", id="tab-proof"):
                yield MarkedTable(id="claims-table")
                yield Static("", id="claim-detail", classes="detail")
            with TabPane("What would help", id="tab-fixes"):
                yield MarkedTable(id="fixes-table")
                yield Static("", id="fix-detail", classes="detail")
            with TabPane("Primary metric", id="tab-metric"):
                yield Vertical(id="metric-box")
                yield MarkedTable(
                    id="metric-table", cursor_type="row", zebra_stripes=True, header_height=2
                )
                yield Static(METRIC_LEGEND, classes="legend")

    def on_mount(self) -> None:
        c = self.query_one("#claims-table", DataTable)
        for key, label in (("i", "#"), ("text", "claim"), ("query", "proved by")):
            c.add_column(label, key=key)
        m = self.query_one("#metric-table", DataTable)
        for key, label in METRIC_COLUMNS:
            m.add_column(Text(label), key=key)
        fx = self.query_one("#fixes-table", DataTable)
        for key, label in (
            ("kind", "change"),
            ("p99", "p99 gain / whole gap, ms"),
            ("p95", "p95 gain ms"),
            ("target", "target"),
        ):
            fx.add_column(label, key=key)
        super().on_mount()

    def refresh_view(self) -> None:
        inc = self.wb.incident
        box = self.query_one("#verdict-box", Static)
        state = self.wb.triage_state()
        if inc is None or state == "none":
            box.update("No pair yet: choose the failing run (1, f) and its comparator (2, a).")
            self.set_hint("Next: press 2 (Pair).")
            return
        if state != "done" or inc.localization is None:
            box.update(
                Text.assemble(("Triage: ", "bold"), self.wb.triage_progress or "starting...")
            )
            if state == "running":
                self.set_hint("Replaying both runs on the accelerator model; this fills when done.")
            elif self.wb.triage_status == "no regression":
                # The box above says which: no regression, or inconclusive and why.
                self.set_hint("Nothing to localize: 2 Pair picks another comparator; t re-runs.")
            else:
                self.set_hint("Triage failed (see the message); press t to run it again.")
            return
        key = (inc.id, inc.version)
        if key == self.shown_for:
            self.update_hint()
            return
        self.shown_for = key
        self.show_verdict()
        self.fill_replay()
        self.fill_claims()
        self.fill_fixes()
        self.fill_metric()
        self.update_hint()

    def show_verdict(self) -> None:
        inc = self.wb.incident
        assert inc is not None and inc.localization is not None
        self.query_one("#verdict-box", Static).update(verdict_text(inc.localization, inc.triage))

    def fill_replay(self) -> None:
        """Per stage: the replay's observed vs predicted tail for both runs, the residual shift
        (failing vs comparator) and the modelled share; origin (O) and manifest (M) marked."""
        inc = self.wb.incident
        assert inc is not None and inc.localization is not None
        rows = replay_rows(inc.triage)
        t = self.query_one("#replay-table", DataTable)
        t.clear(columns=True)
        # Two-line headers that say what a cell is; the legend under the table says the rest.
        for key, label in REPLAY_COLUMNS:
            t.add_column(Text(label), key=key)
        for r in rows:
            role = str(r.get("role") or "")
            mark = "".join(m[0].upper() for m in role.split("+") if m)
            style = "bold red" if role.startswith("origin") else "bold yellow" if role else ""
            f, c = r.get("failing") or {}, r.get("comparator") or {}
            shift = (r.get("residual_shift") or {}).get("hl_us")
            t.add_row(
                Text(f"{r.get('id')} {mark}".rstrip(), style=style),
                _obs_pred(f, "p95"),
                _obs_pred(f, "p99"),
                _obs_pred(c, "p95"),
                _obs_pred(c, "p99"),
                _shift_ms(shift),
                pct(f.get("modelled_share")),
                key=str(r.get("id")),
            )
        self.show_replay_row()

    def show_replay_row(self) -> None:
        """The highlighted stage in full: n, p50/p95/p99 of both runs, shift with CI and p."""
        inc = self.wb.incident
        detail = self.query_one("#replay-detail", Static)
        rows = replay_rows(inc.triage) if inc is not None else []
        t = self.query_one("#replay-table", DataTable)
        if inc is None or not rows or t.row_count == 0:
            detail.update(
                "No replay in this triage result (from an older version, or nothing to "
                "localize): t re-runs the triage."
            )
            return
        r = rows[min(t.cursor_row, len(rows) - 1)]
        sid = str(r.get("id"))
        f, c = r.get("failing") or {}, r.get("comparator") or {}
        res = r.get("residual_shift") or {}
        share = (inc.triage.get("explained_share_by_stage") or {}).get(sid) or {}
        # Four short lines: they fit under the table at 80x24 (app.tcss #replay-detail).
        text = Text.assemble((sid, "bold"), f" {r.get('role')}" if r.get("role") else "")
        text.append(f"  n={_num(f.get('n'))}/{_num(c.get('n'))}")
        if share:
            text.append(
                f"  explains p95 {pct(share.get('p95'))} p99 {pct(share.get('p99'))} of gap"
            )
        text.append("  (p50/p95/p99)")
        text.append("\nunexplained shift ", "bold")
        if res:
            p = res.get("p_value")
            text.append(
                f"{_shift_ms(res.get('hl_us'))} ms [{_shift_ms(res.get('hl_lo_us'))}, "
                f"{_shift_ms(res.get('hl_hi_us'))}] (failing - comparator)"
                + (f", p={p:.2g}" if isinstance(p, float) else "")
            )
        else:
            text.append("- (not a stage the model tests)")
        for tag, fig in (("failing   ", f), ("comparator", c)):
            text.append(f"\n{tag} ", "bold")
            for kind, label in (("observed", "obs"), ("predicted", "model")):
                qs = "/".join(ms(fig.get(f"{kind}_{q}_us")) for q in ("p50", "p95", "p99"))
                text.append(f"{label} {qs} ms  ")
            text.append(f"covers {pct(fig.get('modelled_share'))}")
        detail.update(text)

    def fill_claims(self) -> None:
        inc = self.wb.incident
        assert inc is not None
        t = self.query_one("#claims-table", DataTable)
        t.clear()
        for i, c in enumerate(inc.claims, 1):
            t.add_row(str(i), c.text, c.query or "(no artifact)", key=str(i - 1))
        self.show_claim()

    def fill_fixes(self) -> None:
        """The triage's retuning proposals, each predicted p99 gain capped at the whole gap."""
        inc = self.wb.incident
        assert inc is not None
        gap = (inc.triage.get("p99_gap_us") or {}).get("value")
        t = self.query_one("#fixes-table", DataTable)
        t.clear()
        for i, r in enumerate(_fixes(inc.triage)):
            p99, capped = capped_gain(r.get("predicted_p99_gain_us"), gap)
            t.add_row(
                str(r.get("kind", "?")),
                p99 + (" (capped)" if capped else ""),
                ms(r.get("predicted_p95_gain_us")),
                str(r.get("target", "-")),
                key=str(i),
            )
        self.show_fix()

    def show_fix(self) -> None:
        inc = self.wb.incident
        detail = self.query_one("#fix-detail", Static)
        fixes = _fixes(inc.triage) if inc is not None else []
        t = self.query_one("#fixes-table", DataTable)
        if inc is None or not fixes or t.row_count == 0:
            detail.update("The triage proposed no retuning for this pair.")
            return
        r = fixes[min(t.cursor_row, len(fixes) - 1)]
        gap = (inc.triage.get("p99_gap_us") or {}).get("value")
        text = Text(str(r.get("text", "")))
        _shown, capped = capped_gain(r.get("predicted_p99_gain_us"), gap)
        if capped:
            text.append(
                f"\nThe model predicts {ms(r.get('predicted_p99_gain_us'))} ms of p99 gain, more "
                f"than the whole {ms(gap)} ms gap: it can close the gap at most; the excess is "
                "model error.",
                "italic",
            )
        detail.update(text)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.data_table.id == "fixes-table":
            self.show_fix()
        elif event.data_table.id == "claims-table":
            self.show_claim()
        elif event.data_table.id == "replay-table":
            self.show_replay_row()

    def show_claim(self) -> None:
        inc = self.wb.incident
        t = self.query_one("#claims-table", DataTable)
        detail = self.query_one("#claim-detail", Static)
        if inc is None or not inc.claims or t.row_count == 0:
            detail.update("No claims.")
            return
        c = inc.claims[min(t.cursor_row, len(inc.claims) - 1)]
        text = Text(c.text + "\n")
        text.append_text(Text.assemble(("query ", "bold"), c.query or "-", ("  params ", "bold")))
        text.append(", ".join(f"{k}={_num(v)}" for k, v in c.parameters.items()) or "-")
        text.append("\nnumbers ", "bold")
        text.append(", ".join(f"{k}={_num(v)}" for k, v in c.numbers.items()) or "-")
        detail.update(text)

    def fill_metric(self) -> None:
        inc = self.wb.incident
        assert inc is not None
        rows = metric_buckets(inc.triage.get("primary_metric"))
        gap = (inc.triage.get("p99_gap_us") or {}).get("value")
        t = self.query_one("#metric-table", DataTable)
        t.clear()
        for r in rows:
            static, adapted, gain = (_p99(r, k) for k in ("static", "adapted", "gain"))
            gain_text, capped = capped_gain(gain, gap)
            t.add_row(
                Text(_bucket_label(r), style="bold"),
                _num(r.get("n_requests")),
                _num(r.get("mape", r.get("mape_pct"))),
                _num(r.get("spearman")),
                _num(r.get("regret_pct")),
                pct(r.get("fallback_share")),
                str(r.get("observed_plan", "-")),
                ms(static),
                ms(adapted),
                gain_text + ("*" if capped else ""),
                ms(r.get("recompile_us")),
            )
        self.draw_metric(rows)

    def draw_metric(self, rows: list[dict[str, Any]]) -> None:
        """Mapping accuracy (compile time) against adaptation gain (runtime), per shape bucket."""
        plt = fresh_plot(self.query_one("#metric-box", Vertical)).plt
        if not rows:
            plt.title("The triage reported no primary metric for this pair")
            return
        labels = [_bucket_label(r) for r in rows]
        mape = [_finite(r.get("mape", r.get("mape_pct"))) for r in rows]
        # Gain as a share of the static plan's p99, so both series read in percent.
        gain = [
            _finite(100 * g / s)
            if (g := _p99(r, "gain")) is not None and (s := _p99(r, "static"))
            else 0.0
            for r in rows
        ]
        # textual_plotext's stub says `label`; plotext itself takes `labels` for several series.
        plt.multiple_bar(  # type: ignore[call-arg]
            labels, [mape, gain], labels=["mapping MAPE %", "adaptation gain, % of static p99"]
        )
        plt.title("Compile-time mapping accuracy vs runtime adaptation gain, per shape bucket")

    def update_hint(self) -> None:
        inc = self.wb.incident
        if inc is None:
            return
        if inc.status == "localized":
            self.set_hint(
                "Next: c confirms the mechanism; ] shows its proof; o opens the p99 request."
            )
        else:
            nxt = NEXT_STEP.get(inc.status, "")
            self.set_hint(f"Mechanism confirmed ({inc.status}). Next: {nxt}.")

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.data_table.id == "replay-table":
            self.action_drill()

    def action_drill(self) -> None:
        """The p99 request by latency; on the replay view, by the highlighted stage's time."""
        t = self.query_one("#replay-table", DataTable)
        stage = None
        if t.row_count and self.query_one("#localize-tabs", TabbedContent).active == "tab-replay":
            key = t.coordinate_to_cell_key(t.cursor_coordinate).row_key.value
            stage = None if key is None else str(key)
        self.open_request(stage)

    def action_classify(self) -> None:
        self.wb.classify()

    def action_retriage(self) -> None:
        self.shown_for = None
        self.wb.start_triage(force=True)

    def action_perfetto(self) -> None:
        """Export the pair as one trace for Perfetto UI into the exports folder."""
        inc = self.wb.incident
        if inc is None or not inc.failing or not inc.comparator:
            self.notify("No pair yet: the trace needs a failing and a comparator run (2).")
            return
        path = self.wb.state_dir / "exports" / f"{inc.id}.perfetto.json"
        if not path.parent.exists():
            self.wb.confirm(
                f"The export folder {path.parent} does not exist. Create it and export there?",
                lambda: self.export_perfetto(inc.id, path, create=True),
                yes="create the folder",
            )
            return
        self.export_perfetto(inc.id, path)

    @work(
        thread=True,
        exclusive=True,
        exit_on_error=False,
        group="perfetto",
        description="Export the Perfetto trace",
    )
    def export_perfetto(self, incident_id: str, path: Path, create: bool = False) -> None:
        from workbench.incident.perfetto_export import incident_perfetto
        from workbench.terminal_text import for_terminal

        self.app.call_from_thread(self.set_hint, "Exporting the Perfetto trace (re-triage)...")
        if create:
            from workbench.incident.export import make_folders

            make_folders(path)
        # The workbench's own file in its exports folder: a re-export replaces it.
        written = incident_perfetto(self.wb.store, incident_id, path, replace=True)
        self.post_message(self.PerfettoWritten(written.path, for_terminal(written.line())))

    def on_localize_screen_perfetto_written(self, message: PerfettoWritten) -> None:
        self.app.copy_to_clipboard(str(message.path))
        self.notify(f"{message.line}; open it in ui.perfetto.dev (path copied).")
        self.update_hint()

    def worker_failed(self, worker: object) -> None:
        self.update_hint()  # the error modal says why; the hint stops saying "Exporting"

    def action_tab(self, step: int) -> None:
        tabs = self.query_one("#localize-tabs", TabbedContent)
        ids = ["tab-verdict", "tab-replay", "tab-proof", "tab-fixes", "tab-metric"]
        current = tabs.active if tabs.active in ids else ids[0]
        tabs.active = ids[(ids.index(current) + step) % len(ids)]
        self.focus_pane(tabs.active)


def _fixes(doc: dict[str, Any]) -> list[dict[str, Any]]:
    raw = doc.get("retuning")
    return [r for r in raw if isinstance(r, dict)] if isinstance(raw, list) else []


def metric_buckets(raw: Any) -> list[dict[str, Any]]:
    """The triage's primary metric as one row per shape bucket (seen at compile time, drifted)."""
    rows = [raw] if isinstance(raw, dict) else list(raw or [])
    out: list[dict[str, Any]] = []
    for r in rows:
        buckets = r.get("buckets") if isinstance(r, dict) else None
        if isinstance(buckets, dict):
            out.extend({"bucket": name, **b} for name, b in buckets.items() if isinstance(b, dict))
        elif isinstance(r, dict) and r:
            out.append(r)
    return out


def replay_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows of a triage document's "replay" (TriageResult.to_json); [] when it has none."""
    rep = doc.get("replay")
    rows = rep.get("rows") if isinstance(rep, dict) else None
    return [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []


def _short_ms(us: Any) -> str:
    """us as ms in at most 4-5 characters (the replay table's cells)."""
    if not isinstance(us, int | float) or not math.isfinite(us):
        return "-"
    v = us / 1000
    return f"{v:.2f}" if abs(v) < 10 else f"{v:.1f}" if abs(v) < 100 else f"{v:.0f}"


def _obs_pred(fig: dict[str, Any], q: str) -> str:
    return f"{_short_ms(fig.get(f'observed_{q}_us'))}/{_short_ms(fig.get(f'predicted_{q}_us'))}"


def _shift_ms(us: Any) -> str:
    """A signed residual shift in ms; three decimals below 10 ms (shifts are often small)."""
    if not isinstance(us, int | float) or not math.isfinite(us):
        return "-"
    return f"{us / 1000:+.3f}" if abs(us) < 10_000 else f"{us / 1000:+.1f}"


def _p99(row: dict[str, Any], plan: str) -> float | None:
    """p99 (us) of a plan ('static', 'adapted', 'gain'), flat (static_p99_us) or nested."""
    value = row.get(f"{plan}_p99_us")
    nested = row.get(f"{plan}_us")
    if value is None and isinstance(nested, dict):
        value = nested.get("p99")
    return float(value) if isinstance(value, int | float) else None


def _bucket_label(row: dict[str, Any]) -> str:
    role = row.get("role") or row.get("run_id")
    bucket = str(row.get("bucket", "?"))
    return f"{role} {bucket}" if role else bucket


def _finite(x: Any) -> float:
    return float(x) if isinstance(x, int | float) and math.isfinite(x) else 0.0
