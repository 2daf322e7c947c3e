"""`workbench serve [--host 127.0.0.1] [--port N]`: the same app in a browser tab."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

DEFAULT_PORT = 8000


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "serve",
        help="serve the app to a browser (textual-serve); loopback only unless --allow-remote",
    )
    p.add_argument("--store", type=Path, default=None, help="default: the sample store's copy")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"default {DEFAULT_PORT}")
    p.add_argument(
        "--allow-remote",
        action="store_true",
        help="required to bind an address other machines can reach (plain HTTP: use a tunnel)",
    )
    p.add_argument("--keymap", type=Path, default=None)


def run(args: argparse.Namespace) -> int:
    from workbench.cli.main import default_store
    from workbench.errors import WorkbenchError
    from workbench.tui.web_server import TokenServer, app_command, is_loopback

    if not 0 < args.port < 65536:
        raise WorkbenchError(f"--port {args.port}", "not a TCP port (1-65535)")
    if not is_loopback(args.host):
        if not args.allow_remote:
            raise WorkbenchError(
                f"--host {args.host}",
                "is not a loopback address: add --allow-remote to serve other machines",
            )
        print(
            f"workbench: WARNING: serving on {args.host}: anyone who can reach port {args.port} "
            "and has the URL's token drives the app, over unencrypted HTTP; prefer an SSH tunnel "
            "to 127.0.0.1",
            file=sys.stderr,
        )
    store = (args.store or default_store()).resolve()
    if not store.is_dir():
        raise WorkbenchError(str(store), "store directory does not exist")
    server = TokenServer(app_command(store, args.keymap), args.host, args.port)
    try:
        server.serve()
    except OSError as exc:  # the port is taken, or the address is not ours
        raise WorkbenchError(
            f"{args.host}:{args.port}", f"cannot serve: {exc.strerror or exc}"
        ) from exc
    return 0
