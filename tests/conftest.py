"""Fixtures shared by test modules, and the real-trace rule: tests that need the real traces
skip, naming the folder, on a clone without them; under CI (WORKBENCH_REQUIRE_TRACES set by
.ci/run) their absence fails the run instead."""

from __future__ import annotations

import compileall
import os
from collections.abc import Generator
from pathlib import Path

import pytest

from ingest_helpers import TRACES

REQUIRE = "WORKBENCH_REQUIRE_TRACES"
# The real traces from other projects (see its README); CI always has the folder.
SHARED_TRACES = TRACES


def missing_reason(traces: Path = TRACES) -> str:
    return f"needs the real traces in {traces} (the shared/traces folder beside the checkout)"


@pytest.fixture(scope="session")
def shared_traces() -> Path:
    """The shared real-trace folder, or a skip naming it when it is absent."""
    if not SHARED_TRACES.is_dir():
        pytest.skip(missing_reason())
    return SHARED_TRACES


def needs_traces(exc: BaseException, traces: Path = TRACES) -> bool:
    """Whether a test failed only because the real traces folder is absent: its error names
    a path in it (FileNotFoundError, or the CLI's one-line error)."""
    if traces.is_dir():
        return False
    text = f"{getattr(exc, 'filename', '') or ''} {exc}"
    return str(traces) in text


ROOT = Path(__file__).resolve().parent.parent


def pytest_sessionstart(session: pytest.Session) -> None:
    if os.environ.get(REQUIRE) and not TRACES.is_dir():
        raise pytest.UsageError(
            f"{REQUIRE} is set (as .ci/run does) but the real traces folder {TRACES} is absent"
        )
    # The tests start the CLI as a subprocess well over a thousand times, with
    # PYTHONDONTWRITEBYTECODE set: without bytecode on disk each start compiles the ~70 modules
    # of the product it imports again (~0.1 s). Compiled once here, on the controller only;
    # unchanged files are only stat'ed.
    if not hasattr(session.config, "workerinput"):
        for room in ("workbench", "accel"):
            compileall.compile_dir(ROOT / room, quiet=1)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()  # type: ignore[attr-defined]
    # Under CI the session has already refused to start without the folder.
    if report.failed and call.excinfo is not None and needs_traces(call.excinfo.value):
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1] or 0, f"Skipped: {missing_reason()}")
