"""Evidence, tail first: the named queries over a failing / comparator pair, with n and CIs."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import duckdb
import numpy as np
import pyarrow as pa

from accel import stats
from accel.cluster_bootstrap import cluster_quantile_diffs, cluster_quantile_intervals
from accel.profiles import HardwareProfile
from accel.stages import OTHER, STAGES
from workbench.store import db
from workbench.store.arrays import WARMUP_NAME
from workbench.triage.pairing import LOCKED_TAGS

Progress = Callable[[str, float], None]

QUANTILES: Final[dict[str, float]] = {"p50": 0.50, "p95": 0.95, "p99": 0.99}
STAGE_ROWS: Final[tuple[str, ...]] = ("latency", *STAGES, OTHER)
TAIL_Q: Final[float] = 0.95  # tail set for driver shares: enough requests even in short runs
# Resamples per bootstrap call at any n: stats draws each resample's quantile from its exact
# order-statistic distribution, so a call costs one sort of the sample plus O(N_BOOT).
N_BOOT: Final[int] = 2000
# What the headless triage needs for its claims; the app's evidence screens ask for all of them.
TRIAGE_QUERIES: Final[tuple[str, ...]] = (
    "stage_quantiles",
    "tail_drivers",
    "fallback_recompile_rates",
    "compile_phases",
    "shape_drift",
    "tag_diff",
)


@dataclass(frozen=True)
class Interval:
    value: float
    lo: float
    hi: float

    def to_json(self) -> dict[str, float | None]:
        return {"value": _num(self.value), "lo": _num(self.lo), "hi": _num(self.hi)}


@dataclass(frozen=True)
class StageRow:
    """One stage (or end-to-end 'latency'): both runs' quantiles with CIs and the difference."""

    stage: str
    n_failing: int
    n_comparator: int
    failing: dict[str, Interval]
    comparator: dict[str, Interval]
    diff: dict[str, Interval]  # failing - comparator, percentile bootstrap

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.stage,
            "n_failing": self.n_failing,
            "n_comparator": self.n_comparator,
            "failing": {k: v.to_json() for k, v in self.failing.items()},
            "comparator": {k: v.to_json() for k, v in self.comparator.items()},
            "diff": {k: v.to_json() for k, v in self.diff.items()},
        }


@dataclass(frozen=True)
class EvidenceTable:
    """A query's result with what it took to produce it: the proving artifact of a claim."""

    query: str
    parameters: dict[str, Any]
    table: pa.Table

    def rows(self) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = self.table.to_pylist()
        return rows


@dataclass(frozen=True)
class ShapeDrift:
    psi: float  # over all shape buckets
    buckets: list[dict[str, Any]] = field(default_factory=list)  # + per-bucket 'psi'


def _num(x: float) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


def run(con: duckdb.DuckDBPyConnection, name: str, params: dict[str, Any]) -> EvidenceTable:
    """Run queries/<name>.sql and keep its parameters next to the result."""
    return EvidenceTable(name, dict(params), db.query(con, name, params))


def quantile_ci(x: np.ndarray, q: float, alpha: float = 0.05) -> Interval:
    """Distribution-free interval for a quantile: the order statistics whose ranks bound the
    binomial count below it (Wilson score interval on q), interpolated like the estimate."""
    n = int(np.count_nonzero(~np.isnan(x)))
    if n == 0:
        return Interval(math.nan, math.nan, math.nan)
    _, lo_q, hi_q = stats.wilson_interval(round(q * n), n, alpha)
    values = stats.quantile(x, [q, lo_q, hi_q])
    assert isinstance(values, np.ndarray)
    return Interval(float(values[0]), float(values[1]), float(values[2]))


def stage_samples(con: duckdb.DuckDBPyConnection, failing: str, comparator: str) -> EvidenceTable:
    return run(con, "stage_samples", {"failing": failing, "comparator": comparator})


