"""Entry point of `workbench`: a subcommand runs headless; no subcommand opens the app."""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn

from workbench.cli import interrupts
from workbench.errors import WorkbenchError
from workbench.terminal_text import TerminalSafeWriter, for_terminal

# What a process killed by SIGPIPE reports; `workbench runs | head` ends like `cat | head`.
EXIT_BROKEN_PIPE = 141
# An error this program did not foresee (a bug): still one line, never a traceback.
EXIT_INTERNAL = 70
UnraisableHook = Callable[["sys.UnraisableHookArgs"], object]
# The signals that end a command: handled while it runs, default once it has finished.
_ENDING_SIGNALS = (signal.SIGHUP, signal.SIGTERM, signal.SIGINT)

# name -> module in workbench.cli; each module defines add_parser(subparsers) and run(args) -> int.
# Modules import their heavy dependencies inside run(), so `--help` stays fast.
COMMANDS: dict[str, str] = {
    "ingest": "ingest_cmd",
    "runs": "runs_cmd",
    "sample": "sample_cmd",
    "triage": "triage_cmd",
    "incident": "incident_cmd",
    "assign": "assign_cmd",
    "validate": "validate_cmd",
    "export": "export_cmd",
    "fleet": "fleet_cmd",
    "serve": "serve_cmd",
    "gate": "gate_cmd",
    "baseline": "baseline_cmd",
}
# A bucket store (s3://...) is worked on through its local mirror; these commands need fewer
# of its tables than all, so the mirror fetches only those (see store/objstore.py).
_REMOTE_TABLES: dict[str, tuple[str, ...]] = {
    "ingest": (),
    "fleet": ("requests",),
    "baseline": (),  # runs rows only: a tag checks that its run is there
}


def _mirror_remote_store(argv: list[str]) -> list[str]:
    """argv with an `--store s3://...` replaced by the bucket store's local mirror."""
    from workbench.store import objstore

    out = list(argv)
    for i, arg in enumerate(out):
        if arg == "--store" and i + 1 < len(out):
            at, value = i + 1, out[i + 1]
        elif arg.startswith("--store="):
            at, value = i, arg[len("--store=") :]
        else:
            continue
        if objstore.is_remote(value):
            tables = _REMOTE_TABLES.get(out[0], objstore.ALL_TABLES)
            mirror = str(objstore.open_store(value, tables))
            out[at] = mirror if at == i + 1 else f"--store={mirror}"
    return out


def bundled_sample() -> Path:
    """The bundled sample store (repository checkout first, then the installed copy)."""
    here = Path(__file__).resolve()
    repo = here.parents[2] / "sample_traces"
    return repo if repo.is_dir() else here.parents[1] / "_sample_traces"


def default_store() -> Path:
    """A working copy of the sample store in the state directory: incidents never land in the
    repository (or a read-only install), and survive a restart."""
    from workbench.store.workspace import sample_workspace, state_home

    return sample_workspace(bundled_sample(), state_home())


class OneLineParser(argparse.ArgumentParser):
    """argparse whose usage errors are one line on stderr, naming the command and the option."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"workbench: {self.prog}: {for_terminal(message)} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="workbench",
        description="Triage accelerator performance regressions. Without a command, opens the app.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in COMMANDS.values():
        importlib.import_module(f"workbench.cli.{module}").add_parser(sub)
    return parser


def _open_app(argv: Sequence[str]) -> int:
    parser = OneLineParser(prog="workbench", add_help=False)
    parser.add_argument("store", nargs="?", type=Path, default=None)
    parser.add_argument("--keymap", type=Path, default=None)
    args = parser.parse_args(argv)
    from workbench.store import objstore
    from workbench.tui.launch import launch

    store = args.store or default_store()
    if objstore.is_remote(argv[0] if argv else ""):
        store = objstore.open_store(argv[0])
    return launch(store, keymap=args.keymap)


def _exit_cleanly_on_hangup() -> None:
    """A dropped SSH session (SIGHUP) or a SIGTERM unwinds like Ctrl-C, so that a store or
    incident write in progress is rolled back instead of cut off, and exits with one line."""

    def _raise(signum: int, _frame: object) -> None:
        interrupts.note(signum)
        raise SystemExit(128 + signum)

    # First the alarm that re-delivers an exit a callback swallowed (_swallowing_hook).
    signal.signal(signal.SIGALRM, _deliver_again)
    # Ctrl-C too: as SystemExit it unwinds the same way from anywhere (even argument parsing),
    # and exits with the same one line.
    for sig in _ENDING_SIGNALS:
        signal.signal(sig, _raise)


# Python swallows what a __del__ or weakref callback raises (seen: a SIGTERM that landed in
# importlib's module-lock callback was printed as a traceback and the import went on).
_REDELIVER_AFTER_S = 0.01
_running = [False]  # the command has not returned: a re-delivered exit still has work to undo


def _deliver_again(_signum: int, _frame: object) -> None:
    """SIGALRM armed by the unraisable hook: the signal's exit again, outside the callback."""
    code = interrupts.noted_exit()
    if code is not None and _running[0]:
        raise SystemExit(code)


