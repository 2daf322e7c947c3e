"""Ingest trace files: a path picker, run id / label / tags, a cancellable progress bar."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import DirectoryTree, Input, Label, ProgressBar, Static
from textual.worker import Worker, WorkerState

from workbench.errors import WorkbenchError
from workbench.tui.screens.error_modal import ErrorModal, one_line
from workbench.tui.widgets.path_complete import MAX_LISTED, expand, near_misses
from workbench.tui.widgets.path_input import PathInput

if TYPE_CHECKING:
    from workbench.store.progress import IngestProgress


def parse_tags(text: str) -> dict[str, str]:
    """'k=v, k2=v2' -> {k: v, k2: v2}, by the rule `workbench ingest --tag` follows; raises a
    one-line error naming the bad item."""
    from workbench.store.ingest import parse_tags as parse_items

    return parse_items([x for x in (i.strip() for i in text.split(",")) if x], subject="tag")


class IngestScreen(ModalScreen[str | None]):
    """Pick a trace file, describe the run, import it with progress; Esc cancels."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+s", "start", "Import", id="ingest.start"),
        Binding("ctrl+t", "focus_tree", "Browse", id="ingest.browse"),
        Binding("backspace", "tree_up", "Folder up", id="ingest.up"),
        Binding("escape", "cancel", "Cancel", id="ingest.cancel"),
    ]

    class Progressed(Message):
        def __init__(self, progress: IngestProgress) -> None:
            super().__init__()
            self.progress = progress

    class Done(Message):
        def __init__(self, run_id: str, summary: str) -> None:
            super().__init__()
            self.run_id = run_id
            self.summary = summary

    def __init__(self, store: Path, start_dir: Path) -> None:
        super().__init__()
        self.store = store
        self.start_dir = start_dir
        self.cancel_event: threading.Event | None = None

    def compose(self) -> ComposeResult:
        with Vertical(id="ingest-box"):
            yield Static("[b]Ingest a trace[/b] into " + str(self.store), id="ingest-title")
            with Horizontal(classes="field"):
                yield Label("file  ", classes="field-label")
                yield PathInput(str(self.start_dir) + "/", self.start_dir, id="ingest-path")
            yield DirectoryTree(self.start_dir, id="ingest-tree")
            with Horizontal(classes="field"):
                yield Label("run id", classes="field-label")
                yield Input(
                    placeholder="optional: from the file name", id="ingest-run-id", compact=True
                )
            with Horizontal(classes="field"):
                yield Label("label ", classes="field-label")
                yield Input(placeholder="optional", id="ingest-label", compact=True)
            with Horizontal(classes="field"):
                yield Label("tags  ", classes="field-label")
                yield Input(placeholder="key=value, key=value", id="ingest-tags", compact=True)
            yield ProgressBar(total=1, id="ingest-progress", show_eta=False)
            yield Static(
                "Type a path (Tab completes, Enter opens a folder below) or Ctrl+T to browse "
                "(Enter picks, Backspace goes up); Ctrl+S imports; Esc cancels.",
                id="ingest-status",
                classes="hint",
                markup=False,
            )

    def on_mount(self) -> None:
        self.query_one("#ingest-path", Input).focus()

    @on(DirectoryTree.FileSelected)
    def _picked(self, event: DirectoryTree.FileSelected) -> None:
        self.query_one("#ingest-path", Input).value = str(event.path)
        self.query_one("#ingest-run-id", Input).focus()

    @on(DirectoryTree.DirectorySelected)
    def _folder_picked(self, event: DirectoryTree.DirectorySelected) -> None:
        self.query_one("#ingest-path", Input).value = os.path.join(event.path, "")

    @on(PathInput.Completed)
    def _completed(self, event: PathInput.Completed) -> None:
        path = expand(event.path_input.value, self.start_dir)
        if path.is_dir():
            self.reroot(path)
        if event.candidates:
            shown = "  ".join(event.candidates[:MAX_LISTED])
            more = len(event.candidates) - MAX_LISTED
            self._status(f"{shown}" + (f"  (+{more} more)" if more > 0 else ""))
        elif path.is_file():
            self._status("Enter goes on to the run id; Ctrl+S imports now.")

    @on(Input.Submitted)
    def _submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "ingest-tags":
            self.action_start()
        elif event.input.id == "ingest-path":
            self.path_entered()
        else:
            self.focus_next()

    def path_entered(self) -> None:
        """Enter on the path: a folder re-roots the tree there, a file moves on, anything else
        says what is near (and the field keeps the focus to fix it)."""
        field = self.query_one("#ingest-path", Input)
        path = expand(field.value, self.start_dir)
        if path.is_dir():
            self.reroot(path)
            if not field.value.endswith("/"):
                field.value += "/"
                field.cursor_position = len(field.value)
            self._status(f"Listing {path}: type a name (Tab completes) or Ctrl+T to browse.")
        elif path.is_file():
            self.query_one("#ingest-run-id", Input).focus()
        else:
            self._status(self.missing_text(path))
            field.focus()

    @staticmethod
    def missing_text(path: Path) -> str:
        near = near_misses(path)
        hint = f" Did you mean {' or '.join(near)}?" if near else " Tab completes what exists."
        return f"No such file: {path}.{hint}"

    def reroot(self, folder: Path) -> None:
        tree = self.query_one("#ingest-tree", DirectoryTree)
        if Path(tree.path) != folder:
            tree.path = folder

    def action_tree_up(self) -> None:
        tree = self.query_one("#ingest-tree", DirectoryTree)
        if not tree.has_focus:
            return
        parent = Path(tree.path).resolve().parent
        tree.path = parent
        self.query_one("#ingest-path", Input).value = os.path.join(parent, "")

    def action_focus_tree(self) -> None:
        self.query_one("#ingest-tree", DirectoryTree).focus()

    def _status(self, text: str) -> None:
        self.query_one("#ingest-status", Static).update(text)

    def action_start(self) -> None:
        if self.cancel_event is not None:
            return
        path = expand(self.query_one("#ingest-path", Input).value, self.start_dir)
        try:
            tags = parse_tags(self.query_one("#ingest-tags", Input).value)
        except WorkbenchError as exc:
            self._status(f"Cannot start: {exc.one_line()}")
            return
        if not path.is_file():
            self._status(
                f"Cannot start: {path} is a folder; pick a file in it (Tab completes)."
                if path.exists()
                else f"Cannot start: {self.missing_text(path)}"
            )
            self.query_one("#ingest-path", Input).focus()
            return
        run_id = self.query_one("#ingest-run-id", Input).value.strip() or None
        label = self.query_one("#ingest-label", Input).value.strip() or None
        self.cancel_event = threading.Event()
        self.query_one("#ingest-progress", ProgressBar).update(total=None, progress=0)
        self._status(f"Importing {path.name}... Esc cancels (nothing is written then).")
        self.run_import(path, run_id, label, tags or None, self.cancel_event)

    @work(thread=True, exclusive=True, exit_on_error=False, group="ingest", description="Import")
    def run_import(
        self,
        path: Path,
        run_id: str | None,
        label: str | None,
        tags: dict[str, str] | None,
        cancel: threading.Event,
    ) -> None:
        from workbench.store.ingest import ingest

        def progress(p: IngestProgress) -> None:
            self.post_message(self.Progressed(p))

        report = ingest(
            self.store,
            path,
            run_id=run_id,
            label=label,
            tags=tags,
            progress=progress,
            cancel=cancel,
        )
        if report.status == "imported":
            from workbench.store import objstore

            # A store opened on a bucket: the run goes up as `workbench ingest` sends it (a
            # local store: nothing to do); refused there, it leaves the local mirror too.
            for rid in report.run_ids:
                objstore.publish_run_or_undo(self.store, rid, str(path))
        self.post_message(self.Done(report.run_id, report.lines()[0]))

    def on_ingest_screen_progressed(self, message: Progressed) -> None:
        p = message.progress
        bar = self.query_one("#ingest-progress", ProgressBar)
        if p.bytes_total > 0:
            bar.update(total=p.bytes_total, progress=p.bytes_done)
        self._status(
            f"{p.phase}: {p.bytes_done:,} of {p.bytes_total:,} bytes, {p.events:,} events. Esc cancels."
        )

    def on_ingest_screen_done(self, message: Done) -> None:
        self.cancel_event = None
        self.app.notify(message.summary)
        self.dismiss(message.run_id)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state is WorkerState.ERROR and event.worker.error is not None:
            from workbench.store.progress import ImportCancelled

            self.cancel_event = None
            self.query_one("#ingest-progress", ProgressBar).update(total=1, progress=0)
            if isinstance(event.worker.error, ImportCancelled):
                self._status(
                    "Import cancelled; nothing was written. Ctrl+S starts again, Esc closes."
                )
                return
            cause = one_line(event.worker.error)
            self._status(f"Import failed: {cause} (store unchanged). Fix and Ctrl+S, or Esc.")
            # Back from the modal, keys go to the path field: the next try starts there.
            self.app.push_screen(
                ErrorModal("Import failed", cause),
                lambda _: self.query_one("#ingest-path", Input).focus(),
            )

    def action_cancel(self) -> None:
        if self.cancel_event is not None:
            self.cancel_event.set()
            self._status("Cancelling... nothing will be written.")
            return
        self.dismiss(None)
