"""The one line a signal exit (SIGTERM, SIGHUP, Ctrl-C) prints, unless the command said it itself.

Kept apart from main so that `python -m workbench.cli.main` (where main is __main__) and the
commands share one state.
"""

from __future__ import annotations

import atexit
import signal
import sys

_state = {"signum": 0, "reported": False}


def note(signum: int) -> None:
    """A signal is ending the process: say so at exit unless reported() is called."""
    if not _state["signum"]:
        _state["signum"] = signum
        atexit.register(_say)


def reported() -> None:
    """The command printed what the signal left (ingest names the runs it committed), or it
    finished and printed its own result (library code swallowed the signal's exit)."""
    _state["reported"] = True


def exit_code(exc: BaseException) -> int | None:
    """128 + the signal behind `exc`, or None when no signal caused it.

    A signal's SystemExit raised inside library code can come out as another exception (Python
    3.11 wraps one raised in a class body's __set_name__ as RuntimeError): any exception after
    a noted signal is that signal's.
    """
    if isinstance(exc, KeyboardInterrupt):
        return 128 + signal.SIGINT
    if isinstance(exc, SystemExit):
        code = exc.code
        return code if isinstance(code, int) and code > 128 else None
    return noted_exit()


def noted_exit() -> int | None:
    """128 + the signal that is ending the process, or None before any."""
    return 128 + int(_state["signum"]) if _state["signum"] else None


def _say() -> None:
    if _state["signum"] and not _state["reported"]:
        name = signal.Signals(int(_state["signum"])).name
        print(f"workbench: interrupted by {name}; nothing was written", file=sys.stderr)
