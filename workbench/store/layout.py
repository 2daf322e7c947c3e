"""The on-disk store layout (DESIGN §4) and the all-or-nothing commit of one run."""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import stat
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from workbench.errors import WorkbenchError, describe_os_error
from workbench.store.atomic import fsync_dir, fsync_file, signals_deferred

if TYPE_CHECKING:
    import pyarrow as pa

    from workbench.store.columns.packed_text import PackedText

# pyarrow (and the schemas, op table and manifest built on it) is imported by the functions that
# read or write files: listing runs and naming paths, which the app's first screens do, stay
# free of its import time.

# A leading letter keeps hive partition values from being auto-cast to numbers or dates by
# duckdb / polars, and the character set keeps ids safe as path components.
# Incident ids follow the same rule: they are file names in STORE/incidents/.
ID_RE = re.compile(r"^[A-Za-z][A-Za-z0-9._-]{0,63}$")
STAGING = ".staging"
PART_FILE = "part-0.parquet"
# The partitioned tables' folders: schema.PARTITIONED's keys, named here without pyarrow.
PARTITIONED_TABLES: Final[tuple[str, ...]] = ("events", "requests", "compiles", "tokens")
# Rows per Parquet row group of every store file.
ROW_GROUP: Final[int] = 256 * 1024
# Columns whose values are (nearly) all distinct, written without dictionary encoding: the
# writer would build a memo of every value (~32 MB per row group for ts_us) only to fall back
# to plain, and end up larger. Per 262k-row group of the 209 MB real-shaped trace: ts_us 51 ->
# 24 ms and 935 -> 685 KB, event_id 41 -> 21 ms and 527 -> 269 KB.
PLAIN_COLUMNS: Final[frozenset[str]] = frozenset(
    {"event_id", "ts_us", "dur_us", "parent_id", "correlation", "args"}
)


def parquet_options(file_schema: pa.Schema) -> dict[str, Any]:
    """How every store file is encoded (pyarrow.parquet writer keywords)."""
    dictionary = [name for name in file_schema.names if name not in PLAIN_COLUMNS]
    return {"compression": "zstd", "use_dictionary": dictionary or False}


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
    # The events' args column when an import holds it packed: `events` lacks it then, and it is
    # unpacked one row group at a time as the events file is written.
    events_args: PackedText | None = None
    # v3: one row per output token of an LLM-serving run; None writes the empty table.
    tokens: pa.Table | None = None

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
    import pyarrow.parquet as pq

    from workbench.store import schema

    # ParquetFile, not read_table: read_table goes through pyarrow.dataset, whose first use
    # costs ~70 ms, paid at the start of every triage for one row.
    rows = _conform(pq.ParquetFile(path).read(), schema.RUNS).to_pylist()
    return rows[0] if rows else None


def _conform(table: pa.Table, target: pa.Schema) -> pa.Table:
    """Reorder and cast a table to target, adding null columns that it lacks."""
    import pyarrow as pa

    from workbench.store.columns import null_arrays

    cols = []
    for field in target:
        if field.name in table.column_names:
            cols.append(table.column(field.name).cast(field.type))
        else:
            cols.append(null_arrays.nulls(table.num_rows, field.type))
    # Key-value metadata of the input (e.g. the importer's options fingerprint) is kept.
    meta = {**(target.metadata or {}), **(table.schema.metadata or {})}
    return pa.Table.from_arrays(cols, schema=target.with_metadata(meta or None))


def _write(table: pa.Table, path: Path) -> None:
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, row_group_size=ROW_GROUP, **parquet_options(table.schema))
    fsync_file(path)


def _write_packed(
    table: pa.Table, name: str, packed: PackedText, file_schema: pa.Schema, path: Path
) -> None:
    """_write of `table` with its column `name` taken from `packed`, unpacked a row group at a
    time: the same row groups and bytes as _write of the whole table, without ever holding the
    whole column."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pool = pa.default_memory_pool()
    if len(packed) != table.num_rows:
        raise ValueError(f"{name}: {len(packed)} packed rows for a table of {table.num_rows}")
    idx = file_schema.get_field_index(name)
    rest = _conform(table, file_schema.remove(idx))
    # Conformed as a whole table would be: the input's metadata kept, as _conform kept it.
    out_schema = file_schema.with_metadata(rest.schema.metadata)
    path.parent.mkdir(parents=True, exist_ok=True)
    with pq.ParquetWriter(path, out_schema, **parquet_options(out_schema)) as writer:
        for start in range(0, table.num_rows, ROW_GROUP):
            stop = min(start + ROW_GROUP, table.num_rows)
            part = rest.slice(start, stop - start)
            col = packed.rows(start, stop)
            writer.write_table(part.add_column(idx, file_schema.field(idx), col), ROW_GROUP)
            del part, col
            # Arrow's allocator keeps freed pages for reuse: the unpacked rows would stay.
            pool.release_unused()
    fsync_file(path)


class RunExists(WorkbenchError):
    """The run id is already committed (perhaps by a concurrent identical import)."""


def _make_dirs(path: Path) -> list[Path]:
    """mkdir -p that returns the directories it made itself, outermost first."""
    missing: list[Path] = []
    p = path
    while not p.exists() and not p.is_symlink() and p != p.parent:
        missing.append(p)
        p = p.parent
    made: list[Path] = []
    for d in reversed(missing):
        try:
            d.mkdir()
        except FileExistsError:
            continue  # another writer made it meanwhile: theirs, not ours to remove
        made.append(d)
    return made


def _remove_empty(dirs: list[Path]) -> None:
    """rmdir what this writer made, innermost first, where nothing else landed in it."""
    for d in reversed(dirs):
        try:
            d.rmdir()
        except OSError:
            return


@contextmanager
def store_lock(store: Path) -> Iterator[None]:
    """Hold the store's lock, creating the store when it does not exist.

    One committer at a time per store: flock on the directory itself, so there is no lock file
    to leave behind or to be a symlink. A writer that made the store and then failed removes it
    again while it still holds the lock, so a waiter checks that the directory it locked is the
    one at the path, and otherwise locks that one.
    """
    while True:
        made = _make_dirs(store)
        fd = os.open(store, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                current = os.stat(store)
            except FileNotFoundError:
                current = None
            if current is not None and os.path.samestat(os.fstat(fd), current):
                break
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
    try:
        yield
    except BaseException:
        _remove_empty(made)  # under the lock: no waiter can be inside it yet
        raise
    finally:
        os.close(fd)


def _real_dir(path: Path) -> bool:
    """Whether path is a directory itself (not a symlink to one); error if it is anything else.
    The store's own directories are never followed out of it."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        return False
    if stat.S_ISLNK(st.st_mode):
        raise WorkbenchError(
            str(path), "is a symbolic link; the store writes only into its own directories"
        )
    if not stat.S_ISDIR(st.st_mode):
        raise WorkbenchError(str(path), "is not a directory (the store needs one here)")
    return True


