"""The on-disk store layout (DESIGN §4) and the all-or-nothing commit of one run."""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from workbench.errors import WorkbenchError, describe_os_error
from workbench.store import op_table, schema
from workbench.store.atomic import fsync_dir

# A leading letter keeps hive partition values from being auto-cast to numbers or dates by
# duckdb / polars, and the character set keeps ids safe as path components.
# Incident ids follow the same rule: they are file names in STORE/incidents/.
ID_RE = re.compile(r"^[A-Za-z][A-Za-z0-9._-]{0,63}$")
STAGING = ".staging"
PART_FILE = "part-0.parquet"


def check_id(value: str, kind: str) -> str:
    """Return value if it is a safe store identifier (a path component), else raise a one-line
    error naming the `kind` of id."""
    if not ID_RE.fullmatch(value) or ".." in value:
        raise WorkbenchError(
            repr(value),
            f"invalid {kind} id (a letter, then up to 63 of letters, digits, '.', '_', '-')",
        )
    return value


def check_run_id(run_id: str) -> str:
    return check_id(run_id, "run")


@dataclass(frozen=True)
class RunTables:
    """Everything one run contributes to the store; partition tables omit run_id."""

    run: pa.Table
    events: pa.Table
    requests: pa.Table
    compiles: pa.Table

    @property
    def run_id(self) -> str:
        return str(self.run.column("run_id")[0].as_py())


def runs_dir(store: Path) -> Path:
    return store / "runs"


def run_file(store: Path, run_id: str) -> Path:
    return runs_dir(store) / f"{check_run_id(run_id)}.parquet"


def partition_dir(store: Path, table: str, run_id: str) -> Path:
    return store / table / f"run_id={check_run_id(run_id)}"


def incidents_dir(store: Path) -> Path:
    return store / "incidents"


def run_ids(store: Path) -> list[str]:
    """Committed runs, sorted; a run exists once its runs/<id>.parquet is in place."""
    d = runs_dir(store)
    if not d.is_dir():
        return []
    return sorted(
        p.stem
        for p in d.glob("*.parquet")
        if ID_RE.fullmatch(p.stem) and not p.name.startswith(".")
    )


def read_run_row(store: Path, run_id: str) -> dict[str, object] | None:
    """The runs row of run_id as a dict, or None when it is not in the store."""
    path = run_file(store, run_id)
    if not path.exists():
        return None
    rows = pq.read_table(path, schema=schema.RUNS).to_pylist()
    return rows[0] if rows else None


def _conform(table: pa.Table, target: pa.Schema) -> pa.Table:
    """Reorder and cast a table to target, adding null columns that it lacks."""
    cols = []
    for field in target:
        if field.name in table.column_names:
            cols.append(table.column(field.name).cast(field.type))
        else:
            cols.append(pa.nulls(table.num_rows, field.type))
    # Key-value metadata of the input (e.g. the importer's options fingerprint) is kept.
    meta = {**(target.metadata or {}), **(table.schema.metadata or {})}
    return pa.Table.from_arrays(cols, schema=target.with_metadata(meta or None))


def _write(table: pa.Table, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, compression="zstd", row_group_size=256 * 1024)
    with open(path, "rb") as fh:
        os.fsync(fh.fileno())


@contextmanager
def _store_lock(store: Path) -> Iterator[None]:
    """One committer at a time per store: flock on the directory itself, so no lock file is
    left in the store."""
    fd = os.open(store, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


@contextmanager
def _staging(store: Path) -> Iterator[Path]:
    """A private directory inside the store, removed whatever happens."""
    base = store / STAGING
    created_base = not base.exists()
    stage = base / uuid.uuid4().hex
    try:
        stage.mkdir(parents=True)
        yield stage
    finally:
        shutil.rmtree(stage, ignore_errors=True)
        if created_base:
            shutil.rmtree(base, ignore_errors=True)


def write_table(table: pa.Table, file_schema: pa.Schema, path: Path) -> None:
    """One store file: `table` conformed to `file_schema`, zstd Parquet, fsynced."""
    _write(_conform(table, file_schema), path)


def stage_tables(stage: Path, tables: RunTables) -> None:
    """A run's files in a staging directory, laid out as commit_staged renames them."""
    write_table(tables.run, schema.RUNS, stage / "runs" / f"{tables.run_id}.parquet")
    for name, file_schema in schema.PARTITIONED.items():
        write_table(getattr(tables, name), file_schema, stage / name / PART_FILE)
    if tables.events.num_rows >= op_table.MIN_EVENTS:
        # Made from the staged file, so it lands with the run, in the same rename.
        ids = [r for r in tables.requests.column("request_id").to_pylist() if r is not None]
        op_table.write(stage / "events" / PART_FILE, ids)


def commit_run(store: Path, tables: RunTables, *, source: str) -> None:
    """Write one run all-or-nothing: stage every file, then rename into place, runs row last.

    Raises WorkbenchError naming `source` if the run exists or anything fails; the store is then
    exactly as it was.
    """
    commit_staged(store, tables.run_id, lambda stage: stage_tables(stage, tables), source=source)


def commit_staged(
    store: Path, run_id: str, fill_stage: Callable[[Path], None], *, source: str
) -> None:
    """commit_run for a caller that writes the staged files itself (`fill_stage(stage)` lays
    out runs/<id>.parquet and the partitions' part files, as stage_tables does)."""
    run_id = check_run_id(run_id)
    final_run = run_file(store, run_id)
    targets = {name: partition_dir(store, name, run_id) for name in schema.PARTITIONED}
    created: list[Path] = []
    moved: list[Path] = []
    try:
        if not store.exists():
            store.mkdir(parents=True)
            created.append(store)
        with _store_lock(store), _staging(store) as stage:
            if final_run.exists():
                raise WorkbenchError(source, f"run {run_id!r} already exists in {store}")
            # Partitions without their runs row are what a commit killed between two renames
            # (SIGKILL, power loss) leaves behind: invisible to readers, removed here.
            for target in targets.values():
                if target.exists():
                    shutil.rmtree(target)
            fill_stage(stage)
            # Each path is recorded before the call that makes it, so that an interrupt landing
            # just after the system call still finds it to undo.
            for name in schema.PARTITIONED:
                parent = targets[name].parent
                if not parent.exists():
                    created.append(parent)
                    parent.mkdir()
                moved.append(targets[name])
                os.rename(stage / name, targets[name])
            if not final_run.parent.exists():
                created.append(final_run.parent)
                final_run.parent.mkdir()
            os.rename(stage / "runs" / f"{run_id}.parquet", final_run)
    except BaseException as exc:
        if final_run.exists():
            raise  # the runs row landed: the run is whole, whatever interrupted us afterwards
        # Ctrl-C (or SIGTERM / SIGHUP, which the CLI turns into SystemExit) between two renames
        # must not leave a partial run behind either.
        for path in reversed(moved):
            shutil.rmtree(path, ignore_errors=True)
        for path in reversed(created):
            shutil.rmtree(path, ignore_errors=True)
        if isinstance(exc, OSError):
            raise WorkbenchError(
                source, f"cannot write to store {store}: {describe_os_error(exc, 'store')}"
            ) from exc
        raise
    fsync_dir(final_run.parent)
