"""Serving records into the store: a records file alone becomes a run (join "records"), and a
trace imported with `--records` has its requests replaced by the records' token-level ones,
joined to its engine steps (by request id, else by time)."""

from __future__ import annotations

import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pyarrow as pa

from workbench.errors import WorkbenchError
from workbench.store import schema
from workbench.store.importers import read_head
from workbench.store.layout import RunExists, RunTables, commit_run, read_run_row
from workbench.store.report import ImportReport
from workbench.store.run_row import existing_matches, file_sha, run_row
from workbench.store.serving import aiperf, otlp, vllm_bench
from workbench.store.serving.engine_trace import engine_steps
from workbench.store.serving.join import join
from workbench.store.serving.records import ServingRecords
from workbench.store.serving.token_model import token_tables

# Asked in this order: each recognises its own files only (tests/test_serving_records.py).
READERS: tuple[ModuleType, ...] = (otlp, aiperf, vllm_bench)
_RUN_COLUMNS = frozenset(f.name for f in schema.RUNS)


def describe_readers() -> list[tuple[str, str]]:
    """(name, one-line summary) of each serving-records format, for `ingest --help`."""
    return [(m.NAME, m.SUMMARY) for m in READERS]


def reader_for(path: Path) -> ModuleType | None:
    """The serving-records format of the file, or None when it is not one."""
    head = read_head(path)
    return next((m for m in READERS if m.recognise(head)), None)


def read_records(path: Path) -> ServingRecords:
    """The file's records; a one-line WorkbenchError when it is no serving-records format."""
    reader = reader_for(path)
    if reader is None:
        names = ", ".join(m.NAME for m in READERS)
        raise WorkbenchError(str(path), f"not a serving-records file (formats: {names})")
    recs: ServingRecords = reader.read(path)
    return recs


def join_text(meta: dict[str, Any]) -> str:
    """The report's line of the join: how many records, joined how."""
    n, matched, method = meta["serving_records"], meta["serving_matched"], meta["serving_join"]
    if method == "records":
        return f"{n} records, no trace to join (token gaps have no stage split)"
    return f"{matched} of {n} records joined to engine steps by {method.replace('_', ' ')}"


def serving_meta(recs: ServingRecords, method: str, matched: int) -> dict[str, Any]:
    """The runs-row fields the records state, and the join."""
    meta: dict[str, Any] = {k: v for k, v in recs.meta.items() if k in _RUN_COLUMNS}
    meta.update(
        serving_join=method, serving_records=len(recs.records), serving_matched=matched,
        workload=meta.get("workload") or "llm-serving",
    )  # fmt: skip
    return meta


def joined_tables(
    recs: ServingRecords, events: pa.Table | None, base_us: float
) -> tuple[pa.Table, pa.Table, dict[str, Any], list[str]]:
    """(requests, tokens, runs-row fields, warnings) of records joined to a trace's events
    (None: records only). `base_us`: the epoch time of the events' ts 0, in microseconds."""
    steps = engine_steps(events) if events is not None else None
    joined = join(recs, steps, base_us)
    requests, tokens = token_tables(joined)
    warnings = [*recs.warnings, *(steps.warnings if steps is not None else []), *joined.warnings]
    if events is not None and steps is None:
        warnings.append("the trace has no llm.step# engine steps: the records are not joined")
    return requests, tokens, serving_meta(recs, joined.method, joined.matched), warnings


def ingest_records(
    store: Path, path: Path, *, run_id: str, label: str | None, tags: dict[str, str], fp: str
) -> ImportReport:
    """A serving-records file alone as one run; the store is unchanged on any error."""
    started = time.perf_counter()
    subject = str(path)
    recs = read_records(path)
    sha = file_sha(path)
    if read_run_row(store, run_id) is not None and existing_matches(
        store, run_id, sha, fp, subject
    ):
        return ImportReport(subject, [run_id], "unchanged", bytes_read=path.stat().st_size)
    requests, tokens, meta, warnings = joined_tables(recs, None, 0.0)
    run = run_row(
        run_id, label=label, source_format=recs.source_format, source_file=str(path.resolve()),
        sha=sha, meta=meta, tags=tags, fp=fp,
    )  # fmt: skip
    events = schema.EVENTS_FILE.empty_table()
    tables = RunTables(run, events, requests, schema.COMPILES_FILE.empty_table(), tokens=tokens)
    try:
        commit_run(store, tables, source=subject)
    except RunExists:
        if existing_matches(store, run_id, sha, fp, subject):
            return ImportReport(subject, [run_id], "unchanged", bytes_read=path.stat().st_size)
        raise
    return ImportReport(
        path=subject,
        run_ids=[run_id],
        status="imported",
        source_format=recs.source_format,
        requests=requests.num_rows,
        request_unit="llm_request",
        serving_join=join_text(meta),
        warnings=warnings,
        bytes_read=path.stat().st_size,
        seconds=time.perf_counter() - started,
    )
