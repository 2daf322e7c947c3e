"""What the closure summary's images show: the data and the titles, with the triage's numbers.

The latency image holds both runs' requests as the triage measured them (its skipped warm-up
left out) and the p95/p99 with the intervals the triage reported; the stage image the triage's
share of the tail gap per stage; the hosts image, for a fleet only, p99 per host from the fleet
view. A triage doc that does not name this pair, or lacks a figure, yields no image rather than
a guess. plot_render.py draws these with matplotlib; nothing here imports it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from accel.stages import STAGES
from workbench.errors import WorkbenchError
from workbench.incident.incident import Incident, load_incident
from workbench.store import db, layout
from workbench.triage.evidence import Interval
from workbench.triage.fleet import GroupTail, fleet_view
from workbench.triage.numbers_text import fmt_ci, fmt_signed, fmt_us

F64 = npt.NDArray[np.float64]
KINDS: Final[tuple[str, ...]] = ("latency", "stages", "hosts")
IMAGE_NAMES: Final[frozenset[str]] = frozenset(f"{k}.png" for k in KINDS)
MAX_HOSTS: Final[int] = 24  # the highest-p99 hosts of a bigger fleet; the title says how many
_LABEL_CHARS: Final[int] = 40


def label(value: object, limit: int = _LABEL_CHARS) -> str:
    """Record or trace text fit for an image: one line, printable, at most `limit` characters."""
    text = "".join(ch if ch.isprintable() else "?" for ch in " ".join(str(value).split()))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def interval_text(x: Interval) -> str:
    """A quantile with its interval: '3.045 ms [2.302 ms, 3.897 ms]'."""
    ci = fmt_ci(x.lo, x.hi) if math.isfinite(x.lo) and math.isfinite(x.hi) else "[no CI]"
    return f"{fmt_us(x.value)} {ci}"


def _gap(x: Interval) -> str:
    ci = (
        f" [{fmt_signed(x.lo)}, {fmt_signed(x.hi)}]"
        if math.isfinite(x.lo) and math.isfinite(x.hi)
        else ""
    )
    return f"{fmt_signed(x.value)}{ci}"


@dataclass(frozen=True)
class LatencyPlot:
    """Both runs' end-to-end latencies with the triage's p95/p99 (and their intervals)."""

    failing: str
    comparator: str
    failing_us: F64
    comparator_us: F64
    n_failing: int  # the triage's n, which the quantiles are of
    n_comparator: int
    failing_q: dict[str, Interval]  # "p95", "p99"
    comparator_q: dict[str, Interval]
    gap: dict[str, Interval]
    kind: str = "latency"

    @property
    def title(self) -> str:
        f, c, g = self.failing_q, self.comparator_q, self.gap
        return (
            f"End-to-end p99 {fmt_us(f['p99'].value)} vs {fmt_us(c['p99'].value)}: "
            f"{_gap(g['p99'])}, n={self.n_failing} / {self.n_comparator}; "
            f"p95 {fmt_us(f['p95'].value)} vs {fmt_us(c['p95'].value)}: {_gap(g['p95'])}; "
            f"failing {label(self.failing)} vs comparator {label(self.comparator)}"
        )


@dataclass(frozen=True)
class StagePlot:
    """The triage's share of the p99 (and p95) gap per stage, in pipeline order."""

    shares: list[tuple[str, float | None, float | None]]  # stage, p99 share, p95 share
    origin: str | None
    manifest: str | None
    gap99: Interval
    n_failing: int
    n_comparator: int
    kind: str = "stages"

    @property
    def title(self) -> str:
        top = max(
            ((s, p99) for s, p99, _ in self.shares if p99 is not None),
            key=lambda t: t[1],
            default=None,
        )
        most = f": most {top[0]}, {100 * top[1]:.1f}%" if top else ""
        where = f"; origin {self.origin}, manifest {self.manifest}" if self.origin else ""
        return (
            f"Share of the p99 gap ({_gap(self.gap99)}, n={self.n_failing} / "
            f"{self.n_comparator}) each stage explains{most}{where}"
        )


@dataclass(frozen=True)
class HostPlot:
    """p99 per host of the failing fleet (the highest first), beside the comparator's."""

    failing: str
    comparator: str | None
    hosts: list[GroupTail]  # at most MAX_HOSTS, highest p99 first
    n_hosts: int
    comparator_hosts: dict[str, GroupTail]
    failing_pooled: tuple[int, Interval]
    comparator_pooled: tuple[int, Interval] | None
    kind: str = "hosts"

    @property
    def title(self) -> str:
        top = self.hosts[0]
        shown = (
            f"the {len(self.hosts)} highest of {self.n_hosts} hosts"
            if (len(self.hosts) < self.n_hosts)
            else f"{self.n_hosts} hosts"
        )
        n, pooled = self.failing_pooled
        comp = ""
        if self.comparator_pooled is not None:
            cn, cp = self.comparator_pooled
            comp = f" vs comparator {label(self.comparator)} {interval_text(cp)}, n={cn}"
        return (
            f"p99 by host, {shown}: highest {label(top.key)} {interval_text(top.p99)}, n={top.n}; "
            f"fleet {label(self.failing)} {interval_text(pooled)}, n={n}{comp}"
        )


Plot = LatencyPlot | StagePlot | HostPlot


def _interval(value: Any) -> Interval | None:
    """An {value, lo, hi} of the triage doc; None unless its value is a finite number (a
    missing or non-finite bound stays NaN: the image then draws no interval)."""
    if not isinstance(value, dict):
        return None

    def num(key: str) -> float:
        v = value.get(key)
        return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else math.nan

    x = Interval(num("value"), num("lo"), num("hi"))
    return x if math.isfinite(x.value) else None


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _latency_row(triage: dict[str, Any]) -> dict[str, Any] | None:
    rows = triage.get("stages")
    if not isinstance(rows, list):
        return None
    return next((r for r in rows if isinstance(r, dict) and r.get("id") == "latency"), None)


