"""The facade's polars frames, built from what the CLI prints: the runs list, a triage's
per-stage tail, its tail drivers and its proof (claims with their proving artifacts)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Final

import polars as pl
import pyarrow as pa

from workbench.store.runs import RunSummary

# Tail first: every frame that holds quantiles lists p99 before p95 before p50.
TAIL_FIRST: Final[tuple[str, ...]] = ("p99", "p95", "p50")
# Frame column prefix -> the StageRow JSON key it is read from.
SIDES: Final[tuple[tuple[str, str], ...]] = (
    ("failing", "failing"),
    ("comparator", "comparator"),
    ("gap", "diff"),
)
TAGS: Final = pl.List(pl.Struct({"key": pl.String, "value": pl.String}))
RUNS_SCHEMA: Final[dict[str, Any]] = {
    "run_id": pl.String,
    "label": pl.String,
    "n_requests": pl.Int64,
    "p99_us": pl.Float64,
    "p95_us": pl.Float64,
    "p50_us": pl.Float64,
    "hardware": pl.String,
    "model": pl.String,
    "workload": pl.String,
    "compiler": pl.String,
    "compiler_version": pl.String,
    "runtime": pl.String,
    "runtime_version": pl.String,
    "driver_version": pl.String,
    "thermal_state": pl.String,
    "tags": TAGS,
    "imported_at": pl.Datetime("us", "UTC"),
    # LLM serving (null for other runs): TTFT over requests, ITL over n_tokens gaps.
    "ttft_p99_us": pl.Float64,
    "ttft_p95_us": pl.Float64,
    "ttft_p50_us": pl.Float64,
    "n_tokens": pl.Int64,
    "itl_p99_us": pl.Float64,
    "itl_p95_us": pl.Float64,
    "itl_p50_us": pl.Float64,
}
STAGES_SCHEMA: Final[dict[str, Any]] = {
    "stage": pl.String,
    "quantile": pl.String,
    "n_failing": pl.Int64,
    "n_comparator": pl.Int64,
    **{f"{side}{part}_us": pl.Float64 for side, _ in SIDES for part in ("", "_lo", "_hi")},
}
PROOF_SCHEMA: Final[dict[str, Any]] = {
    "claim": pl.String,
    "query": pl.String,
    "parameters": pl.String,  # JSON text: the query's named parameters
    "numbers": pl.String,  # JSON text: the figures the claim states, with their n
    "evidence_rows": pl.Int64,  # rows the evidence query returned (null: a replay step)
}


def runs_frame(runs: Sequence[RunSummary]) -> pl.DataFrame:
    """One row per committed run (list_runs, oldest import first); tags as key/value pairs."""
    rows = [
        {
            **{k: getattr(r, k) for k in RUNS_SCHEMA if k != "tags"},
            "tags": [{"key": k, "value": v} for k, v in sorted(r.tags.items())],
        }
        for r in runs
    ]
    return pl.DataFrame(rows, schema=RUNS_SCHEMA)


def stages_frame(doc: dict[str, Any]) -> pl.DataFrame:
    """Per stage (latency first, then pipeline order, then other) and quantile, tail first:
    both runs' quantiles with intervals and the failing - comparator gap with its interval."""
    rows: list[dict[str, Any]] = []
    for s in doc.get("stages") or []:
        for q in TAIL_FIRST:
            row: dict[str, Any] = {
                "stage": s["id"],
                "quantile": q,
                "n_failing": s["n_failing"],
                "n_comparator": s["n_comparator"],
            }
            for side, key in SIDES:
                iv = (s.get(key) or {}).get(q) or {}
                row[f"{side}_us"], row[f"{side}_lo_us"] = iv.get("value"), iv.get("lo")
                row[f"{side}_hi_us"] = iv.get("hi")
            rows.append(row)
    return pl.DataFrame(rows, schema=STAGES_SCHEMA)


def table_frame(table: pa.Table) -> pl.DataFrame:
    """An evidence query's Arrow result as polars, NaN as null (as the JSON document has it)."""
    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    floats = [c for c, t in frame.schema.items() if t.is_float()]
    return frame.with_columns(pl.col(floats).fill_nan(None)) if floats else frame


def proof_frame(doc: dict[str, Any]) -> pl.DataFrame:
    """One row per claim, in the triage's order: its text, the query (or replay step) that
    proves it, that query's parameters and the claim's numbers (JSON text)."""
    counts = {name: q.get("rows") for name, q in (doc.get("evidence_queries") or {}).items()}
    rows = [
        {
            "claim": c["text"],
            "query": c["query"],
            "parameters": json.dumps(c["parameters"], sort_keys=True, allow_nan=False),
            "numbers": json.dumps(c["numbers"], sort_keys=True, allow_nan=False),
            "evidence_rows": counts.get(c["query"]),
        }
        for c in doc.get("claims") or []
    ]
    return pl.DataFrame(rows, schema=PROOF_SCHEMA)
