"""Open the app on a store: read the keymap first so a bad one fails before the screen opens."""

from __future__ import annotations

from pathlib import Path

from workbench.errors import WorkbenchError


def launch(store: Path, keymap: Path | None = None) -> int:
    """Run the app on `store` until the user quits; returns the exit code."""
    from workbench.tui.app import WorkbenchApp
    from workbench.tui.app_keys import known_binding_ids
    from workbench.tui.keymap import load_keymap

    if not store.is_dir():
        raise WorkbenchError(str(store), "store directory does not exist")
    overrides = load_keymap(keymap, known_binding_ids()) if keymap is not None else None
    app = WorkbenchApp(store, overrides)
    code = app.run()
    return int(code or 0)
