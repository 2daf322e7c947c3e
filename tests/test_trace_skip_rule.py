"""The real-trace rule (tests/conftest.py): skipped with the folder named on a clone without
../shared/traces, a failed run under CI (WORKBENCH_REQUIRE_TRACES)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# A test module whose tests all need the real traces.
NEEDS_TRACES = "tests/test_ingest_real_traces.py"


def _pytest(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    missing = tmp_path / "shared" / "traces"
    environ = {k: v for k, v in os.environ.items() if not k.startswith("WORKBENCH_")}
    environ.update(WORKBENCH_TRACES=str(missing), WORKBENCH_HOME=str(tmp_path / "home"), **env)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", NEEDS_TRACES],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_without_the_traces_their_tests_skip_naming_the_folder(tmp_path: Path) -> None:
    out = _pytest(tmp_path)
    assert out.returncode == 0, out.stdout[-3000:]
    skips = [line for line in out.stdout.splitlines() if line.startswith("SKIPPED")]
    assert skips, out.stdout[-3000:]
    assert all(str(tmp_path / "shared" / "traces") in line for line in skips), skips
    assert " passed" not in out.stdout and "failed" not in out.stdout


def test_under_ci_their_absence_fails_the_run(tmp_path: Path) -> None:
    out = _pytest(tmp_path, WORKBENCH_REQUIRE_TRACES="1")
    assert out.returncode != 0
    assert str(tmp_path / "shared" / "traces") in out.stdout + out.stderr


def test_ci_sets_the_rule() -> None:
    assert "WORKBENCH_REQUIRE_TRACES=1 uv run pytest" in (ROOT / ".ci" / "run").read_text()
