"""Shared by the tests: CLI runners (in-process and as a real process), store hashing,
independent trace reading."""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
# The real traces, beside the checkout as CI lays them (WORKBENCH_TRACES points elsewhere).
TRACES = Path(os.environ.get("WORKBENCH_TRACES") or ROOT.parent / "shared" / "traces")
RANK0 = TRACES / "rank0.json.gz"
MI250 = TRACES / "mi250_minitoy_train_ROCm6_2_kineto.json.gz"
TORCH = ROOT / "tests" / "fixtures" / "torch"
HANDMADE = ROOT / "tests" / "fixtures" / "serving" / "handmade_serving.json"


def store_hash(store: Path) -> dict[str, str]:
    """Every path under the store (files hashed, directories marked): equal = byte-for-byte."""
    if not store.exists():
        return {}
    out: dict[str, str] = {}
    for p in sorted(store.rglob("*")):
        rel = str(p.relative_to(store))
        out[rel] = "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def run_tables(store: Path, run_id: str) -> dict[str, Any]:
    """A run's events, requests and compiles (Arrow tables) and its runs row (no import time)."""
    import pyarrow.parquet as pq

    out: dict[str, Any] = {}
    for name in ("events", "requests", "compiles"):
        out[name] = pq.read_table(store / name / f"run_id={run_id}" / "part-0.parquet")
    runs = pq.read_table(store / "runs" / f"{run_id}.parquet").drop_columns(["imported_at"])
    out["runs"] = runs.to_pylist()
    return out


def assert_same_run(got: dict[str, Any], want: dict[str, Any]) -> None:
    """Two run_tables results hold the same data."""
    for name in ("events", "requests", "compiles"):
        assert got[name].equals(want[name]), name
    assert got["runs"] == want["runs"]


def cli(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> int:
    """workbench's main() with only the subcommands whose modules exist yet."""
    from workbench.cli import main as m

    present = {
        k: v for k, v in m.COMMANDS.items() if importlib.util.find_spec(f"workbench.cli.{v}")
    }
    monkeypatch.setattr(m, "COMMANDS", present)
    return m.main(argv)


def load_events(path: Path) -> list[dict[str, Any]]:
    """The trace's events with plain json/gzip, independent of the importer."""
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    doc = json.loads(raw)
    return doc["traceEvents"] if isinstance(doc, dict) else doc


def run_workbench(
    argv: list[str],
    *,
    env: dict[str, str] | None = None,
    home: Path | None = None,
    timeout: float = 300,
) -> subprocess.CompletedProcess[str]:
    """The real command in its own process (`env` added to ours; `home`: WORKBENCH_HOME)."""
    extra = {"WORKBENCH_HOME": str(home)} if home is not None else {}
    return subprocess.run(
        [sys.executable, "-m", "workbench", *argv],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, **(env or {}), **extra},
        timeout=timeout,
        check=False,
    )


def one_line_error(proc: subprocess.CompletedProcess[str], code: int = 2) -> str:
    """The refusal's one line on stderr, after checking it is one line with exit `code`."""
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == code and len(lines) == 1, (proc.returncode, proc.stderr)
    assert lines[0].startswith("workbench: ") and "Traceback" not in proc.stderr
    return lines[0]
