"""The closure summary's images drawn with matplotlib (imported here, on first use only).

Each image is drawn on its own Figure with the Agg canvas (no pyplot, no display, no global
figure state) under matplotlib's default style, whatever the user's matplotlibrc says, in the
DejaVu Sans that matplotlib bundles, and saved as PNG at a fixed size and dpi without the
"Software" text chunk: the same incident gives the same bytes. Text is never parsed as mathtext,
so a `$` in a run id or a host name is a dollar sign, not a formula that fails to parse.
"""

from __future__ import annotations

import io
import math
import textwrap
import warnings
from typing import TYPE_CHECKING, Final

import numpy as np

from workbench.incident.plots import (
    F64,
    HostPlot,
    LatencyPlot,
    Plot,
    StagePlot,
    interval_text,
    label,
)
from workbench.triage.evidence import Interval

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

DPI: Final[int] = 100
WIDTH_IN: Final[float] = 9.0
CCDF_POINTS: Final[int] = 4000
# Okabe-Ito colours (told apart with colour-blindness too), and a line style per run besides.
FAILING: Final[str] = "#D55E00"
COMPARATOR: Final[str] = "#0072B2"


def render_png(plot: Plot) -> bytes:
    """The PNG bytes of one plot."""
    import matplotlib.style
    from matplotlib import rc_context
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    height = {"latency": 6.4, "stages": 4.4}.get(plot.kind)
    if isinstance(plot, HostPlot):
        height = max(3.6, 1.6 + 0.3 * len(plot.hosts))
    rc = rc_context(
        {
            "font.family": "DejaVu Sans",
            "text.usetex": False,
            "text.parse_math": False,
            "axes.formatter.use_mathtext": False,
            "svg.hashsalt": "workbench",
            "figure.dpi": DPI,
            "savefig.dpi": DPI,
        }
    )
    with matplotlib.style.context("default"), rc, warnings.catch_warnings():
        # A glyph DejaVu Sans lacks (in a host name) is drawn as a box, not warned about on
        # stderr: the export's output stays its one line.
        warnings.simplefilter("ignore")
        fig = Figure(figsize=(WIDTH_IN, height or 4.4), dpi=DPI, layout="constrained")
        FigureCanvasAgg(fig)
        if isinstance(plot, LatencyPlot):
            _latency(fig, plot)
        elif isinstance(plot, StagePlot):
            _stages(fig, plot)
        else:
            _hosts(fig, plot)
        fig.suptitle(_wrapped(plot.title), x=0.01, ha="left", fontsize=9.5)
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    return buf.getvalue()


def _wrapped(title: str, width: int = 110) -> str:
    """The one-line title as lines: a line per clause, each at most `width` characters."""
    return "\n".join(
        line for part in title.split("; ") for line in textwrap.wrap(part, width) or [""]
    )


def _us_tick(value: float, _pos: object = None) -> str:
    if value <= 0 or not math.isfinite(value):
        return "0" if value == 0 else ""
    return f"{value / 1000:g} ms" if value >= 1000 else f"{value:g} µs"


