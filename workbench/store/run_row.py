"""The runs row of an import and its identity: source hash + options fingerprint."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from workbench.errors import WorkbenchError
from workbench.store import schema
from workbench.store.attribution.rules import Rules
from workbench.store.layout import read_run_row, run_file

# Tags that name a runs column: the tag also fills that column (an explicit statement wins).
TAG_COLUMNS = (
    "model",
    "workload",
    "compiler",
    "compiler_version",
    "runtime",
    "runtime_version",
    "hardware",
    "driver_version",
    "host",
    "thermal_state",
)
# The options fingerprint lives in the runs file's Parquet key-value metadata, not in tags,
# so that runs imported with different options do not differ in their tags.
FINGERPRINT_KEY = b"workbench.import_options"


def file_sha(path: Path) -> str:
    """sha256 of a file's bytes."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            while chunk := fh.read(1 << 20):
                digest.update(chunk)
    except OSError as exc:
        raise WorkbenchError(str(path), f"cannot read file: {exc.strerror or exc}") from exc
    return digest.hexdigest()


def fingerprint(
    label: str | None,
    tags: dict[str, str],
    pattern: str | None,
    rules: Rules,
    compile_log_sha: str | None,
) -> str:
    """Short hash of the options that shape a run: same source + same options = same run."""
    doc = json.dumps(
        [label, sorted(tags.items()), pattern, rules.sha256, compile_log_sha], sort_keys=True
    )
    return hashlib.sha256(doc.encode("utf-8")).hexdigest()[:16]


def existing_matches(store: Path, run_id: str, sha: str, fp: str, subject: str) -> bool:
    """True when run_id holds this very import; error when it holds something else."""
    row = read_run_row(store, run_id)
    if row is None:
        return False
    meta = pq.read_schema(run_file(store, run_id)).metadata or {}
    if row.get("source_sha256") == sha and meta.get(FINGERPRINT_KEY) == fp.encode():
        return True
    raise WorkbenchError(
        subject, f"run {run_id!r} already exists in {store} with different content or options"
    )


def run_row(
    run_id: str,
    *,
    label: str | None,
    source_format: str,
    source_file: str,
    sha: str,
    meta: dict[str, Any],
    tags: dict[str, str],
    fp: str,
) -> pa.Table:
    """The one-row runs table; tags naming a runs column also fill it."""
    row: dict[str, Any] = {f.name: None for f in schema.RUNS}
    row.update(meta)
    for key in TAG_COLUMNS:
        if key in tags:
            row[key] = tags[key]
    row.update(
        run_id=run_id,
        label=label,
        source_format=source_format,
        source_file=source_file,
        source_sha256=sha,
        imported_at=datetime.now(UTC),
        tags=sorted(tags.items()),
        schema_version=schema.SCHEMA_VERSION,
    )
    return pa.Table.from_pylist([row], schema=schema.RUNS.with_metadata({FINGERPRINT_KEY: fp}))
