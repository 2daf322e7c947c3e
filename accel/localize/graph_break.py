"""Graph breaks: the compiled graph split, so part of every request runs eagerly between
compiled regions (DESIGN §5 mechanism `graph_break`)."""

from __future__ import annotations

import numpy as np

from accel.ops import RunArrays

# A break is systematic: it splits (nearly) every request, not the odd unseen shape.
MIN_SPLIT_SHARE = 0.5


def graph_break(failing: RunArrays, comparator: RunArrays, scores: dict[str, float]) -> bool:
    """True when most failing requests enter more compiled regions than the comparator's
    typical request; the figures go into scores (with the eager ops run between them)."""
    fr, fe, cr = failing.regions, failing.eager_between, comparator.regions
    if fr is None or fe is None or cr is None or fr.size == 0 or cr.size == 0:
        return False
    base = float(np.median(cr))
    # More regions is the split; eager ops between them are not needed (a `print` breaks the
    # graph with no tensor op between the regions).
    split = fr > base
    share = float(np.mean(split))
    extra = float(np.median(fr)) - base
    scores.update(
        {
            "lowering.graph_split_share": share,
            "lowering.extra_regions_per_request": extra,
            "lowering.eager_ops_between_graphs": float(np.median(fe)),
        }
    )
    return share >= MIN_SPLIT_SHARE and extra >= 1.0
