"""Warm-up is not a regression: the one-time first compilation, apart from steady recompiles."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import duckdb
import numpy as np

from workbench.store import db
from workbench.store.arrays import CompileRows, compile_rows, compiled_shape_keys


@dataclass(frozen=True)
class CompileRecord:
    compile_id: str
    start_us: float
    duration_us: float
    phase: str  # 'warmup' | 'steady'
    recompile_reason: str | None
    fail_reason: str | None
    request_id: str | None
    shape_key: str | None


@dataclass(frozen=True)
class Warmup:
    """The compiles of one run split by phase, and the requests the warm-up delayed."""

    run_id: str
    warmup: list[CompileRecord] = field(default_factory=list)
    steady: list[CompileRecord] = field(default_factory=list)
    # warm-up requests (by name or because they paid a warm-up compile), plus those queued
    # behind them in the same busy period up to the first steady recompile: they waited only
    # because the service was warming up
    affected_requests: list[str] = field(default_factory=list)
    # arrays.compiled_shapes of the run, from the same rows
    compiled_shapes: frozenset[str] = frozenset()

    @property
    def warmup_us(self) -> float:
        return float(sum(c.duration_us for c in self.warmup))

    @property
    def steady_us(self) -> float:
        return float(sum(c.duration_us for c in self.steady))

    def reasons(self) -> list[dict[str, Any]]:
        """Steady-state recompiles grouped by reason, costliest first."""
        groups: dict[str, list[CompileRecord]] = {}
        for c in self.steady:
            key = c.recompile_reason or c.fail_reason or "(no reason logged)"
            groups.setdefault(key, []).append(c)
        out = [
            {
                "reason": reason,
                "n": len(recs),
                "total_us": float(sum(c.duration_us for c in recs)),
                "max_us": float(max(c.duration_us for c in recs)),
                "shape_keys": sorted({c.shape_key for c in recs if c.shape_key}),
                "compile_ids": [c.compile_id for c in recs],
            }
            for reason, recs in groups.items()
        ]
        return sorted(out, key=lambda g: (-g["total_us"], g["reason"]))


def _busy_period_end(
    arrival: np.ndarray, start: np.ndarray, stops: np.ndarray, first: int, tol_us: float
) -> int:
    """Index one past the last request of the busy period that begins at request `first`,
    cut short at the first request that pays a steady recompile (its backlog is not warm-up)."""
    waited = (start[first + 1 :] - arrival[first + 1 :] > tol_us) & ~stops[first + 1 :]
    idle = np.flatnonzero(~waited)
    return first + 1 + (int(idle[0]) if idle.size else int(waited.size))


def warmup_of(
    con: duckdb.DuckDBPyConnection,
    run_id: str,
    *,
    tol_us: float = 1.0,
    fetched: CompileRows | None = None,
) -> Warmup:
    """Split run_id's compiles into warm-up and steady state (queries/compile_phases.sql);
    `fetched`: compile_rows(con, run_id) when the caller has them."""
    fetched = fetched or compile_rows(con, run_id)
    rows = fetched.phases.to_pylist()
    records = [
        CompileRecord(
            compile_id=str(r["compile_id"]),
            start_us=float(r["start_us"] or 0.0),
            duration_us=float(r["duration_us"] or 0.0),
            phase=str(r["phase"]),
            recompile_reason=r["recompile_reason"],
            fail_reason=r["fail_reason"],
            request_id=r["request_id"],
            shape_key=r["shape_key"],
        )
        for r in rows
    ]
    warm = [c for c in records if c.phase == "warmup"]
    steady = [c for c in records if c.phase == "steady"]
    named = fetched.named.to_pylist()
    seeds = {c.request_id for c in warm if c.request_id} | {r["request_id"] for r in named}
    shapes = compiled_shape_keys(rows, named)
    if not seeds:
        return Warmup(run_id, warm, steady, [], shapes)
    req = db.query(con, "run_requests", {"run_id": run_id, "skip_requests": []})
    ids = [str(x) for x in req.column("request_id").to_pylist()]
    arrival = np.asarray(req.column("arrival_us").to_numpy(zero_copy_only=False), dtype=np.float64)
    start = np.asarray(req.column("start_us").to_numpy(zero_copy_only=False), dtype=np.float64)
    latency = np.asarray(req.column("latency_us").to_numpy(zero_copy_only=False), np.float64)
    # A wait a trace annotates holds the hand-over's own microseconds even at an idle server:
    # only a wait of a twentieth of a typical service is a backlog.
    service = arrival + latency - start
    typical = float(np.nanmedian(service)) if np.isfinite(service).any() else 0.0
    tol_us = max(tol_us, 0.05 * typical)
    payers = {c.request_id for c in steady}
    stops = np.array([r in payers for r in ids], dtype=bool)
    affected: set[str] = set()
    for i, rid in enumerate(ids):
        if rid in seeds:
            affected.update(ids[i : _busy_period_end(arrival, start, stops, i, tol_us)])
    return Warmup(run_id, warm, steady, [r for r in ids if r in affected], shapes)
