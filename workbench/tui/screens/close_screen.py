"""Step 7: the closure summary previewed, the close gate, export as Markdown / JSON."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.message import Message
from textual.widgets import Input, Label, Static, TabbedContent, TabPane, TextArea

from workbench.terminal_text import for_terminal
from workbench.tui.screens.step_screen import StepScreen


class CloseScreen(StepScreen):
    """Preview the summary; close when every gate passes; export and copy the path."""

    AUTO_FOCUS = "#brief-scroll"
    STEP = "close"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("x", "close_incident", "Close", id="close.close"),
        Binding("m", "export('md')", "Export md", id="close.export_md"),
        Binding("j", "export('json')", "Export json", id="close.export_json"),
        Binding("d", "edit_dir", "Folder", id="close.export_dir"),
        Binding("r", "preview", "Refresh", id="close.refresh", show=False),
        Binding("right_square_bracket", "tab", "Next view", id="close.next_view", show=False),
        Binding("left_square_bracket", "tab", "Prev view", id="close.prev_view", show=False),
        Binding("escape", "leave_input", "Back", id="close.back", show=False),
    ]

    class Previewed(Message):
        def __init__(
            self, version: int, brief: list[str], markdown: str, missing: list[str]
        ) -> None:
            super().__init__()
            self.version = version
            self.brief = brief
            self.markdown = markdown
            self.missing = missing

    class Exported(Message):
        def __init__(self, path: Path, size: int) -> None:
            super().__init__()
            self.path = path
            self.size = size

    def __init__(self) -> None:
        super().__init__()
        self.previewed_version: tuple[str, int] | None = None
        self.missing: list[str] | None = None
        self.last_export: Path | None = None

    def compose_body(self) -> ComposeResult:
        yield Static("", id="close-gate")
        with TabbedContent(id="close-tabs"):
            # The brief wraps (it is short); the whole summary does not: its wide tables
            # scroll sideways, and wrapping it costs the handler that loads it several times.
            with TabPane("Brief", id="tab-brief"), VerticalScroll(id="brief-scroll"):
                yield Static("Building the brief...", id="brief-text")
            with TabPane("Full summary (Markdown)", id="tab-summary"):
                yield TextArea(
                    "", id="summary-preview", read_only=True, soft_wrap=False, show_cursor=True
                )
        with Horizontal(classes="field"):
            yield Label("folder", classes="field-label")
            # workbench.incident.export.export_dir() of the app's state folder (not imported here:
            # that module pulls in the data stack, which the first paint must not wait for).
            yield Input(str(self.wb.state_dir / "exports"), id="export-dir", compact=True)

    def refresh_view(self) -> None:
        inc = self.wb.incident
        if inc is None:
            self.query_one("#close-gate", Static).update("No incident yet.")
            self.set_hint("Start on Runs (1): highlight the failing run and press f.")
            return
        key = (inc.id, inc.version)
        if key != self.previewed_version:
            self.previewed_version = key
            self.set_hint("Building the closure summary...")
            self.preview(inc.id, inc.version)
        self.update_gate()

    @work(
        thread=True,
        exclusive=True,
        exit_on_error=False,
        group="close",
        description="Build the summary",
    )
    def preview(self, incident_id: str, version: int) -> None:
        from workbench.incident.brief import lines_of
        from workbench.incident.export_md import render_markdown
        from workbench.incident.incident import load_incident
        from workbench.incident.lifecycle import missing_for
        from workbench.incident.summary import build_summary

        inc = load_incident(self.wb.store, incident_id)
        missing = [] if inc.status == "closed" else missing_for(inc, "closed")
        # One summary for both views (export_text would build it again for the Markdown).
        doc = build_summary(self.wb.store, incident_id)
        self.post_message(
            self.Previewed(version, lines_of(doc["brief"]), render_markdown(doc), missing)
        )

    def on_close_screen_previewed(self, message: Previewed) -> None:
        self.missing = message.missing
        area = self.query_one("#summary-preview", TextArea)
        area.load_text(message.markdown)
        brief = Text()
        for i, line in enumerate(message.brief):
            label, sep, rest = line.partition(": ")
            if i and sep and not line.startswith(" "):
                brief.append(label + sep, "bold")
                brief.append(for_terminal(rest) + "\n")
            else:
                brief.append(for_terminal(line) + "\n", "bold" if i == 0 else "")
        self.query_one("#brief-text", Static).update(brief)
        self.update_gate()

    def update_gate(self) -> None:
        inc = self.wb.incident
        gate = self.query_one("#close-gate", Static)
        if inc is None:
            return
        if inc.status == "closed":
            gate.update(Text.assemble((f"{inc.id} is closed. ", "bold green"), self._export_line()))
            self.set_hint(
                "Export: m (Markdown) or j (JSON) into the folder below (d edits); ] full summary."
            )
        elif self.missing is None:
            gate.update("Checking what closing still needs...")
        elif self.missing:
            text = Text(f"Cannot close yet; missing ({len(self.missing)}): ", "bold yellow")
            # The gate names CLI commands in parentheses; the screens to use are in the hint.
            text.append("; ".join(m.split(" (")[0] for m in self.missing))
            gate.update(text)
            self.set_hint(
                "Finish what is missing (5 Owners, 6 Validate); m / j export a draft now."
            )
        else:
            gate.update(Text.assemble(("Every gate passes. ", "bold green"), self._export_line()))
            self.set_hint("Next: x closes the incident, then m / j export it; ] full summary.")

    def _export_line(self) -> str:
        return f"Last export: {self.last_export}" if self.last_export else "Not exported yet."

    def action_close_incident(self) -> None:
        self.wb.close_incident()

    def action_export(self, fmt: str) -> None:
        inc = self.wb.incident
        if inc is None:
            self.notify("No incident to export.", severity="warning")
            return
        text = self.query_one("#export-dir", Input).value.strip()
        folder = Path(text).expanduser() if text else self.wb.state_dir / "exports"
        path = folder / f"{inc.id}.{fmt}"  # as default_export_path names it
        if not folder.is_dir() and not folder.exists():
            self.wb.confirm(
                f"The export folder {folder} does not exist. Create it and export there?",
                lambda: self._export(inc.id, fmt, path, create=True),
                yes="create the folder",
            )
            return
        self._export(inc.id, fmt, path)

    def _export(self, incident_id: str, fmt: str, path: Path, create: bool = False) -> None:
        self.set_hint(f"Exporting {fmt}...")
        self.export(incident_id, fmt, path, create)

    @work(
        thread=True,
        exclusive=True,
        exit_on_error=False,
        group="export",
        description="Export the summary",
    )
    def export(self, incident_id: str, fmt: str, path: Path, create: bool = False) -> None:
        from workbench.errors import WorkbenchError
        from workbench.incident.export import export_file

        if create:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise WorkbenchError(str(path.parent), f"cannot create: {exc.strerror}") from exc
        if not path.parent.is_dir():
            raise WorkbenchError(str(path.parent), "export folder does not exist")
        # The Markdown writes its images beside it, as `workbench export` does.
        text = export_file(path, self.wb.store, incident_id, fmt, replace=True)
        self.post_message(self.Exported(path.resolve(), len(text.encode())))

    def on_close_screen_exported(self, message: Exported) -> None:
        self.last_export = message.path
        self.app.copy_to_clipboard(str(message.path))
        self.notify(f"Wrote {message.path} ({message.size:,} bytes); path copied to the clipboard.")
        self.update_gate()
        self.set_hint(f"Exported {message.path.name}; path copied (OSC 52). q quits; all is saved.")

    def action_edit_dir(self) -> None:
        self.query_one("#export-dir", Input).focus()

    @on(Input.Submitted, "#export-dir")
    def _dir_done(self) -> None:
        self.action_leave_input()

    def action_leave_input(self) -> None:
        self.query_one("#brief-scroll").focus()

    def action_tab(self) -> None:
        tabs = self.query_one("#close-tabs", TabbedContent)
        tabs.active = "tab-summary" if tabs.active == "tab-brief" else "tab-brief"
        target = "#summary-preview" if tabs.active == "tab-summary" else "#brief-scroll"
        self.query_one(target).focus()

    def worker_failed(self, worker: object) -> None:
        self.update_gate()
