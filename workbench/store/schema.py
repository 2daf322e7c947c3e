"""Arrow schemas of the store (DESIGN §4, §5b): the single definition every writer and reader uses.

v2 adds the fleet: host / rank / window on events and requests, and the runs row's fleet shape
(hosts, ranks, windows, members). v3 adds LLM serving at token level: token counts, TTFT, TPOT,
queue wait, preemptions and engine steps on requests, the `tokens` table (one row per output
token: its gap, TTFT for the first, and that gap's stages), and the runs row's join of records to
engine steps. Older stores read unchanged: the new columns read as null, the new table as empty.
"""

from typing import Final

import pyarrow as pa

SCHEMA_VERSION: Final[int] = 3

_TAGS = pa.map_(pa.string(), pa.string())

# One trace file of a run built from many (store/fleet/fleet_ingest.py): where it came from and what
# its header says about its host, so that hosts that differ can be told apart.
MEMBER: Final[pa.DataType] = pa.struct(
    [
        ("host", pa.string()),
        ("rank", pa.int32()),
        ("window", pa.int32()),
        ("source_file", pa.string()),
        ("source_sha256", pa.string()),
        ("hardware", pa.string()),
        ("driver_version", pa.string()),
        ("runtime_version", pa.string()),
        ("events", pa.int64()),
        ("requests", pa.int64()),
        ("tags", _TAGS),
    ]
)

RUNS: Final[pa.Schema] = pa.schema(
    [
        ("run_id", pa.string()),
        ("label", pa.string()),
        ("source_format", pa.string()),
        ("source_file", pa.string()),
        ("source_sha256", pa.string()),
        ("imported_at", pa.timestamp("us", tz="UTC")),
        ("model", pa.string()),
        ("workload", pa.string()),
        ("compiler", pa.string()),
        ("compiler_version", pa.string()),
        ("runtime", pa.string()),
        ("runtime_version", pa.string()),
        ("hardware", pa.string()),
        ("device_count", pa.int32()),
        ("driver_version", pa.string()),
        ("host", pa.string()),
        ("rank", pa.int32()),
        ("world_size", pa.int32()),
        ("thermal_state", pa.string()),
        ("tags", _TAGS),
        ("schema_version", pa.int32()),
        # The fleet's shape; null for a run made from one file.
        ("hosts", pa.int32()),
        ("ranks", pa.int32()),
        ("windows", pa.int32()),
        ("members", pa.list_(MEMBER)),
        # Not in DESIGN §4's list: the device as the trace describes it (null when it does not):
        # SMs (NVIDIA) or CUs (AMD), memory size, memory bandwidth; several devices of one run
        # are of one kind in practice, else the first device's figures.
        ("device_sm_count", pa.int32()),
        ("device_memory_gb", pa.float64()),
        ("device_memory_bandwidth_gbs", pa.float64()),
        # v3, LLM serving: how per-request serving records were joined to the trace's engine
        # steps ("request_id", "time", or "records" when there was no trace), how many records
        # the run holds and how many of them were found in the steps.
        ("serving_join", pa.string()),
        ("serving_records", pa.int64()),
        ("serving_matched", pa.int64()),
    ]
)

# Where in the fleet an event or request was captured; null for a run made from one file.
_FLEET_COLUMNS = [("host", pa.string()), ("rank", pa.int32()), ("window", pa.int32())]

# Partitioned tables: files under <table>/run_id=<id>/ do not repeat run_id (hive convention);
# readers get it back from the path. *_FILE schemas are what a partition file holds.
EVENTS_FILE: Final[pa.Schema] = pa.schema(
    [
        ("event_id", pa.int64()),
        ("request_id", pa.string()),
        ("stage", pa.string()),
        ("category", pa.string()),
        ("name", pa.string()),
        ("ts_us", pa.float64()),
        ("dur_us", pa.float64()),
        ("device", pa.int32()),
        ("core", pa.int32()),
        ("stream", pa.int32()),
        ("pid", pa.int64()),
        ("tid", pa.int64()),
        ("correlation", pa.int64()),
        ("parent_id", pa.int64()),
        ("shape", pa.string()),
        ("flops", pa.float64()),
        ("bytes", pa.float64()),
        ("kernel", pa.string()),
        ("tile", pa.string()),
        ("fusion_group", pa.int64()),
        ("mem_tier", pa.string()),
        ("predicted_us", pa.float64()),
        ("fallback", pa.bool_()),
        ("recompile", pa.bool_()),
        # Not in DESIGN §4's list: the torch.compile id ("0/1") that joins events to compiles.
        ("compile_id", pa.string()),
        ("args", pa.string()),
        *_FLEET_COLUMNS,
    ]
)

