"""The runs of a store with their request counts and latency tails (`workbench runs`, app)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class RunSummary:
    """One committed run: metadata, tags, n / p50 / p95 / p99 of request latency, and for an
    LLM-serving run the same of TTFT (over requests) and ITL (over n_tokens gaps)."""

    run_id: str
    label: str | None
    hardware: str | None
    model: str | None
    workload: str | None
    compiler: str | None
    compiler_version: str | None
    runtime: str | None
    runtime_version: str | None
    driver_version: str | None
    thermal_state: str | None
    tags: dict[str, str]
    n_requests: int
    p50_us: float | None
    p95_us: float | None
    p99_us: float | None
    imported_at: datetime | None
    ttft_p50_us: float | None
    ttft_p95_us: float | None
    ttft_p99_us: float | None
    n_tokens: int | None
    itl_p50_us: float | None
    itl_p95_us: float | None
    itl_p99_us: float | None

    def to_json(self) -> dict[str, Any]:
        """Plain JSON-able dict (imported_at as ISO text)."""
        d = dict(self.__dict__)
        d["imported_at"] = self.imported_at.isoformat() if self.imported_at else None
        return d


def list_runs(store: Path) -> list[RunSummary]:
    """Every committed run of the store, oldest import first."""
    # Imported here: RunSummary alone (the app's cached runs list) must not load duckdb; and
    # rows, not Arrow: the app's first read of a store does not wait for pyarrow's import.
    from workbench.store import db

    con = db.connect(store)
    try:
        rows = db.query_rows(con, "run_summary")
    finally:
        con.close()
    out: list[RunSummary] = []
    for r in rows:
        tags = r.pop("tags") or []
        out.append(RunSummary(tags=dict(tags), **r))
    return out
