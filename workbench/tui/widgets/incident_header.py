"""The header on every screen: the incident (id, status, pair, origin, elapsed) and the steps."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static

if TYPE_CHECKING:
    from workbench.incident.incident import Incident

# (mode name, key, title) in the order an incident is worked.
STEPS: tuple[tuple[str, str, str], ...] = (
    ("runs", "1", "Runs"),
    ("pair", "2", "Pair"),
    ("evidence", "3", "Evidence"),
    ("localize", "4", "Localize"),
    ("owners", "5", "Owners"),
    ("validate", "6", "Validate"),
    ("close", "7", "Close"),
)


@dataclass(frozen=True)
class IncidentLine:
    """What the header needs from an incident record."""

    incident_id: str
    status: str
    failing: str | None
    comparator: str | None
    origin: str | None
    created: datetime
    ended: datetime | None = None  # closed: the clock stops


def incident_line(inc: Incident | None) -> IncidentLine | None:
    """The header's view of an incident record."""
    if inc is None:
        return None
    loc = inc.localization
    return IncidentLine(
        incident_id=inc.id,
        status=inc.status,
        failing=inc.failing,
        comparator=inc.comparator,
        origin=loc.origin if loc else None,
        created=_parse_time(inc.created_at),
        ended=_parse_time(inc.updated_at) if inc.status == "closed" else None,
    )


def _parse_time(text: str) -> datetime:
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        return datetime.now(UTC)
    return at if at.tzinfo else at.replace(tzinfo=UTC)


def elapsed(since: datetime, now: datetime) -> str:
    """h:mm:ss (or Nd h:mm:ss) since the incident was declared."""
    secs = max(0, int((now - since).total_seconds()))
    days, secs = divmod(secs, 86400)
    h, rem = divmod(secs, 3600)
    m, s = divmod(rem, 60)
    clock = f"{h}:{m:02d}:{s:02d}"
    return f"{days}d {clock}" if days else clock


def incident_text(line: IncidentLine | None, now: datetime, loading: bool = False) -> Text:
    """The first header line (while the record is read: says so, never "No incident yet")."""
    if line is None and loading:
        return Text("Opening the incident record...", "bold")
    if line is None:
        return Text.assemble(
            ("No incident yet", "bold"),
            " - on Runs, highlight the failing run and press f",
        )
    return Text.assemble(
        (line.incident_id, "bold"),
        " ",
        (f" {line.status} ", "reverse"),
        " ",
        (elapsed(line.created, line.ended or now), "bold"),
        "  origin ",
        (line.origin or "?", "bold"),
        "  ",
        (line.failing or "?", "bold red"),
        " vs ",
        (line.comparator or "no comparator", "bold green" if line.comparator else "dim"),
    )


def steps_text(current: str) -> Text:
    """The second header line: every step with its key, the current one marked."""
    text = Text()
    for mode, key, title in STEPS:
        style = "bold reverse" if mode == current else ""
        text.append(f" {key} {title} ", style)
    return text


class IncidentHeader(Vertical):
    """Two lines: the incident as it stands and the step bar; refreshed on every change."""

    def __init__(self, current: str) -> None:
        super().__init__(id="incident-header")
        self.current = current

    def compose(self) -> ComposeResult:
        yield Static(id="incident-line")
        yield Static(steps_text(self.current), id="steps-line")

    def on_mount(self) -> None:
        self.watch(self.app, "incident_rev", self._refresh_line, init=True)
        self.set_interval(1.0, self._refresh_line)

    def _refresh_line(self, _rev: int | None = None) -> None:
        app = self.app
        line: IncidentLine | None = getattr(app, "incident_line", lambda: None)()
        now: datetime = app.now()  # type: ignore[attr-defined]
        loading = not getattr(app, "incident_loaded", True)
        self.query_one("#incident-line", Static).update(incident_text(line, now, loading))
