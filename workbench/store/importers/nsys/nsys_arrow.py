"""Big reads of an Nsight Systems export: queries/nsys_*.sql straight into Arrow through the
ADBC SQLite driver, each table in PARTS shares (rowid modulo) read on parallel threads.

A row-at-a-time Python cursor would take seconds per million kernels. SQLite's cost is per
column value handed over, so the shares split that work; skipping the other shares' rows is a
cheap walk of the table's pages. The driver releases the GIL while it reads.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import adbc_driver_manager as adbc
import adbc_driver_sqlite
import pyarrow as pa

from workbench.store.query_files import load_query, param_order

# Fixed, not per machine, so that an import gives the same row order everywhere.
PARTS = 2
WORKERS = max(1, min(4, os.cpu_count() or 1))
# Rows per Arrow batch the driver builds (its default, 1024, costs a batch per thousand rows).
BATCH_ROWS = 65_536

Error = adbc.Error


def read_one(uri: str, name: str, params: dict[str, int]) -> pa.Table:
    """queries/<name>.sql with integer parameters, as Arrow, on its own connection (the
    threads share none)."""
    db = adbc_driver_sqlite.connect(uri)
    try:
        conn = adbc.AdbcConnection(db)
        try:
            stmt = adbc.AdbcStatement(conn)
            try:
                stmt.set_sql_query(load_query(name))
                stmt.set_options(**{adbc_driver_sqlite.StatementOptions.BATCH_ROWS.value:
                                    str(BATCH_ROWS)})  # fmt: skip
                order = param_order(name)
                if order:
                    # The driver binds by position; SQLite numbers $names by first use.
                    stmt.bind(
                        pa.record_batch({k: pa.array([params[k]], pa.int64()) for k in order})
                    )
                handle, _ = stmt.execute_query()
                table: pa.Table = pa.RecordBatchReader.from_stream(handle).read_all()
            finally:
                stmt.close()
        finally:
            conn.close()
    finally:
        db.close()
    return table


def read_shares(uri: str, names: list[str]) -> dict[str, pa.Table]:
    """Each query (queries/<name>.sql with $parts / $part) over all its shares, concatenated."""
    jobs = [(n, {"parts": PARTS, "part": p}) for n in names for p in range(PARTS)]
    with ThreadPoolExecutor(min(WORKERS, len(jobs) or 1)) as pool:
        tables = list(pool.map(lambda job: read_one(uri, *job), jobs))
    out: dict[str, list[pa.Table]] = {}
    for (name, _), table in zip(jobs, tables, strict=True):
        out.setdefault(name, []).append(table)
    # The driver infers each result's types from its own rows: a share whose column is all
    # null comes back typed null, which the permissive concatenation promotes.
    return {n: pa.concat_tables(ts, promote_options="permissive") for n, ts in out.items()}
