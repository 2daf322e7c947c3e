"""Store tables from accel.synth runs: the column dicts of a SynthRun as one layout.RunTables."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa

from accel.synth import SynthRun
from workbench.errors import WorkbenchError
from workbench.store import layout, schema


def _column(values: object, field: pa.Field) -> pa.Array:
    if isinstance(values, np.ndarray):
        if values.dtype.kind == "f":
            # NaN means "unknown" in accel; the store says so with a null.
            return pa.array(values, type=field.type, from_pandas=True)
        return pa.array(values, type=field.type)
    return pa.array(values, type=field.type)


def _table(cols: dict[str, object], file_schema: pa.Schema) -> pa.Table:
    """A table with the columns of `file_schema` that `cols` holds, in schema order."""
    arrays, fields = [], []
    for field in file_schema:
        if field.name in cols:
            arrays.append(_column(cols[field.name], field))
            fields.append(field)
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def run_tables(
    synth: SynthRun,
    *,
    run_id: str,
    imported_at: datetime,
    label: str | None = None,
    overrides: dict[str, object] | None = None,
    tags: dict[str, str] | None = None,
) -> layout.RunTables:
    """The four store tables of a generated run, under `run_id` (metadata may be overridden)."""
    return columns_tables(
        synth.run,
        synth.events,
        synth.requests,
        synth.compiles,
        run_id=run_id,
        imported_at=imported_at,
        label=label,
        overrides=overrides,
        tags=tags,
    )


def columns_tables(
    run_row: dict[str, object],
    events: Mapping[str, object],
    requests: Mapping[str, object],
    compiles: Mapping[str, object],
    *,
    run_id: str,
    imported_at: datetime,
    label: str | None = None,
    overrides: dict[str, object] | None = None,
    tags: dict[str, str] | None = None,
) -> layout.RunTables:
    """The four store tables from a runs row and column dicts of any generator."""
    layout.check_run_id(run_id)
    row: dict[str, object] = dict(run_row)
    row.update(overrides or {})
    row["run_id"] = run_id
    row["label"] = label or run_id
    row["imported_at"] = imported_at
    row["schema_version"] = schema.SCHEMA_VERSION
    row["tags"] = sorted((tags or {}).items())
    run = pa.Table.from_pylist([{f.name: row.get(f.name) for f in schema.RUNS}], schema=schema.RUNS)
    return layout.RunTables(
        run=run,
        events=_table(dict(events), schema.EVENTS_FILE),
        requests=_table(dict(requests), schema.REQUESTS_FILE),
        compiles=_table(dict(compiles), schema.COMPILES_FILE),
    )


# --- the bundled sample store: one incident whose cause is known --------------------------------

SAMPLE_SEED = 20261129
SAMPLE_REQUESTS = 240
# The comparator and the rollback candidate are longer windows: a rollback passes only when
# each guardrail's interval lies inside its tolerance (equivalence), and at 240 requests a side
# the throughput interval alone is about four times the 5% tolerance.
VALIDATION_REQUESTS = 6000
SAMPLE_IMPORTED_AT = datetime(2026, 11, 29, 9, 0, tzinfo=UTC)

# Shared tags of the production canary: failing and comparator differ only in compiler_version.
_SAMPLE_META: dict[str, str] = {
    "model": "chat-lm-2l-2048",
    "workload": "chat-serving",
    "compiler": "torch-inductor",
    "runtime": "serve-rt",
    "runtime_version": "3.2.1",
    "hardware": "NVIDIA H100-SXM5-80GB",
    "driver_version": "550.54.15",
    "thermal_state": "nominal",
    "host": "canary-03",
}


@dataclass(frozen=True)
class SampleRun:
    run_id: str
    label: str
    compiler_version: str
    aggressive_fusion: bool
    production_shapes: bool
    seed_offset: int
    minutes: int  # imported_at offset from SAMPLE_IMPORTED_AT
    requests: int = SAMPLE_REQUESTS


SAMPLE_RUNS: tuple[SampleRun, ...] = (
    SampleRun(
        "comparator",
        "canary before the compiler upgrade (2.4.0)",
        "2.4.0",
        False,
        True,
        1,
        0,
        VALIDATION_REQUESTS,
    ),
    SampleRun("failing", "canary after the compiler upgrade (2.5.0)", "2.5.0", True, True, 2, 60),
    SampleRun(
        "fixed-metadata",
        "failing config re-run with every tag pinned (reproduction)",
        "2.5.0",
        True,
        True,
        3,
        95,
    ),
    SampleRun(
        "candidate-rollback",
        "fix candidate: compiler 2.5.1 with the 2.4 fusion limit, production-like shapes",
        "2.5.1",
        False,
        True,
        4,
        130,
        VALIDATION_REQUESTS,
    ),
    SampleRun(
        "candidate-synthetic",
        "same fix candidate measured on synthetic short shapes production never sent",
        "2.5.1",
        False,
        False,
        5,
        140,
    ),
)


SAMPLE_FUSION_BUFFERING = 3.0  # the 2.5.0 fused template's on-chip buffers per intermediate


def sample_synth_runs() -> list[tuple[SampleRun, SynthRun]]:
    """The sample incident's runs as generated (with their truth), deterministic."""
    from accel.profiles import get_profile
    from accel.synth import TRUTH_TABLE, Plan, Truth, Workload, draw_reality, generate_run

    hw = get_profile("h100")
    reality = draw_reality(np.random.default_rng(SAMPLE_SEED))
    production = Workload(n_requests=SAMPLE_REQUESTS)
    # Shapes the production stream never sends: short prompts only.
    synthetic = replace(production, seq_buckets=(32, 48, 96), seq_probs=(0.4, 0.4, 0.2))
    base = Plan()
    burst = replace(base, fusion="aggressive", fusion_buffering=SAMPLE_FUSION_BUFFERING)
    origin, manifest, mechanism = TRUTH_TABLE["fusion_memory_burst"]
    truth = Truth(
        "fusion_memory_burst",
        origin,
        manifest,
        mechanism,
        {"fusion_buffering": SAMPLE_FUSION_BUFFERING},
    )
    gap: float | None = None
    out = []
    for spec in SAMPLE_RUNS:
        synth = generate_run(
            hw,
            replace(production if spec.production_shapes else synthetic, n_requests=spec.requests),
            burst if spec.aggressive_fusion else base,
            reality,
            seed=SAMPLE_SEED + spec.seed_offset,
            run_id=spec.run_id,
            mean_gap_us=gap,
            truth=truth if spec.aggressive_fusion else None,
            meta={**_SAMPLE_META, "compiler_version": spec.compiler_version},
        )
        if gap is None:  # every run sees the comparator's arrival rate
            gap = synth.mean_gap_us
        out.append((spec, synth))
    return out


