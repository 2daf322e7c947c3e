"""`ingest`: one trace file (or Parquet table / store) into the store, all-or-nothing."""

from __future__ import annotations

import gc
import re
import stat
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from workbench.errors import WorkbenchError
from workbench.store import schema
from workbench.store.attribution.engine_steps import UNIT as ENGINE_STEP
from workbench.store.attribution.engine_steps import workload
from workbench.store.attribution.request_pattern import compile_pattern
from workbench.store.attribution.rules import DEFAULT_RULES, Rules, load_rules
from workbench.store.attribution.trace_import import attribute
from workbench.store.columns.trace_columns import TraceColumns
from workbench.store.heap import arrow_from_heap, release_freed, reused_heap
from workbench.store.importers import Decoded, Opened, importer_for
from workbench.store.importers.compile_log.compile_log import compile_log_sha, load_compile_log
from workbench.store.importers.devices import profile_line
from workbench.store.importers.nsys.nsys_parquet import refuse_nsys_parquet
from workbench.store.importers.parquet.parquet_import import ingest_parquet
from workbench.store.input_path import check_input
from workbench.store.layout import (
    ID_RE,
    RunExists,
    RunTables,
    check_run_id,
    commit_run,
    read_run_row,
)
from workbench.store.progress import IngestProgress, ProgressFn, check_cancel
from workbench.store.report import ImportReport
from workbench.store.run_row import existing_matches, file_sha, fingerprint, run_row
from workbench.store.serving import serving_ingest
from workbench.store.serving.records import ServingRecords

PARQUET_MAGIC = b"PAR1"
TORCH_COMPILE = "torch.compile"
_SUFFIXES = (".gz", ".json", ".parquet", ".trace", ".pt")


def parse_tags(items: list[str] | None, subject: str = "--tag") -> dict[str, str]:
    """KEY=VALUE strings -> dict, spaces around key and value trimmed; an item without a key
    or a value is a one-line error naming it (a tag nobody knows is left out, not set empty)."""
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key or not value:
            raise WorkbenchError(
                f"{subject} {item!r}", "expected KEY=VALUE with a non-empty KEY and VALUE"
            )
        out[key] = value
    return out


def default_run_id(path: Path) -> str:
    """A valid run id from the file name: known suffixes dropped, odd characters replaced."""
    name = path.name
    changed = True
    while changed:
        changed = False
        for suffix in _SUFFIXES:
            if name.lower().endswith(suffix) and len(name) > len(suffix):
                name, changed = name[: -len(suffix)], True
    name = re.sub(r"[^A-Za-z0-9._-]", "_", name).replace("..", "_")
    if not name or not name[0].isalpha():
        name = "run_" + name
    name = name[:64].rstrip(".")
    return check_run_id(name) if ID_RE.fullmatch(name) else check_run_id("run")


def _compiles(
    compile_log: Path | None,
    rank: int | None,
    shift_us: float,
    progress: ProgressFn | None,
    cancel: threading.Event | None,
) -> tuple[pa.Table, frozenset[str], tuple[str, ...]]:
    """The compiles table on the run's clock, the torch versions the log states, warnings."""
    if compile_log is None:
        return schema.COMPILES_FILE.empty_table(), frozenset(), ()
    log = load_compile_log(compile_log, rank=rank, progress=progress, cancel=cancel)
    table = log.table
    if "run_id" in table.column_names:
        table = table.drop_columns(["run_id"])
    # The log's start times are epoch microseconds; the store's are relative to run start.
    idx = table.schema.get_field_index("start_us")
    if idx >= 0:
        table = table.set_column(
            idx, "start_us", pc.subtract(table.column("start_us").cast(pa.float64()), shift_us)
        )
    return table, log.pytorch_versions, log.warnings


def _compiler_from_log(
    meta: dict[str, object], tags: dict[str, str], versions: frozenset[str], warnings: list[str]
) -> None:
    """compiler / compiler_version from the log's pytorch_version; tags win, doubt stays null.

    The compiler is named "torch.compile" (the front end the log belongs to, as for traces with
    compile spans), not the backend: the log's version is torch's, not Inductor's own.
    """
    if not versions:
        return
    if len(versions) > 1:
        warnings.append(
            "compile log states several pytorch_version values ("
            + ", ".join(sorted(versions))
            + "): compiler_version left null"
        )
        return
    if tags.get("compiler", TORCH_COMPILE) != TORCH_COMPILE:
        return  # another compiler by the user's word: torch's version is not its version
    meta.setdefault("compiler", TORCH_COMPILE)
    meta.setdefault("compiler_version", next(iter(versions)))


