"""The drill-down's pair rule, for the app (`o`), the Python API and the Perfetto export: the
failing run's request at quantile q (by latency or a stage's time) and its twin, the comparator's
request at that quantile of the same shape bucket, else (said in the note) its own at q."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import duckdb

from workbench.store import db


@dataclass(frozen=True, slots=True)
class PickedRequest:
    """One request of a run and where it was picked: times in us, NaN where the store has null."""

    run_id: str
    request_id: str
    shape_key: str | None
    latency_us: float
    value_us: float  # what it was ranked by: latency, or the stage's exclusive time
    arrival_us: float
    n_requests: int  # how many requests its quantile was taken over
    quantile: float  # the quantile it was picked at (by id: where its latency ranks)


def _num(x: object) -> float:
    return float(x) if isinstance(x, int | float) and not isinstance(x, bool) else math.nan


def pick_request(
    con: duckdb.DuckDBPyConnection,
    run_id: str,
    shape_key: str | None,
    stage: str | None,
    q: float,
) -> PickedRequest | None:
    """The run's request at quantile q by `stage`'s time (None: latency), over one shape bucket
    (None: every request); None when there is no such request (queries/request_pick.sql)."""
    params = {"run_id": run_id, "shape_key": shape_key, "stage": stage, "q": q}
    rows = db.query_rows(con, "request_pick", params)
    if not rows:
        return None
    return _picked(run_id, rows[0], rows[0]["value_us"], q)


def request_by_id(
    con: duckdb.DuckDBPyConnection, run_id: str, request_id: str
) -> PickedRequest | None:
    """The run's request `request_id`, at the quantile its latency ranks at in the run."""
    rows = db.query_rows(con, "request_stages", {"run_id": run_id, "request_id": request_id})
    if not rows:
        return None
    return _picked(run_id, rows[0], rows[0]["latency_us"], _num(rows[0]["quantile"]))


def _picked(run_id: str, r: dict[str, Any], value: object, q: float) -> PickedRequest:
    return PickedRequest(
        run_id=run_id,
        request_id=str(r["request_id"]),
        shape_key=r["shape_key"],
        latency_us=_num(r["latency_us"]),
        value_us=_num(value),
        arrival_us=_num(r["arrival_us"]),
        n_requests=int(r["n_requests"]),
        quantile=q,
    )


def fallback_note(comparator: str, shape_key: str | None, q: float) -> str:
    """Why the twin is not of the failing request's shape bucket."""
    q_name = f"p{round(q * 100)}"
    return f"{comparator} has no request of shape {shape_key}: its own {q_name} request instead"


def twin_pair(
    con: duckdb.DuckDBPyConnection,
    failing: str,
    comparator: str,
    *,
    stage: str | None = None,
    q: float = 0.99,
    request_id: str | None = None,
) -> tuple[PickedRequest | None, PickedRequest | None, str]:
    """The failing run's request (`request_id`, else the one at quantile q by `stage`'s time or
    latency) and its twin, with a note saying when the twin is not of the same shape bucket or
    missing. A request without a shape key is twinned over every comparator request, no note."""
    if request_id is not None:
        if stage is not None:
            raise ValueError("a request picked by id is ranked by latency: stage must be None")
        f = request_by_id(con, failing, request_id)
        if f is None:
            return None, None, f"{failing} has no request {request_id}"
        if not math.isnan(f.quantile):
            q = f.quantile
    else:
        f = pick_request(con, failing, None, stage, q)
        if f is None:
            return None, None, f"{failing} has no requests"
    twin = pick_request(con, comparator, f.shape_key, stage, q)
    if twin is not None:
        return f, twin, ""
    # A request without a shape key was already twinned over every comparator request.
    own = pick_request(con, comparator, None, stage, q) if f.shape_key is not None else None
    if own is None:
        return f, None, f"{comparator} has no requests"
    return f, own, fallback_note(comparator, f.shape_key, q)