def _clear_staging(store: Path) -> Path:
    """The staging directory, emptied: whatever is in it was left by a writer that was killed
    (only the lock holder stages), so the next writer cleans it."""
    base = store / STAGING
    if _real_dir(base):
        for entry in base.iterdir():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
    return base


def _remove_tree(path: Path) -> None:
    """Remove a directory tree, or a symlink or file in its place, never following a link."""
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)


def write_table(table: pa.Table, file_schema: pa.Schema, path: Path) -> None:
    """One store file: `table` conformed to `file_schema`, zstd Parquet, fsynced."""
    _write(_conform(table, file_schema), path)


def stage_tables(stage: Path, tables: RunTables) -> pa.Table:
    """A run's partition files in a staging directory; returns its runs row. (A big run's op
    table is a cache made on its first load, not a store file: see op_table.)"""
    from workbench.store import schema

    for name, file_schema in schema.PARTITIONED.items():
        path = stage / name / PART_FILE
        if name == "events" and tables.events_args is not None:
            _write_packed(tables.events, "args", tables.events_args, file_schema, path)
        else:
            table = getattr(tables, name)
            write_table(file_schema.empty_table() if table is None else table, file_schema, path)
    return tables.run


def commit_run(store: Path, tables: RunTables, *, source: str) -> None:
    """Write one run all-or-nothing: stage every file, then rename into place, runs row last.

    The runs file records the content hash of every other file (see integrity). Raises
    WorkbenchError naming `source` if the run exists (RunExists) or anything fails; the store
    is then exactly as it was. A signal during the renames is delivered after them.
    """
    commit_staged(store, tables.run_id, lambda stage: stage_tables(stage, tables), source=source)


def commit_staged(
    store: Path, run_id: str, fill_stage: Callable[[Path], pa.Table], *, source: str
) -> None:
    """commit_run for a caller that writes the partition files itself: `fill_stage(stage)`
    lays them out as stage_tables does and returns the runs row, written here last."""
    run_id = check_run_id(run_id)
    try:
        with store_lock(store):
            _commit_locked(store, run_id, fill_stage, source)
    except OSError as exc:
        raise WorkbenchError(
            source, f"cannot write to store {store}: {describe_os_error(exc, 'store')}"
        ) from exc


def _commit_locked(
    store: Path, run_id: str, fill_stage: Callable[[Path], pa.Table], source: str
) -> None:
    from workbench.store import schema
    from workbench.store.integrity import manifest

    final_run = run_file(store, run_id)
    targets = {name: partition_dir(store, name, run_id) for name in schema.PARTITIONED}
    for d in (runs_dir(store), *(t.parent for t in targets.values())):
        _real_dir(d)
    base = _clear_staging(store)
    if final_run.exists():
        raise RunExists(source, f"run {run_id!r} already exists in {store}")
    stage = base / uuid.uuid4().hex
    created: list[Path] = []
    moved: list[Path] = []
    try:
        stage.mkdir(parents=True)
        # Partitions without their runs row are what a commit killed between two renames
        # (SIGKILL, power loss) leaves behind: invisible to readers, removed here.
        for target in targets.values():
            _remove_tree(target)
        run = _conform(fill_stage(stage), schema.RUNS)
        files: dict[str, Path] = {}
        for name in schema.PARTITIONED:
            for path in sorted((stage / name).iterdir()):
                files[f"{name}/{targets[name].name}/{path.name}"] = path
        run = run.replace_schema_metadata({**(run.schema.metadata or {}), **manifest(files)})
        _write(run, stage / "runs" / f"{run_id}.parquet")
        with signals_deferred():
            try:
                # Each path is recorded before the call that makes it, so that a failure
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
            except BaseException:
                if not final_run.exists():
                    for path in reversed(moved):
                        shutil.rmtree(path, ignore_errors=True)
                    _remove_empty(created)
                raise
            fsync_dir(final_run.parent)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
        _remove_empty([base])  # only the lock holder stages: nobody else is using it
