"""A run's configuration (workload + engine flags), the faults as changes to it, their truth,
and the pairs of each half (tuning, blind, fixtures)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace

# fault -> (origin stage, mechanism id, the SLO it hurts)
TRUTH: dict[str, tuple[str, str, str]] = {
    "none": ("none", "none", "ttft"),
    "slow_tokenizer": ("ingress", "tokenizer_slowdown", "ttft"),
    "recompile_per_batch": ("lowering", "batch_shape_recompile", "itl"),
    "small_kv_budget": ("scheduling", "kv_preemption", "ttft"),
    "no_chunked_prefill": ("scheduling", "prefill_starving_decode", "itl"),
    "heavy_decode": ("execution", "slower_decode_kernel", "tpot"),
    "slow_detokenizer": ("assembly", "detokenizer_cost", "itl"),
}


@dataclass(frozen=True)
class RunConfig:
    """Everything one run does; a pair's two runs differ in `fault` only (A/A: in nothing)."""

    seed: int = 0
    requests: int = 300
    rate_per_s: float = 60.0  # Poisson arrivals, open loop
    prompt_words: tuple[int, int] = (8, 60)  # uniform range of a short prompt's words
    long_share: float = 0.05  # share of long prompts
    long_words: tuple[int, int] = (250, 450)
    output_tokens: tuple[int, int] = (8, 64)
    d_model: int = 64
    layers: int = 2
    heads: int = 4
    block_size: int = 16
    kv_blocks: int = 1024
    token_budget: int = 192  # tokens per step (decodes + prefill chunks)
    max_seqs: int = 48
    segments: int = 4  # ABBA turns per run
    # The fault flags.
    slow_tokenizer: bool = False
    pad_batches: bool = True  # bucketed sample batch for the compiled head
    chunked_prefill: bool = True
    heavy_decode: bool = False
    slow_detokenizer: bool = False
    fault: str = "none"


def with_fault(base: RunConfig, fault: str, small_blocks: int) -> RunConfig:
    """The failing run: the base with one flag changed."""
    flags: dict[str, object] = {
        "none": {},
        "slow_tokenizer": {"slow_tokenizer": True},
        "recompile_per_batch": {"pad_batches": False},
        "small_kv_budget": {"kv_blocks": small_blocks},
        "no_chunked_prefill": {"chunked_prefill": False},
        "heavy_decode": {"heavy_decode": True},
        "slow_detokenizer": {"slow_detokenizer": True},
    }[fault]
    assert isinstance(flags, dict)
    return replace(base, fault=fault, **flags)


@dataclass
class Pair:
    pair_id: str
    fault: str
    failing: RunConfig
    comparator: RunConfig
    notes: dict[str, str] = field(default_factory=dict)

    def truth(self) -> dict[str, str]:
        stage, mechanism, slo = TRUTH[self.fault]
        return {"origin_stage": stage, "mechanism": mechanism, "slo": slo, "fault": self.fault}


def _small_blocks(base: RunConfig) -> int:
    # Room for the longest prompt (~2.1 tokens a word; 2.5 to be safe) and its output, and a
    # little more: admission then waits on KV and running sequences get preempted.
    longest = int(base.long_words[1] * 2.5) + base.output_tokens[1]
    return -(-longest // base.block_size) + 8


def plan(half: str) -> list[Pair]:
    """Per half, ten A/A pairs and each fault twice, on two workloads (request count, rate,
    segments); the halves differ in seeds, rates, lengths and model size. The first seven
    pairs (one A/A, each fault once on workload A) keep the seeds they were first drawn with."""
    rng = random.Random({"tuning": 101, "blind": 202}[half])
    if half == "tuning":
        base = RunConfig(requests=240, rate_per_s=30.0, d_model=64, output_tokens=(8, 48),
                         segments=10)  # fmt: skip
        other = replace(base, requests=160, rate_per_s=36.0, segments=8)
    else:
        base = RunConfig(
            requests=200, rate_per_s=25.0, d_model=96, prompt_words=(10, 80), segments=10,
            long_share=0.07, long_words=(200, 400), output_tokens=(12, 56), token_budget=160,
        )  # fmt: skip
        other = replace(base, requests=280, rate_per_s=22.0, segments=12)
    pairs: list[Pair] = []
    aa = replace(base, seed=rng.randrange(1 << 30))
    pairs.append(Pair(f"{half}-aa", "none", aa, aa))
    for fault in TRUTH:
        if fault == "none":
            continue
        b = replace(base, seed=rng.randrange(1 << 30))
        pairs.append(Pair(f"{half}-{fault}", fault, with_fault(b, fault, _small_blocks(b)), b))
    for fault in TRUTH:
        if fault == "none":
            continue
        b = replace(other, seed=rng.randrange(1 << 30))
        pairs.append(Pair(f"{half}-{fault}-b", fault, with_fault(b, fault, _small_blocks(b)), b))
    for i in range(2, 11):
        aa = replace(base if i % 2 else other, seed=rng.randrange(1 << 30))
        pairs.append(Pair(f"{half}-aa-{i}", "none", aa, aa))
    return pairs


def fixture_pairs() -> list[Pair]:
    """Small pairs for tests: a TTFT fault, an ITL fault, an A/A pair, 150 requests each, at a
    high rate with short outputs so that the traces stay small."""
    base = RunConfig(requests=150, rate_per_s=50.0, output_tokens=(3, 12), segments=4,
                     long_words=(200, 300))  # fmt: skip
    kv = replace(base, seed=3131)
    detok = replace(base, seed=4141, output_tokens=(8, 20), long_share=0.15)
    aa = replace(base, seed=5151)
    return [
        Pair("fixture-kv_preemption", "small_kv_budget",
             with_fault(kv, "small_kv_budget", _small_blocks(kv)), kv),
        Pair("fixture-detokenizer_cost", "slow_detokenizer",
             with_fault(detok, "slow_detokenizer", 0), detok),
        Pair("fixture-aa", "none", aa, aa),
    ]  # fmt: skip


def smoke_pair() -> Pair:
    """A short pair to check the loop and its annotations (not part of any half)."""
    base = RunConfig(requests=60, rate_per_s=40.0, output_tokens=(4, 16), segments=2, seed=77)
    return Pair("smoke-kv_preemption", "small_kv_budget",
                with_fault(base, "small_kv_budget", _small_blocks(base)), base)  # fmt: skip
