"""The one line a signal exit (SIGTERM, SIGHUP) prints, unless the command said it itself.

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
    """The command printed what the signal left (ingest names the runs it committed)."""
    _state["reported"] = True


def _say() -> None:
    if _state["signum"] and not _state["reported"]:
        name = signal.Signals(int(_state["signum"])).name
        print(f"workbench: interrupted by {name}; nothing was written", file=sys.stderr)