def _time_axis(ax: Axes, lo: float, hi: float, *, vertical: bool = False) -> None:
    """Microseconds as µs / ms ticks; logarithmic when the values span two decades or more."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    axis = ax.yaxis if vertical else ax.xaxis
    if lo > 0 and hi / lo >= 100:
        (ax.set_yscale if vertical else ax.set_xscale)("log")
        axis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        axis.set_minor_formatter(NullFormatter())
    axis.set_major_formatter(FuncFormatter(_us_tick))


def _xerr(x: Interval) -> list[list[float]] | None:
    if not (math.isfinite(x.lo) and math.isfinite(x.hi)):
        return None
    return [[max(0.0, x.value - x.lo)], [max(0.0, x.hi - x.value)]]


def _latency(fig: Figure, p: LatencyPlot) -> None:
    ax_h, ax_t = fig.subplots(2, 1, sharex=True, height_ratios=(1.0, 1.4))
    both = np.concatenate([p.failing_us, p.comparator_us])
    quantiles = [q for side in (p.failing_q, p.comparator_q) for q in side.values()]
    marks = [v for q in quantiles for v in (q.value, q.lo, q.hi) if math.isfinite(v)]
    span = np.concatenate([both, np.asarray(marks, dtype=np.float64)])
    positive = span[span > 0]
    lo = float(positive.min()) if positive.size else 1.0
    hi = float(span.max())
    hi = hi if hi > lo else lo * 1.01 + 1.0
    log = hi / lo >= 100
    bins = np.geomspace(lo, hi, 61) if log else np.linspace(lo, hi, 61)
    runs = (
        ("failing", p.failing, p.failing_us, p.failing_q, p.n_failing, FAILING, "-"),
        ("comparator", p.comparator, p.comparator_us, p.comparator_q, p.n_comparator,
         COMPARATOR, "--"),
    )  # fmt: skip
    floor = 1.0
    for role, run_id, x, q, n, colour, style in runs:
        shown = x[x > 0] if log else x
        ax_h.hist(
            shown, bins=bins, weights=np.full(shown.size, 1.0 / max(shown.size, 1)),
            histtype="step", color=colour, linestyle=style, linewidth=1.6,
            label=f"{role}: {label(run_id)} (n={x.size})",
        )  # fmt: skip
        p99 = q["p99"]
        ax_h.axvline(p99.value, color=colour, linestyle=style, linewidth=1.0)
        if _xerr(p99) is not None:
            ax_h.axvspan(p99.lo, p99.hi, color=colour, alpha=0.12, linewidth=0)
        xs, slower = _tail_steps(x)
        floor = min(floor, 1.0 / max(x.size, 1))
        ax_t.step(xs, slower, where="post", color=colour, linestyle=style, linewidth=1.6)
        for name, share, marker in (("p99", 0.01, "s"), ("p95", 0.05, "o")):
            iv = q[name]
            ax_t.errorbar(
                iv.value, share, xerr=_xerr(iv), fmt=marker, color=colour, capsize=4,
                markersize=6, label=f"{role} {name} {interval_text(iv)} (n={n})",
            )  # fmt: skip
    _share_axis(ax_t, floor)
    _time_axis(ax_t, lo, hi)
    pad = (hi / lo) ** 0.02 if log else 0.02 * (hi - lo)
    ax_t.set_xlim(*((lo / pad, hi * pad) if log else (lo - pad, hi + pad)))
    ax_h.set_ylabel("share of requests per bin")
    ax_h.legend(loc="upper right", fontsize=8, title="shaded: each run's p99 interval",
                title_fontsize=8)  # fmt: skip
    ax_t.set_ylabel("share of requests slower (log)")
    ax_t.set_xlabel("end-to-end latency per request")
    ax_t.legend(loc="upper right", fontsize=8, title="the triage's quantiles, 95% intervals",
                title_fontsize=8)  # fmt: skip
    for ax in (ax_h, ax_t):
        ax.grid(True, which="major", alpha=0.3)


def _tail_steps(x: F64, points: int = CCDF_POINTS) -> tuple[F64, F64]:
    """The share of requests at or above each sorted latency: every one of the slowest
    requests, thinned towards the body (ranks from the top spaced geometrically), so a run of
    a million requests draws a few thousand steps and the same tail."""
    xs = np.sort(x)
    n = xs.size
    idx = np.arange(n)
    if n > points:
        from_top = np.unique(np.geomspace(1, n, points).astype(np.int64))
        idx = np.unique(np.concatenate([[0], n - from_top]))
    return xs[idx], 1.0 - idx.astype(np.float64) / max(n, 1)


def _share_axis(ax: Axes, floor: float) -> None:
    """The tail share on a log axis, with p95 and p99 named where they cross it."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    bottom = min(0.005, floor) * 0.7
    ax.set_yscale("log")
    ax.set_ylim(bottom, 1.3)
    for share in (0.05, 0.01):
        ax.axhline(share, color="0.6", linewidth=0.8, linestyle=":")
    ticks = [t for t in (1.0, 0.5, 0.1, 0.05, 0.01, 0.001, 0.0001) if t >= bottom]
    names = {0.05: " (p95)", 0.01: " (p99)"}
    ax.yaxis.set_major_locator(FixedLocator(ticks))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_major_formatter(
        FuncFormatter(lambda v, _pos: f"{100 * v:g}%{names.get(round(v, 6), '')}")
    )


