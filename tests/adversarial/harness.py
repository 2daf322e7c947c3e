"""Shared by the adversarial suites: the real CLI in a subprocess under a timeout, and a tree
hash that sees files, directories, symlinks and special files without following or opening them."""

from __future__ import annotations

import hashlib
import os
import signal
import stat
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# The suites here share tests/ helpers (triage_stores, ingest_helpers) with the tests beside it.
if str(ROOT / "tests") not in sys.path:
    sys.path.insert(0, str(ROOT / "tests"))
# Generous for a loaded 2-core machine; a case that needs longer is a hang.
TIMEOUT = 60.0


@dataclass(frozen=True)
class Outcome:
    """What one CLI call did: its exit code and both streams as text."""

    argv: tuple[str, ...]
    code: int
    stdout: str
    stderr: str

    @property
    def err_lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.strip()]

    def __str__(self) -> str:
        return (
            f"workbench {' '.join(self.argv)} -> exit {self.code}\n"
            f"--- stdout ---\n{self.stdout[-2000:]}\n--- stderr ---\n{self.stderr[-4000:]}"
        )


def cli_env(home: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a CLI call: its own state directory, no colours, no terminal."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORKBENCH_")}
    env.update(
        WORKBENCH_HOME=str(home),
        NO_COLOR="1",
        TERM="dumb",
        COLUMNS="120",
        PYTHONIOENCODING="utf-8",
        PYTHONDONTWRITEBYTECODE="1",
    )
    env.update(extra or {})
    return env


def command(argv: Iterable[str]) -> list[str]:
    """The argv that runs `workbench ARGV...` with this interpreter."""
    return [sys.executable, "-m", "workbench.cli.main", *argv]


def workbench(
    argv: Iterable[str],
    home: Path,
    *,
    cwd: Path | None = None,
    timeout: float = TIMEOUT,
    stdin: bytes | None = None,
    env: Mapping[str, str] | None = None,
) -> Outcome:
    """Run `workbench ARGV` in a subprocess; a call past `timeout` fails the test as a hang."""
    args = tuple(str(a) for a in argv)
    proc = subprocess.Popen(
        command(args),
        cwd=cwd or home,
        env=cli_env(home, env),
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # so that a hang is killed with everything it started
    )
    try:
        out, err = proc.communicate(stdin, timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(
            f"workbench {' '.join(args)} hung (killed after {timeout:.0f} s)\n"
            f"{err.decode('utf-8', 'replace')[-2000:]}"
        )
    return Outcome(
        args, proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
    )


def spawn(argv: Iterable[str], home: Path, *, cwd: Path | None = None) -> subprocess.Popen[bytes]:
    """Start `workbench ARGV` without waiting, for tests that signal or race it."""
    return subprocess.Popen(
        command(str(a) for a in argv),
        cwd=cwd or home,
        env=cli_env(home),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


def finish(proc: subprocess.Popen[bytes], argv: Iterable[str] = ()) -> Outcome:
    """Wait (under TIMEOUT) for a spawned call and collect what it printed."""
    try:
        out, err = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"workbench {' '.join(map(str, argv))} hung")
    return Outcome(
        tuple(map(str, argv)),
        proc.returncode,
        out.decode("utf-8", "replace"),
        err.decode("utf-8", "replace"),
    )


def _entry(path: Path) -> str:
    st = path.lstat()
    if stat.S_ISLNK(st.st_mode):
        return f"link -> {os.readlink(path)}"
    if stat.S_ISDIR(st.st_mode):
        return "dir"
    if stat.S_ISREG(st.st_mode):
        h = hashlib.sha256()
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        return h.hexdigest()
    return f"special {stat.S_IFMT(st.st_mode):o}"  # a FIFO or device: never opened


def tree_hash(root: Path) -> dict[str, str]:
    """Every entry under root (files hashed, symlinks by target, never followed): equal means
    byte-for-byte the same tree. A root that does not exist hashes to {}."""
    if not root.exists() and not root.is_symlink():
        return {}
    out: dict[str, str] = {".": _entry(root)}
    if out["."] != "dir":
        return out
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        base = Path(dirpath)
        for name in sorted(dirnames + filenames):
            p = base / name
            out[str(p.relative_to(root))] = _entry(p)
    return out


def assert_one_line_error(out: Outcome, subject: str, *, code: int | None = 2) -> str:
    """A refusal as the quality bar wants it: non-zero exit (`code` if given), no traceback,
    exactly one line on stderr, and that line names `subject`. Returns the line."""
    assert "Traceback" not in out.stderr, str(out)
    assert out.code != 0, f"expected a refusal\n{out}"
    if code is not None:
        assert out.code == code, f"expected exit {code}\n{out}"
    lines = out.err_lines
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}\n{out}"
    assert subject in lines[0], f"the error does not name {subject!r}\n{out}"
    return lines[0]


def refused(
    argv: Iterable[str],
    home: Path,
    subject: str,
    watch: Iterable[Path],
    *,
    code: int | None = 2,
    cwd: Path | None = None,
    timeout: float = TIMEOUT,
    stdin: bytes | None = None,
) -> Outcome:
    """Run a call that must fail: one-line error naming `subject`, and every tree in `watch`
    (the store, the incidents, the input folder) exactly as it was before."""
    roots = list(watch)
    before = {str(r): tree_hash(r) for r in roots}
    out = workbench(argv, home, cwd=cwd, timeout=timeout, stdin=stdin)
    assert_one_line_error(out, subject, code=code)
    after = {str(r): tree_hash(r) for r in roots}
    for r in before:
        assert after[r] == before[r], f"{r} changed on a refused call\n{out}"
    return out
