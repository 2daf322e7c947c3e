"""Native Parquet input: a schema-v1 events table, or another store merged run by run."""

from __future__ import annotations

import re
import shutil
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from accel.stages import STAGES
from workbench.errors import WorkbenchError
from workbench.store import schema
from workbench.store.attribution.engine_steps import UNIT as ENGINE_STEP
from workbench.store.attribution.engine_steps import step_facts
from workbench.store.attribution.requests import Requests, assign, exclusive_times, find_requests
from workbench.store.attribution.rules import Rules, distinct_pairs, stage_codes
from workbench.store.attribution.trace_import import request_rows, unattributed
from workbench.store.columns import null_arrays
from workbench.store.columns.args import DEVICE_CATEGORIES, category_mask
from workbench.store.columns.trace_columns import thread_key
from workbench.store.integrity import verify_run
from workbench.store.layout import (
    RunExists,
    RunTables,
    check_run_id,
    commit_run,
    partition_dir,
    read_run_row,
    run_file,
    run_ids,
)
from workbench.store.progress import IngestProgress, ProgressFn, check_cancel
from workbench.store.report import ImportReport
from workbench.store.run_row import (
    FINGERPRINT_KEY,
    existing_matches,
    file_sha,
    fingerprint,
    run_row,
)

REQUIRED = ("run_id", "category", "name", "ts_us", "dur_us")
# A stored run has these whatever it holds (commit_run writes them even when empty); compiles
# came later, so older stores may lack them.
_REQUIRED_PARTS = ("events", "requests")


def ingest_parquet(
    store: Path,
    path: Path,
    *,
    run_id: str | None,
    label: str | None,
    tags: dict[str, str],
    rules: Rules,
    pattern: re.Pattern[str] | None,
    progress: ProgressFn | None,
    cancel: threading.Event | None,
) -> ImportReport:
    """Import a Parquet events table or a store directory; all runs or none."""
    started = time.perf_counter()
    subject = str(path)
    if path.is_dir():
        plans = _store_runs(path, run_id, label, tags, subject)
        fmt = "store"
    else:
        sha = file_sha(path)
        fp = fingerprint(label, tags, pattern.pattern if pattern else None, rules, None)
        plans = []
        for rid, events, requests in _events_runs(path, run_id, rules, pattern, subject):
            run = run_row(
                rid,
                label=label,
                source_format="parquet-events",
                source_file=str(path.resolve()),
                sha=sha,
                meta={},
                tags=tags,
                fp=fp,
            )
            plans.append(RunTables(run, events, requests, schema.COMPILES_FILE.empty_table()))
        fmt = "parquet-events"
    # Check every run before writing any, so a conflict leaves the store untouched.
    todo = [t for t in plans if not _already_there(store, t, fmt, subject)]
    done: list[str] = []
    try:
        for t in todo:
            check_cancel(cancel, subject)
            try:
                commit_run(store, t, source=subject)
            except RunExists:
                # Committed meanwhile by an identical import (two at once): nothing to do.
                if _already_there(store, t, fmt, subject):
                    continue
                raise
            done.append(t.run_id)
            if progress is not None:
                progress(IngestProgress(subject, "write", len(done), len(todo), 0))
    except BaseException:
        _remove_runs(store, done)
        raise
    n_events = sum(t.events.num_rows for t in todo)
    n_req = sum(t.requests.num_rows for t in todo)
    cats = (
        pa.concat_arrays([t.events.column("category").combine_chunks() for t in todo])
        if todo
        else pa.array([], pa.string())
    )
    stage_all = (
        pa.concat_arrays([t.events.column("stage").combine_chunks() for t in todo])
        if todo
        else pa.array([], pa.string())
    )
    codes = np.asarray(
        pc.fill_null(pc.index_in(stage_all, value_set=pa.array(list(STAGES))), -1).to_numpy(
            zero_copy_only=False
        ),
        dtype=np.int64,
    )
    return ImportReport(
        path=subject,
        run_ids=[t.run_id for t in plans],
        status="imported" if todo else "unchanged",
        source_format=fmt,
        events_read=n_events,
        events_kept=n_events,
        requests=n_req,
        request_unit="as stored" if fmt == "store" else "parquet",
        unattributed_by_category=unattributed(cats, codes) if todo else {},
        seconds=time.perf_counter() - started,
    )


def _already_there(store: Path, t: RunTables, fmt: str, subject: str) -> bool:
    """True when the store holds this very run; error when its id holds another.

    A run copied from another store is the same when its runs row is (imported_at included;
    synthetic runs have no source hash); else the same import is the same source hash and
    import options.
    """
    if fmt == "store":
        row = read_run_row(store, t.run_id)
        if row is None:
            return False
        if row == _conform_row(t.run):
            return True
    meta = t.run.schema.metadata or {}
    fp_run = meta.get(FINGERPRINT_KEY, b"").decode()
    sha_run = str(t.run.column("source_sha256")[0].as_py())
    return existing_matches(store, t.run_id, sha_run, fp_run, subject)


