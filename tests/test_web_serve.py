"""`workbench serve` driven in a real headless Chromium (Debian's /usr/bin/chromium through
Playwright): the token admits the page, the Runs screen's text appears, a key moves to Pair;
without the token (or from another origin) nothing starts, and the token is never logged."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from workbench.cli.main import bundled_sample

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--headless",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-dev-shm-usage",
    "--no-first-run",
]
# .ci/run installs Chromium and sets this: there, a missing browser fails instead of skipping.
REQUIRED = os.environ.get("WORKBENCH_REQUIRE_BROWSER") == "1"
# textual.js keeps its xterm Terminal in a closure; the test (only) exposes it to read the
# screen from xterm's buffer, since the terminal is drawn on a canvas, not as DOM text.
EXPOSE_FROM = "this.terminal=new v.Terminal("
EXPOSE_TO = "this.terminal=window.__wbTerminal=new v.Terminal("

pytestmark = pytest.mark.skipif(
    not REQUIRED and not CHROMIUM.exists(),
    reason=f"{CHROMIUM} is missing (apt-get install chromium; .ci/run installs it)",
)


def footer_key(screen: Any, binding_id: str) -> str:
    """A binding as the footer shows it ("f Failing"), read from the screen's own bindings."""
    b = next(b for b in screen.BINDINGS if getattr(b, "id", None) == binding_id)
    return f"{b.key} {b.description}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """A `workbench serve` on a copy of the sample store: (the printed URL, the process)."""
    home = tmp_path_factory.mktemp("serve")
    store = home / "store"
    shutil.copytree(bundled_sample(), store, ignore=shutil.ignore_patterns("incidents"))
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "workbench", "serve", "--port", str(port), "--store", str(store)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "WORKBENCH_HOME": str(home), "NO_COLOR": "1"},
    )
    assert proc.stdout is not None
    url = ""
    deadline = time.monotonic() + 30
    while not url and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if "?token=" in line:
            url = line.strip()
    try:
        assert url.startswith(f"http://127.0.0.1:{port}/?token="), url
        yield url, proc
    finally:
        proc.terminate()
        rest, _ = proc.communicate(timeout=20)
    # Every request went through the access log's level: the token was printed once, above.
    assert url.split("=", 1)[1] not in rest, rest


def status_of(url: str, headers: dict[str, str] | None = None) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {})) as r:
            return int(r.status)
    except urllib.error.HTTPError as err:
        return int(err.code)


def screen(page: Any) -> str:
    """The terminal's visible text, row by row, from xterm's active buffer."""
    text: str = page.evaluate(
        """() => {
            const t = window.__wbTerminal;
            if (!t) return "";
            const b = t.buffer.active, rows = [];
            for (let i = 0; i < t.rows; i++) {
                const line = b.getLine(b.viewportY + i);
                rows.push(line ? line.translateToString(true) : "");
            }
            return rows.join("\\n");
        }"""
    )
    return text


def wait_for_text(page: Any, *needles: str, timeout_s: float = 30.0) -> str:
    """The screen once it shows every needle."""
    deadline = time.monotonic() + timeout_s
    text = ""
    while time.monotonic() < deadline:
        text = screen(page)
        if all(n in text for n in needles):
            return text
        page.wait_for_timeout(100)
    raise AssertionError(f"{needles!r} never all appeared; the screen shows:\n{text}")


def test_browser_session_needs_the_token(served: tuple[str, subprocess.Popen[str]]) -> None:
    from playwright.sync_api import Route, sync_playwright

    from workbench.tui.screens.pair_screen import PairScreen
    from workbench.tui.screens.runs_screen import RunsScreen

    runs_key, pair_key = (
        footer_key(RunsScreen, "runs.mark_failing"),
        footer_key(PairScreen, "pair.accept"),
    )

    url, _ = served
    base = url.split("?", 1)[0]

    def expose_terminal(route: Route) -> None:
        original = route.fetch()
        body = original.text()
        assert body.count(EXPOSE_FROM) == 1, "textual.js changed: update EXPOSE_FROM"
        route.fulfill(response=original, body=body.replace(EXPOSE_FROM, EXPOSE_TO))

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            # Without the token: the page is refused, and no websocket session starts.
            stranger = browser.new_page()
            refused = stranger.goto(base)
            assert refused is not None and refused.status == 403
            wrong = stranger.goto(base + "?token=not-the-token")
            assert wrong is not None and wrong.status == 403
            stranger.close()

            page = browser.new_page(viewport={"width": 1100, "height": 700})
            page.route("**/static/js/textual.js", expose_terminal)
            response = page.goto(url)
            assert response is not None and response.status == 200
            assert page.url == base, "the token stays in the address bar"
            cookie = next(c for c in page.context.cookies() if c["name"] == "workbench_session")
            assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
            # The Runs screen: the sample's runs, and its footer's own keys.
            runs = wait_for_text(page, "candidate-rollback", runs_key)
            assert pair_key not in runs
            page.focus("textarea.xterm-helper-textarea")
            page.keyboard.press("2")
            # Pair: its footer's keys instead of the Runs screen's.
            pair = wait_for_text(page, pair_key, timeout_s=20)
            assert runs_key not in pair
        finally:
            browser.close()


def test_websocket_and_static_need_the_cookie_and_our_origin(
    served: tuple[str, subprocess.Popen[str]],
) -> None:
    url, _ = served
    base, token = url.split("/?token=")
    assert status_of(f"{base}/ws") == 403
    assert status_of(f"{base}/static/js/textual.js") == 403
    assert status_of(f"{base}/download/x") == 403
    cookie = {"Cookie": f"workbench_session={token}"}
    assert status_of(f"{base}/static/js/textual.js", cookie) == 200
    assert status_of(f"{base}/ws", {**cookie, "Origin": "http://evil.example"}) == 403
    assert status_of(f"{base}/ws", cookie) == 403  # no Origin: not a browser on our page


def test_refuses_non_loopback_without_the_flag(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "workbench", "serve", "--host", "0.0.0.0", "--store", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "is not a loopback address: add --allow-remote" in done.stderr
