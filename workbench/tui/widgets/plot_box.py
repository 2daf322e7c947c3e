"""A plot inside a container, created on first use (plotext loads only when a plot is shown)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.containers import Vertical

if TYPE_CHECKING:
    from textual_plotext import PlotextPlot


def fresh_plot(box: Vertical) -> PlotextPlot:
    """The box's plot, cleared for redrawing (mounted the first time)."""
    from textual_plotext import PlotextPlot

    found = box.query(PlotextPlot)
    if found:
        plot = found.first(PlotextPlot)
        plot.plt.clear_figure()
        plot.refresh()
        return plot
    plot = PlotextPlot()
    box.mount(plot)
    return plot
