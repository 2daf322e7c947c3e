"""generators.profsim runs written two ways: a full schema-v1 store (the generator's requests, batch
ids and stage times) and events only (a Kineto-style trace that `workbench ingest` imports, so
the importer builds the requests as it does for real traces)."""

from __future__ import annotations

import gzip
import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import numpy as np

from accel.stages import STAGES
from generators.profsim import Run
from generators.profsim.events import DEVICE_PID
from workbench.sample.synthetic import columns_tables
from workbench.store import layout
from workbench.store.ingest import ingest

LAYOUTS: Final[tuple[str, ...]] = ("store", "events")
IMPORTED_AT: Final[datetime] = datetime(2026, 12, 1, tzinfo=UTC)
_META: Final[dict[str, str]] = {
    "model": "profsim-2L-4096",
    "workload": "serving",
    "compiler": "profsim-compiler",
    "compiler_version": "1.0",
    "runtime": "profsim-rt",
    "runtime_version": "1.0",
    "driver_version": "1.0",
    "thermal_state": "nominal",
    "host": "profsim-01",
}


def request_ids(n: int) -> list[str]:
    return [f"request#{i}" for i in range(n)]


def _or_none(values: np.ndarray, missing: object) -> list[Any]:
    if values.dtype.kind == "f":
        return [None if not np.isfinite(v) else float(v) for v in values]
    return [None if v == missing else v.item() if hasattr(v, "item") else v for v in values]


def _shape_key(run: Run) -> list[str]:
    # The importer's key: the first op's "Input Dims" (the admission span's input).
    h = run.service.hidden
    return [f"[[1,{int(s)},{h}]]" for s in run.timeline.seq]


def store_tables(run: Run, run_id: str) -> layout.RunTables:
    """The run as the generator knows it: every event attributed, the truth's requests."""
    tl, ev = run.timeline, run.timeline.events
    ids = request_ids(tl.latency_us.size)
    stage = [s or None for s in ev["stage"].tolist()]
    events = {
        "event_id": np.arange(ev["ts"].size, dtype=np.int64),
        "request_id": [ids[int(i)] if i >= 0 else None for i in ev["req"]],
        "stage": stage,
        "category": ev["category"].tolist(),
        "name": ev["name"].tolist(),
        "ts_us": ev["ts"].astype(np.float64),
        "dur_us": ev["dur"].astype(np.float64),
        "device": [0 if p == DEVICE_PID else None for p in ev["pid"]],
        "core": _or_none(ev["core"], -1),
        "stream": _or_none(ev["stream"], -1),
        "pid": ev["pid"].astype(np.int64),
        "tid": ev["tid"].astype(np.int64),
        "correlation": _or_none(ev["corr"], -1),
        "parent_id": _or_none(ev["parent"], -1),
        "shape": _or_none(ev["shape"], ""),
        "flops": ev["flops"].astype(np.float64),
        "bytes": ev["bytes"].astype(np.float64),
        "kernel": _or_none(ev["kernel"], ""),
        "predicted_us": ev["predicted"].astype(np.float64),
        "fallback": ev["fallback"].astype(bool),
        "recompile": ev["recompile"].astype(bool),
    }
    stage_cols = {f"{s}_us": tl.stage_us[:, i].copy() for i, s in enumerate(STAGES)}
    requests = {
        "request_id": ids,
        "name": ids,
        "arrival_us": tl.arrival_us,
        "start_us": tl.start_us,
        "end_us": tl.arrival_us + tl.latency_us,
        "latency_us": tl.latency_us,
        "batch_id": _or_none(tl.batch_id, -1),
        "batch_size": tl.batch_size.astype(np.int32),
        "shape_key": _shape_key(run),
        **stage_cols,
        "other_us": tl.stage_us[:, len(STAGES)].copy(),
    }
    params = json.dumps({"seed": run.seed, "service": repr(run.service)}, sort_keys=True)
    row: dict[str, object] = {
        "source_format": "profsim",
        "source_file": f"generators.profsim seed={run.seed}",
        "source_sha256": hashlib.sha256(params.encode()).hexdigest(),
        "hardware": run.hardware,
        "device_count": 1,
        "rank": 0,
        "world_size": 1,
        **_META,
    }
    return columns_tables(row, events, requests, {}, run_id=run_id, imported_at=IMPORTED_AT)


def chrome_trace(run: Run) -> dict[str, Any]:
    """The run's events as a Kineto-style JSON object: no requests table, no stages, no batch
    ids, no cores; requests are the top-level `request#i` annotations on their threads."""
    ev = run.timeline.events
    out: list[dict[str, Any]] = []
    for i in range(ev["ts"].size):
        args: dict[str, Any] = {}
        if ev["corr"][i] >= 0:
            args["correlation"] = int(ev["corr"][i])
        if ev["stream"][i] >= 0:
            args["stream"] = int(ev["stream"][i])
            args["device"] = 0
        if ev["shape"][i]:
            args["Input Dims"] = json.loads(str(ev["shape"][i]))
        for key in ("flops", "bytes"):
            if np.isfinite(ev[key][i]):
                args[key] = float(ev[key][i])
        out.append(
            {
                "ph": "X",
                "cat": str(ev["category"][i]),
                "name": str(ev["name"][i]),
                "pid": int(ev["pid"][i]),
                "tid": int(ev["tid"][i]),
                "ts": float(ev["ts"][i]),
                "dur": float(ev["dur"][i]),
                "args": args,
            }
        )
    return {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": run.hardware}],
        "traceEvents": out,
    }


def write_trace(run: Run, path: Path) -> Path:
    """Write chrome_trace(run) gzipped to path."""
    with gzip.open(path, "wt", encoding="utf-8", compresslevel=1) as fh:
        json.dump(chrome_trace(run), fh)
    return path


def add_run(store: Path, run: Run, run_id: str, how: str, work: Path) -> None:
    """Put `run` into `store` under `run_id` the `how` way ("store" or "events")."""
    if how == "store":
        layout.commit_run(store, store_tables(run, run_id), source=f"profsim {run_id}")
    elif how == "events":
        trace = write_trace(run, work / f"{run_id}.pt.trace.json.gz")
        ingest(store, trace, run_id=run_id)
    else:
        raise ValueError(f"unknown layout {how!r}; known: {', '.join(LAYOUTS)}")
