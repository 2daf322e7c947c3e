"""The background triage of the incident's pair: its messages to the app and what they say."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from textual.message import Message


class TriageProgress(Message):
    """A step of the triage worker and the share of the work done."""

    def __init__(self, step: str, fraction: float) -> None:
        super().__init__()
        self.step = step
        self.fraction = fraction


class NoRegression(Message):
    """The triage found no stage to blame: its result, not attached to the incident."""

    def __init__(self, doc: dict[str, Any]) -> None:
        super().__init__()
        self.doc = doc


def triage_doc(
    store: Path,
    failing: str,
    comparator: str,
    fixed: str | None,
    suspect: str | None,
    progress: Callable[[str, float], None],
) -> dict[str, Any]:
    """Replay and localize the pair (in a worker thread); the result as the record keeps it."""
    import textual_plotext  # noqa: F401  (Localize draws with it; load it off the UI thread)

    from workbench.api.workspace import Workspace

    cmp = Workspace(store).compare(
        failing, comparator, suspect=suspect, fixed=fixed, progress=progress
    )
    return cmp.to_json()


def localized(doc: dict[str, Any]) -> bool:
    """The triage named an origin and a manifest stage (else there is nothing to record)."""
    return bool(doc.get("origin_stage")) and bool(doc.get("manifest_stage"))


def no_regression_text(doc: dict[str, Any]) -> str:
    """What the app says when no stage explains a significant tail gap."""
    gap = doc.get("p99_gap_us") or {}
    lo, hi = gap.get("lo"), gap.get("hi")
    ci = (
        f" (p99 gap CI {lo / 1000:.2f}..{hi / 1000:.2f} ms)"
        if lo is not None and hi is not None
        else ""
    )
    verdict = doc.get("verdict") or {}
    if verdict.get("outcome") == "inconclusive":
        # The first clause of the trigger's reason says why (too few requests, tags differ...).
        why = str(verdict.get("reason") or "").split(": ")[0]
        return f"inconclusive{ci}: {why}; pick another comparator on 2 Pair, or t to re-run"
    return (
        f"no stage explains a significant tail gap{ci}: pick another comparator on 2 Pair, "
        "or t to re-run"
    )
