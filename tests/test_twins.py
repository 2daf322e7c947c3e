"""workbench.triage.twins, the drill-down's pair rule, on the sample store and on a store whose
comparator never saw the failing run's shapes; and the three places that pair requests (the
app's `o`, the API's request(), the Perfetto export) agree with it and with each other."""

from __future__ import annotations

import math
import shutil
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

import workbench
from triage_stores import RunSpec, write_run
from workbench.api.requests import request_pair
from workbench.cli.main import bundled_sample
from workbench.errors import WorkbenchError
from workbench.store.db import connect
from workbench.triage.perfetto import tail_pair
from workbench.triage.twins import pick_request, twin_pair
from workbench.tui.screens.request_screen import DrillTarget, drill

PAIR = ("failing", "comparator")


def nearest_rank(
    con: duckdb.DuckDBPyConnection,
    run_id: str,
    q: float,
    by: str = "latency_us",
    shape: str | None = None,
) -> tuple[str | None, int]:
    """The oracle: the request whose value is the nearest-rank q value (earliest on ties), and
    how many requests it ranks among, computed here in Python from the raw rows."""
    table = con.sql("SELECT * FROM requests WHERE run_id = $r", params={"r": run_id}).fetchdf()
    rows = [r for r in table.to_dict("records") if shape is None or r["shape_key"] == shape]
    values = sorted(r[by] for r in rows if r[by] is not None)
    if not values:
        return None, 0
    target = values[max(0, math.ceil(q * len(values)) - 1)]
    best = min(
        (r for r in rows if r[by] == target), key=lambda r: (r["arrival_us"], r["request_id"])
    )
    return best["request_id"], len(rows)


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> Path:
    store = tmp_path_factory.mktemp("twins") / "store"
    shutil.copytree(bundled_sample(), store, ignore=shutil.ignore_patterns("incidents"))
    return store