def _conform_row(run: pa.Table) -> dict[str, object]:
    """The runs row as read_run_row gives it back from the store."""
    cols = {
        f.name: run.column(f.name)[0].as_py() if f.name in run.column_names else None
        for f in schema.RUNS
    }
    row: dict[str, object] = pa.Table.from_pylist([cols], schema=schema.RUNS).to_pylist()[0]
    return row


def _remove_runs(store: Path, ids: list[str]) -> None:
    """Undo runs committed by this call (runs file first: it is what makes a run visible)."""
    for rid in reversed(ids):
        run_file(store, rid).unlink(missing_ok=True)
        for name in schema.PARTITIONED:
            shutil.rmtree(partition_dir(store, name, rid), ignore_errors=True)


def _read(path: Path, subject: str) -> pa.Table:
    try:
        return pq.read_table(path)
    except (OSError, pa.ArrowException) as exc:
        raise WorkbenchError(subject, f"cannot read Parquet: {exc}") from exc


def _read_dir(d: Path, subject: str) -> pa.Table | None:
    files = sorted(d.glob("*.parquet")) if d.is_dir() else []
    if not files:
        return None
    tables = [_read(f, subject) for f in files]
    return pa.concat_tables(tables, promote_options="default")


def _store_runs(
    src: Path, run_id: str | None, label: str | None, tags: dict[str, str], subject: str
) -> list[RunTables]:
    """Every committed run of another store, as it is stored."""
    if not (src / "runs").is_dir():
        raise WorkbenchError(subject, "not a store directory (it has no runs/)")
    if run_id is not None:
        raise WorkbenchError("--run-id", "does not apply to a store directory (runs keep ids)")
    if label is not None or tags:
        raise WorkbenchError("--label/--tag", "do not apply to a store directory")
    out: list[RunTables] = []
    for rid in run_ids(src):
        # Damage in the source is refused here rather than copied under fresh hashes.
        verify_run(src, run_file(src, rid))
        run = _read(run_file(src, rid), subject)
        parts: dict[str, pa.Table] = {}
        for name, file_schema in schema.PARTITIONED.items():
            folder = partition_dir(src, name, rid)
            if name in _REQUIRED_PARTS and not folder.is_dir():
                raise WorkbenchError(
                    str(folder), f"missing: run {rid!r} of this store has no {name} partition"
                )
            t = _read_dir(folder, subject)
            if t is not None and "run_id" in t.column_names:
                t = t.drop_columns(["run_id"])
            parts[name] = t if t is not None else file_schema.empty_table()
        out.append(
            RunTables(
                run, parts["events"], parts["requests"], parts["compiles"], tokens=parts["tokens"]
            )
        )
    if not out:
        raise WorkbenchError(subject, "store directory holds no runs")
    return out


def _events_runs(
    path: Path,
    run_id: str | None,
    rules: Rules,
    pattern: re.Pattern[str] | None,
    subject: str,
) -> list[tuple[str, pa.Table, pa.Table]]:
    """A schema-v1 events table split by run_id; stage and requests filled where missing."""
    table = _read(path, subject)
    missing = [c for c in REQUIRED if c not in table.column_names]
    if missing:
        raise WorkbenchError(
            subject, f"not a schema v1 events table: missing columns {', '.join(missing)}"
        )
    ids = pc.unique(table.column("run_id")).to_pylist()
    if None in ids:
        raise WorkbenchError(subject, "events table has rows without run_id")
    if run_id is not None and len(ids) != 1:
        raise WorkbenchError("--run-id", f"{subject} holds {len(ids)} runs; --run-id needs one")
    out = []
    for rid in sorted(ids):
        sub = table.filter(pc.equal(table.column("run_id"), rid)).drop_columns(["run_id"])
        new_id = check_run_id(run_id or str(rid))
        try:
            events = _conform_events(sub)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise WorkbenchError(subject, f"run {rid!r}: column of the wrong type: {exc}") from exc
        events, requests = _attribute_events(events, rules, pattern, subject)
        out.append((new_id, events, requests))
    return out


def _conform_events(t: pa.Table) -> pa.Table:
    n = t.num_rows
    cols = []
    for f in schema.EVENTS_FILE:
        if f.name in t.column_names:
            cols.append(t.column(f.name).cast(f.type))
        elif f.name == "event_id":
            cols.append(pa.chunked_array([pa.array(np.arange(n, dtype=np.int64))]))
        else:
            cols.append(pa.chunked_array([null_arrays.nulls(n, f.type)]))
    return pa.Table.from_arrays(cols, schema=schema.EVENTS_FILE)


