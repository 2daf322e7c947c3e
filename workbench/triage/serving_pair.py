"""Whether a pair is two LLM-serving runs, and how each run's records were joined: duckdb
only, so the app's drill-down can ask before it loads numpy or pyarrow."""

from __future__ import annotations

from typing import Any

import duckdb

from workbench.store import db


def serving_join(
    con: duckdb.DuckDBPyConnection, failing: str, comparator: str
) -> dict[str, Any] | None:
    """Each run's join of records to engine steps, when both runs hold serving tokens."""
    rows = db.query_rows(con, "serving_runs", {"failing": failing, "comparator": comparator})
    by_run = {r["run_id"]: r for r in rows}
    if not all(by_run.get(r, {}).get("tokens") for r in (failing, comparator)):
        return None
    return {
        role: {k: by_run[rid][k] for k in ("serving_join", "serving_records", "serving_matched")}
        for role, rid in (("failing", failing), ("comparator", comparator))
    }
