"""accel.synth runs as events only: a Kineto-style trace that `workbench ingest` imports.

accel.synth repeats every batch op for each member of the batch; here each member gets its own
thread with a `request#i` annotation (arrival to end), a `queue_wait` span, its copy of the
batch's host ops, a zero-length launch per kernel and copy, and the device events they launch,
named by their kernel as a profiler names them. No batch ids, no stages, no cores (a stream per
core), no compiler estimates: the importer builds the requests as it does for real traces.
Warm-up compiles (before serving) are left out.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any, Final

import numpy as np

from accel.synth import SynthRun
from workbench.store.ingest import ingest

HOST_PID: Final[int] = 1
DEVICE_PID: Final[int] = 0
# accel.synth op name -> the name a profiler gives it (the rules file attributes these)
_HOST_NAMES: Final[dict[str, str]] = {
    "serving.admit": "serving.admission",
    "compile": "backend_compile",
    "compile_cache.lookup": "TorchDynamo Cache Lookup",
    "placement": "placement",
    "postprocess": "postprocess",
}
_COPIES: Final[dict[str, str]] = {
    "h2d_copy": "Memcpy HtoD (Pinned -> Device)",
    "d2h_copy": "Memcpy DtoH (Device -> Pageable)",
}


def chrome_trace(run: SynthRun, hardware: str) -> dict[str, Any]:
    """The run's request-bound events as a Kineto-style JSON object."""
    req = run.requests
    ids = [str(r) for r in req["request_id"]]
    index = {r: i for i, r in enumerate(ids)}
    arrival = np.asarray(req["arrival_us"], dtype=np.float64)
    start = np.asarray(req["start_us"], dtype=np.float64)
    latency = np.asarray(req["latency_us"], dtype=np.float64)
    ev = run.events
    out: list[dict[str, Any]] = []
    admitted = arrival.copy()

    def host(i: int, cat: str, name: str, ts: float, dur: float, args: dict[str, Any]) -> None:
        out.append(
            {
                "ph": "X",
                "cat": cat,
                "name": name,
                "pid": HOST_PID,
                "tid": 10_000 + i,
                "ts": ts,
                "dur": dur,
                "args": args,
            }
        )

    ts_all = np.asarray(ev["ts_us"], dtype=np.float64)
    dur_all = np.asarray(ev["dur_us"], dtype=np.float64)
    core_all = np.asarray(ev["core"], dtype=np.int64)
    numbers = {key: np.asarray(ev[key], dtype=np.float64) for key in ("flops", "bytes")}
    corr = 0
    for k in range(len(ev["name"])):
        rid = ev["request_id"][k]
        if rid is None:
            continue
        i = index[str(rid)]
        name, cat = str(ev["name"][k]), str(ev["category"][k])
        ts, dur = float(ts_all[k]), float(dur_all[k])
        args: dict[str, Any] = {}
        if ev["shape"][k]:
            args["Input Dims"] = json.loads(str(ev["shape"][k]))
        for key, values in numbers.items():
            if np.isfinite(values[k]):
                args[key] = float(values[k])
        if name in _HOST_NAMES:
            host(i, "cpu_op", _HOST_NAMES[name], ts, dur, args)
            if name == "serving.admit":
                admitted[i] = ts + dur
        elif cat == "sync":  # a layer barrier: the host waits for every core
            host(i, "cuda_runtime", "cudaStreamSynchronize", ts, dur, {})
        elif cat in ("kernel", "gpu_memcpy"):
            corr += 1
            launch = "cudaLaunchKernel" if cat == "kernel" else "cudaMemcpyAsync"
            # Copies block the host for their duration; kernel launches return at once.
            host(
                i,
                "cuda_runtime",
                launch,
                ts,
                dur if cat == "gpu_memcpy" else 0.0,
                {"correlation": corr},
            )
            core = int(core_all[k])
            stream = 7 + max(core, 0)
            args.update(correlation=corr, stream=stream, device=0)
            # A profiler names device activity by the kernel that ran (a fallback runs a
            # generic kernel, a fused group a fused one), not by the op that launched it.
            kernel = ev["kernel"][k] if cat == "kernel" else None
            out.append(
                {
                    "ph": "X",
                    "cat": cat,
                    "name": str(kernel) if kernel else _COPIES.get(name, name),
                    "pid": DEVICE_PID,
                    "tid": stream,
                    "ts": ts,
                    "dur": dur,
                    "args": args,
                }
            )
        else:
            raise ValueError(f"accel.synth event {name!r} ({cat}) has no trace form")
    for i in range(len(ids)):
        host(i, "user_annotation", f"request#{i}", float(arrival[i]), float(latency[i]), {})
        if start[i] > admitted[i]:
            host(
                i,
                "user_annotation",
                "queue_wait",
                float(admitted[i]),
                float(start[i] - admitted[i]),
                {},
            )
    return {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": hardware}],
        "traceEvents": out,
    }


def ingest_events_only(store: Path, run: SynthRun, run_id: str, hardware: str, work: Path) -> None:
    """Write chrome_trace(run) under `work` and import it into `store` as `run_id`."""
    path = work / f"{run_id}.pt.trace.json.gz"
    with gzip.open(path, "wt", encoding="utf-8", compresslevel=1) as fh:
        json.dump(chrome_trace(run, hardware), fh)
    ingest(store, path, run_id=run_id)