def stage_rows(
    samples: pa.Table,
    *,
    skip_failing: Sequence[str] = (),
    skip_comparator: Sequence[str] = (),
    stages: Sequence[str] = STAGE_ROWS,
    seed: int = 0,
    groups: Sequence[str] | None = None,
) -> list[StageRow]:
    """Quantiles with CIs per stage from the stage_samples table (each run's skipped requests,
    e.g. its warm-up, left out). With `groups` (a label per row, e.g. the request of a token)
    the intervals come from a bootstrap over whole groups, not over rows."""
    roles = np.asarray(samples.column("role").to_pylist(), dtype=object)
    keep = np.ones(samples.num_rows, dtype=bool)
    if skip_failing or skip_comparator:
        skip = {("failing", r) for r in skip_failing} | {("comparator", r) for r in skip_comparator}
        ids = samples.column("request_id").to_pylist()
        keep = np.array([(role, r) not in skip for role, r in zip(roles, ids, strict=True)])
    fail_mask = (roles == "failing") & keep
    comp_mask = (roles == "comparator") & keep
    labels = None if groups is None else np.asarray(groups, dtype=object)
    out: list[StageRow] = []
    for stage in stages:
        col = "latency_us" if stage == "latency" else f"{stage}_us"
        values = np.asarray(samples.column(col).to_numpy(zero_copy_only=False), dtype=np.float64)
        f, c = values[fail_mask], values[comp_mask]
        constant = f.size and c.size and np.ptp(f) == 0 and np.ptp(c) == 0
        if labels is not None and not constant:
            out.append(_cluster_row(stage, f, labels[fail_mask], c, labels[comp_mask], seed))
            continue
        diff: dict[str, Interval] = {}
        for key, q in QUANTILES.items():
            if constant:  # every resample is the sample itself: no need to draw them
                d = float(f[0] - c[0])
                diff[key] = Interval(d, d, d)
                continue
            d, lo, hi = stats.bootstrap_quantile_diff(f, c, q, n_boot=N_BOOT, seed=seed)
            diff[key] = Interval(d, lo, hi)
        out.append(
            StageRow(
                stage=stage,
                n_failing=int(np.count_nonzero(~np.isnan(f))),
                n_comparator=int(np.count_nonzero(~np.isnan(c))),
                failing={k: quantile_ci(f, q) for k, q in QUANTILES.items()},
                comparator={k: quantile_ci(c, q) for k, q in QUANTILES.items()},
                diff=diff,
            )
        )
    return out


def _cluster_row(
    stage: str, f: np.ndarray, gf: np.ndarray, c: np.ndarray, gc: np.ndarray, seed: int
) -> StageRow:
    """One StageRow whose intervals (each run's and the gap's) resample whole groups."""
    qs = list(QUANTILES.values())

    def run(x: np.ndarray, g: np.ndarray) -> dict[str, Interval]:
        got = cluster_quantile_intervals(x, g, qs, n_boot=N_BOOT, seed=seed)
        return {k: Interval(*v) for k, v in zip(QUANTILES, got, strict=True)}

    gaps = cluster_quantile_diffs(f, gf, c, gc, qs, n_boot=N_BOOT, seed=seed)
    return StageRow(
        stage=stage,
        n_failing=int(np.count_nonzero(~np.isnan(f))),
        n_comparator=int(np.count_nonzero(~np.isnan(c))),
        failing=run(f, gf),
        comparator=run(c, gc),
        diff={k: Interval(*v) for k, v in zip(QUANTILES, gaps, strict=True)},
    )


def shape_drift(con: duckdb.DuckDBPyConnection, failing: str, comparator: str) -> ShapeDrift:
    """Population stability index of the shape mix, overall and per bucket (bucket vs rest)."""
    return drift_of(run(con, "shape_drift", {"failing": failing, "comparator": comparator}))


