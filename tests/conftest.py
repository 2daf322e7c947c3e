"""Fixtures shared by test modules."""

from __future__ import annotations

from pathlib import Path

import pytest

# The real traces from other projects (see its README); CI always has the folder.
SHARED_TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"


@pytest.fixture(scope="session")
def shared_traces() -> Path:
    """The shared real-trace folder, or a skip naming it when it is absent."""
    if not SHARED_TRACES.is_dir():
        pytest.skip(f"real traces folder {SHARED_TRACES} is absent")
    return SHARED_TRACES
