"""Step 3: evidence, tail first: per-stage quantiles with CIs, distributions, drivers, views."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import DataTable, Static, TabbedContent, TabPane

from workbench.tui.screens.step_screen import StepScreen
from workbench.tui.units import ms, pct
from workbench.tui.widgets.marked_table import MarkedTable
from workbench.tui.widgets.plot_box import fresh_plot

if TYPE_CHECKING:
    from workbench.triage.evidence import StageRow

Fmt = Callable[[Any], str]


def _int(x: Any) -> str:
    return "-" if x is None else f"{int(x):,}"


def _f3(x: Any) -> str:
    return "-" if x is None else f"{float(x):.3f}"


def _mb(x: Any) -> str:
    return "-" if x is None else f"{float(x) / 1e6:.1f}"


def _gb(x: Any) -> str:
    return "-" if x is None else f"{float(x) / 1e9:.1f}"


def _str(x: Any) -> str:
    if x is None:
        return "-"
    if isinstance(x, list):
        return ", ".join(str(v) for v in x[:3]) + (" ..." if len(x) > 3 else "")
    return str(x)


# Per view: (tab id, tab title, query name, [(column, header, formatter)], explanation).
VIEWS: tuple[tuple[str, str, str, list[tuple[str, str, Fmt]], str], ...] = (
    (
        "queue",
        "Queue",
        "queue_wait_profile",
        [
            ("role", "run", _str),
            ("bucket_start_us", "t ms", ms),
            ("n", "n", _int),
            ("p50_wait_us", "p50 wait", ms),
            ("p95_wait_us", "p95 wait", ms),
            ("p99_wait_us", "p99 wait", ms),
            ("max_wait_us", "max", ms),
        ],
        "Queue wait (start - arrival) over time, in ms: a wait that grows over the run means "
        "service time exceeds the arrival rate.",
    ),
    (
        "batch",
        "Batches",
        "batch_impact",
        [
            ("role", "run", _str),
            ("batch_size", "batch", _int),
            ("n", "n", _int),
            ("share", "share", pct),
            ("p95_us", "p95 ms", ms),
            ("p99_us", "p99 ms", ms),
            ("p95_wait_us", "p95 wait", ms),
        ],
        "Latency by batch size: the batch policy's price is the wait to fill a batch.",
    ),
    (
        "fairness",
        "Fairness",
        "core_fairness",
        [
            ("role", "run", _str),
            ("device", "dev", _int),
            ("core", "core", _int),
            ("stream", "stream", _int),
            ("n_ops", "ops", _int),
            ("busy_share", "busy", pct),
            ("p99_op_us", "p99 op ms", ms),
            ("jain_index", "Jain", _f3),
            ("max_over_mean", "max/mean", _f3),
        ],
        "Busy time per core and stream; Jain's index 1.0 = perfectly even, max/mean > 1 = one "
        "core holds the others back at every barrier.",
    ),
    (
        "fusion",
        "Fusion",
        "fusion_effect",
        [
            ("role", "run", _str),
            ("n_ops", "ops", _int),
            ("fused_ops", "fused", _int),
            ("launches_saved", "launches saved", _int),
            ("fused_bytes", "fused GB", _gb),
            ("p95_group_working_set_bytes", "p95 set MB", _mb),
            ("max_group_working_set_bytes", "max set MB", _mb),
            ("fused_us", "fused ms", ms),
        ],
        "Fusion saves launches but grows the working set: above on-chip capacity it spills "
        "to HBM (fusion_memory_burst).",
    ),
    (
        "recompiles",
        "Recompiles",
        "compile_phases",
        [
            ("phase", "phase", _str),
            ("compile_id", "compile", _str),
            ("duration_us", "ms", ms),
            ("recompile_reason", "recompile reason", _str),
            ("fail_reason", "failure", _str),
            ("shape_key", "shape", _str),
            ("request_id", "paid by", _str),
        ],
        "Compilations of the failing run: the one-time warm-up apart from steady-state "
        "recompiles, each with the compiler's reason and the request that paid for it.",
    ),
)


@dataclass(frozen=True)
class EvidenceBundle:
    """What the evidence worker hands the screen: plain rows, ready to show."""

    failing: str
    comparator: str
    stages: list[StageRow]  # end to end; empty for an LLM pair (its SLOs' rows instead)
    tables: dict[str, list[dict[str, Any]]]
    latency_ms: dict[str, list[float]] = field(default_factory=dict)
    skipped: int = 0
    # LLM serving: each SLO's stage rows (its tail and each stage's part of it) and the SLO
    # the triage reads by default; empty for other workloads.
    slo_stages: dict[str, list[StageRow]] = field(default_factory=dict)
    primary_slo: str | None = None


class EvidenceScreen(StepScreen):
    """Tail-first evidence for the incident's pair."""

    AUTO_FOCUS = "#stage-table"
    STEP = "evidence"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("right_square_bracket", "tab(1)", "Next view", id="evidence.next_view"),
        Binding("left_square_bracket", "tab(-1)", "Prev view", id="evidence.prev_view", show=False),
        Binding("r", "reload", "Reload", id="evidence.reload", show=False),
        Binding("o", "drill", "Request", id="evidence.drill"),
        Binding("v", "fleet", "Fleet view", id="evidence.fleet", show=False),
        Binding("s", "next_slo", "SLO", id="evidence.next_slo"),
    ]

    class Loaded(Message):
        def __init__(self, bundle: EvidenceBundle) -> None:
            super().__init__()
            self.bundle = bundle

    def __init__(self) -> None:
        super().__init__()
        self.bundle: EvidenceBundle | None = None
        self.filled: set[str] = set()  # views filled from the current bundle
        self.loading_for: tuple[str, str] | None = None
        self.slo: str | None = None  # the SLO the Tail table is in (LLM serving only)

    def compose_body(self) -> ComposeResult:
        with TabbedContent(id="evidence-tabs"):
            with TabPane("Tail", id="tab-tail"):
                yield MarkedTable(id="stage-table")
                yield Static("", id="stage-detail", classes="detail")
            with TabPane("Distribution", id="tab-dist"):
                yield Vertical(id="dist-box")
            for tab_id, title, _q, _cols, note in VIEWS:
                with TabPane(title, id=f"tab-{tab_id}"):
                    yield MarkedTable(id=f"view-{tab_id}")
                    yield Static(note, classes="detail")

    def on_mount(self) -> None:
        t = self.query_one("#stage-table", DataTable)
        t.add_column("stage", key="stage")
        t.add_column("n f/c", key="n")
        for q in ("p99", "p95", "p50"):
            t.add_column(f"{q} fail", key=f"{q}f")
            t.add_column(f"{q} comp", key=f"{q}c")
            t.add_column(f"Δ{q} [95% CI] ms", key=f"{q}d")
        for tab_id, _title, _q, cols, _note in VIEWS:
            table = self.query_one(f"#view-{tab_id}", DataTable)
            for key, header, _fmt in cols:
                table.add_column(header, key=key)
        super().on_mount()

    def pair(self) -> tuple[str, str] | None:
        inc = self.wb.incident
        if inc is None or not inc.failing or not inc.comparator:
            return None
        return inc.failing, inc.comparator

    def refresh_view(self) -> None:
        pair = self.pair()
        if pair is None:
            self.set_hint("No pair yet: press 2 (Pair) and choose the comparator.")
            return
        if pair != self.loading_for:
            self.loading_for = pair
            self.set_hint(f"Querying evidence for {pair[0]} vs {pair[1]}...")
            self.load(*pair)
        elif self.bundle is not None:
            self.update_hint()

    def update_hint(self) -> None:
        next_step = {
            "done": "Next: 4 Localize, where the replay names the origin stage.",
            "failed": "The triage failed (see the message); on 4 Localize, t runs it again.",
        }.get(self.wb.triage_state(), "Triage (replay) is running; 4 Localize shows it when done.")
        self.set_hint("Tail first: Δp99 with its CI per stage; o opens a p99 request. " + next_step)

    @work(
        thread=True,
        exclusive=True,
        exit_on_error=False,
        group="evidence",
        description="Query evidence",
    )
    def load(self, failing: str, comparator: str) -> None:
        import textual_plotext  # noqa: F401  (loaded here, not in the handler that draws)

        from accel.stages import SLOS
        from workbench.store import db
        from workbench.triage import evidence, serving_pair, serving_slo
        from workbench.triage.warmup import warmup_of

        con = db.connect(self.wb.store)
        try:
            # Warm-up (the one-time first compile) is not the regression: leave it out, as the
            # triage does.
            skip = {
                "failing": warmup_of(con, failing).affected_requests,
                "comparator": warmup_of(con, comparator).affected_requests,
            }
            samples = evidence.stage_samples(con, failing, comparator).table
            tables = evidence.pair_tables(
                con,
                failing,
                comparator,
                skip_failing=skip["failing"],
                skip_comparator=skip["comparator"],
            )
            slo_stages: dict[str, list[StageRow]] = {}
            primary = None
            if serving_pair.serving_join(con, failing, comparator) is not None:
                slo_stages = {s: serving_slo.slo_rows(con, failing, comparator, s) for s in SLOS}
                gaps = {s: serving_slo.gap_doc(s, rows[0]) for s, rows in slo_stages.items()}
                primary = serving_slo.primary_slo(gaps, None)
            # An LLM pair's Tail table is always in one of its SLOs: no e2e bootstrap for it.
            stages = (
                []
                if slo_stages
                else evidence.stage_rows(
                    samples, skip_failing=skip["failing"], skip_comparator=skip["comparator"]
                )
            )
        finally:
            con.close()
        roles = samples.column("role").to_pylist()
        lat = samples.column("latency_us").to_pylist()
        rid = samples.column("request_id").to_pylist()
        skipped = {(role, r) for role, ids in skip.items() for r in ids}
        latency_ms: dict[str, list[float]] = {"failing": [], "comparator": []}
        for role, x, r in zip(roles, lat, rid, strict=True):
            if x is not None and (role, r) not in skipped:
                latency_ms[role].append(x / 1000.0)
        bundle = EvidenceBundle(
            failing,
            comparator,
            stages,
            {name: t.rows() for name, t in tables.items()},
            latency_ms,
            len(skipped),
            slo_stages,
            primary,
        )
        self.post_message(self.Loaded(bundle))

    def on_evidence_screen_loaded(self, message: Loaded) -> None:
        self.bundle = b = message.bundle
        self.slo = b.primary_slo
        self.fill_stages()
        self.filled = set()
        self.fill_active_view()
        self.update_hint()

    def shown_stages(self) -> list[StageRow]:
        """The Tail table's rows: in the chosen SLO for LLM serving, else end to end."""
        b = self.bundle
        if b is None:
            return []
        return b.slo_stages.get(self.slo or "", b.stages)

    def action_next_slo(self) -> None:
        b = self.bundle
        if b is None or not b.slo_stages:
            self.notify("SLOs are for LLM-serving runs (ingest --records).", severity="warning")
            return
        order = list(b.slo_stages)
        self.slo = order[(order.index(self.slo) + 1) % len(order)] if self.slo else order[0]
        self.fill_stages()

    def fill_stages(self) -> None:
        table = self.query_one("#stage-table", DataTable)
        table.clear()
        for row in self.shown_stages():
            cells: list[Any] = [
                Text(row.stage, style="bold" if row.stage == "latency" else ""),
                f"{row.n_failing}/{row.n_comparator}",
            ]
            for q in ("p99", "p95", "p50"):
                d = row.diff[q]
                significant = d.lo > 0 or d.hi < 0
                cells += [
                    ms(row.failing[q].value),
                    ms(row.comparator[q].value),
                    Text(
                        f"{ms(d.value)} [{ms(d.lo)}, {ms(d.hi)}]",
                        style="bold yellow" if significant and d.value > 0 else "",
                    ),
                ]
            table.add_row(*cells, key=row.stage)
        self.show_stage_detail()

    @on(TabbedContent.TabActivated, "#evidence-tabs")
    def _tab_shown(self) -> None:
        self.fill_active_view()

    def fill_active_view(self) -> None:
        """Fill the shown view from the loaded evidence (each view when first shown)."""
        b = self.bundle
        active = self.query_one("#evidence-tabs", TabbedContent).active
        if b is None or active in self.filled:
            return
        self.filled.add(active)
        if active == "tab-dist":
            self.draw_distribution()
            return
        for tab_id, _title, query, cols, _note in VIEWS:
            if active != f"tab-{tab_id}":
                continue
            view = self.query_one(f"#view-{tab_id}", DataTable)
            view.clear()
            rows = b.tables.get(query, [])
            for r in rows:
                view.add_row(*(fmt(r.get(key)) for key, _h, fmt in cols))
            if not rows:
                view.add_row("none", *([""] * (len(cols) - 1)))

    @on(DataTable.RowSelected, "#stage-table")
    def _stage_selected(self) -> None:
        self.action_drill()

    def action_fleet(self) -> None:
        from workbench.tui.screens.fleet_screen import FleetScreen

        pair = self.pair()
        if pair is None:
            self.notify("Pair two runs first (2).", severity="warning")
            return
        self.app.push_screen(FleetScreen(self.wb.store, [pair[0]], [pair[1]]))

    def action_drill(self) -> None:
        t = self.query_one("#stage-table", DataTable)
        stage = None
        if t.row_count:
            key = t.coordinate_to_cell_key(t.cursor_coordinate).row_key.value
            stage = None if key is None else str(key)
        self.open_request(stage)

    @on(DataTable.RowHighlighted, "#stage-table")
    def _stage_highlighted(self) -> None:
        self.show_stage_detail()

    def show_stage_detail(self) -> None:
        b = self.bundle
        if b is None:
            return
        from accel.stages import SLO_NAMES
        from workbench.triage.serving_slo import UNITS

        table = self.query_one("#stage-table", DataTable)
        text = Text()
        if self.slo is not None:
            default = " (the triage's default)" if self.slo == b.primary_slo else ""
            text.append(f"In {SLO_NAMES[self.slo]}{default}, tails over {UNITS[self.slo]}", "bold")
            text.append("; s shows the next SLO.\n")
        if table.row_count:
            key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
            row = next((r for r in self.shown_stages() if r.stage == key), None)
            if row is not None:
                f, c = row.failing["p99"], row.comparator["p99"]
                text.append(f"{row.stage}: ", "bold")
                text.append(
                    f"p99 failing {ms(f.value)} ms [{ms(f.lo)}, {ms(f.hi)}] n={row.n_failing}; "
                    f"comparator {ms(c.value)} ms [{ms(c.lo)}, {ms(c.hi)}] n={row.n_comparator}"
                )
        drivers = b.tables.get("tail_drivers", [])
        if drivers:
            # Read on the end-to-end latency, whichever SLO the table above is in.
            e2e = "e2e " if b.primary_slo else ""
            text.append(f"\nDrivers of the {e2e}p99 gap: ", "bold")
            text.append(
                "  ".join(
                    f"{d['driver']} {pct(d.get('share'))}"
                    for d in sorted(drivers, key=lambda d: -(d.get("share") or 0.0))
                )
            )
            gap = drivers[0].get("p99_gap_us")
            text.append(f" of a {ms(gap)} ms gap (overlap: shares need not sum to 100%)")
        if b.skipped:
            text.append(f"\n{b.skipped} warm-up requests left out (one-time first compile).")
        self.query_one("#stage-detail", Static).update(text)

    def draw_distribution(self) -> None:
        b = self.bundle
        if b is None:
            return
        plt = fresh_plot(self.query_one("#dist-box", Vertical)).plt
        # Tail first: the share of requests slower than x (a CCDF) on a log scale, so the p95/p99
        # region is as wide as the body.
        for role, color in (("comparator", "green"), ("failing", "red")):
            data = sorted(b.latency_ms.get(role) or [])
            n = len(data)
            if n:
                slower = [(n - i) / n for i in range(n)]
                plt.plot(data, slower, label=f"{role} (n={n})", color=color)
        plt.yscale("log")
        for share in (0.05, 0.01):  # where the p95 and p99 lie
            plt.hline(share, "gray")
        plt.title(f"Share slower than x (p95 at 0.05, p99 at 0.01): {b.failing} vs {b.comparator}")
        plt.xlabel("end-to-end latency ms")

    def action_tab(self, step: int) -> None:
        tabs = self.query_one("#evidence-tabs", TabbedContent)
        ids = [p.id for p in tabs.query(TabPane) if p.id]
        if not ids:
            return
        current = tabs.active if tabs.active in ids else ids[0]
        tabs.active = ids[(ids.index(current) + step) % len(ids)]
        self.focus_pane(tabs.active)

    def worker_failed(self, worker: object) -> None:
        self.set_hint("The evidence queries failed (see the message); press r to retry.")

    def action_reload(self) -> None:
        self.loading_for = None
        self.refresh_view()
