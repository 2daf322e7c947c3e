"""Small synthetic runs written with layout.commit_run for the incident, validation and export tests.

Each request's exclusive stage times are drawn around fixed bases; `slow` multiplies chosen
stages, so tests know the truth they check against. Shapes come from named pools so a candidate
can be measured on the production mix or on shapes production never sent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa

from accel.stages import STAGES
from workbench.store import layout

BASE_US = {
    "ingress": 50.0,
    "lowering": 80.0,
    "scheduling": 60.0,
    "execution": 400.0,
    "assembly": 40.0,
}
PRODUCTION_SHAPES = ("[[8,128,512]]", "[[16,128,512]]", "[[32,128,512]]")
SYNTHETIC_SHAPES = ("[[2,64,64]]", "[[4,64,64]]")  # far smaller than production's


@dataclass(frozen=True)
class Spec:
    run_id: str
    n: int = 400
    seed: int = 0
    slow: dict[str, float] = field(default_factory=dict)  # stage -> time multiplier
    shapes: tuple[str, ...] = PRODUCTION_SHAPES
    shape_p: tuple[float, ...] = (0.5, 0.3, 0.2)
    quality: float | None = 0.98
    fallback_share: float = 0.0
    gap_us: float = 1000.0
    meta: dict[str, object] = field(default_factory=dict)


META: dict[str, object] = {
    "compiler": "xla",
    "compiler_version": "2.1.0",
    "runtime": "pjrt",
    "runtime_version": "0.4.30",
    "hardware": "TPU-v5e",
    "device_count": 4,
    "driver_version": "1.9",
    "host": "canary-02",
    "thermal_state": "nominal",
}


def build(spec: Spec) -> layout.RunTables:
    rng = np.random.default_rng(spec.seed)
    n = spec.n
    stage = {s: BASE_US[s] * spec.slow.get(s, 1.0) * rng.lognormal(0.0, 0.2, n) for s in STAGES}
    other = rng.uniform(1.0, 3.0, n)
    latency = sum(stage.values()) + other
    arrival = np.arange(n) * spec.gap_us
    shape = rng.choice(np.array(spec.shapes), size=n, p=np.array(spec.shape_p))
    rid = np.char.add("q", np.arange(n).astype(str))
    fallback = rng.random(n) < spec.fallback_share
    requests = pa.table(
        {
            "request_id": rid,
            "name": ["infer"] * n,
            "arrival_us": arrival,
            "start_us": arrival,
            "end_us": arrival + latency,
            "latency_us": latency,
            "batch_id": np.arange(n, dtype=np.int64),
            "batch_size": np.full(n, 8, dtype=np.int32),
            "shape_key": shape,
            **{f"{s}_us": stage[s] for s in STAGES},
            "other_us": other,
            "sla_us": np.full(n, 5000.0),
            "quality": pa.nulls(n, pa.float64())
            if spec.quality is None
            else pa.array(np.clip(rng.normal(spec.quality, 0.005, n), 0.0, 1.0)),
            "ok": np.ones(n, dtype=bool),
        }
    )
    events = pa.table(
        {
            "event_id": np.arange(n, dtype=np.int64),
            "request_id": rid,
            "stage": ["execution"] * n,
            "category": ["kernel"] * n,
            "name": np.where(fallback, "generic_matmul", "fused_matmul"),
            "ts_us": arrival + stage["ingress"],
            "dur_us": stage["execution"],
            "shape": shape,
            "fallback": fallback,
            "recompile": np.zeros(n, dtype=bool),
        }
    )
    compiles = pa.table(
        {
            "compile_id": pa.array(["0/0"]),
            "start_us": pa.array([0.0]),
            "duration_us": pa.array([12_000.0]),
            "recompile_reason": pa.array([None], pa.string()),
            "cache_hit": pa.array([False]),
        }
    )
    imported = int(datetime(2026, 11, 1, tzinfo=UTC).timestamp() * 1e6) + spec.seed
    run = pa.table(
        {
            "run_id": [spec.run_id],
            "label": [spec.run_id],
            "source_format": ["synthetic"],
            "source_file": [f"{spec.run_id}.json"],
            "source_sha256": ["0" * 64],
            "imported_at": pa.array([imported], pa.timestamp("us", tz="UTC")),
            "model": ["resnet-serving"],
            "workload": ["image-batch"],
            **{k: [v] for k, v in {**META, **spec.meta}.items()},
            "tags": pa.array([[("canary", spec.run_id)]], pa.map_(pa.string(), pa.string())),
            "schema_version": pa.array([1], pa.int32()),
        }
    )
    return layout.RunTables(run=run, events=events, requests=requests, compiles=compiles)


def write(store: Path, spec: Spec) -> None:
    layout.commit_run(store, build(spec), source=f"synthetic:{spec.run_id}")


# The comparator and the rollback candidate are long enough for a rollback to be shown
# equivalent (each guardrail's interval inside its tolerance), as in the sample store.
VALIDATION_N = 6000


def incident_runs(store: Path) -> Path:
    """failing (execution burst) vs comparator, a fixed-metadata rerun and two candidates."""
    write(store, Spec("comparator", n=VALIDATION_N, seed=1))
    write(store, Spec("failing", seed=2, slow={"execution": 1.8, "lowering": 1.1}))
    write(store, Spec("fixed-metadata", seed=3, slow={"execution": 1.8, "lowering": 1.1}))
    write(store, Spec("candidate-rollback", n=VALIDATION_N, seed=4))
    write(
        store,
        Spec(
            "candidate-synthetic",
            n=VALIDATION_N,
            seed=5,
            shapes=SYNTHETIC_SHAPES,
            shape_p=(0.5, 0.5),
        ),
    )
    return store


def triage_doc(failing: str = "failing", comparator: str = "comparator") -> dict[str, object]:
    """A triage result in the shape of TriageResult.to_json(), with one proven claim."""
    return {
        "failing": failing,
        "comparator": comparator,
        "warnings": [],
        "stages": [],
        "origin_stage": "lowering",
        "manifest_stage": "execution",
        "mechanism": "fusion_memory_burst",
        "explained_share": 0.82,
        "confidence": 0.9,
        "claims": [
            {
                "text": "execution p99 grew with spill traffic after the fusion change",
                "query": "stage_quantiles",
                "parameters": {"failing": failing, "comparator": comparator},
                "numbers": {
                    "execution_p99_failing_us": 980.0,
                    "execution_p99_comparator_us": 540.0,
                },
            }
        ],
        "primary_metric": {},
        "secondary_mechanism": None,
        "retuning": [
            {
                "kind": "split_fusion",
                "target": "fusion group 7",
                "text": "split fusion group 7 so its working set fits SRAM",
                "predicted_p95_gain_us": 390.0,
                "predicted_p99_gain_us": 410.0,
                "priority": 0.8,
                "evidence": {"query": "fusion_effect"},
            }
        ],
    }
