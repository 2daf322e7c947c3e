"""The tasks of a triage's two lanes (see triage._triage): each loads, replays or queries one
part of the pair; the lane that runs them and the order are triage's."""

from __future__ import annotations

import math
import threading
from concurrent.futures import Future
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from accel.cost import OpCost
from accel.localize import Replayed, SwapInputs, comparator_shares, prepare_swaps, replayed
from accel.localize.matching import PlacementShares
from accel.ops import RunArrays
from accel.primary_metric import primary_metric
from accel.profiles import HardwareProfile
from workbench.store import db
from workbench.store.arrays import (
    CompileRows,
    compiled_shapes,
    has_op_table,
    load_run_arrays,
)
from workbench.triage import evidence, graph_break
from workbench.triage.context import RunContext
from workbench.triage.evidence import EvidenceTable, StageRow
from workbench.triage.warmup import Warmup, warmup_of


def load_steady(con: duckdb.DuckDBPyConnection, run: RunContext, warm: Warmup) -> RunArrays:
    """The run's steady state (warm-up requests left out); ops without per-op text lists,
    which nothing in a triage reads (their codes do), saving ~0.3 s and 80 MB per 5M ops."""
    arrays = load_run_arrays(
        con,
        run.run_id,
        skip_requests=warm.affected_requests,
        texts=False,
        shapes=warm.compiled_shapes,
        table_ok=run.table_ok,
    )
    return graph_break.with_regions(con, arrays)


def release_duckdb_memory(con: duckdb.DuckDBPyConnection) -> None:
    """Make duckdb hand back the memory it keeps after big scans (none of it reported by
    duckdb_memory()): lowering the limit frees it, then the default limit comes back. Only
    while no other cursor runs a query."""
    con.execute("SET memory_limit = '64MB'")
    con.execute("RESET memory_limit")


def shape_buckets(
    con: duckdb.DuckDBPyConnection, failing: str, fetched: Future[CompileRows]
) -> tuple[dict[str, Any], pa.Table]:
    """The failing run's shape buckets (seen at compile time or not) and their parameters."""
    # Run here, not after the failing run's load: as the worker's first tasks this staggers
    # the two lanes (queued behind the comparator instead, the comparator's replay meets the
    # failing run's op_times and a 10M-event triage takes 0.2-0.3 s longer).
    shapes = compiled_shapes(con, failing, fetched.result())
    params = {"run_id": failing, "compiled_shapes": sorted(shapes)}
    return params, db.query(con, "shape_buckets", params)


def comparator_lane(
    con: duckdb.DuckDBPyConnection,
    comparator: RunContext,
    hw: HardwareProfile,
    metric_done: threading.Event,
) -> tuple[Warmup, RunArrays, Replayed]:
    """The comparator's warm-up, steady state and replay."""
    warm_c = warmup_of(con, comparator.run_id)
    if not has_op_table(con, comparator.run_id):
        # Decoded from its Parquet into fresh memory: not beside the failing run's primary
        # metric, or the two would pass 2 GB on 10M events.
        metric_done.wait()
    steady_c = load_steady(con, comparator, warm_c)
    return warm_c, steady_c, replayed(steady_c, hw)


def placement_shares(
    lane: Future[tuple[Warmup, RunArrays, Replayed]],
) -> PlacementShares | None:
    """The comparator's half of the placement swap (~70 ms on 5M ops), made while the worker
    waits for the primary metric instead of in the localization, which would wait for it."""
    return comparator_shares(lane.result()[1].ops)


def swap_inputs_lane(
    metric_done: threading.Event,
    steady_f: RunArrays,
    lane: Future[tuple[Warmup, RunArrays, Replayed]],
    shares: Future[PlacementShares | None],
) -> SwapInputs:
    """prepare_swaps of the pair, once the failing run's primary metric is done: its temporaries
    and the swap inputs side by side would pass 2 GB on 10M events."""
    metric_done.wait()
    return prepare_swaps(steady_f, lane.result()[1], shares.result())


def evidence_lane(
    con: duckdb.DuckDBPyConnection,
    duck: threading.Lock,
    failing: str,
    comparator: str,
    warm_f: Warmup,
    fetched: CompileRows,
    lane: Future[tuple[Warmup, RunArrays, Replayed]],
    release: bool,
) -> tuple[dict[str, EvidenceTable], list[StageRow], StageRow, evidence.ShapeDrift]:
    """The evidence tables, stage rows (steady and end-to-end with warm-up) and shape drift;
    duckdb's cache is released afterwards when `release`."""
    skip_f, skip_c = warm_f.affected_requests, lane.result()[0].affected_requests
    tables = evidence.pair_tables(
        con,
        failing,
        comparator,
        names=evidence.TRIAGE_QUERIES,
        skip_failing=skip_f,
        skip_comparator=skip_c,
        given=(EvidenceTable("compile_phases", fetched.params, fetched.phases),),
    )
    samples = evidence.stage_samples(con, failing, comparator)
    tables["stage_samples"] = samples
    stages = evidence.stage_rows(samples.table, skip_failing=skip_f, skip_comparator=skip_c)
    with_warmup = evidence.stage_rows(samples.table, stages=("latency",))[0]
    drift = evidence.drift_of(tables["shape_drift"])
    if release:  # needs no query running: the other thread's run under the same lock
        with duck:
            release_duckdb_memory(con)
    return tables, stages, with_warmup, drift


def metric_rows(
    role: str, run: RunArrays, warm: Warmup, hw: HardwareProfile, op_cost: OpCost | None = None
) -> list[dict[str, Any]]:
    """The primary metric of one run, one flat row per shape bucket (seen / drifted)."""
    # The compile log's steady recompiles price a new shape; without them primary_metric uses
    # the run's own recompile events, or reports the gain gross.
    cost = float(np.median([c.duration_us for c in warm.steady])) if warm.steady else None
    pm = primary_metric(run, hw, compile_us=cost, op_cost=op_cost)
    rows = []
    for b in pm.buckets.values():
        static99 = b.static_us.get("p99", math.nan)
        gain99 = b.gain_us.get("p99", math.nan)
        rows.append(
            {
                "role": role,
                "run_id": run.run_id,
                "bucket": b.bucket,
                "n_requests": b.n_requests,
                "n_ops": b.n_ops,
                "estimate_share": b.estimate_share,
                "mape": b.mape_pct,
                "spearman": b.spearman,
                "regret_pct": b.regret_pct,
                "fallback_share": b.fallback_share,
                "fallback_regret_pct": b.fallback_regret_pct,
                "observed_plan": b.observed_plan,
                **{f"static_{k}_us": v for k, v in b.static_us.items()},
                **{f"adapted_{k}_us": v for k, v in b.adapted_us.items()},
                **{f"gain_{k}_us": v for k, v in b.gain_us.items()},
                "gain_p99": gain99 / static99 * 100 if static99 > 0 else math.nan,
                "recompile_us": b.recompile_us,
                "net_of_compile": b.net_of_compile,
                "compile_us": pm.compile_us,
            }
        )
    return rows
