"""Startup of the app: process start -> first screen ready, and -> runs list filled; and the
request drill-down: key -> the p99 request's timeline drawn.

Spawns a fresh interpreter per sample that opens the app headless on the store (default: the
bundled sample store), times both marks against the spawn time on the shared monotonic clock,
and reports medians. A bare Textual app is timed alongside (interleaved) as the reference.
"Runs filled" is measured two ways: with the app's runs cache of a previous start (what a user
sees from the second start on) and cold (a fresh state folder: the store read with duckdb).

The drill-down is timed in the app on the sample store and, with --big-store, on a store whose
failing run holds 10M events (built there with bench/triage.py's builder when missing: two runs
of 10M): once in a fresh process (duckdb not yet imported) and once more in the same process.
Ends with one JSON line.

    uv run python bench/startup.py [STORE] [--repeat 5] [--big-store DIR]

Headless (no terminal I/O): the marks are the app's own Ready event and the runs table filled.
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


def child(store: Path, out: Path, state_dir: Path | None = None) -> None:
    """Open the app the way `workbench STORE` does, headless; record the two marks; quit."""
    from workbench.cli import main as _cli  # the entry point's own import cost
    from workbench.tui.app import WorkbenchApp
    from workbench.tui.screens.runs_screen import RunsScreen

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
    Probe(_cli.default_store() if str(store) == "default" else store, state_dir=state_dir).run(
        headless=True, size=(100, 30)
    )
    out.write_text(json.dumps(marks), encoding="utf-8")


def drill_child(store: Path, out: Path) -> None:
    """Open the drill-down on the failing run's p99 request (vs the comparator) twice in one
    app: the first open pays duckdb's import, the second does not."""
    from workbench.tui.app import WorkbenchApp
    from workbench.tui.screens.request_screen import DrillTarget, RequestScreen

    marks: dict[str, float] = {}

    class Probe(WorkbenchApp):
        def on_ready(self) -> None:
            self.open_drill("cold")

        def open_drill(self, name: str) -> None:
            screen = RequestScreen(store, DrillTarget("failing", "comparator"))
            self.push_screen(screen)

            def check() -> None:
                if screen.opened_in_s is None:
                    self.set_timer(0.005, check)
                    return
                marks[name] = screen.opened_in_s
                marks[f"{name}_events"] = float(len(screen.picked[0].spans))  # type: ignore[index]
                self.pop_screen()
                if name == "cold":
                    self.set_timer(0.05, lambda: self.open_drill("warm"))
                else:
                    self.exit(0)

            self.set_timer(0.005, check)

    with tempfile.TemporaryDirectory() as tmp:
        Probe(store, state_dir=Path(tmp)).run(headless=True, size=(80, 24))
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