def drift_of(t: EvidenceTable) -> ShapeDrift:
    """shape_drift from the shape_drift query's table (of the same pair)."""
    rows = t.rows()
    nf = np.array([r["n_failing"] for r in rows], dtype=np.float64)
    nc = np.array([r["n_comparator"] for r in rows], dtype=np.float64)
    total = stats.psi(nc, nf) if rows else math.nan
    tf, tc = nf.sum(), nc.sum()
    buckets = [
        {**r, "psi": _num(stats.psi([c, tc - c], [f, tf - f]))}
        for r, f, c in zip(rows, nf, nc, strict=True)
    ]
    return ShapeDrift(psi=total, buckets=buckets)


def pair_tables(
    con: duckdb.DuckDBPyConnection,
    failing: str,
    comparator: str,
    *,
    skip_failing: Sequence[str] = (),
    skip_comparator: Sequence[str] = (),
    bucket_us: float | None = None,
    names: Sequence[str] | None = None,
    progress: Progress | None = None,
    given: Sequence[EvidenceTable] = (),
) -> dict[str, EvidenceTable]:
    """The pairwise evidence queries of DESIGN §6 (or those in `names`), by query name;
    `given`: tables of these queries the caller ran already with the same parameters."""
    pair = {"failing": failing, "comparator": comparator}
    skips = {"skip_failing": list(skip_failing), "skip_comparator": list(skip_comparator)}
    if bucket_us is None and (names is None or "queue_wait_profile" in names):
        bucket_us = _default_bucket(con, failing)
    specs: list[tuple[str, dict[str, Any]]] = [
        ("stage_quantiles", {**pair, **skips}),
        ("tail_drivers", {**pair, "tail_q": TAIL_Q, **skips}),
        ("queue_wait_profile", {**pair, "bucket_us": bucket_us}),
        ("batch_impact", pair),
        ("core_fairness", pair),
        ("fusion_effect", pair),
        ("fallback_recompile_rates", pair),
        ("compile_phases", {"run_id": failing, "warmup_name": WARMUP_NAME}),
        ("shape_drift", pair),
        ("tag_diff", {"failing": failing, "others": [comparator], "locked": list(LOCKED_TAGS)}),
    ]
    if names is not None:
        specs = [(n, p) for n, p in specs if n in names]
    have = {t.query: t for t in given}
    out: dict[str, EvidenceTable] = {}
    for i, (name, params) in enumerate(specs):
        if progress:
            progress(f"query {name}", i / len(specs))
        known = have.get(name)
        if known is not None and known.parameters != params:
            raise ValueError(f"{name} was given with {known.parameters}, expected {params}")
        out[name] = known or run(con, name, params)
    return out


def _default_bucket(con: duckdb.DuckDBPyConnection, run_id: str) -> float:
    """About 20 time buckets over the run."""
    t = db.query(con, "run_requests", {"run_id": run_id, "skip_requests": []})
    arr = np.asarray(t.column("arrival_us").to_numpy(zero_copy_only=False), dtype=np.float64)
    arr = arr[~np.isnan(arr)]
    span = float(arr.max() - arr.min()) if arr.size > 1 else 0.0
    return max(span / 20.0, 1.0)


def bandwidth_lens(
    con: duckdb.DuckDBPyConnection,
    run_ids: Sequence[str],
    hw: HardwareProfile,
    *,
    saturation_util: float = 0.8,
    unstable_ratio: float = 1.5,
    pressure_growth: float = 1.25,
) -> EvidenceTable:
    """Working-set pressure and bandwidth use of runs in tuning order, each placed in a zone."""
    return run(
        con,
        "bandwidth_lens",
        {
            "run_ids": list(run_ids),
            "onchip_bytes": float(hw.onchip_bytes),
            "hbm_bytes_per_s": float(hw.hbm_bw),
            "saturation_util": saturation_util,
            "unstable_ratio": unstable_ratio,
            "pressure_growth": pressure_growth,
        },
    )