def _stages(fig: Figure, p: StagePlot) -> None:
    ax = fig.subplots()
    y = np.arange(len(p.shares), dtype=np.float64)
    for offset, idx, name, colour, hatch in (
        (-0.2, 1, "p99", FAILING, ""),
        (0.2, 2, "p95", "#E69F00", "//"),
    ):
        values = [s[2] if idx == 2 else s[1] for s in p.shares]
        widths = np.asarray([100 * v if v is not None else 0.0 for v in values], dtype=np.float64)
        ax.barh(y + offset, widths, height=0.38, color=colour, hatch=hatch, edgecolor="0.2",
                linewidth=0.5, label=f"share of the {name} gap")  # fmt: skip
        for yy, v in zip(y + offset, values, strict=True):
            text = "n/a" if v is None else f"{100 * v + 0.0:.1f}%".replace("-0.0%", "0.0%")
            ax.text(max(0.0, 100 * v) if v is not None else 0.0, yy, f" {text}",
                    va="center", fontsize=8)  # fmt: skip
    names = []
    for stage, _, _ in p.shares:
        role = [r for r, s in (("origin", p.origin), ("manifest", p.manifest)) if s == stage]
        names.append(f"{stage} ({', '.join(role)})" if role else stage)
    ax.set_yticks(y, labels=names)
    ax.invert_yaxis()  # pipeline order, top down
    ax.axvline(0, color="0.2", linewidth=0.8)
    ax.axvline(100, color="0.5", linewidth=0.8, linestyle="--")
    ax.set_xlabel("share of the failing − comparator gap the triage attributes to the stage (%)")
    left, right = ax.get_xlim()
    ax.set_xlim(min(left, -5.0), max(right, 115.0))
    ax.legend(loc="lower right", fontsize=8,
              title=f"n={p.n_failing} / {p.n_comparator} requests", title_fontsize=8)  # fmt: skip
    ax.grid(True, axis="x", alpha=0.3)


def _hosts(fig: Figure, p: HostPlot) -> None:
    ax = fig.subplots()
    y = np.arange(len(p.hosts), dtype=np.float64)
    values: list[float] = []
    same_host: str | None = "comparator, same host"
    for i, h in enumerate(p.hosts):
        ax.errorbar(h.p99.value, y[i], xerr=_xerr(h.p99), fmt="o", color=FAILING, capsize=3,
                    label="failing host p99, 95% CI" if i == 0 else None)  # fmt: skip
        values += [h.p99.value, h.p99.lo, h.p99.hi]
        other = p.comparator_hosts.get(h.key)
        if other is not None and math.isfinite(other.p99.value):
            ax.errorbar(other.p99.value, y[i] + 0.25, xerr=_xerr(other.p99), fmt="o",
                        mfc="white", color=COMPARATOR, capsize=3, label=same_host)  # fmt: skip
            same_host = None
            values += [other.p99.value]
    pooled: list[tuple[str, str, str, int, Interval]] = [
        ("failing fleet", FAILING, "-", *p.failing_pooled)
    ]
    if p.comparator_pooled is not None:
        pooled.append(("comparator", COMPARATOR, "--", *p.comparator_pooled))
    for name, colour, style, n, iv in pooled:
        if not math.isfinite(iv.value):
            continue
        ax.axvline(iv.value, color=colour, linestyle=style, linewidth=1.0,
                   label=f"{name} p99 {interval_text(iv)} (n={n})")  # fmt: skip
        if _xerr(iv) is not None:
            ax.axvspan(iv.lo, iv.hi, color=colour, alpha=0.1, linewidth=0)
        values += [iv.value, iv.lo, iv.hi]
    finite: F64 = np.asarray([v for v in values if math.isfinite(v) and v > 0], dtype=np.float64)
    if finite.size:
        _time_axis(ax, float(finite.min()), float(finite.max()))
    ax.set_yticks(y, labels=[f"{label(h.key, 28)} (n={h.n})" for h in p.hosts])
    ax.invert_yaxis()  # the highest p99 on top
    ax.set_xlabel("p99 of end-to-end latency per host (requests outside warm-up)")
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(True, axis="x", alpha=0.3)
