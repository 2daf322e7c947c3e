"""Stage and mechanism identifiers shared by every layer (DESIGN §2, §5)."""

from typing import Final

# Pipeline order matters: origin = first stage in this order that explains the gap.
STAGES: Final[tuple[str, ...]] = ("ingress", "lowering", "scheduling", "execution", "assembly")
OTHER: Final[str] = "other"
STAGE_CODE: Final[dict[str, int]] = {s: i for i, s in enumerate(STAGES)}

STAGE_NAMES: Final[dict[str, str]] = {
    "ingress": "request ingress and model metadata",
    "lowering": "graph lowering and kernel selection",
    "scheduling": "tile/dataflow scheduling and memory placement",
    "execution": "tensor execution + synchronization barriers",
    "assembly": "result assembly + quality/SLA validation",
}

# The same five stages as an LLM-serving engine has them (issue 35's mapping).
SERVING_STAGE_NAMES: Final[dict[str, str]] = {
    "ingress": "tokenize, admission and queue wait",
    "lowering": "graph capture and compile per batch shape",
    "scheduling": "batch formation, prefill budget, KV-cache allocation and preemption",
    "execution": "prefill and decode kernels, attention, collectives",
    "assembly": "detokenize, streaming and stop checks",
}

DEFAULT_OWNER_ROLE: Final[dict[str, str]] = {
    "ingress": "model serving architect",
    "lowering": "compiler lead",
    "scheduling": "runtime lead",
    "execution": "runtime lead",
    "assembly": "observability engineer",
}

MECHANISMS: Final[tuple[str, ...]] = (
    "queueing",
    "batch_policy",
    "recompile",
    "mapping_fallback",
    "graph_break",
    "fusion_memory_burst",
    "core_imbalance",
    "barrier_stall",
    "bandwidth_bound",
    "launch_overhead",
    "assembly",
    # LLM serving (accel/serving): each named only when its witness events are in the trace
    "queueing_under_load",
    "tokenizer_slowdown",
    "batch_shape_recompile",
    "kv_preemption",
    "prefill_starving_decode",
    "slower_decode_kernel",
    "detokenizer_cost",
    "unknown",  # a stage is named, but the trace holds no events that witness a mechanism
    "none",
)

MEM_TIERS: Final[tuple[str, ...]] = ("sram", "hbm", "host")
MEM_TIER_CODE: Final[dict[str, int]] = {t: i for i, t in enumerate(MEM_TIERS)}

# The serving-level objectives an LLM regression is paged on (issue 35); e2e is the request's
# whole latency, as for every other workload.
SLOS: Final[tuple[str, ...]] = ("ttft", "itl", "tpot", "e2e")
SLO_NAMES: Final[dict[str, str]] = {
    "ttft": "time to first token",
    "itl": "inter-token latency",
    "tpot": "time per output token",
    "e2e": "end-to-end latency",
}
