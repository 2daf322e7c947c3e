"""The command palette provider: the main actions of the workbench by name."""

from __future__ import annotations

from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Provider

# (title, action run on the app, help line). Actions are the ones bound to keys.
COMMANDS: tuple[tuple[str, str, str], ...] = (
    ("Incidents: switch to another incident", "incidents", "every incident of the store"),
    ("Incidents: start a new incident", "incidents", "then n, and f on the failing run"),
    ("Incidents: reopen a closed incident", "incidents", "then o on it, with a reason"),
    ("Runs: list the store's runs", "goto('runs')", "runs with tags and p50/p95/p99"),
    ("Runs: ingest trace files", "on('runs', 'ingest')", "load a trace with progress"),
    ("Runs: mark highlighted run as failing", "on('runs', 'mark_failing')", "declare the incident"),
    ("Runs: pin highlighted run as fixed-metadata", "on('runs', 'pin_fixed')", "lock tags"),
    ("Pair: choose the comparator", "goto('pair')", "ranked candidates with reasons"),
    ("Pair: use highlighted comparator", "on('pair', 'accept')", "pair the runs"),
    ("Evidence: per-stage tails and views", "goto('evidence')", "p95/p99 with CIs first"),
    ("Evidence: open the p99 request's timeline", "on('evidence', 'drill')", "vs comparator"),
    ("Localize: origin, mechanism, proof", "goto('localize')", "the replay's verdict"),
    ("Localize: re-run triage", "on('localize', 'retriage')", "replay both runs again"),
    ("Localize: confirm classification", "on('localize', 'classify')", "classify the incident"),
    ("Localize: export the A/B trace for Perfetto", "on('localize', 'perfetto')", "aligned tail"),
    ("Owners: assign people to roles", "goto('owners')", "owners follow the origin"),
    ("Validate: judge a candidate", "goto('validate')", "guardrail matrix and verdict"),
    ("Close: preview the closure summary", "goto('close')", "what closing still needs"),
    ("Close: close the incident", "on('close', 'close_incident')", "gates are checked"),
    ("Close: export summary as Markdown", "on('close', \"export('md')\")", "path copied"),
    ("Close: export summary as JSON", "on('close', \"export('json')\")", "path copied"),
    ("Help: every key and its id", "help", "rebind them with a TOML keymap"),
    ("Quit (asks first)", "quit", "everything is already saved"),
)


class WorkbenchCommands(Provider):
    """Main workbench actions, searchable by name."""

    async def discover(self) -> Hits:
        for title, action, help_text in COMMANDS:
            yield DiscoveryHit(title, partial(self._run, action), help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for title, action, help_text in COMMANDS:
            score = matcher.match(title)
            if score > 0:
                yield Hit(
                    score, matcher.highlight(title), partial(self._run, action), help=help_text
                )

    async def _run(self, action: str) -> None:
        await self.app.run_action(action)