@pytest.fixture(scope="module")
def unseen(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A failing run whose requests (but the warm-up) all have shapes the comparator never saw."""
    store = tmp_path_factory.mktemp("twins-unseen") / "store"
    write_run(store, RunSpec("comparator", seed=1, drift_share=0.0))
    write_run(store, RunSpec("failing", seed=2, drift_share=1.0, recompile_us=15_000.0))
    return store


@pytest.fixture()
def con(sample: Path) -> Iterator[duckdb.DuckDBPyConnection]:
    c = connect(sample)
    yield c
    c.close()


def test_the_failing_pick_is_the_nearest_rank_request(con: duckdb.DuckDBPyConnection) -> None:
    p = pick_request(con, "failing", None, None, 0.99)
    assert p is not None
    assert (p.request_id, p.n_requests) == nearest_rank(con, "failing", 0.99)
    assert p.value_us == p.latency_us and p.quantile == 0.99 and math.isfinite(p.arrival_us)
    by_exec = pick_request(con, "failing", None, "execution", 0.9)
    assert by_exec is not None
    assert (by_exec.request_id, by_exec.n_requests) == nearest_rank(
        con, "failing", 0.9, by="execution_us"
    )
    assert pick_request(con, "no-such-run", None, None, 0.99) is None


def test_the_twin_is_of_the_same_shape_when_the_comparator_has_it(
    con: duckdb.DuckDBPyConnection,
) -> None:
    # The failing run's p50 request is of a shape both runs serve.
    f, c, note = twin_pair(con, *PAIR, q=0.5)
    assert f is not None and c is not None and note == ""
    assert f.request_id == nearest_rank(con, "failing", 0.5)[0]
    assert c.shape_key == f.shape_key
    assert (c.request_id, c.n_requests) == nearest_rank(con, "comparator", 0.5, shape=f.shape_key)
    assert c.n_requests < nearest_rank(con, "comparator", 0.5)[1]  # one bucket, not the run


def test_the_samples_tail_request_has_a_twin_of_its_shape(con: duckdb.DuckDBPyConnection) -> None:
    # The comparator's 6,000 requests serve the shape of the failing run's p99 request.
    f, c, note = twin_pair(con, *PAIR)
    assert f is not None and c is not None and note == ""
    assert c.shape_key == f.shape_key
    assert (c.request_id, c.n_requests) == nearest_rank(con, "comparator", 0.99, shape=f.shape_key)


def test_without_the_shape_the_twin_is_the_comparators_own_pick_said_in_the_note(
    unseen: Path,
) -> None:
    con = connect(unseen)
    try:
        _without_the_shape(con)
    finally:
        con.close()


def _without_the_shape(con: duckdb.DuckDBPyConnection) -> None:
    # The failing run's p99 request is of a shape the comparator never served.
    f, c, note = twin_pair(con, *PAIR)
    assert f is not None and c is not None
    assert nearest_rank(con, "comparator", 0.99, shape=f.shape_key)[1] == 0
    assert (c.request_id, c.n_requests) == nearest_rank(con, "comparator", 0.99)
    assert note == f"comparator has no request of shape {f.shape_key}: its own p99 request instead"
    # By id: the same request, its twin at the quantile its latency ranks at.
    again = twin_pair(con, *PAIR, request_id=f.request_id)
    assert again[0] is not None and again[1] is not None and again[0].quantile >= 0.99
    assert (again[0].request_id, again[1].request_id) == (f.request_id, c.request_id)
    assert again[1].quantile == again[0].quantile
    with pytest.raises(ValueError, match="stage must be None"):
        twin_pair(con, *PAIR, stage="execution", request_id=f.request_id)


def test_missing_runs_and_requests_come_back_as_none_with_a_note(
    con: duckdb.DuckDBPyConnection, sample: Path
) -> None:
    f, c, note = twin_pair(con, "failing", "no-such-run")
    assert f is not None and c is None and note == "no-such-run has no requests"
    assert twin_pair(con, "no-such-run", "comparator") == (
        None,
        None,
        "no-such-run has no requests",
    )
    assert twin_pair(con, *PAIR, request_id="nope")[:2] == (None, None)
    # What each caller makes of that: its own error, or no comparator timeline.
    with pytest.raises(WorkbenchError, match="comparator run has no requests to export"):
        tail_pair(con, "failing", "no-such-run")
    with pytest.raises(WorkbenchError, match="request is not in run"):
        request_pair(sample, *PAIR, "nope", 0.99)
    shown_f, shown_c = drill(sample, DrillTarget("failing", "no-such-run"))
    assert shown_f is not None and shown_f.request_id == f.request_id and shown_c is None


def _callers(store: Path, via_compare: bool) -> list[tuple[str, str, str]]:
    """(failing id, comparator id, note) from the app's drill-down, the API, the export."""
    shown_f, shown_c = drill(store, DrillTarget(*PAIR))
    assert shown_f is not None and shown_c is not None and shown_f.spans and shown_c.spans
    api = (
        workbench.open(store).compare(*PAIR).request()
        if via_compare
        else request_pair(store, *PAIR, None, 0.99)
    )
    assert api.comparator is not None
    con = connect(store)
    try:
        tail, twin = tail_pair(con, *PAIR)
        f, c, note = twin_pair(con, *PAIR)
    finally:
        con.close()
    assert f is not None and c is not None
    return [
        (f.request_id, c.request_id, note),
        (shown_f.request_id, shown_c.request_id, shown_c.note),
        (api.failing.request_id, api.comparator.request_id, api.note),
        (tail.request_id, twin.request_id, twin.note),
    ]


def test_the_three_callers_agree_on_the_sample_pair(sample: Path) -> None:
    got = _callers(sample, via_compare=True)
    assert got[0][:2] == ("r000227", "r002437")  # what the export's CLI test prints
    assert all(g == got[0] for g in got), got


def test_the_three_callers_agree_when_the_comparator_lacks_the_shape(unseen: Path) -> None:
    got = _callers(unseen, via_compare=False)
    assert all(g == got[0] for g in got), got
    con = connect(unseen)
    try:
        f = pick_request(con, "failing", None, None, 0.99)
        assert f is not None
        assert nearest_rank(con, "comparator", 0.99, shape=f.shape_key)[1] == 0
        assert got[0][1] == nearest_rank(con, "comparator", 0.99)[0]
    finally:
        con.close()
    assert got[0][2] == (
        f"comparator has no request of shape {f.shape_key}: its own p99 request instead"
    )
