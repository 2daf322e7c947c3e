"""Synthetic serving runs written with layout.commit_run, for triage tests and bench/triage.py.

A run is a single-server queue of requests; each request is a fixed pattern of ops over the five
stages. Faults are injected as data (recompiles on unseen shapes, fallbacks, a hardware tag), so
tests know the truth they check against. Vectorised: bench/triage.py builds >= 10M events with it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa

from accel.stages import STAGES
from workbench.store import layout

# op slot -> stage; queue wait is charged to ingress (admission), as in the store's invariant.
_PATTERN = ("ingress", "lowering", "scheduling", "execution", "execution", "execution", "assembly")
_BASE_US = {
    "ingress": 40.0,
    "lowering": 60.0,
    "scheduling": 50.0,
    "execution": 300.0,
    "assembly": 45.0,
}
_SHAPES = ("[[8,128,512],[512,512]]", "[[16,128,512],[512,512]]", "[[32,128,512],[512,512]]")
_NEW_SHAPES = ("[[24,128,512],[512,512]]", "[[40,128,512],[512,512]]", "[[56,128,512],[512,512]]")


@dataclass(frozen=True)
class RunSpec:
    run_id: str
    n_requests: int = 200
    seed: int = 0
    ops_per_request: int = len(_PATTERN)  # multiples of the pattern: bigger runs for the bench
    mean_gap_us: float = 2500.0  # mean inter-arrival time
    drift_share: float = 0.0  # share of requests with a shape unseen at compile time
    recompile_us: float = 0.0  # > 0: first request of every unseen shape recompiles (dynamic=False)
    recompile_share: float = 0.0  # and this share of later drifted requests too (guard churn)
    fallback_share: float = 0.0  # share of execution ops that fall back to a generic kernel
    warmup_compile_us: float = 20_000.0  # one-time first compilation inside the first request
    start_offset_s: float = 0.0  # imported_at offset, for "close in time"
    label: str = ""
    model: str = "llama-mini"
    workload: str = "chat-serving"
    tags: dict[str, str] = field(default_factory=dict)
    meta: dict[str, object] = field(default_factory=dict)  # runs columns: hardware, driver...


DEFAULT_META: dict[str, object] = {
    "compiler": "inductor",
    "compiler_version": "2.5.1",
    "runtime": "torch",
    "runtime_version": "2.5.1",
    "hardware": "H100-SXM",
    "device_count": 1,
    "driver_version": "550.54",
    "host": "canary-01",
    "thermal_state": "nominal",
}


def build_run(spec: RunSpec) -> layout.RunTables:
    """The four tables of one synthetic run."""
    rng = np.random.default_rng(spec.seed)
    nr = spec.n_requests
    pattern = np.array(
        [STAGES.index(s) for s in _PATTERN] * (spec.ops_per_request // len(_PATTERN))
    )
    k = pattern.size
    scale = len(_PATTERN) / k  # keep request service time independent of ops_per_request

    drifted = rng.random(nr) < spec.drift_share
    drifted[0] = False  # the warm-up request compiles a known shape
    shape_idx = np.where(drifted, rng.integers(0, 3, nr) + 3, rng.integers(0, 3, nr))
    shapes = np.array(_SHAPES + _NEW_SHAPES)
    shape_key = shapes[shape_idx]
    batch = np.array([8, 16, 32, 24, 40, 56])[shape_idx].astype(np.int32)

    base = np.array([_BASE_US[s] for s in STAGES])[pattern] * scale
    dur = base[None, :] * rng.lognormal(0.0, 0.25, (nr, k)) * (batch[:, None] / 16.0) ** 0.5
    is_exec = (pattern == STAGES.index("execution"))[None, :]
    fallback = is_exec & (rng.random((nr, k)) < spec.fallback_share)
    dur = np.where(fallback, dur * 3.0, dur)

    # One-time first compilation (warm-up) in request 0; dynamic=False recompiles on the first
    # request of every unseen shape.
    lowering_slot = int(np.flatnonzero(pattern == STAGES.index("lowering"))[0])
    recompile = np.zeros((nr, k), dtype=bool)
    compile_row = np.full((nr, k), -1, dtype=np.int64)
    compile_reasons: list[str | None] = []
    compile_dur: list[float] = []
    compile_req: list[int] = []
    if spec.warmup_compile_us > 0:
        dur[0, lowering_slot] += spec.warmup_compile_us
        compile_row[0, lowering_slot] = 0
        compile_reasons.append(None)
        compile_dur.append(spec.warmup_compile_us)
        compile_req.append(0)
    if spec.recompile_us > 0:
        seen: set[int] = set()
        churn = rng.random(nr) < spec.recompile_share
        for r in np.flatnonzero(drifted):
            s = int(shape_idx[r])
            if s in seen and not churn[r]:
                continue
            seen.add(s)
            recompile[r, lowering_slot] = True
            cost = spec.recompile_us * rng.lognormal(0.0, 0.1)
            dur[r, lowering_slot] += cost
            compile_row[r, lowering_slot] = len(compile_reasons)
            compile_reasons.append(
                f"tensor 'x' size mismatch at index 0. expected 8, actual {batch[r]}"
            )
            compile_dur.append(cost)
            compile_req.append(int(r))

    service = dur.sum(axis=1)
    other = rng.uniform(2.0, 6.0, nr)
    arrival = np.cumsum(rng.exponential(spec.mean_gap_us, nr))
    # Lindley: start_i = max(arrival_i, end_{i-1}), in closed form over cumulative service.
    total = service + other
    cum = np.concatenate(([0.0], np.cumsum(total)[:-1]))
    start = np.maximum.accumulate(arrival - cum) + cum
    end = start + total
    wait = start - arrival

    stage_us = np.zeros((nr, len(STAGES)))
    for s in range(len(STAGES)):
        stage_us[:, s] = dur[:, pattern == s].sum(axis=1)
    stage_us[:, 0] += wait

    rid = np.char.add("r", np.arange(nr).astype(str))
    offs = np.cumsum(dur, axis=1) - dur
    ts = start[:, None] + offs
    n_ev = nr * k
    cores = rng.integers(0, 4, (nr, k)).astype(np.int32)
    kernels = np.where(fallback, "aten::mm_generic", np.where(is_exec, "triton_mm_fused", "cpu_op"))
    tiles = np.where(is_exec, "128x128", "")
    fusion = np.where(is_exec, np.arange(nr)[:, None] * 10 + 1, -1).astype(np.int64)
    ev_bytes = np.where(is_exec, batch[:, None] * 128 * 512 * 2.0 * 3, 4096.0)
    ev_flops = np.where(is_exec, 2.0 * batch[:, None] * 128 * 512 * 512, 0.0)
    compile_ids = np.array([f"0/{i}" for i in range(max(len(compile_reasons), 1))])
    cid = np.where(compile_row >= 0, compile_ids[np.maximum(compile_row, 0)], None)
    stage_names = np.array(STAGES)[np.broadcast_to(pattern, (nr, k))]

    events = pa.table(
        {
            "event_id": pa.array(np.arange(n_ev, dtype=np.int64)),
            "request_id": pa.array(np.repeat(rid, k)),
            "stage": pa.array(stage_names.ravel()),
            "category": pa.array(np.where(is_exec, "kernel", "cpu_op").repeat(nr, 0).ravel()),
            "name": pa.array(kernels.ravel()),
            "ts_us": pa.array(ts.ravel()),
            "dur_us": pa.array(dur.ravel()),
            "device": pa.array(np.zeros(n_ev, dtype=np.int32)),
            "core": pa.array(cores.ravel()),
            "stream": pa.array(cores.ravel() % 2),
            "shape": pa.array(np.repeat(shape_key, k)),
            "flops": pa.array(ev_flops.ravel()),
            "bytes": pa.array(ev_bytes.ravel()),
            "kernel": pa.array(kernels.ravel()),
            "tile": pa.array(np.broadcast_to(tiles, (nr, k)).ravel()),
            "fusion_group": pa.array(fusion.ravel()),
            "mem_tier": pa.array(np.where(is_exec, "hbm", "host").repeat(nr, 0).ravel()),
            "fallback": pa.array(fallback.ravel()),
            "recompile": pa.array(recompile.ravel()),
            "compile_id": pa.array(cid.ravel(), type=pa.string()),
        }
    )
    requests = pa.table(
        {
            "request_id": pa.array(rid),
            "name": pa.array(["generate"] * nr),
            "arrival_us": pa.array(arrival),
            "start_us": pa.array(start),
            "end_us": pa.array(end),
            "latency_us": pa.array(end - arrival),
            "batch_id": pa.array(np.arange(nr, dtype=np.int64)),
            "batch_size": pa.array(batch),
            "shape_key": pa.array(shape_key),
            **{f"{s}_us": pa.array(stage_us[:, i]) for i, s in enumerate(STAGES)},
            "other_us": pa.array(other),
            "sla_us": pa.array(np.full(nr, 50_000.0)),
            "ok": pa.array(np.ones(nr, dtype=bool)),
        }
    )
    starts = [float(ts[r, lowering_slot]) for r in compile_req]
    compiles = pa.table(
        {
            "compile_id": pa.array(
                [str(c) for c in compile_ids[: len(compile_reasons)]], pa.string()
            ),
            "start_us": pa.array(starts, pa.float64()),
            "duration_us": pa.array(compile_dur, pa.float64()),
            "recompile_reason": pa.array(compile_reasons, pa.string()),
            "cache_hit": pa.array([False] * len(compile_reasons), pa.bool_()),
        }
    )
    meta = {**DEFAULT_META, **spec.meta}
    imported = datetime(2026, 11, 1, tzinfo=UTC).timestamp() + spec.start_offset_s
    run = pa.table(
        {
            "run_id": [spec.run_id],
            "label": [spec.label or spec.run_id],
            "source_format": ["synthetic"],
            "source_file": [f"{spec.run_id}.json"],
            "source_sha256": ["0" * 64],
            "imported_at": pa.array([int(imported * 1e6)], pa.timestamp("us", tz="UTC")),
            "model": [spec.model],
            "workload": [spec.workload],
            **{key: [value] for key, value in meta.items()},
            "tags": pa.array([list(spec.tags.items())], pa.map_(pa.string(), pa.string())),
            "schema_version": pa.array([1], pa.int32()),
        }
    )
    return layout.RunTables(run=run, events=events, requests=requests, compiles=compiles)


def write_run(store: Path, spec: RunSpec) -> None:
    layout.commit_run(store, build_run(spec), source=f"synthetic:{spec.run_id}")


def incident_store(store: Path, *, hardware_mismatch: bool = False) -> Path:
    """failing (recompiles on drifted shapes) vs comparator (dynamic shapes), plus decoys."""
    write_run(store, RunSpec("comparator", seed=1, drift_share=0.3, start_offset_s=0))
    write_run(
        store,
        RunSpec(
            "failing",
            seed=2,
            drift_share=0.3,
            recompile_us=15_000.0,
            start_offset_s=3600,
            meta={"hardware": "H200-SXM"} if hardware_mismatch else {},
        ),
    )
    write_run(store, RunSpec("old-comparator", seed=3, drift_share=0.3, start_offset_s=-30 * 86400))
    write_run(store, RunSpec("tiny", seed=4, n_requests=12, start_offset_s=1800))
    write_run(store, RunSpec("other-model", seed=5, model="resnet", start_offset_s=600))
    write_run(
        store,
        RunSpec("hot-box", seed=6, drift_share=0.3, meta={"thermal_state": "throttled"}),
    )
    return store
