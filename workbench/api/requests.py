"""One request of a pair, both runs: the failing run's request and its twin in the comparator
(workbench.triage.twins, the app's drill-down rule), with their stage times and events."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import duckdb

from workbench.api.frames import table_frame
from workbench.api.records import REQUEST_TIMES, RequestPair, RequestStages
from workbench.errors import WorkbenchError
from workbench.incident.numbers import finite
from workbench.store import db
from workbench.triage.twins import twin_pair


def request_pair(
    store: Path, failing: str, comparator: str, request_id: str | None, q: float
) -> RequestPair:
    """`request_id` of the failing run (None: its request at latency quantile `q`) beside the
    comparator's request of its shape at its quantile, else the comparator's own at that
    quantile, said in the note. Reads the store, writes nothing."""
    q = finite(q, "q", 0.0, 1.0)
    if request_id is not None and (not isinstance(request_id, str) or not request_id):
        raise WorkbenchError(repr(request_id), "a request id is a non-empty string")
    con = db.connect(store)
    try:
        f, c, note = twin_pair(con, failing, comparator, q=q, request_id=request_id)
        fs = _stages(con, failing, f.request_id) if f is not None else None
        if fs is None:
            if request_id is None:
                raise WorkbenchError(repr(failing), "run has no requests")
            raise WorkbenchError(repr(request_id), f"request is not in run {failing!r}")
        return RequestPair(fs, _stages(con, comparator, c.request_id) if c else None, note)
    finally:
        con.close()


def _stages(con: duckdb.DuckDBPyConnection, run_id: str, request_id: str) -> RequestStages | None:
    rows = db.query_rows(con, "request_stages", {"run_id": run_id, "request_id": request_id})
    if not rows:
        return None
    row: dict[str, Any] = rows[0]
    events = table_frame(
        db.query(con, "request_events", {"run_id": run_id, "request_id": request_id})
    )
    return RequestStages(
        run_id=run_id,
        request_id=str(row["request_id"]),
        shape_key=row["shape_key"],
        batch_id=row["batch_id"],
        batch_size=row["batch_size"],
        arrival_us=_float(row["arrival_us"]),
        times_us={k: _float(row[f"{k}_us"]) for k in REQUEST_TIMES},
        quantile=_float(row["quantile"]),
        n_requests=int(row["n_requests"]),
        events=events,
    )


def _float(x: object) -> float | None:
    """A column's number as float; null, NaN and infinities as None (as the JSON has them)."""
    if isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(x):
        return None
    return float(x)