def sample(store: Path | None, cold: bool = False, drill: bool = False) -> dict[str, float]:
    """One start in a fresh process (store None: the bare reference app; cold: a fresh state
    folder, so no runs cache; drill: time the drill-down instead)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "marks.json"
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        if drill:
            args = ["--drill", str(store), str(out)]
        elif store is None:
            args = ["--bare", str(out)]
        else:
            args = ["--child", str(store), str(out), *(["--state", tmp] if cold else [])]
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
        want = {"cold", "warm"} if drill else {"first_screen", "runs_filled"}
        if proc.returncode != 0 or not want <= set(marks):
            sys.exit(f"startup probe failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
    if drill:
        return marks
    return {k: v - start for k, v in marks.items()}


BIG_RUN_EVENTS = 10_000_000


def big_store(path: Path) -> tuple[Path, int]:
    """A store whose failing run holds 10M events at path (built by bench/triage.py when
    missing, failing and comparator alike); returns it with the failing run's event count."""
    if not (path / "runs").is_dir():
        sys.path.insert(0, str(ROOT / "bench"))
        sys.path.insert(0, str(ROOT / "tests"))
        from triage import build  # bench/triage.py

        t0 = time.monotonic()
        n = build(path, 2 * BIG_RUN_EVENTS)
        print(f"built {n:,} events in {time.monotonic() - t0:.1f} s at {path}", flush=True)
    from workbench.store import db

    con = db.connect(path)
    try:
        rows = con.sql("SELECT count(*) FROM events WHERE run_id = 'failing'").fetchall()
    finally:
        con.close()
    events = int(rows[0][0])
    if events < BIG_RUN_EVENTS:
        sys.exit(f"{path}: its failing run holds {events:,} events, not 10M; give a new folder")
    return path, events


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "store", nargs="?", type=Path, default=Path("default"), help="default: the sample store"
    )
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--big-store", type=Path, help="store with a 10M-event failing run (built when missing)"
    )
    parser.add_argument("--child", nargs=2, type=Path, metavar=("STORE", "OUT"))
    parser.add_argument("--state", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--drill", nargs=2, type=Path, metavar=("STORE", "OUT"))
    parser.add_argument("--bare", type=Path, metavar="OUT")
    args = parser.parse_args()
    if args.child:
        child(*args.child, state_dir=args.state)
        return
    if args.drill:
        drill_child(*args.drill)
        return
    if args.bare:
        bare_child(args.bare)
        return
    sample(args.store)  # warm the file cache; cold-disk time is not the app's
    runs = []
    bare = []
    cold = []
    for _ in range(args.repeat):  # interleaved, so machine noise hits all alike
        runs.append(sample(args.store))
        bare.append(sample(None)["first_screen"])
        cold.append(sample(args.store, cold=True)["runs_filled"])
    first = [r["first_screen"] for r in runs]
    filled = [r["runs_filled"] for r in runs]
    for i, r in enumerate(runs, 1):
        print(
            f"run {i}: first screen {r['first_screen']:.3f} s, runs filled {r['runs_filled']:.3f} s"
            f" (cold {cold[i - 1]:.3f} s); bare Textual app {bare[i - 1]:.3f} s"
        )
    bare_median = statistics.median(bare)
    drills: dict[str, list[dict[str, float]]] = {"sample": []}
    sample_store = Path("sample_traces") if str(args.store) == "default" else args.store
    sample_store = sample_store if sample_store.is_absolute() else ROOT / sample_store
    stores = {"sample": sample_store}
    big_events = 0
    if args.big_store:
        stores["10M"], big_events = big_store(args.big_store)
        drills["10M"] = []
    for _ in range(max(1, args.repeat // 2)):
        for name, path in stores.items():
            drills[name].append(sample(path, drill=True))
    for name, got in drills.items():
        print(
            f"drill-down on {name} store ({int(got[0]['cold_events'])} events in the request): "
            + ", ".join(f"{g['cold']:.3f} s fresh / {g['warm']:.3f} s again" for g in got)
        )
    figures = {
        "store": str(args.store),
        "repeat": args.repeat,
        "headless": True,
        "first_screen_s_median": round(statistics.median(first), 3),
        "runs_filled_cached_s_median": round(statistics.median(filled), 3),
        "first_screen_s_min": round(min(first), 3),
        "runs_filled_cached_s_min": round(min(filled), 3),
        "first_screen_budget_s": 1.0,
        "runs_filled_budget_s": 2.0,
        "bare_textual_first_screen_s_median": round(bare_median, 3),
        "first_screen_vs_bare_ratio": round(statistics.median(first) / bare_median, 2),
        "runs_filled_cached_vs_bare_ratio": round(statistics.median(filled) / bare_median, 2),
        "runs_filled_cold_s_median": round(statistics.median(cold), 3),
        "runs_filled_cold_vs_bare_ratio": round(statistics.median(cold) / bare_median, 2),
        "first_screen_ratio_budget": 1.3,
        "runs_filled_ratio_budget": 2.0,
        "drill_budget_s": 1.0,
    }
    for name, got in drills.items():
        figures[f"drill_{name}_fresh_process_s_median"] = round(
            statistics.median(g["cold"] for g in got), 3
        )
        figures[f"drill_{name}_again_s_median"] = round(
            statistics.median(g["warm"] for g in got), 3
        )
        figures[f"drill_{name}_request_events"] = int(got[0]["cold_events"])
    if big_events:
        figures["drill_10M_run_events"] = big_events
    print(
        f"median of {args.repeat}: first screen {figures['first_screen_s_median']} s, runs list "
        f"filled {figures['runs_filled_cached_s_median']} s from the runs cache and "
        f"{figures['runs_filled_cold_s_median']} s cold; bare Textual app "
        f"{figures['bare_textual_first_screen_s_median']} s; ratios to it: first screen "
        f"{figures['first_screen_vs_bare_ratio']} (budget 1.3), runs list "
        f"{figures['runs_filled_cached_vs_bare_ratio']} cached and "
        f"{figures['runs_filled_cold_vs_bare_ratio']} cold (budget 2)"
    )
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