def ingest(
    store: Path,
    path: Path,
    *,
    run_id: str | None = None,
    label: str | None = None,
    tags: dict[str, str] | None = None,
    compile_log: Path | None = None,
    request_pattern: str | None = None,
    progress: ProgressFn | None = None,
    cancel: threading.Event | None = None,
    rules_path: Path = DEFAULT_RULES,
    records: Path | None = None,
) -> ImportReport:
    """Import one source into the store; raises WorkbenchError and leaves the store unchanged.

    A trace file of any registered format (importers: Kineto JSON, nsys SQLite, plugins)
    becomes one run; a Parquet events table or a store directory is merged run by run; a
    serving-records file (vLLM bench, AIPerf, OTLP) becomes an LLM-serving run, and `records`
    beside a trace replaces its requests with the records', joined to its engine steps.
    """
    started = time.perf_counter()
    subject = str(path)
    tags = dict(tags or {})
    for key in tags:
        if not key:
            raise WorkbenchError(f"tag {key!r}", "empty tag key")
    pattern = compile_pattern(request_pattern)
    rules = load_rules(rules_path)
    if run_id is not None:
        check_run_id(run_id)
    is_dir = stat.S_ISDIR(check_input(path).st_mode)  # before any open: FIFOs block
    if compile_log is not None:
        check_input(compile_log)
    if records is not None:
        check_input(records, dirs=False)
    if is_dir or _is_parquet(path):
        refuse_nsys_parquet(path)
        if compile_log is not None:
            raise WorkbenchError("--compile-log", "applies to trace files, not Parquet or stores")
        return ingest_parquet(
            store,
            path,
            run_id=run_id,
            label=label,
            tags=tags,
            rules=rules,
            pattern=pattern,
            progress=progress,
            cancel=cancel,
        )
    rid = run_id or default_run_id(path)
    if serving_ingest.reader_for(path) is not None:
        if compile_log is not None or records is not None:
            raise WorkbenchError("--compile-log/--records", "apply to trace files, not records")
        fp = fingerprint(label, tags, request_pattern, rules, None)
        return serving_ingest.ingest_records(store, path, run_id=rid, label=label, tags=tags, fp=fp)
    importer = importer_for(path)
    log_sha = compile_log_sha(compile_log) if compile_log is not None else None
    served = serving_ingest.read_records(records) if records is not None else None
    if records is not None:
        log_sha = f"{log_sha}+records:{file_sha(records)}"
    fp = fingerprint(label, tags, request_pattern, rules, log_sha)

    opened = importer.open(path, progress, cancel)
    # Only an existing run needs the hash before decoding (which hashes the file as it reads).
    if read_run_row(store, rid) is not None and existing_matches(
        store, rid, opened.sha, fp, subject
    ):
        return ImportReport(subject, [rid], "unchanged", bytes_read=opened.n_bytes)
    # Millions of short-lived objects, none of them cyclic: the cycle collector would only
    # rescan them over and over.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        check_cancel(cancel, subject)
        release_freed()
        # The args text (half a real trace's bytes) is only written: held packed until then.
        opened.pack_text = True
        opened.second_process = True
        # Without numpy's huge-page advice and with Arrow's buffers on the C heap too: each
        # fresh multi-MB column otherwise faults in (and the kernel zeroes) its pages anew;
        # ~40% of a 2M-event nsys import's CPU was the kernel's, now ~30% of a smaller total.
        # release_freed still trims between phases.
        with reused_heap(), arrow_from_heap():
            # Passed on, not kept here: _import_decoded lets the decoded columns go when done.
            return _import_decoded(
                store, path, opened.decode(), opened, rid, fp, label, tags, compile_log,
                rules, pattern, progress, cancel, started, served,
            )  # fmt: skip
    finally:
        if gc_was_enabled:
            gc.enable()