def _skipped(triage: dict[str, Any], role: str) -> list[str]:
    """The requests the triage left out of its quantiles (its warm-up), as it recorded them."""
    queries = triage.get("evidence_queries")
    query = queries.get("stage_quantiles") if isinstance(queries, dict) else None
    params = query.get("parameters") if isinstance(query, dict) else None
    skip = params.get(f"skip_{role}") if isinstance(params, dict) else None
    return [s for s in skip if isinstance(s, str)] if isinstance(skip, list) else []


def _latencies(store: Path, run_id: str, skip: list[str]) -> F64:
    con = db.connect(store)
    try:
        t = db.query(con, "run_requests", {"run_id": run_id, "skip_requests": skip})
    finally:
        con.close()
    x = np.asarray(t.column("latency_us").to_numpy(zero_copy_only=False), dtype=np.float64)
    return x[np.isfinite(x)]


def _latency_plot(store: Path, inc: Incident, row: dict[str, Any]) -> LatencyPlot | None:
    assert inc.failing and inc.comparator
    quants: dict[str, dict[str, Interval]] = {}
    for role in ("failing", "comparator", "diff"):
        side = row.get(role)
        got = {q: _interval(side.get(q)) for q in ("p95", "p99")} if isinstance(side, dict) else {}
        if any(v is None for v in got.values()) or len(got) < 2:
            return None
        quants[role] = {k: v for k, v in got.items() if v is not None}
    n_f, n_c = _count(row.get("n_failing")), _count(row.get("n_comparator"))
    if n_f is None or n_c is None:
        return None
    f = _latencies(store, inc.failing, _skipped(inc.triage, "failing"))
    c = _latencies(store, inc.comparator, _skipped(inc.triage, "comparator"))
    if not f.size or not c.size:
        return None
    return LatencyPlot(
        inc.failing, inc.comparator, f, c, n_f, n_c,
        quants["failing"], quants["comparator"], quants["diff"],
    )  # fmt: skip


def _share(value: Any) -> float | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None


def _stage_plot(inc: Incident, row: dict[str, Any]) -> StagePlot | None:
    by_stage = inc.triage.get("explained_share_by_stage")
    diff = row.get("diff")
    gap = _interval(diff.get("p99")) if isinstance(diff, dict) else None
    n_f, n_c = _count(row.get("n_failing")), _count(row.get("n_comparator"))
    if not isinstance(by_stage, dict) or gap is None or n_f is None or n_c is None:
        return None
    shares = []
    for s in STAGES:  # the pipeline's stages only: a key the record holds besides is not drawn
        d = by_stage.get(s)
        if isinstance(d, dict):
            shares.append((s, _share(d.get("p99")), _share(d.get("p95"))))
    if not any(p99 is not None for _, p99, _ in shares):
        return None
    loc = inc.localization
    return StagePlot(
        shares, loc.origin if loc else None, loc.manifest if loc else None, gap, n_f, n_c
    )


def is_fleet(store: Path, run_id: str) -> bool:
    """A run built from the traces of two or more hosts (its runs row says how many)."""
    row = layout.read_run_row(store, run_id)
    hosts = row.get("hosts") if row else None
    return isinstance(hosts, int) and hosts >= 2


def _host_plot(store: Path, inc: Incident) -> HostPlot | None:
    assert inc.failing
    view = fleet_view(store, [inc.failing], [inc.comparator] if inc.comparator else [])
    hosts = [h for h in view.failing.hosts if math.isfinite(h.p99.value)]
    if not hosts:
        return None
    comp = view.comparator
    return HostPlot(
        failing=inc.failing,
        comparator=inc.comparator,
        hosts=hosts[:MAX_HOSTS],
        n_hosts=len(hosts),
        comparator_hosts={h.key: h for h in comp.hosts} if comp else {},
        failing_pooled=(view.failing.n, view.failing.p99),
        comparator_pooled=(comp.n, comp.p99) if comp else None,
    )


def collect_plots(store: Path, incident_id: str, version: int | None = None) -> list[Plot]:
    """The images the incident's closure summary holds, in reading order (tail first).

    `version`: the incident version the summary was built from; a record saved meanwhile is
    refused, so that the images and the text tell the same version."""
    inc = load_incident(store, incident_id)
    if version is not None and inc.version != version:
        raise WorkbenchError(inc.id, "changed while it was being exported; export it again")
    if not inc.failing or not inc.comparator:
        return []
    out: list[Plot] = []
    row = _latency_row(inc.triage)
    same_pair = (inc.triage.get("failing"), inc.triage.get("comparator")) == (
        inc.failing,
        inc.comparator,
    )
    if row is not None and same_pair:
        for plot in (_latency_plot(store, inc, row), _stage_plot(inc, row)):
            if plot is not None:
                out.append(plot)
    if is_fleet(store, inc.failing):
        hosts = _host_plot(store, inc)
        if hosts is not None:
            out.append(hosts)
    return out


def image_folder(export: Path) -> Path:
    """Where the images of the export at `export` go: <stem>.files beside it."""
    name = f"{export.stem}.files"
    return export.with_name(name if name != export.name else f"{export.name}.files")


def plot_entries(plots: list[Plot], folder: str) -> list[dict[str, str]]:
    """The images as the summary names them: kind, path relative to the export, title."""
    return [{"kind": p.kind, "path": f"{folder}/{p.kind}.png", "title": p.title} for p in plots]
