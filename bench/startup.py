"""Startup of the app: process start -> first screen ready, and -> runs list filled.

Spawns a fresh interpreter per sample that opens the app headless on the store (default: the
bundled sample store), times both marks against the spawn time on the shared monotonic clock,
and reports medians. Ends with one JSON line.

    uv run python bench/startup.py [STORE] [--repeat 5]

Headless (no terminal I/O): the marks are the app's own Ready event and the runs table filled.
A bare Textual app is timed alongside as the reference.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def child(store: Path, out: Path) -> None:
    """Open the app the way `workbench STORE` does, headless; record the two marks; quit."""
    from workbench.cli import main as _cli  # the entry point's own import cost
    from workbench.tui.app import WorkbenchApp
    from workbench.tui.runs_screen import RunsScreen

    marks: dict[str, float] = {}

    class Probe(WorkbenchApp):
        def on_ready(self) -> None:
            marks["first_screen"] = time.monotonic()

        def on_runs_screen_runs_loaded(self, _message: RunsScreen.RunsLoaded) -> None:
            # Bubbles here after the screen filled its table.
            self.call_after_refresh(self._filled)

        def _filled(self) -> None:
            marks["runs_filled"] = time.monotonic()
            self.exit(0)

    # "default": what `workbench` without an argument opens (the sample's working copy).
    Probe(_cli.default_store() if str(store) == "default" else store).run(
        headless=True, size=(100, 30)
    )
    out.write_text(json.dumps(marks), encoding="utf-8")


def bare_child(out: Path) -> None:
    """The reference: a bare Textual app with one line of text, headless, to its first screen."""
    from textual.app import App, ComposeResult
    from textual.widgets import Static

    marks: dict[str, float] = {}

    class Bare(App[None]):
        def compose(self) -> ComposeResult:
            yield Static("hello")

        def on_ready(self) -> None:
            marks["first_screen"] = marks["runs_filled"] = time.monotonic()
            self.exit()

    Bare().run(headless=True, size=(100, 30))
    out.write_text(json.dumps(marks), encoding="utf-8")


def sample(store: Path | None) -> dict[str, float]:
    """One cold start in a fresh process (store None: the bare reference app)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "marks.json"
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        args = ["--child", str(store), str(out)] if store else ["--bare", str(out)]
        start = time.monotonic()
        proc = subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), *args],
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=120,
            text=True,
        )
        marks = json.loads(out.read_text(encoding="utf-8")) if out.exists() else {}
        if proc.returncode != 0 or set(marks) != {"first_screen", "runs_filled"}:
            sys.exit(f"startup probe failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
    return {k: v - start for k, v in marks.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "store", nargs="?", type=Path, default=Path("default"), help="default: the sample store"
    )
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--child", nargs=2, type=Path, metavar=("STORE", "OUT"))
    parser.add_argument("--bare", type=Path, metavar="OUT")
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    if args.bare:
        bare_child(args.bare)
        return
    sample(args.store)  # warm the file cache; cold-disk time is not the app's
    runs = []
    bare = []
    for _ in range(args.repeat):  # interleaved, so machine noise hits both alike
        runs.append(sample(args.store))
        bare.append(sample(None)["first_screen"])
    first = [r["first_screen"] for r in runs]
    filled = [r["runs_filled"] for r in runs]
    for i, r in enumerate(runs, 1):
        print(
            f"run {i}: first screen {r['first_screen']:.3f} s, runs filled {r['runs_filled']:.3f} s"
        )
    bare_median = statistics.median(bare)
    figures = {
        "store": str(args.store),
        "repeat": args.repeat,
        "headless": True,
        "first_screen_s_median": round(statistics.median(first), 3),
        "runs_filled_s_median": round(statistics.median(filled), 3),
        "first_screen_s_min": round(min(first), 3),
        "runs_filled_s_min": round(min(filled), 3),
        "first_screen_budget_s": 1.0,
        "runs_filled_budget_s": 2.0,
        "bare_textual_first_screen_s_median": round(bare_median, 3),
        "first_screen_vs_bare_ratio": round(statistics.median(first) / bare_median, 2),
        "runs_filled_vs_bare_ratio": round(statistics.median(filled) / bare_median, 2),
    }
    print(
        f"median of {args.repeat}: first screen {figures['first_screen_s_median']} s "
        f"(budget 1.0), runs list filled {figures['runs_filled_s_median']} s (budget 2.0); "
        f"bare Textual app {figures['bare_textual_first_screen_s_median']} s"
    )
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