def _np(col: pa.ChunkedArray, fill: float | int, dtype: type) -> np.ndarray:
    return np.asarray(pc.fill_null(col, fill).to_numpy(), dtype=dtype)


def _attribute_events(
    events: pa.Table, rules: Rules, pattern: re.Pattern[str] | None, subject: str
) -> tuple[pa.Table, pa.Table]:
    """Stages the table lacks from the rules; requests as stored (request_id) or detected."""
    category = events.column("category").combine_chunks()
    name = events.column("name").combine_chunks()
    ts = _np(events.column("ts_us"), np.nan, np.float64)
    if np.isnan(ts).any():
        raise WorkbenchError(subject, "events table has rows without ts_us")
    dur = np.maximum(_np(events.column("dur_us"), 0.0, np.float64), 0.0)
    pid = _np(events.column("pid"), 0, np.int64)
    tid = _np(events.column("tid"), 0, np.int64)
    thread = thread_key(pid, tid)
    pairs = distinct_pairs(category, name)
    rule_stage, prio = stage_codes(rules, pairs)
    given = np.asarray(
        pc.fill_null(
            pc.index_in(events.column("stage"), value_set=pa.array(list(STAGES))), -1
        ).to_numpy(),
        dtype=np.int64,
    )
    stage = np.where(given >= 0, given, rule_stage)
    device = category_mask(category, DEVICE_CATEGORIES)
    parent = _np(events.column("parent_id"), -1, np.int64)
    eid = _np(events.column("event_id"), -1, np.int64)
    end = ts + dur
    given_req = events.column("request_id")
    if given_req.null_count < len(given_req):
        req, request_of, names = _stored_requests(given_req, ts, end, thread)
    else:
        req = find_requests(rules, pairs, ts, dur, thread, ~device & (dur > 0), pattern)
        launcher = _launchers(eid, parent, device)
        request_of = assign(req, ts, thread, device, launcher)
        names = ["run"] if req.unit == "run" else name.take(pa.array(req.event)).to_pylist()
    excl = exclusive_times(req, request_of, ts, end, stage, prio)
    ids = names if given_req.null_count < len(given_req) else None
    steps = step_facts(rules, names) if req.unit == ENGINE_STEP else None
    requests = request_rows(
        req, excl, names, ids, 0.0, request_of, ts, events.column("shape"), steps=steps
    )
    rid_arr = requests.column("request_id").combine_chunks()
    events = events.set_column(
        events.schema.get_field_index("request_id"),
        "request_id",
        rid_arr.take(pa.array(request_of, mask=request_of < 0)),
    )
    events = events.set_column(
        events.schema.get_field_index("stage"),
        "stage",
        pa.array(list(STAGES)).take(pa.array(stage, mask=stage < 0)),
    )
    return events, requests


def _launchers(eid: np.ndarray, parent: np.ndarray, device: np.ndarray) -> np.ndarray:
    """Row index of each device event's parent (its launching call), or -1."""
    order = np.argsort(eid, kind="stable")
    pos = np.minimum(np.searchsorted(eid[order], parent), max(len(eid) - 1, 0))
    hit = (parent >= 0) & device & (eid[order][pos] == parent) if len(eid) else device
    return np.where(hit, order[pos], -1)


def _stored_requests(
    given: pa.ChunkedArray,
    ts: np.ndarray,
    end: np.ndarray,
    thread: np.ndarray,
) -> tuple[Requests, np.ndarray, list[str]]:
    """Requests named by the table: each spans its events, first start to last end."""
    enc = pc.dictionary_encode(given.combine_chunks())
    idx = np.asarray(enc.indices.fill_null(-1).to_numpy(zero_copy_only=False), dtype=np.int64)
    names: list[str] = [str(x) for x in enc.dictionary.to_pylist()]
    k = len(names)
    start = np.full(k, np.inf)
    stop = np.full(k, -np.inf)
    sel = idx >= 0
    np.minimum.at(start, idx[sel], ts[sel])
    np.maximum.at(stop, idx[sel], end[sel])
    order = np.argsort(start, kind="stable")
    rank = np.empty(k, dtype=np.int64)
    rank[order] = np.arange(k)
    first_thread = np.zeros(k, dtype=np.int64)
    first_thread[idx[sel]] = thread[sel]
    req = Requests(
        "stored", np.full(k, -1, np.int64), start[order], stop[order], first_thread[order]
    )
    request_of = np.where(sel, rank[np.maximum(idx, 0)], -1)
    return req, request_of, [names[i] for i in order.tolist()]
