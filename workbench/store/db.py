"""duckdb over the Parquet store: views for the four tables and the named queries in queries/."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import duckdb

from workbench.errors import WorkbenchError
from workbench.store.layout import (
    PART_FILE,
    PARTITIONED_TABLES,
    partition_dir,
    run_file,
    run_ids,
)

if TYPE_CHECKING:
    import pyarrow as pa

# Re-exported: queries/ is found and read the same way by every reader of it.
from workbench.store.query_files import load_query as load_query
from workbench.store.query_files import queries_dir as queries_dir


def _empty_view(con: duckdb.DuckDBPyConnection, name: str) -> None:
    """A view of `name` with no rows (no run has that file): the schema's columns, from Arrow.

    Only an empty store or a run without a table pays pyarrow's import here (not a store
    without v3's tokens: every older one).
    """
    if name == "tokens":
        con.sql(_EMPTY_TOKENS).create_view(name)
        return
    from workbench.store import schema

    s = schema.RUNS if name == "runs" else schema.with_run_id(schema.PARTITIONED[name])
    con.from_arrow(s.empty_table()).create_view(name)


def connect(store: Path) -> duckdb.DuckDBPyConnection:
    """An in-memory duckdb with views runs / events / requests / compiles over the store.

    Only committed runs (those with a runs/<id>.parquet) are visible in every view.
    """
    if not store.is_dir():
        raise WorkbenchError(str(store), "store directory does not exist")
    con = duckdb.connect(":memory:")
    try:
        _create_views(con, store)
    except duckdb.Error as exc:
        con.close()
        raise WorkbenchError(str(store), f"cannot read the store: {_first_line(exc)}") from exc
    return con


def _first_line(exc: BaseException) -> str:
    """duckdb's message (which names the file) without the hints it adds on later lines."""
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def _create_views(con: duckdb.DuckDBPyConnection, store: Path) -> None:
    # Never print from a headless layer. Under a Jupyter kernel duckdb starts with the bar off
    # and refuses to change the setting at all unless ipywidgets is installed.
    if con.sql("SELECT current_setting('enable_progress_bar')").fetchall() != [(False,)]:
        con.execute("SET enable_progress_bar = false")
    # Where the views read from, for readers that go to the run's Parquet files directly.
    con.sql("SELECT $store AS store", params={"store": str(store)}).create_view("store_root")
    ids = run_ids(store)
    # Relations and parameters instead of SQL text: store paths may hold any character, and
    # nothing user-made is ever formatted into SQL.
    if ids:
        rows = [literal(run_file(store, r)) for r in ids]
        con.sql(
            "SELECT * FROM read_parquet($files, union_by_name = true, hive_partitioning = false) "
            f"UNION ALL BY NAME {_V3_COLUMNS['runs']}",
            params={"files": rows},
        ).create_view("runs")
    else:
        _empty_view(con, "runs")
    for name in PARTITIONED_TABLES:
        files = {r: partition_dir(store, name, r) / PART_FILE for r in ids}
        present = {r: f for r, f in files.items() if f.is_file()}
        if present:
            _partition_view(con, name, present).create_view(name)
        else:
            _empty_view(con, name)


# Schema v3's serving columns (schema.py), typed in SQL: built without pyarrow, whose import
# the app's first screen does not pay; appended where files lack them, as schema.py orders them.
_V3_COLUMNS: Final[dict[str, str]] = {
    "runs": "SELECT NULL::VARCHAR AS serving_join, NULL::BIGINT AS serving_records, "
    "NULL::BIGINT AS serving_matched WHERE false",
    "requests": "SELECT NULL::INTEGER AS input_tokens, NULL::INTEGER AS output_tokens, "
    "NULL::DOUBLE AS ttft_us, NULL::DOUBLE AS tpot_us, NULL::DOUBLE AS queue_us, "
    "NULL::INTEGER AS preemptions, NULL::INTEGER[] AS steps WHERE false",
}

_EMPTY_TOKENS: Final[str] = (
    "SELECT NULL::VARCHAR AS run_id, NULL::VARCHAR AS request_id, NULL::INTEGER AS token, "
    "NULL::DOUBLE AS ts_us, NULL::DOUBLE AS gap_us, NULL::INTEGER AS step, "
    "NULL::DOUBLE AS ingress_us, NULL::DOUBLE AS lowering_us, NULL::DOUBLE AS scheduling_us, "
    "NULL::DOUBLE AS execution_us, NULL::DOUBLE AS assembly_us, NULL::DOUBLE AS other_us, "
    "NULL::VARCHAR AS host, NULL::INTEGER AS rank, NULL::INTEGER AS window WHERE false"
)

_GLOB_CHARS = re.compile(r"([\[\]*?])")


def literal(path: Path) -> str:
    """`path` as duckdb must be given it to read that one file: absolute (so no `~` or URL
    prefix is expanded) with glob characters bracketed (so `[`, `]`, `*`, `?` are literal)."""
    return _GLOB_CHARS.sub(r"[\1]", str(path.absolute()))


def _partition_view(con: duckdb.DuckDBPyConnection, name: str, files: dict[str, Path]) -> Any:
    """One partitioned table over each run's file, run_id given with the file, not parsed.

    An empty relation of v3's serving columns ends the union, so that an older store, whose
    files lack them, reads them as null instead of as unknown columns.

    duckdb's hive partitioning would take run_id from the first `run_id=` directory anywhere in
    the path, the store's own path included; a filter on run_id still skips other runs' files.
    """
    selects: list[str] = []
    params: dict[str, str] = {}
    for i, (rid, path) in enumerate(files.items()):
        # Only placeholders are formatted in; ids and paths travel as parameters.
        selects.append(
            f"SELECT *, $run{i}::VARCHAR AS run_id FROM read_parquet($file{i}, "
            "hive_partitioning = false)"
        )
        params[f"run{i}"], params[f"file{i}"] = rid, literal(path)
    if name in _V3_COLUMNS:
        selects.append(_V3_COLUMNS[name])
    return con.sql(" UNION ALL BY NAME ".join(selects), params=params)


def store_of(con: duckdb.DuckDBPyConnection) -> Path:
    """The store directory `con` was opened on by connect()."""
    return Path(str(con.table("store_root").fetchall()[0][0]))


def query(
    con: duckdb.DuckDBPyConnection, name: str, params: dict[str, Any] | None = None
) -> pa.Table:
    """Run queries/<name>.sql with named parameters and return Arrow."""
    # con.sql keeps the result in Arrow; a DB-API execute() result would copy the rows once more.
    try:
        table: pa.Table = con.sql(load_query(name), params=params or {}).to_arrow_table()
    except (duckdb.IOException, duckdb.InvalidInputException) as exc:
        # A store file damaged past its footer (which connect() read) shows up here.
        raise WorkbenchError(f"query {name}", _first_line(exc)) from exc
    return table


def query_rows(
    con: duckdb.DuckDBPyConnection, name: str, params: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """query() as one dict per row, converted by duckdb itself: for small results read where
    pyarrow's import would cost more than the query (the runs list at the app's start)."""
    try:
        rel = con.sql(load_query(name), params=params or {})
        return [dict(zip(rel.columns, row, strict=True)) for row in rel.fetchall()]
    except (duckdb.IOException, duckdb.InvalidInputException) as exc:
        raise WorkbenchError(f"query {name}", _first_line(exc)) from exc