def sample_runs() -> list[layout.RunTables]:
    """The sample incident's runs as store tables."""
    out = []
    for spec, synth in sample_synth_runs():
        tags = {
            "canary": "true",
            "region": "us-east-2",
            "traffic": "production-mirror" if spec.production_shapes else "synthetic-load",
        }
        out.append(
            run_tables(
                synth,
                run_id=spec.run_id,
                label=spec.label,
                imported_at=SAMPLE_IMPORTED_AT + timedelta(minutes=spec.minutes),
                overrides={"source_file": f"sample:{spec.run_id}"},
                tags=tags,
            )
        )
    return out


def write_sample_store(out: Path) -> list[str]:
    """Write the sample store into `out` (which must not exist or be empty), all-or-nothing."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise WorkbenchError(str(out), "exists and is not an empty directory; choose a new --out")
    parent = out.resolve().parent
    if not parent.is_dir():
        raise WorkbenchError(str(out), f"parent directory {parent} does not exist")
    from workbench.sample.llm import write_llm_runs

    tmp = parent / f".{out.name}.sample-{uuid.uuid4().hex[:8]}"
    try:
        ids = []
        for tables in sample_runs():
            layout.commit_run(tmp, tables, source=f"sample run {tables.run_id}")
            ids.append(tables.run_id)
        ids += write_llm_runs(tmp, SAMPLE_IMPORTED_AT + timedelta(minutes=180))
        (tmp / "README.md").write_text(sample_readme(), encoding="utf-8")
        (tmp / "roster.toml").write_text(SAMPLE_ROSTER, encoding="utf-8")
        if out.exists():
            out.rmdir()
        os.rename(tmp, out)
    except OSError as exc:
        raise WorkbenchError(str(out), f"cannot write the sample store: {exc.strerror}") from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return ids


# The sample team, so that owners can be assigned on the sample incident without setup; the
# format is workbench/incident/roster.default.toml's (STORE/roster.toml is read by `assign`).
SAMPLE_ROSTER = """# Owner roster of the sample store: role -> people, first proposed first.