REQUESTS_FILE: Final[pa.Schema] = pa.schema(
    [
        ("request_id", pa.string()),
        ("name", pa.string()),
        ("arrival_us", pa.float64()),
        ("start_us", pa.float64()),
        ("end_us", pa.float64()),
        ("latency_us", pa.float64()),
        ("batch_id", pa.int64()),
        ("batch_size", pa.int32()),
        ("shape_key", pa.string()),
        ("ingress_us", pa.float64()),
        ("lowering_us", pa.float64()),
        ("scheduling_us", pa.float64()),
        ("execution_us", pa.float64()),
        ("assembly_us", pa.float64()),
        ("other_us", pa.float64()),
        ("sla_us", pa.float64()),
        ("quality", pa.float64()),
        ("ok", pa.bool_()),
        *_FLEET_COLUMNS,
        # v3, LLM serving (null otherwise): prompt and output tokens, time to first token,
        # time per output token after the first, arrival to first scheduled, times preempted,
        # and the engine steps (their step numbers) the request took part in.
        ("input_tokens", pa.int32()),
        ("output_tokens", pa.int32()),
        ("ttft_us", pa.float64()),
        ("tpot_us", pa.float64()),
        ("queue_us", pa.float64()),
        ("preemptions", pa.int32()),
        ("steps", pa.list_(pa.int32())),
    ]
)

# v3: one row per output token of an LLM request. gap_us is the time since the previous token
# (for token 0, since arrival: the TTFT); the stage columns split that gap and sum to it. `step`
# is the engine step that emitted the token (null when no trace was joined).
TOKENS_FILE: Final[pa.Schema] = pa.schema(
    [
        ("request_id", pa.string()),
        ("token", pa.int32()),
        ("ts_us", pa.float64()),
        ("gap_us", pa.float64()),
        ("step", pa.int32()),
        ("ingress_us", pa.float64()),
        ("lowering_us", pa.float64()),
        ("scheduling_us", pa.float64()),
        ("execution_us", pa.float64()),
        ("assembly_us", pa.float64()),
        ("other_us", pa.float64()),
        *_FLEET_COLUMNS,
    ]
)

COMPILES_FILE: Final[pa.Schema] = pa.schema(
    [
        ("compile_id", pa.string()),
        ("start_us", pa.float64()),
        ("duration_us", pa.float64()),
        ("dynamo_us", pa.float64()),
        ("aot_us", pa.float64()),
        ("inductor_us", pa.float64()),
        ("codegen_us", pa.float64()),
        ("recompile_reason", pa.string()),
        ("fail_reason", pa.string()),
        ("guard_count", pa.int32()),
        ("graph_op_count", pa.int32()),
        ("cache_hit", pa.bool_()),
        # Not in DESIGN §4's list; tlparse-depth facts of the compile log (null when it is
        # silent): "hit" / "miss" / "bypass" per cache, restarts of the analysis and their
        # reasons (JSON list), graph breaks and their reasons (JSON list of {file, line, reason,
        # hint, code}), the rank whose log it is.
        ("fx_graph_cache", pa.string()),
        ("aot_autograd_cache", pa.string()),
        ("restarts", pa.int32()),
        ("restart_reasons", pa.string()),
        ("graph_breaks", pa.int32()),
        ("graph_break_reasons", pa.string()),
        ("rank", pa.int32()),
    ]
)

PARTITIONED: Final[dict[str, pa.Schema]] = {
    "events": EVENTS_FILE,
    "requests": REQUESTS_FILE,
    "compiles": COMPILES_FILE,
    "tokens": TOKENS_FILE,
}


def with_run_id(schema: pa.Schema) -> pa.Schema:
    """The logical table schema: a partition file's schema with run_id in front."""
    return pa.schema([pa.field("run_id", pa.string()), *schema])