def _swallowing_hook(previous: UnraisableHook) -> UnraisableHook:
    """An unraisable hook that re-arms a signal's swallowed exit and passes the rest on."""

    def _swallowed(unraisable: sys.UnraisableHookArgs) -> None:
        exc = unraisable.exc_value
        if isinstance(exc, SystemExit) and interrupts.exit_code(exc) is not None:
            signal.setitimer(signal.ITIMER_REAL, _REDELIVER_AFTER_S)
            return
        previous(unraisable)

    return _swallowed


def main(argv: Sequence[str] | None = None) -> int:
    from_command_line = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or (argv[0] not in COMMANDS and argv[0] not in ("-h", "--help")):
        try:
            return _open_app(argv)
        except WorkbenchError as exc:
            print(f"workbench: {exc.one_line()}", file=sys.stderr)
            return 2
    # The hook before the handlers, and everything after them inside the try: a signal that
    # lands in an import's module-lock callback (start_early imports) is re-delivered, not lost.
    previous_hook = sys.unraisablehook
    sys.unraisablehook = _swallowing_hook(previous_hook)
    _running[0] = True
    try:
        _exit_cleanly_on_hangup()
        if argv[0] == "ingest":
            # An import does no linear algebra: OpenBLAS's threads, started as numpy loads
            # (next, with the store's modules), only cost start-up CPU (~0.05-0.08 s a process).
            os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
            if "--fleet" not in argv:  # a fleet's workers keep both cores busy without it
                from workbench.store.importers.kineto.args_spawn import start_early

                # A big trace's second decoding process imports its modules beside this one's.
                start_early(argv[1:])
        code = _command(argv)
    except BaseException as exc:
        signalled = interrupts.exit_code(exc)
        if signalled is None:
            raise
        return signalled  # interrupts says so at exit, unless the command did
    finally:
        _running[0] = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        sys.unraisablehook = previous_hook
    # Finished: a signal that library code swallowed on the way changed nothing the command's
    # own output does not say, so no "nothing was written" at exit.
    interrupts.reported()
    if from_command_line:  # one that comes now, with nothing left to undo, ends the program
        for sig in _ENDING_SIGNALS:
            signal.signal(sig, signal.SIG_DFL)
    return code


def _command(argv: list[str]) -> int:
    """Parse and run one subcommand: its exit code, and one line for any error."""
    try:
        argv = _mirror_remote_store(argv)
    except WorkbenchError as exc:
        print(f"workbench: {exc.one_line()}", file=sys.stderr)
        return 2
    args = build_parser().parse_args(argv)
    mod = importlib.import_module(f"workbench.cli.{COMMANDS[args.command]}")
    real_stdout = sys.stdout
    sys.stdout = TerminalSafeWriter(real_stdout)  # type: ignore[assignment]
    try:
        code: int = mod.run(args)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit
    except BrokenPipeError:
        return _stdout_gone(real_stdout)
    except WorkbenchError as exc:
        if interrupts.exit_code(exc) is not None:
            raise  # its message would blame the input for what the signal did
        print(f"workbench: {exc.one_line()}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("workbench: interrupted; nothing was written", file=sys.stderr)
        return 130
    except Exception as exc:  # the CLI's promise: one line, never a traceback
        if os.environ.get("WORKBENCH_DEBUG") or interrupts.exit_code(exc) is not None:
            raise  # a signal's exit that library code turned into another error
        print(f"workbench: {args.command}: {unforeseen(exc)}", file=sys.stderr)
        return EXIT_INTERNAL
    finally:
        sys.stdout = real_stdout
    return code


def _stdout_gone(stdout: object) -> int:
    """The reader of stdout went away (`| head`): exit quietly, as a SIGPIPE would."""
    try:
        fd = stdout.fileno()  # type: ignore[attr-defined]
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)  # the interpreter's final flush must not fail again
        os.close(devnull)
    except (AttributeError, OSError, ValueError):
        pass
    return EXIT_BROKEN_PIPE


def unforeseen(exc: Exception) -> str:
    """One line for an error no layer turned into a WorkbenchError."""
    if isinstance(exc, OSError) and exc.filename is not None:
        text = f"{exc.filename}: {exc.strerror or exc}"
    else:
        text = f"unexpected {type(exc).__name__}: {exc}"
    text = " ".join(text.split())[:300]
    return for_terminal(text) + " (set WORKBENCH_DEBUG=1 for the traceback, and please report)"


if __name__ == "__main__":
    sys.exit(main())