[roles."compiler lead"]
artifact = "design rationale and trade-offs"
people = ["ana.compiler", "li.codegen"]

[roles."runtime lead"]
artifact = "profile traces and bottleneck map"
people = ["raj.runtime", "mo.kernels"]

[roles."observability engineer"]
artifact = "test report and closure memo"
people = ["eve.observability"]

[roles."model serving architect"]
artifact = "SLA and batch policy impact"
people = ["sam.serving"]
"""


def sample_readme() -> str:
    """README.md of the sample store: the incidents, their known causes, the runs, regeneration."""
    from workbench.sample.llm import llm_runs

    rows = "\n".join(f"| `{r.run_id}` | {r.compiler_version} | {r.label} |" for r in SAMPLE_RUNS)
    llm_rows = "\n".join(
        f"| `{rid}` | {tags['kv_blocks']} | {label} |" for rid, _, label, tags in llm_runs()
    )
    return f"""# Sample store: two incidents with known causes

Store schema v{schema.SCHEMA_VERSION}: `runs/`, `events/`, `requests/`, `compiles/`, `tokens/`
(DESIGN §4).

## 1. A fusion memory burst after a compiler upgrade (synthetic)

Generated by `accel.synth` on the H100 profile (seed {SAMPLE_SEED}, {SAMPLE_REQUESTS} requests
per run, {VALIDATION_REQUESTS:,} for `comparator` and `candidate-rollback`: a rollback passes only
when each guardrail's interval lies inside its tolerance, which takes a longer window); the cause
is known because it was injected.

Upgrading the serving compiler from 2.4.0 to 2.5.0 made lowering fuse every op of a layer into
one kernel (2.4.0 fused only the MLP epilogue). Launches drop by three quarters, but on long
prompts the fused kernel's working set no longer fits on chip: it spills to HBM, the kernels
move more bytes and the p95/p99 latency regresses; the median barely moves. Queueing then
amplifies the slower batches into the ingress stage.

- origin stage: `lowering` (the fusion decision) - owner role: compiler lead
- manifest stage: `execution` (where the time shows up)
- mechanism: `fusion_memory_burst`

Nothing inside the runs names the cause: the compiler version differs between `failing` and
`comparator`, every other tag (hardware, driver, runtime, thermal state, host) is the same.

| run id | compiler | what it is |
|---|---|---|
{rows}

`candidate-rollback` should pass validation on production-like shapes; `candidate-synthetic`
is the same fix measured on short prompts production never sent (`traffic=synthetic-load`),
so a validation gate has something to refuse.

## 2. Time to first token after a KV-cache cut (recorded, LLM serving)

Recorded, not generated: the continuous-batching loop of `bench/corpus/serving` (a tiny
decoder on the CPU torch wheel, a block KV pool, chunked prefill, preemption by recompute)
served the same 150 requests twice, with the PyTorch profiler on and per-request records
written as `vllm bench serve --save-detailed` JSON. The only change between the two runs is
the KV pool: 1024 blocks of 16 tokens before, 56 after. With fewer blocks the scheduler
preempts running requests to free memory and recomputes them, so new requests wait longer
to be admitted: time to first token regresses at the tail.

- primary SLO: TTFT p99
- origin stage: `scheduling` (KV-cache allocation and preemption) - owner role: runtime lead
- manifest stage: `ingress` (the wait to be admitted)
- mechanism: `kv_preemption`

| run id | KV blocks | what it is |
|---|---|---|
{llm_rows}

Each was ingested as `workbench ingest trace.json.gz --records vllm_bench.json`; the
recorded files are in `workbench/sample/recorded/kv_preemption/`.

`roster.toml` names a fictional team, so that owners can be assigned without setup.

## Regenerate

    rm -rf sample_traces && uv run workbench sample --out sample_traces

The output is deterministic; `tests/test_sample_store.py` checks that it matches this copy.
"""
