"""The app in a browser: page load to the Runs screen's text, and a key to the next screen.

Serves a copy of the sample store with `workbench serve` (as tests/test_web_serve.py does) and
drives Debian's /usr/bin/chromium headless through Playwright. Per repeat, a fresh page (so a
fresh app session): the time from navigating to the tokened URL until the terminal shows the
sample's runs, then from pressing 2 until it shows the Pair screen's footer. Medians; ends
with one JSON line.

    uv run python bench/web.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

from test_web_serve import (  # noqa: E402
    CHROMIUM,
    CHROMIUM_ARGS,
    EXPOSE_FROM,
    EXPOSE_TO,
    footer_key,
    free_port,
)
from workbench.cli.main import bundled_sample  # noqa: E402

# True once xterm's visible rows hold `needle` (the terminal is a canvas: read its buffer).
SHOWS = """needle => {
    const t = window.__wbTerminal;
    if (!t) return false;
    const b = t.buffer.active;
    for (let i = 0; i < t.rows; i++) {
        const line = b.getLine(b.viewportY + i);
        if (line && line.translateToString(true).includes(needle)) return true;
    }
    return false;
}"""


def serve(home: Path) -> tuple[str, subprocess.Popen[str]]:
    """`workbench serve` on a copy of the sample store: (its tokened URL, the process)."""
    store = home / "store"
    shutil.copytree(bundled_sample(), store, ignore=shutil.ignore_patterns("incidents"))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "workbench",
            "serve",
            "--port",
            str(free_port()),
            "--store",
            str(store),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "WORKBENCH_HOME": str(home), "PYTHONPATH": str(ROOT)},
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if "?token=" in line:
            return line.strip(), proc
        if not line:
            break
    proc.terminate()
    sys.exit("workbench serve printed no URL")


def one_session(browser: Any, url: str, runs_text: str, pair_text: str) -> dict[str, float]:
    """Page load -> Runs screen shown; key 2 -> Pair screen shown (its first visit builds it);
    key 1 -> back on the Runs screen (built already). Seconds."""
    page = browser.new_page(viewport={"width": 1100, "height": 700})

    def expose_terminal(route: Any) -> None:
        original = route.fetch()
        body = original.text()
        route.fulfill(response=original, body=body.replace(EXPOSE_FROM, EXPOSE_TO))

    try:
        page.route("**/static/js/textual.js", expose_terminal)
        t0 = time.perf_counter()
        page.goto(url)
        page.wait_for_function(SHOWS, arg=runs_text, timeout=60_000, polling=10)
        loaded = time.perf_counter() - t0
        page.focus("textarea.xterm-helper-textarea")
        t1 = time.perf_counter()
        page.keyboard.press("2")
        page.wait_for_function(SHOWS, arg=pair_text, timeout=30_000, polling=10)
        key = time.perf_counter() - t1
        t2 = time.perf_counter()
        page.keyboard.press("1")
        page.wait_for_function(SHOWS, arg=runs_text, timeout=30_000, polling=10)
        back = time.perf_counter() - t2
    finally:
        page.close()
    return {"page_load_s": loaded, "key_to_pair_s": key, "key_back_to_runs_s": back}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    if not CHROMIUM.exists():
        sys.exit(f"{CHROMIUM} is missing (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    from workbench.tui.screens.pair_screen import PairScreen
    from workbench.tui.screens.runs_screen import RunsScreen

    # The footers' own keys: text only that screen shows.
    runs_text = footer_key(RunsScreen, "runs.mark_failing")
    pair_text = footer_key(PairScreen, "pair.accept")
    samples: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        url, proc = serve(Path(tmp))
        try:
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
                try:
                    one_session(browser, url, runs_text, pair_text)  # warm the file cache
                    for i in range(args.repeat):
                        got = one_session(browser, url, runs_text, pair_text)
                        samples.append(got)
                        print(
                            f"session {i + 1}: page load to Runs {got['page_load_s']:.3f} s, "
                            f"key 2 to Pair {got['key_to_pair_s'] * 1000:.0f} ms (first visit), "
                            f"key 1 back to Runs {got['key_back_to_runs_s'] * 1000:.0f} ms",
                            flush=True,
                        )
                finally:
                    browser.close()
        finally:
            proc.terminate()
            proc.communicate(timeout=20)
    figures = {
        "repeat": args.repeat,
        "browser": str(CHROMIUM),
        "page_load_to_runs_s_median": round(
            statistics.median(s["page_load_s"] for s in samples), 3
        ),
        "key_to_pair_s_median": round(statistics.median(s["key_to_pair_s"] for s in samples), 3),
        "key_back_to_runs_s_median": round(
            statistics.median(s["key_back_to_runs_s"] for s in samples), 3
        ),
    }
    print(
        f"median of {args.repeat}: page load to the Runs screen "
        f"{figures['page_load_to_runs_s_median']} s, key 2 to the Pair screen "
        f"{figures['key_to_pair_s_median'] * 1000:.0f} ms (first visit), key 1 back to Runs "
        f"{figures['key_back_to_runs_s_median'] * 1000:.0f} ms"
    )
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
