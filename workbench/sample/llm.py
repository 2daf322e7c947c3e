"""The sample store's LLM-serving incident: a recorded continuous-batching pair whose KV-cache
pool was cut, ingested through the real trace + records path."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from workbench.store import layout, schema
from workbench.store.ingest import ingest

# Recorded by bench/corpus/serving (torch 2.13 CPU): the fault is a real change of one setting.
RECORDED_PAIR = Path(__file__).parent / "recorded" / "kv_preemption"


def llm_runs() -> list[tuple[str, str, str, dict[str, str]]]:
    """(run id, recorded side, label, tags) of the LLM-serving incident's runs."""
    tags = {"canary": "true", "region": "us-east-2", "traffic": "chat-mirror"}
    return [
        (
            "llm-comparator",
            "comparator",
            "LLM canary before the memory change (KV pool 1024 blocks of 16 tokens)",
            {**tags, "kv_blocks": "1024"},
        ),
        (
            "llm-failing",
            "failing",
            "LLM canary after the memory change (KV pool cut to 56 blocks)",
            {**tags, "kv_blocks": "56"},
        ),
    ]


def write_llm_runs(store: Path, imported_at: datetime) -> list[str]:
    """Ingest the recorded pair into `store`; the runs rows are then pinned (import times an
    hour apart from `imported_at`, source path) so that the sample store is the same bytes
    wherever it is regenerated."""
    ids = []
    for i, (run_id, side, label, tags) in enumerate(llm_runs()):
        src = RECORDED_PAIR / side
        ingest(
            store,
            src / "trace.json.gz",
            run_id=run_id,
            label=label,
            tags=tags,
            records=src / "vllm_bench.json",
        )
        _pin_run_row(store, run_id, imported_at + timedelta(hours=i), f"sample:{run_id}")
        ids.append(run_id)
    return ids


def _pin_run_row(store: Path, run_id: str, imported_at: datetime, source: str) -> None:
    path = layout.run_file(store, run_id)
    run = pq.read_table(path)  # its metadata holds the manifest of the partition files: kept
    for name, value in (("imported_at", imported_at), ("source_file", source)):
        i = run.schema.get_field_index(name)
        run = run.set_column(i, run.schema.field(i), pa.array([value], run.schema.field(i).type))
    layout.write_table(run, schema.RUNS, path)
