"""The app in a browser tab: textual-serve, with the per-launch token textual-serve lacks.
It starts the app as a command for each session and never imports it.

textual-serve starts the app's command for every websocket that connects, and has no access
control. This subclass adds one aiohttp middleware in front of every route:

- the page (`/`) needs `?token=<per-launch token>`; a right one sets an HttpOnly, SameSite=Strict
  cookie and redirects to `/`, so the token leaves the address bar, the history and referrers;
- everything else (the websocket that starts a session, static files, downloads) needs that
  cookie: the websocket URL cannot carry the token (textual.js appends its own ?width=&height=)
  and downloads are opened on the bare origin;
- the websocket also needs an Origin header naming this server, so another site open in the
  same browser cannot drive a session (cross-site websocket hijacking);
- tokens are compared with hmac.compare_digest, and the access log is lowered to warnings, so a
  token never reaches the log.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import secrets
import shlex
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Final

from aiohttp import web
from textual_serve.server import Server

COOKIE: Final[str] = "workbench_session"
TEMPLATES: Final[Path] = Path(__file__).resolve().parent / "web_templates"
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def is_loopback(host: str) -> bool:
    """Does host only accept connections from this machine?"""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def app_command(store: Path, keymap: Path | None = None) -> str:
    """The shell command textual-serve runs for each session: this Python, the app, the store."""
    argv = [sys.executable, "-m", "workbench", str(store)]
    if keymap is not None:
        argv += ["--keymap", str(keymap)]
    return shlex.join(argv)


class TokenServer(Server):
    """A textual-serve Server that admits only browsers that brought the launch token."""

    def __init__(self, command: str, host: str, port: int, token: str | None = None) -> None:
        super().__init__(command, host=host, port=port, title="Incident Workbench")
        self.templates_path = TEMPLATES
        self.token = token or secrets.token_urlsafe(32)
        # Origins a browser sends for our own page: the URL we print, and its localhost twin.
        self.origins = {self.public_url}
        if is_loopback(host):
            self.origins |= {f"http://localhost:{port}", f"http://127.0.0.1:{port}"}

    @property
    def url(self) -> str:
        """The URL to open: the only place the token is shown."""
        return f"{self.public_url}/?token={self.token}"

    def _valid(self, presented: str | None) -> bool:
        return presented is not None and hmac.compare_digest(
            presented.encode("utf-8", "surrogateescape"), self.token.encode()
        )

    @web.middleware
    async def guard(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Refuse (403) before any handler runs, so no session starts without the token."""
        if request.path == "/" and "token" in request.query:
            if not self._valid(request.query.get("token")):
                raise web.HTTPForbidden(text="wrong or expired workbench token\n")
            found = web.Response(status=303, headers={"Location": "/"})
            found.set_cookie(COOKIE, self.token, httponly=True, samesite="Strict", path="/")
            return found
        if not self._valid(request.cookies.get(COOKIE)):
            raise web.HTTPForbidden(
                text="open the URL `workbench serve` printed (it carries the token)\n"
            )
        if request.path == "/ws" and request.headers.get("Origin") not in self.origins:
            raise web.HTTPForbidden(text="websocket from another origin\n")
        response = await handler(request)
        response.headers["Referrer-Policy"] = "no-referrer"
        response.headers["Cache-Control"] = "no-store"
        return response

    async def _make_app(self) -> web.Application:
        app = await super()._make_app()
        app.middlewares.append(self.guard)
        return app

    def initialize_logging(self) -> None:
        super().initialize_logging()
        # The access log would print each request line, and the first one holds the token.
        logging.getLogger("aiohttp.access").setLevel(logging.WARNING)

    async def on_startup(self, app: web.Application) -> None:
        where = "this machine only" if is_loopback(self.host) else f"anyone who reaches {self.host}"
        print(f"Serving the workbench to {where}. Open:\n  {self.url}", flush=True)
        print("Ctrl+C stops the server and every session.", flush=True)
