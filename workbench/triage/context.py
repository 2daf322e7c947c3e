"""A run as one triage reads it, loaded once and handed on: its runs row (tags, hardware,
schema version), the files its runs file records and the outcome of their integrity check."""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import duckdb

from workbench.errors import WorkbenchError
from workbench.store import db, integrity
from workbench.store.arrays import run_exists
from workbench.store.layout import read_run_row, run_file


@dataclass(frozen=True)
class RunContext:
    """One committed run's context; built by load_present, never by hand."""

    run_id: str
    row: Mapping[str, object]
    # The files the runs file records by content hash (relative to the store); () for a run
    # committed before hashes were recorded, which loads unverified.
    files: tuple[str, ...]
    # Whether the run's op table, if any, passed the integrity check (else it is rebuilt from
    # the Parquet files on load).
    table_ok: bool

    @property
    def hardware(self) -> str | None:
        """The runs row's device name, or None when the run does not state one."""
        tag = self.row.get("hardware")
        return tag if isinstance(tag, str) and tag.strip() else None

    @property
    def tags(self) -> dict[str, str]:
        raw = self.row.get("tags")
        pairs = raw.items() if isinstance(raw, Mapping) else raw if isinstance(raw, list) else []
        return {str(k): str(v) for k, v in pairs}

    @property
    def schema_version(self) -> int | None:
        v = self.row.get("schema_version")
        return v if isinstance(v, int) else None


def load_present(con: duckdb.DuckDBPyConnection, *run_ids: str | None) -> dict[str, RunContext]:
    """The context of each named run that is committed (one that is not is the caller's error
    to report): its row read once, its files hashed side by side (the hash leaves the GIL, and
    a 10M-event pair is a GB of files). A damaged file raises, in the order of the runs."""
    store = db.store_of(con)
    present = list(dict.fromkeys(r for r in run_ids if r is not None and run_exists(con, r)))

    def load(run_id: str) -> RunContext:
        path = run_file(store, run_id)
        hashes = integrity.recorded(path)
        unusable = integrity.verify_recorded(store, path, hashes)
        row = read_run_row(store, run_id)
        if row is None:  # removed between the runs query and now
            raise WorkbenchError(repr(run_id), "run is not in the store")
        return RunContext(run_id, row, tuple(sorted(hashes or ())), not unusable)

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(present, pool.map(load, present), strict=True))