def _import_decoded(
    store: Path,
    path: Path,
    decoded: Decoded,
    opened: Opened,
    rid: str,
    fp: str,
    label: str | None,
    tags: dict[str, str],
    compile_log: Path | None,
    rules: Rules,
    pattern: re.Pattern[str] | None,
    progress: ProgressFn | None,
    cancel: threading.Event | None,
    started: float,
    served: ServingRecords | None = None,
) -> ImportReport:
    """Attribute and commit one decoded file, whatever its format (the body of ingest);
    `served`: the serving records that replace the trace's requests."""
    subject = str(path)
    cols, args = decoded.cols, decoded.args
    warnings = list(decoded.warnings)
    meta, base_us, source_format = dict(decoded.meta), decoded.base_us, decoded.source_format
    del decoded
    n_bytes = opened.n_bytes
    check_cancel(cancel, subject)
    release_freed()
    att = attribute(cols, args, rules, pattern)
    t0, n_kept, counts = float(cols.ts.min()), cols.n, _counts(cols)
    # The events table holds what the store needs: the decoded columns go before the commit.
    del cols, args
    release_freed()
    if progress is not None:
        progress(IngestProgress(subject, "attribute", n_bytes, n_bytes, n_kept))
    if att.request_unit == ENGINE_STEP:
        meta.setdefault("workload", workload(att.requests.column("shape_key").to_pylist()))
    if att.compilations and "compiler" not in meta:
        meta["compiler"] = TORCH_COMPILE
    shift = t0 + base_us
    compiles, versions, log_warnings = _compiles(
        compile_log, meta.get("rank"), shift, progress, cancel
    )
    warnings += log_warnings
    _compiler_from_log(meta, tags, versions, warnings)
    requests, tokens, request_unit = att.requests, None, att.request_unit
    serving_line = ""
    if served is not None:
        requests, tokens, serving_meta, serving_warnings = serving_ingest.joined_tables(
            served, att.events, shift
        )
        meta.update(serving_meta)
        warnings += serving_warnings
        request_unit = "llm_request"
        serving_line = serving_ingest.join_text(serving_meta)
    run = run_row(
        rid,
        label=label,
        source_format=source_format,
        source_file=str(path.resolve()),
        sha=opened.sha,
        meta=meta,
        tags=tags,
        fp=fp,
    )
    check_cancel(cancel, subject)
    if progress is not None:
        progress(IngestProgress(subject, "write", n_bytes, n_bytes, n_kept))
    try:
        tables = RunTables(run, att.events, requests, compiles, att.packed_args, tokens=tokens)
        commit_run(store, tables, source=subject)
    except RunExists:
        # An identical import committed meanwhile (two at once): this one changes nothing.
        if existing_matches(store, rid, opened.sha, fp, subject):
            return ImportReport(subject, [rid], "unchanged", bytes_read=n_bytes)
        raise
    read_by_phase, kept_by_phase, skipped_by_phase, col_warnings = counts
    warnings += col_warnings
    if request_unit == "run":
        warnings.append("no request annotations or profiler steps: the whole run is one request")
    return ImportReport(
        path=subject,
        run_ids=[rid],
        status="imported",
        source_format=source_format,
        events_read=sum(read_by_phase.values()),
        events_kept=n_kept,
        read_by_phase=read_by_phase,
        kept_by_phase=kept_by_phase,
        skipped_by_phase=skipped_by_phase,
        unattributed_by_category=att.unattributed_by_category,
        background_events=att.background_events,
        requests=requests.num_rows,
        request_unit=request_unit,
        serving_join=serving_line,
        compilations=att.compilations,
        compiles_logged=compiles.num_rows,
        device=profile_line(run.column("hardware")[0].as_py()),
        graph_launches=att.graph.launches,
        graph_kernels=att.graph.kernels,
        graph_unlinked=att.graph.unlinked,
        warnings=warnings,
        bytes_read=n_bytes,
        seconds=time.perf_counter() - started,
    )


def _counts(
    cols: TraceColumns,
) -> tuple[dict[str, int], dict[str, int], dict[str, int], list[str]]:
    """What the report needs of the decoded columns: events by phase read, kept and skipped,
    and the decoder's warnings."""
    return cols.read_by_phase, cols.kept_by_phase, cols.skipped_by_phase, cols.warnings


def _is_parquet(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == PARQUET_MAGIC
    except OSError as exc:
        raise WorkbenchError(str(path), f"cannot read file: {exc.strerror or exc}") from exc
